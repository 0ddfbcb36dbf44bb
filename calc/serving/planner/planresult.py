"""What the planner answers (calc.serving.planner.plan searches for it): every option tried, and the
plan over them: the cheapest deployment that meets the SLOs, aggregated or disaggregated, its
runner-up of the other kind, and the best on each GPU type."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from calc.cost.dtypes import Dtypes
from calc.serving.effects.prefixeffect import PrefixEffect
from calc.serving.effects.speceffect import SpecEffect
from calc.serving.effects.whatif import WhatIf
from calc.serving.planner.disagg import DisaggTrial
from calc.serving.planner.disagg_search import best_disagg
from calc.serving.planner.trial import Trial, cost_key, nearest_miss
from calc.spec.hardware import HardwareSpec
from calc.spec.workload import LoadedWorkload


@dataclass
class Option:
    """One (hardware, TP, max batch): the trials run, the cheapest that meets the SLOs, or why none does."""

    hw: HardwareSpec
    tp: int
    max_batch: int | None
    price_per_gpu_hour: float | None
    pp: int = 1
    ep: int = 1
    nodes: int = 1
    reason: str | None = None
    kind: str | None = None  # split | fit | kv | ttft | tpot | gpus | slo | pruned
    trials: list[Trial] = field(default_factory=list)
    lower_bound_replicas: int | None = None
    note: str = ""  # e.g. ", chunk 4,096" when the chunked-prefill size is searched

    @property
    def best(self) -> Trial | None:
        ok = [t for t in self.trials if t.meets]
        return min(ok, key=lambda t: t.replicas) if ok else None

    @property
    def most_replicas(self) -> Trial:
        """The trial with the most replicas: of a miss's trials the nearest its SLOs (the search's
        bisection takes more replicas never to make a configuration slower)."""
        return max(self.trials, key=lambda t: t.replicas)

    @property
    def label(self) -> str:
        mb = f", max batch {self.max_batch}" if self.max_batch else ""
        split = (f"TP{self.tp}" + (f" PP{self.pp}" if self.pp > 1 else "") + (f" EP{self.ep}" if self.ep > 1 else "")
                 + (f" ({self.nodes} nodes)" if self.nodes > 1 else ""))
        return f"{self.hw.name} {split}{mb}{self.note}"


@dataclass(frozen=True)
class Plan:
    workload: LoadedWorkload
    options: list[Option]
    wall_s: float
    simulations: int
    dtypes: Dtypes
    prompt_len: np.ndarray  # the simulated requests (the same for every configuration)
    output_len: np.ndarray
    prefix_effect: PrefixEffect | None = None  # the chosen configuration without prefix caching, when declared
    disagg: tuple[DisaggTrial, ...] = ()  # disaggregated trials simulated (when the workload asks)
    what_if: WhatIf | None = None  # the shown trial's representative steps and FP8 alternatives
    spec_effect: SpecEffect | None = None  # with vs without speculative decoding (when declared)

    @property
    def scheduler(self):
        """The engine scheduler the answer runs (calc.spec.scheduler.Serving, after the workload's
        overrides; its max_num_seqs the chosen max batch), or None when nothing was simulated."""
        t = self.chosen or self.closest
        return None if t is None else t.scheduler

    @property
    def engine_args(self) -> dict:
        """That scheduler in the engine's own argument names (for a launch command); {} when none."""
        t = self.chosen or self.closest
        return {} if t is None else t.engine_args

    @property
    def best_disagg(self) -> DisaggTrial | None:
        return best_disagg(list(self.disagg))

    @property
    def winner(self) -> str | None:
        """"aggregated" or "disaggregated": the cheaper of the two best that meet the SLOs."""
        a, d = self.chosen, self.best_disagg
        if a is None and d is None:
            return None
        if d is None or (a is not None and cost_key(a) <= cost_key(d)):
            return "aggregated"
        return "disaggregated"

    @property
    def answer(self) -> Trial | DisaggTrial | None:
        """The cheapest deployment that meets the SLOs, aggregated or disaggregated."""
        a, d = self.chosen, self.best_disagg
        return d if self.winner == "disaggregated" else a

    @property
    def runner_up(self) -> Trial | DisaggTrial | None:
        """The best of the other kind when disaggregation was searched and met the SLOs, else the
        next aggregated configuration."""
        best = self.answer
        if best is None:
            return None
        if self.best_disagg is not None and self.chosen is not None:
            return self.chosen if best is self.best_disagg else self.best_disagg
        ranked = self.ranked
        return ranked[1] if best is self.chosen and len(ranked) > 1 else None

    def best_by_hardware(self) -> list[tuple[HardwareSpec, Trial | None, str | None]]:
        """Per GPU type of the workload, in its order: its cheapest configuration that meets the
        SLOs, or (None, why none does: the nearest miss, or why nothing was simulated)."""
        out = []
        for hw in self.workload.hardware:
            mine = [t for t in self.ranked if t.replica.hw.name == hw.name]
            if mine:
                out.append((hw, mine[0], None))
                continue
            tried = [o for o in self.options if o.hw.name == hw.name and o.trials]
            if tried:
                near = nearest_miss([o.most_replicas for o in tried])
                out.append((hw, None, f"nearest: {near.label}: {near.why(whole=True)}"))
            else:
                why = next((o.reason for o in self.options if o.hw.name == hw.name and o.reason), "not searched")
                out.append((hw, None, why))
        return out

    def launches(self) -> list[tuple[str, object]]:
        """(role, calc.serving.planner.launch.Launch) for the answer: one command for an aggregated one,
        the prefill pool's and the decode pool's for a disaggregated one; [] when its preset names
        no serving engine or nothing meets the SLOs."""
        from calc.serving.planner.launch import DISAGG, launch

        t = self.answer
        spec = self.workload.spec
        caps = [d.max for d in (spec.prompt_len, spec.output_len) if d is not None]
        # the longest request the workload allows (its distributions' caps), else the longest sampled
        longest = sum(caps) if len(caps) == 2 and None not in caps else int((self.prompt_len + self.output_len).max())
        if t is None:
            return []
        if isinstance(t, Trial):
            cmd = launch(t.replica, t.replicas, longest)
            return [] if cmd is None else [("replica", cmd)]
        out = []
        for role, rep, n in (("prefill", t.prefill, t.prefill_replicas), ("decode", t.decode, t.decode_replicas)):
            cmd = launch(rep, n, longest)
            if cmd is not None:
                note = f"{role} pool of a disaggregated deployment: connect the pools with {DISAGG[cmd.engine]}"
                out.append((role, replace(cmd, notes=(note, *cmd.notes))))
        return out

    @property
    def requests(self) -> int:
        return int(self.prompt_len.size)

    @property
    def ranked(self) -> list[Trial]:
        """Configurations that meet the SLOs: priced ones by USD/hour, then unpriced by GPUs;
        ties go to the one with more headroom. A larger max batch that changes nothing (the
        batch never reached the smaller cap) is left out."""
        best = [o.best for o in self.options if o.best is not None and o.best.same_as is None]
        return sorted(best, key=lambda t: (*cost_key(t), t.miss_ratio))

    @property
    def chosen(self) -> Trial | None:
        r = self.ranked
        return r[0] if r else None

    @property
    def rejected(self) -> list[Option]:
        return [o for o in self.options if o.best is None]

    @property
    def closest(self) -> Trial | None:
        """When nothing meets the SLOs: the simulated trial whose worst SLO is nearest its target
        (of each option's, the one with the most replicas)."""
        return nearest_miss([o.most_replicas for o in self.options if o.trials])

    @property
    def trials(self) -> list[Trial]:
        return [t for o in self.options for t in o.trials]

    @property
    def prices_known(self) -> bool:
        return all(self.workload.price_per_gpu_hour(h) is not None for h in self.workload.hardware)
