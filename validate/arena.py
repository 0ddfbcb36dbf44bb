"""One buffer for the weights of the models a validation builds in turn (validate.reference's
build_decoder places them in it), so their memory is faulted in once, not once per model."""

from __future__ import annotations

import torch

ALIGN = 64  # bytes: each weight in an arena starts on a cache line


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def _params(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Parameter]]:
    return [(mod, name, p) for mod in model.modules() for name, p in mod.named_parameters(recurse=False)]


def arena_bytes(model: torch.nn.Module) -> int:
    """Bytes an arena needs for ``model``'s parameters (a meta-device model: no memory used)."""
    return sum(_aligned(p.numel() * p.element_size()) for _, _, p in _params(model))


class WeightArena:
    """One buffer that holds the weights of one model at a time, for a run that builds several models
    in turn (validate's held-out models at each dtype). Memory that a process touches for the first
    time costs a page fault per 4 KiB: on this project's VM 0.3-1.5 GB/s, so building qwen3-30b-a3b
    at 2 layers in fp32 and then bf16 took 6-14 s each, nearly all of it faults. In an arena only the
    first model to reach an address pays for it. A model's weights are views of the arena, valid until
    the next model is placed; building a model larger than the arena replaces the buffer."""

    def __init__(self, nbytes: int = 0, device: str = "cpu"):
        self.device = device
        self.buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)  # untouched until filled

    def place(self, model: torch.nn.Module) -> torch.nn.Module:
        """Every parameter of ``model`` (on the meta device, at its dtype) made a view of the arena."""
        params = _params(model)
        need = arena_bytes(model)
        if need > self.buffer.numel():
            self.buffer = torch.empty(0, dtype=torch.uint8, device=self.device)  # the old one freed first
            self.buffer = torch.empty(need, dtype=torch.uint8, device=self.device)
        at = 0
        for mod, name, p in params:
            n = p.numel() * p.element_size()
            view = self.buffer[at:at + n].view(p.dtype).view(p.shape)
            setattr(mod, name, torch.nn.Parameter(view, requires_grad=False))
            at += _aligned(n)
        return model
