"""The scheduler of a replica that decodes speculatively (calc.serving.specstep's step times).

Each step, every decoding request emits the expected accepted tokens on average, through a
replica-wide acceptance clock: step j emits floor(E (j + 1)) - floor(E j) tokens per decoding
request, E = (1 - alpha^(k+1)) / (1 - alpha), so every request's tokens per step average E
(the per-request spread of accepted runs is left out: they change the tail, not the means).
A request's KV grows by the tokens it emits (its pages with it; rejected positions are
overwritten next step); its last step emits only the tokens it still needs; its verification
takes k + 1 slots of the step's token budget. Everything else
(admission, chunked prefill, preemption) is calc.serving.scheduler's.
"""

from __future__ import annotations

import math

import numpy as np

from calc.serving.scheduler import MAX_RUN, Scheduler, _min, _sum
from calc.serving.specstep import decode_x
from calc.serving.stepmodel import step_features


class SpecScheduler(Scheduler):
    def __init__(self, rep, *args, **kwargs):
        super().__init__(rep, *args, **kwargs)
        self.ss = rep.spec_steps
        self.E = self.ss.tokens_per_step
        self.j = 0  # steps with decode tokens so far: the acceptance clock
        self.dec_tokens = self.ss.k + 1  # a verification takes k + 1 slots of the token budget (as vLLM counts them)

    def _emitted(self, steps) -> np.ndarray:
        """Tokens per decoding request over the next 1..steps steps (cumulative)."""
        i = np.arange(1, steps + 1)
        return np.floor(self.E * (self.j + i)) - math.floor(self.E * self.j)

    def _bound(self, total_s: float, terms) -> None:
        c, m, k = terms
        self.bound_time["communication" if k > max(c, m) else "compute" if c >= m else "memory"] += total_s

    def _page_need(self, kv, dec):
        m = int(self._emitted(1)[0])
        need = -(-(kv + m) // self.bs) - -(-kv // self.bs)
        return need if dec is None else need * dec

    def _step_s(self, N: int, n_dec: int, kv_sum: int, dec, chunk, past) -> float:
        kv_dec = self.r_kv[:N] if dec is None else self.r_kv[:N][dec]
        draft = self.ss.draft.model
        if not chunk:
            x, xd = decode_x(self.model, kv_dec)[:, 0], decode_x(draft, kv_dec)[:, 0]
            dt = float(self.ss.decode_s(x, xd))
            self._bound(dt, self.ss.terms(x, xd))
            return dt
        x = self._features_global(n_dec, kv_sum, chunk, past) if self.global_only else \
            self._features(kv_dec, chunk, past)
        new = np.concatenate([np.asarray(chunk, float), np.ones(n_dec)])
        xd = step_features(draft, new, np.concatenate([np.asarray(past, float), kv_dec]))
        if n_dec:
            x_dec = decode_x(self.model, kv_dec)[:, 0]
            dt = self.ss.mixed_s(x, x_dec, xd, decode_x(draft, kv_dec)[:, 0])
            self._tally(dt, self.ss.verify_x(x, x_dec), "prefill")
        else:
            dt = self.ss.mixed_s(x, None, xd, None)
            self._tally(dt, x, "prefill")
        return dt

    def _advance(self, N: int, n_dec: int, dec, need, n_need: int) -> None:
        m = int(self._emitted(1)[0])
        rem = self.r_rem[:N]
        step = m if dec is None else m * dec
        self.out_tokens += int(_sum(np.minimum(step, np.maximum(rem, 0))))
        self.r_kv[:N] += step
        rem -= step
        if n_need:
            self.r_pages[:N] += need
            self.free -= n_need
        self.j += 1

    def decode_run(self) -> bool:
        """Advance k >= 1 pure decode steps if nothing else can happen before; False otherwise."""
        N = self.N
        if N == 0 or self.n_prefill or self.can_admit():
            return False
        bs, sp = self.bs, self.shared_pages
        kv, rem, pages = self.r_kv[:N], self.r_rem[:N], self.r_pages[:N]
        cum = self._emitted(MAX_RUN)
        k = min(int(np.searchsorted(cum, _min(rem), side="left")) + 1, MAX_RUN)  # the first finish
        if N * (int(cum[k - 1]) // bs + 1) > self.free:
            held = -(-(kv[:, None] + cum[None, :k].astype(np.int64)) // bs) - sp
            needed = held.sum(axis=0) - int(_sum(pages))
            k = min(k, int(np.searchsorted(needed, self.free, side="right")))
            if k == 0:
                return False
        ahead = np.concatenate([[0.0], cum[:k - 1]])
        draft = self.ss.draft.model
        arrival = self.incoming and not self.waiting and N < self.mb
        if arrival:  # steps only get longer as contexts grow: the first bounds the count
            t_arr = self.arrive[self.incoming[0]] - self.clock
            t0 = float(self.ss.decode_s(decode_x(self.model, kv), decode_x(draft, kv))[0])
            k = min(k, max(int(t_arr / t0) + 1, 1))
            ahead = ahead[:k]
        x, xd = decode_x(self.model, kv, ahead), decode_x(draft, kv, ahead)
        cum_t = self.ss.decode_s(x, xd).cumsum()
        if arrival:
            k = min(k, int(np.searchsorted(cum_t, t_arr, side="left")) + 1)
        total = float(cum_t[k - 1])
        self._bound(total, self.ss.terms(x[:, :k], xd[:, :k]).sum(axis=-1))
        self.clock += total
        self.steps += k
        emitted = int(cum[k - 1])
        self.out_tokens += int(_sum(np.minimum(emitted, np.maximum(rem, 0))))
        kv += emitted
        rem -= emitted
        new_pages = -(-kv // bs) - sp
        self.free -= int(_sum(new_pages - pages))
        pages[:] = new_pages
        self.j += k
        if _min(rem) <= 0:
            self.finish_done()
        return True
