"""Geometric attention weights (Csordás et al., 2022, Sec. 3.2): every key matches with a sigmoid probability and the
closest match wins.

For query i and key j != i, with match probability `P_ij = sigmoid(z_ij)`:

    A_ij = P_ij * prod over keys k closer to i than j of (1 - P_ik),        A_ii = 0,

where "closer" scans the keys in the order i+1, i-1, i+2, i-2, ... (at equal distance the key on the right comes
first). Rows are not normalised: `sum_j A_ij = 1 - prod_k (1 - P_ik) <= 1`, the missing mass means "no match".

Two implementations compute the same numbers:

* `geometric_attention_reference`: PyTorch operations, any device. The product over closer keys is a sum of
  `log(1 - P)` over a contiguous range on each side of i, computed with one cumulative sum per side (never as the
  difference of two cumulative sums, which loses all precision when the sums are large and gives NaN at ±inf).
* a fused CPU kernel (C++, built on first use with `torch.utils.cpp_extension`, registered as a custom op
  (`ndr_<id>::geometric_attention`) so `torch.compile` keeps it in the graph): one pass per query row, the scan done
  as a running product in scan order, and a hand-written backward that keeps only the weights and the logits. It is
  used on the CPU when it builds (a C++ compiler with OpenMP is needed; otherwise the reference is used, with a
  warning).
  `NDR_GEOMETRIC_KERNEL=torch` turns it off, `NDR_GEOMETRIC_KERNEL=cpu` makes a failed build an error.

Both flush weights below the smallest normal float to 0: denormal numbers make the matrix products that follow
(weights @ values and its backward) many times slower, and change nothing above 1e-38.

Tensor dimensions: b batch, h heads, i query, j key (both in range n).
"""

import hashlib
import logging
import math
import os
import threading
from functools import lru_cache

import torch
from torch.nn import functional as F


logger = logging.getLogger(__name__)


def _direction_logits(content, left, right):
    """`content_ij + (right_i if j > i else left_i)`: (b, h, n, n)."""
    n = content.shape[-1]
    key_is_right = torch.ones(n, n, dtype=torch.bool, device=content.device).triu(1)  # (i, j): j > i
    return content + torch.where(key_is_right, right.unsqueeze(-1), left.unsqueeze(-1))


