"""Runs of pure decode steps between events, advanced in one vectorised call: the half of the
scheduler (calc.serving.sim.scheduler.Scheduler) that makes 50,000 requests take about a second.
A run stops at the first request to finish, at the step its pages run out, or during the step in
which the next request arrives."""

from __future__ import annotations

import numpy as np

# ndarray.sum/min through numpy's Python wrappers cost more than the small sums they do here
_sum, _min = np.add.reduce, np.minimum.reduce
MAX_RUN = 1024  # decode steps advanced per vectorised call
_AHEAD = np.arange(float(MAX_RUN))  # tokens emitted before each step of a run, at one token a step
_AHEAD.flags.writeable = False


class DecodeRuns:
    """Scheduler's decode runs; the state (running arrays, pages, clock, timer) is the Scheduler's."""

    def decode_run(self) -> bool:
        """Advance k >= 1 pure decode steps if nothing else can happen before; False otherwise."""
        N = self.N
        if N == 0 or self.n_prefill or self.pending or self.can_admit():
            return False
        bs, sp = self.bs, self.shared_pages
        kv, rem, pages = self.r_kv[:N], self.r_rem[:N], self.r_pages[:N]
        first = int(_min(rem))  # a request finishes once it has emitted this many (each step emits >= 1)
        unit = self.unit
        if unit:  # one token a step: after k steps each has emitted k (the first finish at k = first)
            k = min(first, MAX_RUN)
            cum = None
            emitted = k
        else:
            cum = self.timer.emitted(self.j, min(max(first, 1), MAX_RUN))  # tokens each has emitted after 1, 2, ... steps
            k = min(int(cum.searchsorted(first)) + 1, MAX_RUN)  # the first finish
            emitted = int(cum[k - 1])
        if not self.reserve and N * (emitted // bs + 1) > self.free:
            if unit:
                cum = self.timer.emitted(self.j, k)
            # pages taken after each step: a request at kv (kv % bs = r) holding ceil(kv / bs) pages
            # takes ceil((r + cum_j) / bs) - ceil(r / bs) more after step j; count requests by r
            counts = np.bincount(kv % bs, minlength=bs)
            r = np.arange(bs)
            needed = counts @ (-(-(r[:, None] + cum[None, :k]) // bs) - -(-r[:, None] // bs))
            k = min(k, int(np.searchsorted(needed, self.free, side="right")))
            if k == 0:
                return False
        extra = self._extra_s(N) if self.eager_s else 0.0
        arrival = self.incoming and not self.waiting and N < self.mb
        if arrival:
            # stop at the step during which the next request arrives (it can then be admitted);
            # steps only get longer as contexts grow, so the first step's time bounds the count
            t_arr = self.ready[self.incoming[0]] - self.clock
            if k > 64:  # a long run: price only the steps before the arrival can land
                k = min(k, max(int(t_arr / (self.timer.decode_s(kv) + extra)) + 1, 1))
        if unit:
            ahead = _AHEAD[:k]  # tokens each has emitted before each step
        else:
            ahead = np.empty(k)
            ahead[0] = 0.0
            ahead[1:] = cum[:k - 1]
        k, total, shares = self.timer.decode_until(kv, ahead, extra, t_arr if arrival else None)
        self._tally(total, *shares)
        self.step_start = self.clock + total * (k - 1) / k  # the run's last step began (its steps taken as equal)
        self.clock += total
        self.steps += k
        emitted = k if unit else int(cum[k - 1])
        self.out_tokens += N * emitted if emitted <= first else int(_sum(np.minimum(emitted, rem)))
        kv += emitted
        rem -= emitted
        self.low = first - emitted
        if not self.reserve:
            held = int(_sum(pages))
            np.floor_divide(kv + (bs - 1), bs, out=pages)  # ceil(kv / bs), the shared prefix's pages not the request's
            if sp:
                pages -= sp
            self.free -= int(_sum(pages)) - held
        self.j += k
        if first <= emitted:
            self.finish_done(True)
        return True
