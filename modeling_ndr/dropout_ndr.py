"""Dropout with cheaper masks on the CPU.

`nn.Dropout` draws one random number per element with torch's CPU generator, one thread at a time, which made
dropout masks a large share of an NDR training step on the CPU. Here a mask element takes 16 random bits: one 64-bit
draw gives four elements, and an element is kept when its 16 bits (as a signed integer) are at least a threshold. The
drop probability is therefore `round(p * 65536) / 65536` (within 1e-5 of `p`), the kept values are scaled by
`1 / (1 - p)` as in `nn.Dropout`, and the masks come from torch's global generator, so `torch.manual_seed` makes them
reproducible. On other devices (whose generators are fast), and under `torch.compile` (which generates and fuses its
own random numbers), it is `F.dropout`: one fused kernel.

Either way the scale `1 / (1 - p)` is applied as a Python float, which torch's kernels compute with in float32 also for
bfloat16 or float16 inputs: a scale rounded to bfloat16 would shrink what dropout keeps (p = 0.1: 1.109 instead of
1.111, kept activations averaging 0.998 of their value).
"""

import torch
from torch import nn
from torch.nn import functional as F


def dropout_keep_mask(shape: torch.Size, p: float, device: torch.device) -> torch.Tensor:
    """A bool mask of `shape`, True (keep) with probability `1 - p`, from 16-bit draws on the CPU (`torch.rand`
    elsewhere)."""
    if torch.device(device).type == "cpu":
        count = shape.numel()
        bits = torch.empty((count + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), None)
        bits = bits.view(torch.int16)[:count].view(shape)  # four 16-bit values per draw
        return bits >= round(p * 65536) - 32768
    return torch.rand(shape, device=device) >= p


def dropout_mask(shape: torch.Size, p: float, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A mask of `shape` whose elements are `1 / (1 - p)` with probability `1 - p` and 0 otherwise (the mask
    `NDRDropout` applies on the CPU, as numbers; for inspection and tests)."""
    return dropout_keep_mask(shape, p, device).to(dtype) * (1.0 / (1.0 - p))


class NDRDropout(nn.Module):
    """`nn.Dropout` with the masks of `dropout_keep_mask` on the CPU and `F.dropout` elsewhere (no parameters, so
    checkpoints are unaffected)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return hidden_states
        if hidden_states.device.type != "cpu" or torch.compiler.is_compiling():
            return F.dropout(hidden_states, self.p, training=True)
        keep = dropout_keep_mask(hidden_states.shape, self.p, hidden_states.device)  # saved for backward: 1 byte each
        return torch.where(keep, hidden_states * (1.0 / (1.0 - self.p)), 0.0)

    def extra_repr(self) -> str:
        return f"p={self.p}"


__all__ = ["NDRDropout", "dropout_keep_mask", "dropout_mask"]
