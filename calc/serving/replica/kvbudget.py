"""KV-cache pages of one GPU of a replica (vLLM's PagedAttention accounting):

    KV budget per GPU = capacity * share - weights - activation workspace      (share of total: vLLM, TGI)
                      = capacity * share - weights                               (static: SGLang's
                        mem_fraction_static holds weights + KV pool; the workspace lies outside it)
                      = (capacity - weights - workspace) * share                 (free: TensorRT-LLM, LMDeploy)
    pages             = floor(KV budget / (block_size * KV bytes per token per GPU))

with share = the scheduler's gpu_memory_utilization and its kv_share_of (calc.spec.scheduler).

The workspace is what the engine's profiling run measures: the activation peak of one step at
the token budget (a prefill chunk of max_batched_tokens in one pass,
calc.cost.memory.activation_peak_bytes), or its dummy sampler's over min(max_num_seqs,
max_batched_tokens) requests x the vocabulary x the scheduler's sampler_bytes_per_logit, whichever
is larger (the pass's activations are freed before the sampler runs), plus the memory outside
torch it counts (non_torch_gib, at TP > 1 non_torch_tp_gib). Pages hold every
position of every layer (sliding-window layers are not reclaimed). A PP replica runs PP
engines (one micro-batch each in flight, as vLLM's virtual engines), each with 1/PP of the pages.
Under data-parallel attention (Serving.dp_attention) every TP rank holds the whole attention,
embedding and lm_head weights and caches its own requests' KV, so the replica has TP x one rank's
pages (its requests dispatched round-robin, the ranks' pages pooled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from calc.core import text
from calc.core.units import DTYPE_BYTES, GiB
from calc.cost.dtypes import Dtypes
from calc.cost.memory import activation_peak_bytes, kv_share_per_gpu
from calc.cost.opcost import Pass
from calc.cost.operators import pass_ops
from calc.cost.parallel import Parallel, sharded_weight_bytes
from calc.cost.speculative import Draft
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec
from calc.spec.workload import Serving


@dataclass(frozen=True)
class KVBudget:
    """Memory of one GPU of a replica, in bytes, and the KV pages it leaves (``pages``: the
    replica's, TP x one GPU's under data-parallel attention; ``rank_pages``: one rank's, the most a
    request can hold)."""

    capacity_bytes: float
    utilization: float
    weights_bytes: float
    workspace_bytes: float
    kv_bytes_per_token: float  # per GPU (its share of layers and heads)
    block_size: int
    engines: int = 1  # PP engines (micro-batches in flight) the pages are split between
    share_of: str = "total"  # what ``utilization`` is a share of: total, static or free memory
    max_tokens: int | None = None  # the scheduler's kv_tokens: the engine keeps at most this many
    ranks: int = 1  # data-parallel attention ranks, each with these pages for its own requests

    @property
    def usable_bytes(self) -> float:
        """The memory weights, workspace and KV share (what the share leaves them)."""
        if self.share_of == "free":
            return self.weights_bytes + self.workspace_bytes + self.kv_bytes
        if self.share_of == "static":
            return self.capacity_bytes * self.utilization + self.workspace_bytes
        return self.capacity_bytes * self.utilization

    @property
    def kv_bytes(self) -> float:
        """The KV budget by the share's formula (negative: the model does not fit)."""
        if self.share_of == "free":
            free = self.capacity_bytes - self.weights_bytes - self.workspace_bytes
            return free * self.utilization if free > 0 else free
        if self.share_of == "static":
            return self.capacity_bytes * self.utilization - self.weights_bytes
        return self.capacity_bytes * self.utilization - self.weights_bytes - self.workspace_bytes

    @property
    def page_bytes(self) -> float:
        return self.block_size * self.kv_bytes_per_token

    @property
    def pages(self) -> int:
        """Pages of one engine (all of them when PP = 1): what the share leaves, at most
        ``max_tokens`` worth (whole pages) where the scheduler caps the cache, times the
        data-parallel attention ranks (each caps its own)."""
        pages = max(int(math.floor(self.kv_bytes / self.page_bytes)), 0)
        if self.max_tokens is not None:
            pages = min(pages, self.max_tokens // self.block_size)
        return pages // self.engines * self.ranks

    @property
    def rank_pages(self) -> int:
        """Pages of one data-parallel attention rank (all of them without): one request's KV lives
        on its rank, so this is the most it can hold."""
        return self.pages // self.ranks

    @property
    def fits(self) -> bool:
        return self.pages > 0

    def no_room(self, memory_gb: float) -> str:
        """Why there is no whole KV page: weights + workspace exceed the usable memory, or what is
        left is less than one page of block_size tokens (bytes as calc.core.text writes them)."""
        b = text.nbytes
        room = (f"short by {b(-self.kv_bytes)}" if self.kv_bytes <= 0 else
                f"{b(self.kv_bytes)} left, less than one KV page of {self.block_size:,} tokens ({b(self.page_bytes)})")
        return (f"weights {b(self.weights_bytes)} + workspace {b(self.workspace_bytes)} per GPU leave no KV room in "
                f"{b(self.usable_bytes)} usable ({memory_gb:g} GB x {self.utilization:g}; {room})")

    def pages_for(self, positions) -> np.ndarray:
        """Pages a sequence of ``positions`` cached tokens holds: ceil(positions / block)."""
        return np.ceil(np.asarray(positions, float) / self.block_size)

    def admissible_pages(self, watermark: float) -> int:
        """Pages one request may take: all of its rank's but the watermark's share the scheduler
        keeps free (calc.serving.sim.scheduler admits a prompt only while ceil(watermark x pages)
        stay free)."""
        return self.rank_pages - int(math.ceil(watermark * self.rank_pages))

    def admits(self, positions: int, watermark: float) -> bool:
        """Whether one request holding ``positions`` tokens can ever be admitted (else the
        simulator stalls on it)."""
        return self.fits and self.pages_for(positions) <= self.admissible_pages(watermark)

    def max_sequences(self, positions: int) -> int:
        """Sequences that fit at once when each holds ``positions`` tokens: floor(pages / ceil(positions /
        block)) on each data-parallel attention rank."""
        return self.ranks * int(self.rank_pages // self.pages_for(positions))


def kv_budget(model: ModelSpec, hw: HardwareSpec, dt: Dtypes, par: Parallel, serving: Serving,
              attention: str = "fused", draft: Draft | None = None) -> KVBudget:
    """``draft`` (speculative decoding): its weights join the target's, and its KV per position
    the target's (a page holds both models' KV for its positions). ``serving.dp_attention``: the
    attention, embedding and lm_head whole on every rank, each rank's KV its own requests' whole
    (all heads), and TP ranks' pages."""
    dp = serving.dp_attention and par.tp > 1
    attn_tp = 1 if dp else None
    weights = sharded_weight_bytes(model, dt.weight_bytes_per_param(), DTYPE_BYTES[dt.unquantized(model)], par,
                                   attention_tp=attn_tp)
    n = float(serving.max_batched_tokens)
    ops = pass_ops(model, Pass(np.float64(1.0), np.float64(n), np.float64(0.0), "prefill"), dt, attention, par)
    # the engine profiles its whole budget in one pass (its fused MoE in chunks where it chunks)
    forward = float(activation_peak_bytes(model, 1.0, n, ops, dt, chunk=None, moe_chunk=serving.moe_chunk_tokens))
    seqs = min(serving.max_num_seqs or serving.max_batched_tokens, serving.max_batched_tokens)
    sampler = serving.sampler_bytes_per_logit * seqs * model.vocab_size
    outside = (serving.non_torch_tp_gib if par.tp > 1 else serving.non_torch_gib) * GiB
    workspace = max(forward, sampler) + outside
    per_token = model.kv_bytes_per_token(dt.kv) * kv_share_per_gpu(model, replace(par, tp=1) if dp else par)
    if draft is not None:
        weights += draft.weight_bytes
        per_token += draft.kv_bytes_per_token()
    return KVBudget(hw.cuda_memory_bytes, serving.gpu_memory_utilization, weights, workspace, per_token,
                    serving.block_size, par.pp, serving.kv_share_of, serving.kv_tokens, par.tp if dp else 1)
