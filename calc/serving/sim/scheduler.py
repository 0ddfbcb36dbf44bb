"""The continuous-batching scheduler of one replica, step by step (calc.serving.sim.simulate
describes the policy). The state lives in preallocated numpy arrays; runs of pure decode
steps between events are advanced in one vectorised call (calc.serving.sim.decoderun)."""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from calc.cost.roofline import BOUNDS, bound_name
from calc.serving.replica.capacity import Replica
from calc.serving.replica.prefix import CachedPrefix
from calc.serving.sim.decoderun import DecodeRuns, _min, _sum
from calc.serving.sim.slowatch import CHECK_EVERY, SloWatch


def served(arrive: np.ndarray, s: float, servers: int = 1) -> np.ndarray:
    """When requests sent at ``arrive`` (in order) reach the engine, less the service ``s`` itself,
    past ``servers`` API servers that take them first come, first served, ``s`` seconds each:
    request k starts when it arrives or when request k - servers (whose server it gets) is done,
    r_k = max(a_k, r_(k - servers) + s), so along every servers-th request
    r_m = m s + max over j <= m of (a_j - j s)."""
    a = np.asarray(arrive, float)
    out = np.empty_like(a)
    for first in range(min(servers, a.size)):
        sub = a[first::servers]
        m = np.arange(sub.size) * s
        out[first::servers] = m + np.maximum.accumulate(sub - m)
    return out


