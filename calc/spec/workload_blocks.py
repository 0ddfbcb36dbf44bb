"""A workload's optional blocks: a cached prefix, disaggregated pools, speculative decoding and
the cluster replicas run on (calc.spec.workload reads them)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from calc.core import limits as lim
from calc.spec.lengths import _Spec


class PrefixCache(_Spec):
    """Prompt tokens whose KV is already cached when a request arrives (vLLM's automatic
    prefix caching, SGLang's radix cache). ``shared_tokens``: a system prompt every request
    starts with (counted in prompt_len), cached once and shared; ``hit_rate``: the share of
    each request's remaining prompt found cached (earlier turns of its own session).
    ``enabled: false`` keeps the declaration but computes every prompt in full."""

    shared_tokens: int = Field(default=0, ge=0, le=lim.MAX_TOKENS)
    hit_rate: float = Field(default=0.0, ge=0, lt=1)
    enabled: bool = True


class Pool(_Spec):
    """Candidates for one pool of a disaggregated deployment; unset keys take the workload's."""

    hardware: list[str] | None = Field(default=None, min_length=1, max_length=64)
    tp: list[Annotated[int, Field(ge=1, le=lim.MAX_PARALLEL)]] | None = Field(default=None, min_length=1, max_length=64)
    max_batch: list[Annotated[int, Field(ge=1, le=lim.MAX_BATCH)]] | None = Field(default=None, min_length=1,
                                                                                  max_length=256)


class Disaggregation(_Spec):
    """Search prefill/decode pools (xP + yD) beside the aggregated replicas (open-loop arrivals).
    Pools of one GPU type that fit in a node of ``gpus_per_node`` send the KV over its NVLink;
    otherwise over the network, ``network_gb_s`` per GPU per direction after ``network_latency_us``
    (each unset: the workload's ``cluster``).
    ``overlap_layers``: the KV is sent layer by layer while the prefill runs (else after it).
    ``prefill_max_batched_tokens``: the prefill pool's token budget per step (default: serving's)."""

    prefill: Pool = Pool()
    decode: Pool = Pool()
    network_gb_s: float | None = Field(default=None, gt=0, le=lim.MAX_LINK_GB_S)
    network_latency_us: float | None = Field(default=None, ge=0, le=lim.MAX_OVERHEAD_US)
    gpus_per_node: int | None = Field(default=None, ge=1, le=lim.MAX_PARALLEL)
    overlap_layers: bool = False
    prefill_max_batched_tokens: int | None = Field(default=None, ge=16, le=lim.MAX_TOKENS)


class DraftHeadsChoice(_Spec):
    """EAGLE/MTP-style draft heads: decoder layers of hidden ``width`` (None: the target's)."""

    layers: int = Field(ge=1, le=lim.MAX_LAYERS)
    width: int | None = Field(default=None, ge=1, le=lim.MAX_DIM)


class Speculative(_Spec):
    """Speculative decoding, searched beside plain decoding: a ``draft`` model (catalog name or
    path, sharing the target's vocabulary) or draft ``heads``; ``k`` tokens drafted per step,
    each accepted with probability ``acceptance`` (calc.cost.speculative)."""

    draft: str | None = None
    heads: DraftHeadsChoice | None = None
    k: int = Field(ge=1, le=16)
    acceptance: float = Field(ge=0, lt=1)

    @model_validator(mode="after")
    def _one(self):
        if (self.draft is None) == (self.heads is None):
            raise ValueError("give a draft model or draft heads, one of them")
        return self


class Cluster(_Spec):
    """The nodes replicas run on: a replica of more than ``gpus_per_node`` GPUs spans nodes and its
    collectives run over the network, ``network_gb_s`` per GPU per direction after ``network_latency_us``."""

    gpus_per_node: int = Field(default=8, ge=1, le=lim.MAX_PARALLEL)  # source: DGX/HGX H100 and A100 nodes hold 8 GPUs (NVIDIA DGX H100 data sheet)
    network_gb_s: float = Field(default=50.0, gt=0, le=lim.MAX_LINK_GB_S)  # source: 400 Gb/s per GPU, one ConnectX-7 NDR port per GPU (DGX H100)
    network_latency_us: float = Field(default=10.0, ge=0, le=lim.MAX_OVERHEAD_US)  # source: assumption, a few microseconds per RDMA hop plus NCCL's
