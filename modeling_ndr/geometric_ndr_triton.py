"""Geometric attention weights as fused Triton kernels (forward and backward), for CUDA tensors.

The weights are those of `geometric_ndr` (Csordás et al., 2022, Sec. 3.2): for query i and key j != i, with
`z_ij = content_ij + (right_i if j > i else left_i)` and `P_ij = sigmoid(z_ij)`,

    log A_ij = log P_ij + sum over the keys k closer to i than j of log(1 - P_ik),        A_ii = 0,

the keys scanned in the order i+1, i-1, i+2, i-2, ... (at equal distance the key on the right comes first); padded
keys never match. The PyTorch path computes this with about twenty passes over (b, h, n, n) tensors; here each query
row is read once and written once, in float32 registers whatever the logits' dtype (float32, bfloat16 or float16: a
bfloat16 `q @ k^T` is read as it is, with no float32 copy).

How: a program takes a block of query rows and walks away from the diagonal in chunks of distances d. Row i reads
its keys i + d and i - d (both are contiguous runs of memory), so the scan order becomes a plain prefix over d:

    closer keys of the right key i + d:  every key at a distance below d, on both sides
    closer keys of the left key i - d:   the same, plus the right key i + d

That is an exclusive prefix sum of `log(1 - P_(i,i+d)) + log(1 - P_(i,i-d))` over d, computed with an associative
scan whose elements are (sum of all but the last, sum of all) pairs, so no sum is ever subtracted from another (a
difference of prefix sums loses all precision when they are large and gives NaN at -inf). The backward walks the
distances from the far end: `dz_ik = g_ik A_ik (1 - P_ik) - P_ik * sum over the keys j farther than k of g_ij A_ij`,
and the direction terms' gradients are the row sums of `dz` on each side. Each program owns its rows (no atomics:
deterministic). Weights below the smallest normal float are 0, as in the other two implementations.

triton is optional (the `triton` extra; CUDA builds of PyTorch on Linux bring it): without it this module imports,
defines nothing that runs, and `geometric_ndr` uses the PyTorch path. The kernels are defined at import, so Triton's
interpreter (`TRITON_INTERPRET=1` set before this module is first imported) runs them on CPU tensors: that is how the
test suite checks them without a GPU.

Tensor dimensions: b batch, h heads, i query, d distance from the query, j key (i and j in range n).
"""

import contextlib
import hashlib
import math

import torch

from .kernel_autograd_ndr import register_kernel_autograd


try:  # optional; transformers' remote-code import check skips imports inside `try`
    import triton
    import triton.language as tl
except ImportError:
    triton = tl = None

TRITON_AVAILABLE = triton is not None
# dtypes of the logits that the kernels read directly (float64 stays on the PyTorch path)
TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Tile of one program: BLOCK_ROWS queries x BLOCK_DISTANCES distances per loop iteration. Chosen, not measured: about
# ten float32 tiles are live, 16 x 64 of them fit 4 warps' registers; a GPU run is to tune them.
BLOCK_ROWS = 16
BLOCK_DISTANCES = 64
NUM_WARPS = 4
# log of the smallest normal float32: weights below it are flushed to 0 (denormals slow the products that follow)
LOG_SMALLEST_NORMAL = math.log(torch.finfo(torch.float32).tiny)