@lru_cache(maxsize=64)  # called at every step with the same few (n, device)
def _scan_indices(n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Masks of the keys right and left of each query, and, for each (i, j), where the closer keys on the *other*
    side of i end, as an index into `cat([left_sums, right_sums], -1)` (see `geometric_attention_reference`)."""
    i = torch.arange(n, device=device).unsqueeze(1)  # (n, 1)
    j = torch.arange(n, device=device).unsqueeze(0)  # (1, n)
    key_is_right, key_is_left = j > i, j < i
    # key j = i + d (right) is preceded by the left keys i-1 .. i-d+1: left_sums[i, i-d+1] = left_sums[i, 2i-j+1];
    # key j = i - d (left) is preceded by the right keys i+1 .. i+d: right_sums[i, i+d] = right_sums[i, 2i-j].
    other_side = torch.where(key_is_right, (2 * i - j + 1).clamp(min=0), n + (2 * i - j).clamp(max=n - 1))
    return key_is_right, key_is_left, other_side


def geometric_attention_reference(
    content: torch.Tensor,
    left: torch.Tensor | None = None,
    right: torch.Tensor | None = None,
    key_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Geometric attention weights with PyTorch operations (any device; autograd derives the backward).

    Args: as `geometric_attention_weights`, with `key_valid` (b, n) bool instead of a 0/1 mask.
    """
    n = content.shape[-1]
    logits = content if left is None else _direction_logits(content, left, right)
    excluded = torch.eye(n, dtype=torch.bool, device=content.device)  # a column never attends to itself
    if key_valid is not None:
        excluded = excluded | ~key_valid[:, None, None, :]  # (b, 1, n, n)
    logits = logits.masked_fill(excluded, float("-inf"))
    log_match = F.logsigmoid(logits)  # log P; -inf where excluded
    log_no_match = F.logsigmoid(-logits)  # log (1 - P); 0 where excluded
    key_is_right, key_is_left, other_side = _scan_indices(n, content.device)
    # right_sums[i, j] = sum of log(1 - P_ik) over i < k <= j;  left_sums[i, j] = the same over j <= k < i
    right_sums = log_no_match.masked_fill(~key_is_right, 0.0).cumsum(-1)
    left_sums = log_no_match.masked_fill(~key_is_left, 0.0).flip(-1).cumsum(-1).flip(-1)
    # closer keys on j's own side: i < k < j (right) or j < k < i (left)
    same_side = torch.where(key_is_right, F.pad(right_sums[..., :-1], (1, 0)), F.pad(left_sums[..., 1:], (0, 1)))
    other = torch.cat([left_sums, right_sums], dim=-1).gather(-1, other_side.expand(logits.shape))
    log_weights = log_match + same_side + other
    smallest_normal = math.log(torch.finfo(log_weights.dtype).tiny)
    return torch.exp(log_weights.masked_fill(log_weights < smallest_normal, float("-inf")))


# ------------------------------------------------------------------------------------------ the fused CPU kernel

_KERNEL_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <algorithm>
#include <limits>
#include <vector>

using at::vec::Vectorized;

// Logits of query row i for keys j .. j+count-1: content + (key right of i ? right : left).
template <typename scalar_t>
static inline Vectorized<scalar_t> row_logits(const scalar_t* content, int64_t j, int64_t count, int64_t i,
                                              scalar_t left, scalar_t right) {
  using Vec = Vectorized<scalar_t>;
  Vec c = count == Vec::size() ? Vec::loadu(content + j) : Vec::loadu(content + j, count);
  Vec key_is_right = Vec::arange(scalar_t(j), scalar_t(1)) > Vec(scalar_t(i));
  return c + Vec::blendv(Vec(left), Vec(right), key_is_right);
}

template <typename scalar_t>
static inline Vectorized<scalar_t> load(const scalar_t* data, int64_t count) {
  using Vec = Vectorized<scalar_t>;
  return count == Vec::size() ? Vec::loadu(data) : Vec::loadu(data, count);
}

// Rows per parallel chunk: as many as ATen's own element-wise ops take (small tensors stay on one thread, where
// waking the other threads would cost more than the work)
static inline int64_t grain_rows(int64_t n) {
  return std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(n, 1));
}

// The keys of row i in scan order i+1, i-1, i+2, i-2, ...; `visit(j)` is called once per key.
template <typename Visit>
static inline void scan_forward(int64_t i, int64_t n, Visit visit) {
  const int64_t both = std::min(i, n - 1 - i);
  for (int64_t t = 1; t <= both; ++t) {
    visit(i + t);
    visit(i - t);
  }
  for (int64_t r = i + both + 1; r < n; ++r) visit(r);
  for (int64_t l = i - both - 1; l >= 0; --l) visit(l);
}

template <typename Visit>
static inline void scan_backward(int64_t i, int64_t n, Visit visit) {
  const int64_t both = std::min(i, n - 1 - i);
  for (int64_t l = 0; l < i - both; ++l) visit(l);
  for (int64_t r = n - 1; r > i + both; --r) visit(r);
  for (int64_t t = both; t >= 1; --t) {
    visit(i - t);
    visit(i + t);
  }
}

template <typename scalar_t>
static void forward_rows(const scalar_t* content, const scalar_t* left, const scalar_t* right,
                         const scalar_t* key_valid, scalar_t* weights, int64_t rows, int64_t n, int64_t heads) {
  using Vec = Vectorized<scalar_t>;
  at::parallel_for(0, rows, grain_rows(n), [&](int64_t start, int64_t stop) {
    std::vector<scalar_t> no_match_row(n);
    scalar_t* no_match = no_match_row.data();
    const scalar_t smallest_normal = std::numeric_limits<scalar_t>::min();
    const Vec zero(0), one(1);
    for (int64_t row = start; row < stop; ++row) {
      const int64_t i = row % n;
      const scalar_t* valid = key_valid ? key_valid + (row / n / heads) * n : nullptr;
      scalar_t* match = weights + row * n;  // holds P until the scan turns it into A
      // P = sigmoid(z) and 1 - P = sigmoid(-z) from one exp: e = exp(-|z|); 1 / (1 + e) and e / (1 + e)
      for (int64_t j = 0; j < n; j += Vec::size()) {
        const int64_t count = std::min<int64_t>(Vec::size(), n - j);
        Vec z = row_logits(content + row * n, j, count, i, left[row], right[row]);
        Vec e = (zero - z.abs()).exp();
        Vec large = one / (one + e), small = e * large;
        Vec positive = z >= zero;
        Vec p = Vec::blendv(small, large, positive), q = Vec::blendv(large, small, positive);
        if (valid) {  // a padded key never matches
          Vec is_valid = load(valid + j, count) != zero;
          p = Vec::blendv(zero, p, is_valid);
          q = Vec::blendv(one, q, is_valid);
        }
        p.store(match + j, count);
        q.store(no_match + j, count);
      }
      // A_j = P_j * (product of 1 - P over the keys scanned before j); below the smallest normal number it is 0
      scalar_t none_closer = 1;
      scan_forward(i, n, [&](int64_t j) {
        match[j] *= none_closer;
        none_closer *= no_match[j];
        none_closer = none_closer < smallest_normal ? scalar_t(0) : none_closer;
      });
      match[i] = 0;
      at::vec::map([&](Vec a) { return Vec::blendv(zero, a, a >= Vec(smallest_normal)); }, match, match, n);
    }
  });
}

