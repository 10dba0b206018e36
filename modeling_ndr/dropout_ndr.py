"""Dropout with cheaper masks on the CPU.

`nn.Dropout` draws one random number per element with torch's CPU generator (about 5 ns each, one thread), which made
dropout masks 17-23% of an NDR training step on the CPU. Here a mask element takes 16 random bits: one 64-bit draw
gives four elements, and an element is kept when its 16 bits (as a signed integer) are at least a threshold. The drop
probability is therefore `round(p * 65536) / 65536` (within 1e-5 of `p`), the kept values are scaled by `1 / (1 - p)`
as in `nn.Dropout`, and the masks come from torch's global generator, so `torch.manual_seed` makes them reproducible.
On other devices (whose generators are fast), and under `torch.compile` (which generates and fuses its own random
numbers), it is `torch.rand(...) >= p`.
"""

import torch
from torch import nn


def dropout_mask(shape: torch.Size, p: float, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A mask of `shape` whose elements are `1 / (1 - p)` with probability `1 - p` and 0 otherwise."""
    if device.type == "cpu" and not torch.compiler.is_compiling():  # torch.compile draws its own (fused) numbers
        count = shape.numel()
        bits = torch.empty((count + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), None)
        bits = bits.view(torch.int16)[:count].view(shape)  # four 16-bit values per draw
        keep = bits >= round(p * 65536) - 32768
    else:
        keep = torch.rand(shape, device=device) >= p
    return keep.to(dtype).mul_(1.0 / (1.0 - p))


class NDRDropout(nn.Module):
    """`nn.Dropout` with the masks of `dropout_mask` (no parameters, so checkpoints are unaffected)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return hidden_states
        return hidden_states * dropout_mask(hidden_states.shape, self.p, hidden_states.device, hidden_states.dtype)

    def extra_repr(self) -> str:
        return f"p={self.p}"


__all__ = ["NDRDropout", "dropout_mask"]