if TRITON_AVAILABLE:

    @triton.jit
    def _exclusive_sum(before_a, total_a, before_b, total_b):
        """Combine two runs a, b (a first) of a scan: (sum of all but the last element, sum of all elements)."""
        return total_a + before_b, total_a + total_b

    @triton.jit
    def _log_sigmoids(z):
        """(log sigmoid(z), log(1 - sigmoid(z))), exact for any z, ±inf included, with one exp and one log."""
        small = tl.exp(-tl.abs(z))  # in [0, 1]
        one_plus = 1.0 + small
        # log1p(small) accurately (Goldberg): log(1 + x) * x / ((1 + x) - 1), and x itself where 1 + x rounds to 1
        rounded = one_plus == 1.0
        log1p = tl.where(rounded, small, tl.log(one_plus) * (small / tl.where(rounded, 1.0, one_plus - 1.0)))
        return -(tl.maximum(-z, 0.0) + log1p), -(tl.maximum(z, 0.0) + log1p)

    @triton.jit
    def _row_keys(i, d, row_ok, key_valid, batch, n, HAS_MASK: tl.constexpr):
        """Keys i + d and i - d of every (row, distance) of a tile, whether each is in the row (the diagonal once, on
        the right) and whether it can match (not the diagonal, not padding)."""
        right_key = i[:, None] + d[None, :]
        left_key = i[:, None] - d[None, :]
        right_in = row_ok[:, None] & (right_key < n)
        left_in = row_ok[:, None] & (left_key >= 0) & (d[None, :] > 0)
        right_match = right_in & (d[None, :] > 0)
        left_match = left_in
        if HAS_MASK:
            right_match = right_match & (tl.load(key_valid + batch * n + right_key, mask=right_match, other=0) != 0)
            left_match = left_match & (tl.load(key_valid + batch * n + left_key, mask=left_match, other=0) != 0)
        return right_key, left_key, right_in, left_in, right_match, left_match

    @triton.jit
    def _geometric_forward_kernel(
        content, left, right, key_valid, weights, heads, n, log_smallest_normal,
        HAS_MASK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    ):  # fmt: skip
        bh = tl.program_id(0)  # batch * heads + head
        batch = bh // heads
        i = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) queries
        row_ok = i < n
        row_start = (bh.to(tl.int64) * n + i) * n  # (BLOCK_M,) offset of (b, h, i, 0)
        right_term = tl.load(right + bh * n + i, mask=row_ok, other=0.0).to(tl.float32)[:, None]
        left_term = tl.load(left + bh * n + i, mask=row_ok, other=0.0).to(tl.float32)[:, None]
        closer = tl.zeros([BLOCK_M], dtype=tl.float32)  # sum of log(1 - P) over the keys nearer than this chunk
        d_start = 0
        while d_start < n:  # not `range(0, n, ...)`: Triton 3.6's interpreter cannot take a length there (numpy 2.4)
            d = d_start + tl.arange(0, BLOCK_D)  # (BLOCK_D,) distances
            right_key, left_key, right_in, left_in, right_match, left_match = _row_keys(
                i, d, row_ok, key_valid, batch, n, HAS_MASK
            )
            right_z = tl.load(content + row_start[:, None] + right_key, mask=right_match, other=0.0)
            left_z = tl.load(content + row_start[:, None] + left_key, mask=left_match, other=0.0)
            right_match_log, right_miss_log = _log_sigmoids(right_z.to(tl.float32) + right_term)
            left_match_log, left_miss_log = _log_sigmoids(left_z.to(tl.float32) + left_term)
            right_miss_log = tl.where(right_match, right_miss_log, 0.0)
            left_miss_log = tl.where(left_match, left_miss_log, 0.0)
            both_miss = right_miss_log + left_miss_log  # (BLOCK_M, BLOCK_D)
            nearer, _ = tl.associative_scan((tl.zeros_like(both_miss), both_miss), 1, _exclusive_sum)
            right_closer = closer[:, None] + nearer  # every key at a smaller distance
            left_closer = right_closer + right_miss_log  # and the right key at the same distance
            right_log = tl.where(right_match, right_match_log + right_closer, -float("inf"))
            left_log = tl.where(left_match, left_match_log + left_closer, -float("inf"))
            right_weight = tl.exp(tl.where(right_log < log_smallest_normal, -float("inf"), right_log))
            left_weight = tl.exp(tl.where(left_log < log_smallest_normal, -float("inf"), left_log))
            tl.store(weights + row_start[:, None] + right_key, right_weight, mask=right_in)
            tl.store(weights + row_start[:, None] + left_key, left_weight, mask=left_in)
            closer += tl.sum(both_miss, axis=1)
            d_start += BLOCK_D

    @triton.jit
    def _geometric_backward_kernel(
        grad, weights, content, left, right, key_valid, grad_content, grad_left, grad_right, heads, n,
        HAS_MASK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    ):  # fmt: skip
        bh = tl.program_id(0)
        batch = bh // heads
        i = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = i < n
        row_start = (bh.to(tl.int64) * n + i) * n
        right_term = tl.load(right + bh * n + i, mask=row_ok, other=0.0).to(tl.float32)[:, None]
        left_term = tl.load(left + bh * n + i, mask=row_ok, other=0.0).to(tl.float32)[:, None]
        farther = tl.zeros([BLOCK_M], dtype=tl.float32)  # sum of g * A over the keys beyond this chunk
        right_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
        left_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
        d_end = tl.cdiv(n, BLOCK_D) * BLOCK_D
        while d_end > 0:
            # the far chunks first, each walked from its largest distance down, so that the scan runs outside-in
            d = d_end - 1 - tl.arange(0, BLOCK_D)
            right_key, left_key, right_in, left_in, right_match, left_match = _row_keys(
                i, d, row_ok, key_valid, batch, n, HAS_MASK
            )
            right_at = row_start[:, None] + right_key
            left_at = row_start[:, None] + left_key
            right_z = tl.load(content + right_at, mask=right_match, other=0.0).to(tl.float32) + right_term
            left_z = tl.load(content + left_at, mask=left_match, other=0.0).to(tl.float32) + left_term
            right_ga = tl.load(grad + right_at, mask=right_match, other=0.0).to(tl.float32) * tl.load(
                weights + right_at, mask=right_match, other=0.0
            )
            left_ga = tl.load(grad + left_at, mask=left_match, other=0.0).to(tl.float32) * tl.load(
                weights + left_at, mask=left_match, other=0.0
            )
            both = right_ga + left_ga  # (BLOCK_M, BLOCK_D), 0 where nothing matches
            beyond, _ = tl.associative_scan((tl.zeros_like(both), both), 1, _exclusive_sum)
            left_farther = farther[:, None] + beyond  # every key at a larger distance
            right_farther = left_farther + left_ga  # and the left key at the same distance
            right_match_log, right_miss_log = _log_sigmoids(right_z)
            left_match_log, left_miss_log = _log_sigmoids(left_z)
            right_dz = right_ga * tl.exp(right_miss_log) - tl.exp(right_match_log) * right_farther
            left_dz = left_ga * tl.exp(left_miss_log) - tl.exp(left_match_log) * left_farther
            right_dz = tl.where(right_match, right_dz, 0.0)
            left_dz = tl.where(left_match, left_dz, 0.0)
            out_type = grad_content.dtype.element_ty
            tl.store(grad_content + right_at, right_dz.to(out_type), mask=right_in)
            tl.store(grad_content + left_at, left_dz.to(out_type), mask=left_in)
            right_sum += tl.sum(right_dz, axis=1)
            left_sum += tl.sum(left_dz, axis=1)
            farther += tl.sum(both, axis=1)
            d_end -= BLOCK_D
        tl.store(grad_right + bh * n + i, right_sum, mask=row_ok)
        tl.store(grad_left + bh * n + i, left_sum, mask=row_ok)