template <typename scalar_t>
static void backward_rows(const scalar_t* grad, const scalar_t* weights, const scalar_t* content, const scalar_t* left,
                          const scalar_t* right, const scalar_t* key_valid, scalar_t* grad_content,
                          scalar_t* grad_left, scalar_t* grad_right, int64_t rows, int64_t n, int64_t heads) {
  using Vec = Vectorized<scalar_t>;
  at::parallel_for(0, rows, grain_rows(n), [&](int64_t start, int64_t stop) {
    std::vector<scalar_t> farther_row(n);
    scalar_t* farther_sum = farther_row.data();
    const Vec zero(0), one(1), smallest_normal(std::numeric_limits<scalar_t>::min());
    for (int64_t row = start; row < stop; ++row) {
      const int64_t i = row % n;
      const scalar_t* valid = key_valid ? key_valid + (row / n / heads) * n : nullptr;
      scalar_t* gc = grad_content + row * n;
      // w_j = dL/d log A_j = grad_j * A_j (kept in gc until the last pass)
      at::vec::map2([](Vec g, Vec a) { return g * a; }, gc, grad + row * n, weights + row * n, n);
      // dL/d log(1 - P_k) = sum of w over the keys scanned after k
      scalar_t farther = 0;
      scan_backward(i, n, [&](int64_t j) {
        farther_sum[j] = farther;
        farther += gc[j];
      });
      farther_sum[i] = 0;
      // dL/dz = w (1 - sigmoid z) - farther_sum sigmoid z; the diagonal, padded keys and denormals give 0
      Vec left_sum(0), right_sum(0);
      for (int64_t j = 0; j < n; j += Vec::size()) {
        const int64_t count = std::min<int64_t>(Vec::size(), n - j);
        Vec z = row_logits(content + row * n, j, count, i, left[row], right[row]);
        Vec sig = one / (one + (zero - z).exp());
        Vec gz = load(gc + j, count) * (one - sig) - load(farther_sum + j, count) * sig;
        Vec index = Vec::arange(scalar_t(j), scalar_t(1));
        Vec keep = (index != Vec(scalar_t(i))) & (gz.abs() >= smallest_normal);
        if (count < Vec::size()) keep = keep & (Vec::arange(scalar_t(0), scalar_t(1)) < Vec(scalar_t(count)));
        if (valid) keep = keep & (load(valid + j, count) != zero);
        gz = Vec::blendv(zero, gz, keep);
        gz.store(gc + j, count);
        Vec key_is_right = index > Vec(scalar_t(i));
        right_sum = right_sum + Vec::blendv(zero, gz, key_is_right);
        left_sum = left_sum + Vec::blendv(gz, zero, key_is_right);
      }
      auto add = [](Vec x, Vec y) { return x + y; };
      grad_left[row] = at::vec::vec_reduce_all(add, left_sum);
      grad_right[row] = at::vec::vec_reduce_all(add, right_sum);
    }
  });
}

