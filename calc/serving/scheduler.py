"""The continuous-batching scheduler of one replica, step by step (calc.serving.simulate
describes the policy). The state lives in preallocated numpy arrays; runs of pure decode
steps between events are advanced in one vectorised call."""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from calc.cost.operators import experts_touched
from calc.serving.capacity import Replica
from calc.serving.prefix import CachedPrefix
from calc.serving.stepmodel import FIXED_FEATURES, attention_windows, feature_count, pairs_row, read_row

# ndarray.sum/min through numpy's Python wrappers cost more than the small sums they do here
_sum, _min = np.add.reduce, np.minimum.reduce
MAX_RUN = 1024  # decode steps advanced per vectorised call


class Scheduler:
    """The scheduler's state. The running batch lives in preallocated arrays, in admission
    order, its first ``N`` entries in use; per-request results live in arrays over all
    requests. (Written for speed: a few numpy calls per event, none per token.)"""

    def __init__(self, rep: Replica, T, G, arrive, concurrency, prefix: CachedPrefix | None = None):
        sm = rep.steps
        self.W = {ph: sm.stacked(ph) for ph in ("prefill", "decode")}
        # operators per phase (MLA runs attention differently in prefill and decode)
        self.n_ops = {ph: (w.shape[0] - 2) // 2 for ph, w in self.W.items()}
        # per-feature totals of the compute, memory and comm terms (bound of a run of steps)
        self.Wsum = {ph: np.vstack([w[:n].sum(axis=0), w[n:2 * n].sum(axis=0), w[2 * n + 1]])
                     for (ph, w), n in zip(self.W.items(), self.n_ops.values(), strict=True)}
        self.model = rep.model
        self.windows = attention_windows(rep.model)
        self.global_only = self.windows == (None,)
        n = T.size
        self.T, self.G = T.astype(np.int64), G.astype(np.int64)
        self.gen = np.zeros(n, np.int64)  # tokens generated, for requests not running
        self.arrive = np.full(n, np.nan) if arrive is None else arrive.astype(float).copy()
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.preempt = np.zeros(n, np.int64)
        self.bs = rep.kv.block_size
        self.total_pages = rep.kv.pages
        # prefix caching: a request's prefill starts after its cached tokens; the shared pages are pinned once
        self.cached = np.zeros(n, np.int64) if prefix is None else prefix.cached.astype(np.int64)
        self.shared_pages = 0 if prefix is None else prefix.shared_pages
        self.free = self.total_pages - self.shared_pages
        sv = rep.serving
        self.wm = int(math.ceil(sv.watermark * self.total_pages))
        self.budget = max(sv.max_batched_tokens, rep.max_batch)
        # the engine's scheduler (calc.spec.scheduler): prefill policy, chunking, preemption, graph cap
        self.policy, self.chunked, self.reserve = sv.prefill, sv.chunked_prefill, sv.preemption == "none"
        self.graph_cap = math.inf if sv.graph_max_batch is None else sv.graph_max_batch
        self.eager_s = rep.eager_step_s
        self.mb = mb = rep.max_batch
        self.dec_tokens = 1  # token-budget slots a decoding request takes per step
        # running batch: id, cached tokens, tokens left to generate, pages, prefill done, prefill target
        self.N = 0
        # the six are rows of one array (views), so finishing requests compacts them in one call
        self._state = np.zeros((6, mb), np.int64)
        self.r_id, self.r_kv, self.r_rem, self.r_pages, self.r_done, self.r_target = self._state
        self.n_prefill = 0  # running requests still in prefill
        self.waiting: deque[int] = deque()
        self.incoming: deque[int] = deque()  # not yet arrived, in arrival order
        self.closed = concurrency is not None
        c = min(concurrency, n) if self.closed else n
        if self.closed:
            self.arrive[:c] = 0.0
        self.incoming.extend(range(c))
        self.issued = c
        self.clock = 0.0
        self.completed = 0
        self.out_tokens = 0
        self.steps = 0
        self.bound_time = {"compute": 0.0, "memory": 0.0, "communication": 0.0}
        self.tl = ([], [], [], [], [])  # t_s, kv_used, running, waiting, output_tokens
        m = rep.model.moe
        self._touched = (lambda t: float(experts_touched(m.num_experts, m.experts_per_token, t))) if m \
            else (lambda t: 0.0)

    # ----- bookkeeping

    def record(self):
        t, kv, run, wait, out = self.tl
        t.append(self.clock)
        kv.append(self.free)
        run.append(self.N)
        wait.append(len(self.waiting))
        out.append(self.out_tokens)

    def timeline(self) -> dict:
        t, free, run, wait, out = (np.asarray(v, float) for v in self.tl)
        return {"t_s": t, "kv_used": 1.0 - free / self.total_pages, "running": run, "waiting": wait,
                "output_tokens": out}

    def _times(self, x, phase):
        """Step times for features x [F, k]."""
        y = self.W[phase] @ x
        n = self.n_ops[phase]
        return _sum(np.maximum(y[:n], y[n:2 * n]), axis=0) + y[2 * n]

    def _tally(self, total_s: float, x_sum, phase):
        """Add a run of steps to the bound that wins over their summed terms."""
        c, m, k = self.Wsum[phase] @ x_sum
        bound = "communication" if k > max(c, m) else "compute" if c >= m else "memory"
        self.bound_time[bound] += total_s

    def arrivals(self):
        inc, arr = self.incoming, self.arrive
        while inc and arr[inc[0]] <= self.clock:
            self.waiting.append(inc.popleft())

    def finish_done(self):
        N = self.N
        if N == 0 or _min(self.r_rem[:N]) > 0:
            return
        fin = self.r_rem[:N] <= 0
        ids = self.r_id[:N][fin]
        self.finish[ids] = self.clock
        self.free += int(_sum(self.r_pages[:N][fin]))
        self.completed += ids.size
        keep = ~fin
        M = N - ids.size
        st = self._state
        st[:, :M] = st[:, :N][:, keep]
        self.N = M
        if self.closed:
            for _ in range(ids.size):
                if self.issued < self.T.size:
                    self.arrive[self.issued] = self.clock
                    self.incoming.append(self.issued)
                    self.issued += 1

    def preempt_last(self) -> int:
        j = self.N - 1
        i = int(self.r_id[j])
        self.free += int(self.r_pages[j])
        if self.r_done[j] < self.r_target[j]:
            self.n_prefill -= 1
        self.gen[i] = self.G[i] - self.r_rem[j]
        self.preempt[i] += 1
        self.N = j
        return i

    def _target(self, i: int) -> int:
        """Tokens to prefill: the prompt, plus the generated tokens after a preemption."""
        return int(self.T[i] + self.gen[i])

    def _admit_pages(self, i: int) -> int:
        """Pages request i takes when admitted: its prompt's, or (preemption "none": the engine
        reserves to completion) its final context's, T + G - 1 positions."""
        held = self._target(i) + (int(self.G[i] - self.gen[i]) - 1 if self.reserve else 0)
        return -(-held // self.bs) - self.shared_pages

    def _extra_s(self, tokens) -> float:
        """What a step of ``tokens`` pays beyond the step model: eager kernel launches past the
        engine's CUDA-graph cap (the step's kernels x the preset's eager launch cost)."""
        return self.eager_s if tokens > self.graph_cap else 0.0

    # ----- one step with prefill, admission or preemption

    def step(self) -> None:
        """One step. Mixed policy: every decode plus prefill chunks within the token budget;
        prefill_first: a step with prefill work (a running prefill, or a request that can be
        admitted) carries no decodes; one_at_a_time: such a step carries one prompt's chunk.
        Without chunked prefill a prompt is admitted whole, or alone in pieces when the first."""
        N = self.N
        r_kv, r_done, r_target = self.r_kv, self.r_done, self.r_target
        only_prefill = self.policy != "mixed" and (self.n_prefill > 0 or self.can_admit())
        one = self.policy == "one_at_a_time"
        all_dec = self.n_prefill == 0
        dec = None if all_dec else r_done[:N] >= r_target[:N]
        if only_prefill:
            dec = np.zeros(N, bool)
        need = self._page_need(r_kv[:N], dec)
        n_need = int(_sum(need))
        preempted = []
        while n_need > self.free and self.N:
            preempted.append(self.preempt_last())
            n_need -= int(need[self.N])
            need = need[:self.N]
            dec = None if dec is None else dec[:self.N]
        for i in preempted:  # back to the head of the queue, earliest admitted first
            self.waiting.appendleft(i)
        N = self.N
        n_dec = N if dec is None else int(_sum(dec))
        left = self.budget - n_dec * self.dec_tokens
        pos, chunk, past = [], [], []
        # decode contexts: the prefilling requests are taken out below
        kv_sum = 0 if only_prefill else int(_sum(r_kv[:N]))
        if dec is not None:
            for p in np.nonzero(r_done[:N] < r_target[:N])[0].tolist():
                if one and chunk:
                    break
                done = int(r_done[p])
                if not only_prefill:
                    kv_sum -= int(r_kv[p])
                c = min(int(r_target[p]) - done, left)
                if c > 0:
                    pos.append(p)
                    chunk.append(c)
                    past.append(done)
                    left -= c
        M = N
        while self.waiting and M < self.mb and left > 0 and not (one and chunk):
            i = self.waiting[0]
            tgt = self._target(i)
            p = self._admit_pages(i)
            if self.free - p < self.wm:
                break
            hit = int(self.cached[i])
            c = tgt - hit
            if c > left:
                if not self.chunked and chunk:
                    break  # whole prompts only: it waits for a step with room
                c = left
            self.waiting.popleft()
            self.free -= p
            self.r_id[M], r_kv[M], self.r_rem[M] = i, hit, self.G[i] - self.gen[i]
            self.r_pages[M], r_done[M], r_target[M] = p, hit, tgt
            pos.append(M)
            chunk.append(c)
            past.append(hit)
            left -= c
            M += 1
        self.n_prefill += M - N
        self.N = M
        if n_dec == 0 and not chunk:
            return
        dt = self._step_s(N, n_dec, kv_sum, dec, chunk, past)
        self.clock += dt
        self.steps += 1
        if n_dec:
            self._advance(N, n_dec, dec, need, n_need)
        for p, c in zip(pos, chunk, strict=True):  # prefill chunks; a completed prefill samples a token
            done = int(r_done[p]) + c
            r_done[p] = done
            r_kv[p] = done
            if done >= r_target[p]:
                self.n_prefill -= 1
                self.r_rem[p] -= 1
                self.out_tokens += 1
                i = self.r_id[p]
                if self.first[i] != self.first[i]:  # nan: the first token (not a recompute)
                    self.first[i] = self.clock
        self.finish_done()

    def _page_need(self, kv, dec):
        """Per running request: pages its decode token(s) this step take (a bool mask when 0 or 1);
        none when the engine reserved every page at admission."""
        if self.reserve:
            return np.zeros(kv.size, bool)
        need = kv % self.bs == 0
        if dec is not None:
            need &= dec
        return need

    def _step_s(self, N: int, n_dec: int, kv_sum: int, dec, chunk, past) -> float:
        """The step's time (and its tally by bound)."""
        if self.global_only:
            x = self._features_global(n_dec, kv_sum, chunk, past)
        else:
            x = self._features(self.r_kv[:N] if dec is None else self.r_kv[:N][dec], chunk, past)
        phase = "prefill" if chunk else "decode"
        dt = float(self._times(x, phase))
        self._tally(dt, x, phase)
        return dt + self._extra_s(n_dec + sum(chunk))

    def _advance(self, N: int, n_dec: int, dec, need, n_need: int) -> None:
        """The decoding requests' tokens (a bool mask adds 1 where it is set) and new pages."""
        r_kv = self.r_kv
        if dec is None:
            r_kv[:N] += 1
            self.r_rem[:N] -= 1
        else:
            r_kv[:N] += dec
            self.r_rem[:N] -= dec
        if n_need:
            self.r_pages[:N] += need
            self.free -= n_need
        self.out_tokens += n_dec

    def _features_global(self, n_dec: int, kv_sum: int, chunk, past) -> np.ndarray:
        """step_features for a model with only global attention, from running sums."""
        tokens = n_dec + sum(chunk)
        pairs = kv_sum + n_dec + sum(c * p + c * (c + 1) // 2 for c, p in zip(chunk, past, strict=True))
        read = kv_sum + n_dec + sum(p + c for c, p in zip(chunk, past, strict=True))
        return np.array([1.0, tokens, n_dec + len(chunk), self._touched(tokens), pairs, read], dtype=float)

    def _features(self, kv_dec, chunk, past):
        """[1, tokens, sequences, experts touched, (pairs, positions read) per window]."""
        nd = kv_dec.size
        tokens = nd + sum(chunk)
        x = [1.0, float(tokens), float(nd + len(chunk)), self._touched(tokens)]
        for w in self.windows:
            if w is None:
                s = float(_sum(kv_dec)) + nd
                pairs = s + sum(c * p + c * (c + 1) / 2 for c, p in zip(chunk, past, strict=True))
                read = s + sum(p + c for c, p in zip(chunk, past, strict=True))
            else:
                s = float(np.minimum(kv_dec + 1, w).sum())
                cs, ps = np.asarray(chunk, float), np.asarray(past, float)
                m = np.clip(w - ps, 0, cs)
                pairs = s + float((m * ps + m * (m + 1) / 2 + (cs - m) * w).sum())
                read = s + float(np.minimum(ps + cs, w).sum())
            x += [pairs, read]
        return np.asarray(x)

    # ----- runs of pure decode steps

    def can_admit(self) -> bool:
        if not self.waiting or self.N >= self.mb:
            return False
        return self.free - self._admit_pages(self.waiting[0]) >= self.wm

    def decode_run(self) -> bool:
        """Advance k >= 1 pure decode steps if nothing else can happen before; False otherwise."""
        N = self.N
        if N == 0 or self.n_prefill or self.can_admit():
            return False
        bs = self.bs
        kv = self.r_kv[:N]
        k_fin = int(_min(self.r_rem[:N]))
        k = min(k_fin, MAX_RUN)
        if not self.reserve and N * (k // bs + 1) > self.free:
            # sequence i takes its next page at step j1 = (bs - kv % bs) % bs + 1, then every bs steps
            j1 = (bs - kv % bs) % bs + 1
            j = np.arange(1, k + 1)
            counts = np.bincount(j1, minlength=bs + 1)
            r = np.arange(bs + 1)
            needed = (counts[:, None] * np.maximum((j[None, :] - r[:, None]) // bs + 1, 0)).sum(axis=0)
            ok = int(np.searchsorted(needed, self.free, side="right"))
            if ok == 0:
                return False
            k = min(k, ok)
        s = float(_sum(kv))
        x0 = np.empty(feature_count(self.model))
        x0[:FIXED_FEATURES] = 1.0, N, N, self._touched(N)
        x0[FIXED_FEATURES:] = s + N
        W, n = self.W["decode"], self.n_ops["decode"]
        y0 = W @ x0
        arrival = self.incoming and not self.waiting and N < self.mb
        if arrival:
            # stop at the step during which the next request arrives (it can then be admitted);
            # steps only get longer as contexts grow, so the first step's time bounds the count
            t_arr = self.arrive[self.incoming[0]] - self.clock
            t0 = float(_sum(np.maximum(y0[:n], y0[n:2 * n])) + y0[2 * n]) + self._extra_s(N)
            k = min(k, max(int(t_arr / t0) + 1, 1))
        jj = np.arange(k, dtype=float)
        if self.global_only:
            # features grow by N pairs and N positions read per step: y_j = y0 + j * dy
            dy = N * (W[:, pairs_row(0)] + W[:, read_row(0)])
            y = y0[:, None] + dy[:, None] * jj[None, :]
            times = np.maximum(y[:n], y[n:2 * n]).sum(axis=0) + y[2 * n]
            x_sum = k * x0
            x_sum[FIXED_FEATURES:] += N * k * (k - 1) / 2
        else:
            x = np.empty((x0.size, k))
            x[:] = x0[:, None]
            for wi, w in enumerate(self.windows):
                if w is None:
                    x[pairs_row(wi)] = x0[pairs_row(wi)] + N * jj
                else:
                    x[pairs_row(wi)] = np.minimum(kv[:, None] + jj[None, :] + 1, w).sum(axis=0)
                x[read_row(wi)] = x[pairs_row(wi)]
            times = self._times(x, "decode")
        extra = self._extra_s(N)
        cum = (times + extra if extra else times).cumsum()
        if arrival:
            k_hit = min(k, int(np.searchsorted(cum, t_arr, side="left")) + 1)
            if k_hit < k:
                if self.global_only:
                    x_sum = k_hit * x0
                    x_sum[FIXED_FEATURES:] += N * k_hit * (k_hit - 1) / 2
                k = k_hit
        if not self.global_only:
            x_sum = x[:, :k].sum(axis=1)
        total = float(cum[k - 1])
        self._tally(total, x_sum, "decode")
        self.clock += total
        self.steps += k
        kv += k
        rem = self.r_rem[:N]
        rem -= k
        if not self.reserve:
            pages = self.r_pages[:N]
            new_pages = -(-kv // bs) - self.shared_pages
            self.free -= int(_sum(new_pages - pages))
            pages[:] = new_pages
        self.out_tokens += N * k
        if k == k_fin:
            self.finish_done()
        return True

    def run(self) -> None:
        n = self.T.size
        self.record()
        while self.completed < n:
            self.arrivals()
            if self.N == 0 and not self.waiting:
                if not self.incoming:
                    raise RuntimeError("simulation stalled with requests outstanding")
                self.clock = max(self.clock, float(self.arrive[self.incoming[0]]))
                self.record()
                continue
            if not self.decode_run():
                before = self.steps
                self.step()
                if self.steps == before and self.N == 0:
                    i = self.waiting[0]
                    raise RuntimeError(f"request {i} needs {self._target(i)} positions, more than the KV pages hold")
            self.record()