def kernel_device_type() -> str:
    """The device type the kernels run on: `"cuda"`, `"cpu"` where Triton interprets them (`TRITON_INTERPRET=1` when
    this module was first imported), `""` without triton."""
    if not TRITON_AVAILABLE:
        return ""
    from triton.runtime.interpreter import InterpretedFunction

    return "cpu" if isinstance(_geometric_forward_kernel, InterpretedFunction) else "cuda"


def _on_device(tensor: torch.Tensor):
    """Launch on `tensor`'s GPU (Triton launches on the current device)."""
    return torch.cuda.device(tensor.device) if tensor.device.type == "cuda" else contextlib.nullcontext()


def _launch_settings(content: torch.Tensor, key_valid: torch.Tensor | None):
    b, h, n, _ = content.shape
    grid = (b * h, triton.cdiv(n, BLOCK_ROWS))  # b * h first: the second and third grid axes stop at 65535
    # the padding mask as bytes; without one the kernels never read it (any pointer will do)
    mask = content if key_valid is None else key_valid.to(torch.uint8).contiguous()
    settings = dict(HAS_MASK=key_valid is not None, BLOCK_M=BLOCK_ROWS, BLOCK_D=BLOCK_DISTANCES, num_warps=NUM_WARPS)
    return grid, mask, settings