// content (b, h, n, n), left/right (b, h, n), key_valid (b, n) of 0/1 in content's dtype; all contiguous
torch::Tensor geometric_forward(torch::Tensor content, torch::Tensor left, torch::Tensor right,
                                c10::optional<torch::Tensor> key_valid) {
  const int64_t n = content.size(-1), heads = content.size(1), rows = content.numel() / n;
  auto weights = torch::empty_like(content);
  AT_DISPATCH_FLOATING_TYPES(content.scalar_type(), "geometric_forward", [&] {
    const scalar_t* valid = key_valid.has_value() ? key_valid->data_ptr<scalar_t>() : nullptr;
    forward_rows<scalar_t>(content.data_ptr<scalar_t>(), left.data_ptr<scalar_t>(), right.data_ptr<scalar_t>(),
                           valid, weights.data_ptr<scalar_t>(), rows, n, heads);
  });
  return weights;
}

std::vector<torch::Tensor> geometric_backward(torch::Tensor grad, torch::Tensor weights, torch::Tensor content,
                                              torch::Tensor left, torch::Tensor right,
                                              c10::optional<torch::Tensor> key_valid) {
  const int64_t n = content.size(-1), heads = content.size(1), rows = content.numel() / n;
  auto grad_content = torch::empty_like(content);
  auto grad_left = torch::empty_like(left), grad_right = torch::empty_like(right);
  AT_DISPATCH_FLOATING_TYPES(content.scalar_type(), "geometric_backward", [&] {
    const scalar_t* valid = key_valid.has_value() ? key_valid->data_ptr<scalar_t>() : nullptr;
    backward_rows<scalar_t>(grad.data_ptr<scalar_t>(), weights.data_ptr<scalar_t>(), content.data_ptr<scalar_t>(),
                            left.data_ptr<scalar_t>(), right.data_ptr<scalar_t>(), valid,
                            grad_content.data_ptr<scalar_t>(), grad_left.data_ptr<scalar_t>(),
                            grad_right.data_ptr<scalar_t>(), rows, n, heads);
  });
  return {grad_content, grad_left, grad_right};
}
"""

# compiler flags per CPU capability, as torch's own C++ code generator (inductor) uses them with ATen's vectors
_ISA_FLAGS = {
    "AVX512": ["-DCPU_CAPABILITY_AVX512", "-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma"],
    "AVX2": ["-DCPU_CAPABILITY_AVX2", "-mavx2", "-mfma"],
}
_kernel_lock = threading.Lock()
_kernel_state: dict = {}


def kernel_mode() -> str:
    """`NDR_GEOMETRIC_KERNEL`: `auto` (default: the CPU kernel if it builds), `cpu` (it must build) or `torch`."""
    mode = os.environ.get("NDR_GEOMETRIC_KERNEL", "auto").lower()
    if mode not in ("auto", "cpu", "torch"):
        raise ValueError(f"NDR_GEOMETRIC_KERNEL={mode!r} is invalid: expected auto, cpu or torch.")
    return mode


def load_cpu_kernel():
    """The compiled CPU kernel module, building it on first use (about a minute; cached by torch in
    `~/.cache/torch_extensions`), or `None` if it cannot be built here."""
    with _kernel_lock:
        if "module" in _kernel_state:
            return _kernel_state["module"]
        module, error = None, None
        try:
            from torch.utils.cpp_extension import load_inline

            capability = torch.backends.cpu.get_cpu_capability()
            flags = _ISA_FLAGS.get(capability, [])
            digest = hashlib.sha1((_KERNEL_SOURCE + " ".join(flags) + torch.__version__).encode()).hexdigest()[:10]
            module = load_inline(
                name=f"ndr_geometric_{capability.lower()}_{digest}",
                cpp_sources=_KERNEL_SOURCE,
                functions=["geometric_forward", "geometric_backward"],
                extra_cflags=["-O3", "-fopenmp", *flags],
                extra_ldflags=["-fopenmp"],
            )
        except Exception as caught:  # noqa: BLE001 - no compiler, no OpenMP, no ninja: fall back, say why
            error = caught
        if module is None:
            message = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            if kernel_mode() == "cpu":
                raise RuntimeError(f"NDR_GEOMETRIC_KERNEL=cpu but the CPU kernel did not build: {message}") from error
            logger.warning(
                "The fused geometric-attention CPU kernel did not build (%s); using the PyTorch implementation, "
                "which computes the same weights more slowly.",
                message[:300],
            )
        _kernel_state["module"] = module
        return module


# One op namespace per copy of this module: a process may import the package and a model's remote-code copy of it.
_OPS = "ndr_" + hashlib.sha1(__name__.encode()).hexdigest()[:8]


@torch.library.custom_op(f"{_OPS}::geometric_attention", mutates_args=())
def _geometric_attention_cpu(
    content: torch.Tensor, left: torch.Tensor, right: torch.Tensor, key_valid: torch.Tensor | None
) -> torch.Tensor:
    return load_cpu_kernel().geometric_forward(content, left, right, key_valid)


@_geometric_attention_cpu.register_fake
def _(content, left, right, key_valid):
    return torch.empty_like(content)


@torch.library.custom_op(f"{_OPS}::geometric_attention_backward", mutates_args=())
def _geometric_attention_cpu_backward(
    grad: torch.Tensor,
    weights: torch.Tensor,
    content: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    key_valid: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    grads = load_cpu_kernel().geometric_backward(grad.contiguous(), weights, content, left, right, key_valid)
    return tuple(grads)


@_geometric_attention_cpu_backward.register_fake
def _(grad, weights, content, left, right, key_valid):
    return torch.empty_like(content), torch.empty_like(left), torch.empty_like(right)


def _setup_context(ctx, inputs, output):
    content, left, right, key_valid = inputs
    ctx.save_for_backward(output, content, left, right, key_valid)


def _backward(ctx, grad):
    weights, content, left, right, key_valid = ctx.saved_tensors
    grad_content, grad_left, grad_right = _geometric_attention_cpu_backward(
        grad, weights, content, left, right, key_valid
    )
    return grad_content, grad_left, grad_right, None


_geometric_attention_cpu.register_autograd(_backward, setup_context=_setup_context)


@torch.compiler.assume_constant_result  # evaluated once when torch.compile traces, not a graph break
def cpu_kernel_available() -> bool:
    """Whether the fused CPU kernel is selected (`NDR_GEOMETRIC_KERNEL`) and builds here."""
    return kernel_mode() != "torch" and load_cpu_kernel() is not None


def uses_cpu_kernel(tensor: torch.Tensor) -> bool:
    """Whether `geometric_attention_weights` computes `tensor`'s weights with the fused CPU kernel."""
    return tensor.device.type == "cpu" and cpu_kernel_available()