class Scheduler(DecodeRuns):
    """The scheduler's state. The running batch lives in preallocated arrays, in admission
    order, its first ``N`` entries in use; per-request results live in arrays over all
    requests. (Written for speed: a few numpy calls per event, none per token.)"""

    def __init__(self, rep: Replica, T, G, arrive, concurrency, prefix: CachedPrefix | None = None,
                 api: bool = True):
        self.timer = rep.timer  # what a step costs and emits (calc.serving.steps.timer)
        sv = rep.serving
        self.model = rep.model
        n = T.size
        self.n = n
        # per-request inputs as Python ints: they are read one request at a time, per admission
        self.T, self.G = T.astype(np.int64).tolist(), G.astype(np.int64).tolist()
        self.gen = [0] * n  # tokens generated, for requests not running
        self.arrive = np.full(n, np.nan) if arrive is None else arrive.astype(float).copy()
        # the API servers (Serving.api_servers): when each request reaches the engine, its wait for a
        # server included (the server's own request overhead is reported beside the times, as ever)
        self.fe_s = rep.api_server_s if api else 0.0
        self.fe_n = sv.api_servers or 1
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.preempt = np.zeros(n, np.int64)
        self.bs = rep.kv.block_size
        self.total_pages = rep.kv.pages
        # prefix caching: a request's prefill starts after its cached tokens; the shared pages are pinned once
        self.cached = [0] * n if prefix is None else prefix.cached.astype(np.int64).tolist()
        self.shared_pages = 0 if prefix is None else prefix.shared_pages
        self.free = self.total_pages - self.shared_pages
        self.wm = int(math.ceil(sv.watermark * self.total_pages))
        self.budget = max(sv.max_batched_tokens, rep.engine_max_batch)
        # the engine's scheduler (calc.spec.scheduler): prefill policy, chunking, preemption, graph cap
        self.policy, self.chunked, self.reserve = sv.policy, sv.chunked_prefill, sv.preemption == "none"
        self.eager = sv.eager  # whether a step pays eager launches outside the CUDA graphs
        self.ranks = rep.kv.ranks  # data-parallel attention ranks a step's tokens are spread over
        self.eager_s = rep.eager_step_s
        self.mb = mb = rep.engine_max_batch
        self.dec_tokens = self.timer.decode_slots  # token-budget slots a decoding request takes per step
        self.unit = self.timer.tokens_per_step == 1.0  # one token per decoding request per step
        self.j = 0  # steps with decode tokens so far (a speculative timer's acceptance clock)
        # batched policy (TurboMind before v0.1.0): prompts this iteration may still admit (None:
        # no iteration under way), and the prefilled ones whose first token the next decode step samples
        self.quota: int | None = None
        self.pending: list[int] = []
        # prompt tokens left to the decode step: TurboMind's context pass prefills all but the last,
        # which the iteration's decode step takes (a one-token prompt has no prefill at all)
        self.by_decode = 1 if self.policy == "batched" else 0
        # running batch: id, cached tokens, tokens left to generate, pages, prefill done, prefill target
        self.N = 0
        # the six are rows of one array (views), so finishing requests compacts them in one call
        self._state = np.zeros((6, mb), np.int64)
        self.r_id, self.r_kv, self.r_rem, self.r_pages, self.r_done, self.r_target = self._state
        self.n_prefill = 0  # running requests still in prefill
        self.low = 0  # a lower bound on the running requests' tokens left (none left: they finish)
        self.waiting: deque[int] = deque()
        self.incoming: deque[int] = deque()  # not yet arrived, in arrival order
        self.closed = concurrency is not None
        c = min(concurrency, n) if self.closed else n
        if self.closed:
            self.arrive[:c] = 0.0
        self.ready = self.arrive.copy()
        if self.fe_s > 0:
            self.ready[:c] = served(self.arrive[:c], self.fe_s, self.fe_n)
        self.incoming.extend(range(c))
        self.issued = c
        self.clock = 0.0
        # overlap scheduling (Serving.overlap_schedule): a step's composition is fixed when the step
        # before it starts, so the arrivals it admits are those that came before that start
        # (every engine turns it off under pipeline parallelism, and with speculative decoding but for
        # the kinds Serving.overlap_speculative keeps: vLLM's and TensorRT-LLM's EAGLE/MTP heads)
        spec = rep.speculative
        self.overlap = sv.overlap_schedule and rep.pp == 1 and (
            spec is None or (sv.overlap_speculative == "heads" and spec.heads is not None))
        self.step_start = 0.0  # when the step just done began
        self.completed = 0
        self.out_tokens = 0
        self.steps = 0
        self.stopped_s: float | None = None  # run(watch): when the SLOs were missed for certain
        self.bound_time = dict.fromkeys(BOUNDS.tolist(), 0.0)
        self.tl = ([], [], [], [], [])  # t_s, kv_used, running, waiting, output_tokens

    # ----- bookkeeping

    def timeline(self) -> dict:
        t, free, run, wait, out = (np.asarray(v, float) for v in self.tl)
        return {"t_s": t, "kv_used": 1.0 - free / self.total_pages, "running": run, "waiting": wait,
                "output_tokens": out}

    def _tally(self, total_s: float, c: float, m: float, k: float) -> None:
        """Add a step, or a run of steps, to the bound its time goes to (calc.cost.roofline.bound_name
        of its shares: compute ``c``, memory ``m``, communication ``k``)."""
        self.bound_time[bound_name(c, m, k)] += total_s

    def finish_done(self, known: bool = False):
        """Retire the running requests with nothing left to generate (``known``: one has)."""
        N = self.N
        if not known:
            if N == 0 or self.low > 0:
                return
            self.low = int(_min(self.r_rem[:N]))
            if self.low > 0:
                return
        fin = self.r_rem[:N] <= 0
        done = int(np.count_nonzero(fin))
        st = self._state
        if done == 1:  # the usual case: one request leaves, the later ones move up a place
            f = int(fin.argmax())
            self.finish[self.r_id[f]] = self.clock
            self.free += int(self.r_pages[f])
            st[:, f:N - 1] = st[:, f + 1:N]
        else:
            self.finish[self.r_id[:N].compress(fin)] = self.clock  # compress: bool indexing, faster
            self.free += int(_sum(self.r_pages[:N].compress(fin)))
            st[:, :N - done] = st[:, :N].compress(~fin, axis=1)
        self.completed += done
        self.N = N = N - done
        self.low = int(_min(self.r_rem[:N])) if N else 0
        if self.closed:
            for _ in range(done):
                if self.issued < self.n:
                    k = self.issued
                    self.arrive[k] = self.ready[k] = self.clock
                    if self.fe_s > 0 and k >= self.fe_n:  # its server is the one request k - servers had
                        self.ready[k] = max(self.clock, self.ready[k - self.fe_n] + self.fe_s)
                    self.incoming.append(self.issued)
                    self.issued += 1

    def preempt_last(self) -> int:
        j = self.N - 1
        i = int(self.r_id[j])
        self.free += int(self.r_pages[j])
        if self.r_done[j] < self.r_target[j]:
            self.n_prefill -= 1
        self.gen[i] = self.G[i] - int(self.r_rem[j])
        self.preempt[i] += 1
        self.N = j
        return i

    def _target(self, i: int) -> int:
        """Tokens to prefill: the prompt, plus the generated tokens after a preemption, less the
        last, which the batched policy's decode step takes."""
        return self.T[i] + self.gen[i] - self.by_decode

    def _admit_pages(self, i: int) -> int:
        """Pages request i takes when admitted: its prefill's, or (preemption "none": the engine
        reserves to completion) its final context's, T + G - 1 positions."""
        held = self.T[i] + self.G[i] - 1 if self.reserve else self._target(i)
        return -(-held // self.bs) - self.shared_pages

    def _extra_s(self, tokens, prefill: bool = False) -> float:
        """What a step of ``tokens`` (``prefill``: with prefill chunks) pays beyond the step model:
        eager kernel launches (the step's kernels x the preset's eager launch cost) when
        Serving.eager says it runs outside the engine's CUDA graphs."""
        return self.eager_s if self.eager_s and self.eager(tokens, prefill, self.ranks) else 0.0

    # ----- one step with prefill, admission or preemption

    def step(self) -> None:
        """One step. Mixed policy: every decode plus prefill chunks within the token budget;
        prefill_first: a step with prefill work (a running prefill, or a request that can be
        admitted) carries no decodes; one_at_a_time: such a step carries one prompt's chunk;
        batched: an iteration admits the prompts waiting at its start, prefills all but their last
        tokens in steps of the budget without decodes and sampling, then one decode step of every
        running request takes those last tokens and samples their first tokens. Without chunked prefill a prompt is admitted whole, or alone
        in pieces when the first.

        The running requests still in prefill are the batch's last ``n_prefill`` (admission
        appends, prompts get the budget in admission order, preemption takes the last, and a
        finish, which compacts in order, is never a prefill's), so the decoding ones are a
        prefix of the arrays: slices, no masks."""
        r_kv, r_done, r_target = self.r_kv, self.r_done, self.r_target
        batched = self.policy == "batched"
        closing = batched and self.quota == 0 and self.n_prefill == 0  # the iteration's decode step
        if batched and self.quota is None and not closing and self.can_admit():
            self.quota = len(self.waiting)  # an iteration starts: the prompts waiting now
        only_prefill = (self.policy != "mixed" and not closing
                        and (self.n_prefill > 0 or (self.quota != 0 and self.can_admit())))
        one = self.policy == "one_at_a_time"
        n_dec = 0 if only_prefill else self.N - self.n_prefill  # decoding this step: the first n_dec
        m = 1 if self.unit else self.timer.emits(self.j)  # tokens each decoding request emits
        if n_dec and not self.reserve:
            if m == 1:  # _page_need's one-token case, inline: the scheduler's usual step
                need = r_kv[:n_dec] % self.bs == 0
                n_need = int(np.count_nonzero(need))
            else:
                need = self._page_need(r_kv[:n_dec], m)
                n_need = int(_sum(need))
        else:
            need, n_need = None, 0
        preempted = []
        if n_need > self.free:
            while n_need > self.free and self.N:
                preempted.append(self.preempt_last())
                if self.N < n_dec:
                    n_dec = self.N
                    n_need -= int(need[n_dec])
            need = need[:n_dec]
            for i in preempted:  # back to the head of the queue, earliest admitted first
                self.waiting.appendleft(i)
        # the decode tokens' new pages are taken before admission looks at what is free; a step that
        # had to preempt admits nothing (vLLM's scheduler schedules no waiting request then)
        self.free -= n_need
        N = self.N
        left = self.budget - n_dec * self.dec_tokens
        pos, chunk, past, tgts = [], [], [], []
        for p in range(N - self.n_prefill, N):
            if one and chunk:
                break
            done, tgt = int(r_done[p]), int(r_target[p])
            c = min(tgt - done, left)
            if c > 0:
                pos.append(p)
                chunk.append(c)
                past.append(done)
                tgts.append(tgt)
                left -= c
        M = N
        if closing:
            left = 0
        while self.waiting and M < self.mb and left > 0 and not (one and chunk) and self.quota != 0 and not preempted:
            i = self.waiting[0]
            tgt = self._target(i)
            p = self._admit_pages(i)
            if self.free - p < self.wm:
                break
            hit = self.cached[i]
            c = tgt - hit
            if c > left:
                if not self.chunked and chunk:
                    break  # whole prompts only: it waits for a step with room
                c = left
            self.waiting.popleft()
            if self.quota is not None:
                self.quota -= 1
            self.free -= p
            rem = self.G[i] - self.gen[i]
            self.low = min(self.low, rem)
            self._state[:, M] = i, hit, rem, p, hit, tgt
            pos.append(M)
            chunk.append(c)
            past.append(hit)
            tgts.append(tgt)
            left -= c
            M += 1
        self.n_prefill += M - N
        self.N = M
        if n_dec == 0 and not chunk:
            if closing:  # nothing running to decode (every prompt of the iteration was preempted)
                self.quota = None
                self.pending.clear()
            return
        work, wpast = chunk, past
        if 0 in chunk:  # a prompt with nothing to prefill (batched: one token, left to the decode step)
            work = [c for c in chunk if c]
            wpast = [d for c, d in zip(chunk, past, strict=True) if c]
        if n_dec or work:
            dt, shares = self.timer.one(r_kv[:n_dec], work, wpast)
            self._tally(dt, *shares)
            self.step_start = self.clock
            self.clock += dt + self._extra_s(n_dec + sum(work), bool(work)) if self.eager_s else dt
            self.steps += 1
        if n_dec:  # the decode tokens (each at most what its request still needs) and their new pages
            rem = self.r_rem[:n_dec]
            self.out_tokens += n_dec if m == 1 else int(_sum(np.minimum(m, np.maximum(rem, 0))))
            r_kv[:n_dec] += m
            rem -= m
            self.low -= m
            if n_need:
                self.r_pages[:n_dec] += need
            self.j += 1
        for p, c, done, tgt in zip(pos, chunk, past, tgts, strict=True):  # prefill chunks; a completed prefill samples a token
            done += c
            r_done[p] = done
            r_kv[p] = done
            if done >= tgt:
                self.n_prefill -= 1
                if batched:  # the iteration's decode step samples it
                    self.pending.append(int(self.r_id[p]))
                    continue
                rem = int(self.r_rem[p]) - 1
                self.r_rem[p] = rem
                self.low = min(self.low, rem)
                self.out_tokens += 1
                i = self.r_id[p]
                if self.first[i] != self.first[i]:  # nan: the first token (not a recompute)
                    self.first[i] = self.clock
        if closing:
            ids = np.asarray(self.pending)
            ids = ids[np.isin(ids, self.r_id[:self.N]) & np.isnan(self.first[ids])]  # still running, not a recompute
            self.first[ids] = self.clock
            self.pending.clear()
            self.quota = None
        elif batched and self.n_prefill == 0 and self.quota is not None and not (self.quota and self.can_admit()):
            self.quota = 0  # the iteration's prompts are in: its decode step comes next
        self.finish_done()

    def _page_need(self, kv, m: int):
        """Per decoding request at context ``kv``: pages its ``m`` decode tokens this step take (a
        bool mask when 0 or 1); none when the engine reserved every page at admission."""
        if self.reserve:
            return np.zeros(kv.size, bool)
        if m == 1:
            return kv % self.bs == 0
        return -(-(kv + m) // self.bs) - -(-kv // self.bs)

    # ----- admission (decode runs: calc.serving.sim.decoderun)

    def can_admit(self) -> bool:
        if not self.waiting or self.N >= self.mb:
            return False
        return self.free - self._admit_pages(self.waiting[0]) >= self.wm

    def run(self, watch: SloWatch | None = None) -> None:
        """Events until every request has finished, or (``watch``) until the SLOs are missed for
        certain (``stopped_s`` says when; run() again goes on from there to the end): arrivals join
        the queue, then a decode run or else one step; the timeline takes a row at the start and
        after each event."""
        n = self.n
        inc, arr, ready, waiting = self.incoming, self.arrive, self.ready, self.waiting
        t, kv, run, wait, out = (v.append for v in self.tl)
        decode_run, step = self.decode_run, self.step
        events, self.stopped_s = 0, None
        while True:
            # checked before the row, so a stopped run resumed by run() again adds none twice
            if watch is not None and events % CHECK_EVERY == CHECK_EVERY - 1 and watch.missed(
                    arr, self.first, self.finish, self.clock):
                self.stopped_s = self.clock
                return
            events += 1
            t(self.clock)
            kv(self.free)
            run(self.N)
            wait(len(waiting))
            out(self.out_tokens)
            if self.completed >= n:
                return
            # arrivals (past the API servers); under overlap scheduling, with requests running, only
            # those that came before the step just done began (the next step was queued at its start)
            horizon = self.step_start if self.overlap and self.N else self.clock
            while inc and ready[inc[0]] <= horizon:
                waiting.append(inc.popleft())
            if self.N == 0 and not waiting:
                if not inc:
                    raise RuntimeError("simulation stalled with requests outstanding")
                self.clock = max(self.clock, float(ready[inc[0]]))
            elif not decode_run():
                before = self.steps
                step()
                if self.steps == before and self.N == 0:
                    i = waiting[0]
                    raise RuntimeError(f"request {i} needs {self.T[i] + self.gen[i]} positions, more than the KV "
                                       "pages hold")