def _forward(content, left, right, key_valid):
    weights = torch.empty(content.shape, dtype=torch.float32, device=content.device)
    if weights.numel() == 0:
        return weights
    grid, mask, settings = _launch_settings(content, key_valid)
    with _on_device(content):
        _geometric_forward_kernel[grid](
            content, left, right, mask, weights, content.shape[1], content.shape[-1], LOG_SMALLEST_NORMAL, **settings
        )
    return weights


def _backward(grad, weights, content, left, right, key_valid):
    grad_content = torch.empty_like(content)
    grad_left, grad_right = torch.empty_like(left), torch.empty_like(right)
    if content.numel() == 0:
        return grad_content, grad_left.zero_(), grad_right.zero_()
    grid, mask, settings = _launch_settings(content, key_valid)
    with _on_device(content):
        _geometric_backward_kernel[grid](
            grad, weights, content, left, right, mask, grad_content, grad_left, grad_right, content.shape[1],
            content.shape[-1], **settings,
        )  # fmt: skip
    return grad_content, grad_left, grad_right


# One op namespace per copy of this module: a process may import the package and a model's remote-code copy of it.
_OPS = "ndr_triton_" + hashlib.sha1(__name__.encode()).hexdigest()[:8]


# No device_types: the kernels run where Triton does (CUDA; the CPU only in Triton's interpreter), which
# `geometric_ndr.uses_triton_kernel` checks before calling.
@torch.library.custom_op(f"{_OPS}::geometric_attention", mutates_args=())
def _geometric_attention(
    content: torch.Tensor, left: torch.Tensor, right: torch.Tensor, key_valid: torch.Tensor | None
) -> torch.Tensor:
    return _forward(content, left, right, key_valid)


@_geometric_attention.register_fake
def _(content, left, right, key_valid):
    return content.new_empty(content.shape, dtype=torch.float32)


@torch.library.custom_op(f"{_OPS}::geometric_attention_backward", mutates_args=())
def _geometric_attention_backward(
    grad: torch.Tensor,
    weights: torch.Tensor,
    content: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    key_valid: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(grad.contiguous(), weights, content, left, right, key_valid)


register_kernel_autograd(_geometric_attention, _geometric_attention_backward)


def geometric_attention_triton(
    content: torch.Tensor,
    left: torch.Tensor | None = None,
    right: torch.Tensor | None = None,
    key_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Geometric attention weights with the Triton kernels: the arguments of `geometric_ndr.geometric_attention_torch`
    (`content` in float32, bfloat16 or float16; the direction terms are computed with in float32), float32 weights.
    `geometric_ndr.geometric_attention_weights(..., kernel="triton")` calls it where the kernels run."""
    if not TRITON_AVAILABLE:
        raise ImportError("geometric_attention_triton needs triton: pip install 'ndr[triton]'.")
    if content.dtype not in TRITON_DTYPES:
        raise TypeError(f"geometric_attention_triton reads {TRITON_DTYPES} logits, not {content.dtype}.")
    if left is None:
        left = right = content.new_zeros(content.shape[:-1], dtype=torch.float32)
    left, right = left.to(torch.float32).contiguous(), right.to(torch.float32).contiguous()
    return _geometric_attention(content.contiguous(), left, right, key_valid)


__all__ = ["geometric_attention_triton", "kernel_device_type", "TRITON_AVAILABLE", "TRITON_DTYPES"]