def geometric_attention_weights(
    logits: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    left: torch.Tensor | None = None,
    right: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""
    Geometric attention weights `A_ij = P_ij * prod_{k closer to i than j} (1 - P_ik)` with `P = sigmoid(logits)`.

    Computed in float32, also under autocast (float64 logits stay float64, e.g. for `gradcheck`), in O(n^2) with no
    loop over positions in Python; finite for any finite or infinite logits. Rows are not normalised.

    Args:
        logits (`torch.Tensor` of shape `(batch, heads, seq, seq)`):
            Pre-sigmoid scores `z_ij` of query i for key j.
        attention_mask (`torch.Tensor` of shape `(batch, seq)`, *optional*):
            1 for tokens, 0 for padding. Padded keys never match. Rows of padded queries are finite (and unused).
        left (`torch.Tensor` of shape `(batch, heads, seq)`, *optional*):
            A per-query term added to the logits of the keys left of the query (j < i): with `right`, the NDR's
            directional encoding. Passing it here instead of adding it to `logits` saves two passes over
            `(seq, seq)` tensors. Give both `left` and `right`, or neither.
        right (`torch.Tensor` of shape `(batch, heads, seq)`, *optional*):
            The same for the keys right of the query (j > i).

    Returns:
        `torch.Tensor` of shape `(batch, heads, seq, seq)`, float32 (float64 for float64 logits): the weights `A`;
        the diagonal is 0.
    """
    if (left is None) != (right is None):
        raise ValueError("Pass both left and right, or neither.")
    dtype = torch.promote_types(logits.dtype, torch.float32)
    with torch.autocast(device_type=logits.device.type, enabled=False):
        content = logits.to(dtype).contiguous()
        b, h, n, _ = content.shape
        if left is None:
            left = right = content.new_zeros(b, h, n)
        left, right = left.to(dtype).contiguous(), right.to(dtype).contiguous()
        if uses_cpu_kernel(content):
            key_valid = None if attention_mask is None else (attention_mask != 0).to(dtype).contiguous()
            return _geometric_attention_cpu(content, left, right, key_valid)
        key_valid = None if attention_mask is None else attention_mask != 0
        return geometric_attention_reference(content, left, right, key_valid)


__all__ = ["geometric_attention_weights", "geometric_attention_reference", "load_cpu_kernel", "uses_cpu_kernel"]
