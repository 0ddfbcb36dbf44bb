"""The static KV cache: preallocated once, written in place, never concatenated.

Per layer, full-attention layers hold ``max_len`` slots and sliding-window layers
W slots used as a ring (position p lives in slot p % W), so a layer holds
min(positions, W) positions, as DESIGN.md's KV-bytes convention says.

standard: k, v [B, Hkv, slots, D] per layer
MLA:      one tensor [B, slots, rkv + dr] per layer (latent c_kv and rope key side
          by side, so decode reads keys and values as views of it; ``v`` is unused)
"""

from __future__ import annotations

import torch

from calc.spec.model import ModelSpec


class KVCache:
    def __init__(self, spec: ModelSpec, batch: int, max_len: int, dtype, device):
        a = spec.attention
        self.mla = a.kind == "mla"
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor | None] = []
        self.slots: list[int] = []
        self.ring: list[bool] = []
        for sliding in spec.sliding_layers:
            n = min(a.sliding_window, max_len) if sliding else max_len
            self.slots.append(n)
            self.ring.append(bool(sliding) and n < max_len)
            if self.mla:
                shape = (batch, n, a.kv_lora_rank + a.qk_rope_head_dim)
                self.k.append(torch.full(shape, torch.nan, dtype=dtype, device=device))
                self.v.append(None)
            else:
                shape = (batch, a.num_kv_heads, n, a.head_dim)
                self.k.append(torch.full(shape, torch.nan, dtype=dtype, device=device))
                self.v.append(torch.full(shape, torch.nan, dtype=dtype, device=device))

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor | None = None) -> None:
        """Store positions start .. start+n-1 (n = k's sequence length) in place."""
        dim = 1 if self.mla else 2
        n, slots = k.shape[dim], self.slots[layer]
        end = start + n
        if end > slots and not self.ring[layer]:
            raise IndexError(f"position {end - 1} beyond the cache's {slots} slots")
        if self.ring[layer]:
            keep = min(n, slots)  # a ring keeps only the last W positions
            k = k.narrow(dim, n - keep, keep)
            v = v.narrow(dim, n - keep, keep) if v is not None else None
            idx = torch.arange(end - keep, end, device=k.device) % slots
            self.k[layer].index_copy_(dim, idx, k)
            if v is not None:
                self.v[layer].index_copy_(dim, idx, v)
            return
        self.k[layer].narrow(dim, start, n).copy_(k)
        if v is not None:
            self.v[layer].narrow(dim, start, n).copy_(v)

    def visible(self, layer: int, end: int):
        """Views of the slots a query at position end-1 sees: min(end, slots) of them."""
        n = min(end, self.slots[layer])
        if self.mla:
            return self.k[layer][:, :n]
        return self.k[layer][:, :, :n], self.v[layer][:, :, :n]

    def reset(self) -> None:
        """Back to empty: every slot NaN, the sentinel for "never written"."""
        for t in (*self.k, *self.v):
            if t is not None:
                t.fill_(torch.nan)

    def prime(self) -> None:
        """Fill every slot with zeros, so a decode step can be timed at any context without
        a prefill first (the values do not change the work, but for which experts an MoE layer
        runs: timing.decode_fn gives each row its own token for that; the count checks never prime)."""
        for t in (*self.k, *self.v):
            if t is not None:
                t.zero_()

    def _written(self, layer: int) -> torch.Tensor:
        """bool[slots]: slots holding data (no NaN sentinel left), read from the tensors."""
        if self.mla:
            return ~self.k[layer].isnan().any(dim=0).any(dim=-1)
        k, v = self.k[layer], self.v[layer]
        return ~(k.isnan().any(dim=(0, 1, 3)) | v.isnan().any(dim=(0, 1, 3)))

    def held_positions(self) -> list[int]:
        """Positions each layer holds: its written slots."""
        return [int(self._written(i).sum()) for i in range(len(self.k))]

    def held_bytes(self) -> int:
        """Sum of nbytes of the written slots of every cache tensor: the measured KV bytes."""
        total = 0
        for i, (k, v) in enumerate(zip(self.k, self.v, strict=True)):
            dim = 1 if self.mla else 2
            idx = self._written(i).nonzero().flatten()
            total += k.index_select(dim, idx).nbytes
            if v is not None:
                total += v.index_select(dim, idx).nbytes
        return total

    def shapes(self, layer: int = 0) -> tuple:
        """Shape of layer ``layer``'s written K (the seed checks [B, Hkv, positions, D])."""
        held = self.held_positions()[layer]
        k = self.k[layer]
        return tuple(k[:, :held].shape) if self.mla else tuple(k[:, :, :held].shape)
