"""Geometric attention weights (Csordás et al., 2022, Sec. 3.2): every key matches with a sigmoid probability and the
closest match wins.

For query i and key j != i, with match probability `P_ij = sigmoid(z_ij)`:

    A_ij = P_ij * prod over keys k closer to i than j of (1 - P_ik),        A_ii = 0,

where "closer" scans the keys in the order i+1, i-1, i+2, i-2, ... (at equal distance the key on the right comes
first). Rows are not normalised: `sum_j A_ij = 1 - prod_k (1 - P_ik) <= 1`, the missing mass means "no match".

Three implementations compute the same numbers:

* `geometric_attention_torch`: PyTorch operations, any device (the path every GPU runs). The product over closer keys
  is a sum of `log(1 - P)` over a contiguous range on each side of i, computed with one cumulative sum per side (never
  as the difference of two cumulative sums, which loses all precision when the sums are large and gives NaN at ±inf).
* a fused CPU kernel (C++, `geometric_ndr_cpu.cpp`, built on first use with `torch.utils.cpp_extension` and registered
  as a CPU-only custom op, `ndr_<id>::geometric_attention`, so `torch.compile` keeps it in the graph): one pass per
  query row, the scan done as a running product in scan order, a hand-written backward that keeps only the weights
  and the logits, bfloat16 read and written as it is (computed in float32). Used for CPU tensors when it builds (a C++
  compiler with OpenMP; otherwise, with a warning, the PyTorch path); a `trust_remote_code` copy of this file has no
  `.cpp` next to it and uses the PyTorch path. `kernel="torch"` turns it off, `kernel="cpu"` makes a failed build an
  error.
* fused Triton kernels for CUDA tensors (`geometric_ndr_triton`, forward and backward, float32 inside; they read
  bfloat16 logits as they are), used where `kernel="triton"` is asked for (a model: `attn_implementation=
  "ndr_triton"`) and triton is installed; the PyTorch path stays the GPU default until a GPU measurement says
  otherwise. Under `TRITON_INTERPRET=1` they run on CPU tensors in Triton's interpreter (slowly: that is how they are
  tested without a GPU).

Both flush weights below the smallest normal float to 0: denormal numbers make the matrix products that follow
(weights @ values and its backward) many times slower, and change nothing above 1e-38.

Tensor dimensions: b batch, h heads, i query, j key (both in range n).
"""

import contextlib
import hashlib
import logging
import math
import os
import threading
from functools import lru_cache, wraps
from typing import NamedTuple

import torch
from torch.nn import functional as F

from .kernel_autograd_ndr import register_kernel_autograd


logger = logging.getLogger(__name__)


def cached_per_length(build):
    """`build(n, device)` (constant tensors for sequence length `n`) cached per (n, device) in eager mode and traced
    afresh under `torch.compile`; built outside inference mode, so that autograd may save them."""

    @lru_cache(maxsize=64)
    def cached(n: int, device: torch.device):
        with torch.inference_mode(False):
            return build(n, device)

    @wraps(build)
    def constants(n: int, device: torch.device):
        if torch.compiler.is_compiling():
            return build(n, device)
        return cached(n, torch.device(device))

    return constants


class ScanIndices(NamedTuple):
    """Masks and indices that depend only on the sequence length: (n, n) each."""

    key_is_right: torch.Tensor  # j > i
    key_is_left: torch.Tensor  # j < i
    diagonal: torch.Tensor  # j == i: a column never attends to itself
    # where the closer keys on the *other* side of i end, as an index into the table built by
    # `geometric_attention_torch`: [left total (n - 1) | left sums (n) | right sums (n) | right total (n - 1)]
    other_side: torch.Tensor


@cached_per_length
def scan_indices(n: int, device: torch.device) -> ScanIndices:
    """The `ScanIndices` of length `n` on `device`."""
    i = torch.arange(n, device=device).unsqueeze(1)  # (n, 1)
    j = torch.arange(n, device=device).unsqueeze(0)  # (1, n)
    key_is_right, key_is_left = j > i, j < i
    # Key j = i + d (right) is preceded by the left keys i-1 .. i-d+1: left_sums[i, i-d+1] = left_sums[i, 2i-j+1],
    # all of the left keys once i-d+1 < 0. Key j = i - d (left) is preceded by the right keys i+1 .. i+d:
    # right_sums[i, 2i-j], all of them once i+d > n-1. The totals are padded in as columns of their own, so every
    # (i, j) of a row reads a column of its own: the gather's backward adds each gradient once, so it is deterministic
    # on CUDA too (a clamped index would repeat columns, and CUDA adds repeated gradients with atomics in any order).
    other_side = torch.where(key_is_right, (n - 1) + (2 * i - j + 1), (n - 1) + n + (2 * i - j))
    return ScanIndices(key_is_right, key_is_left, j == i, other_side)


def direction_logits(content: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """`content_ij + (right_i if j > i else left_i)`: (b, h, n, n) content and (b, h, n) terms → (b, h, n, n)."""
    key_is_right = scan_indices(content.shape[-1], content.device).key_is_right
    return content + torch.where(key_is_right, right.unsqueeze(-1), left.unsqueeze(-1))


def geometric_attention_torch(
    content: torch.Tensor,
    left: torch.Tensor | None = None,
    right: torch.Tensor | None = None,
    key_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Geometric attention weights with PyTorch operations (any device; autograd derives the backward), in the dtype
    of `content`. `geometric_attention_weights` calls it in float32 for every tensor the CPU kernel does not take.

    Args:
        content (`torch.Tensor` of shape `(batch, heads, seq, seq)`): the logits `z_ij` without the direction terms.
        left (`torch.Tensor` of shape `(batch, heads, seq)`, *optional*): added to the logits of the keys left of
            each query.
        right (`torch.Tensor` of shape `(batch, heads, seq)`, *optional*): added to the logits of the keys right of
            each query.
        key_valid (`torch.Tensor` of shape `(batch, seq)`, *optional*): bool, False for padded keys.

    Returns:
        `torch.Tensor` of shape `(batch, heads, seq, seq)`: the weights `A`.
    """
    n = content.shape[-1]
    indices = scan_indices(n, content.device)
    logits = content if left is None else direction_logits(content, left, right)
    excluded = indices.diagonal
    if key_valid is not None:
        excluded = excluded | ~key_valid[:, None, None, :]  # (b, 1, n, n)
    logits = logits.masked_fill(excluded, float("-inf"))
    log_match = F.logsigmoid(logits)  # log P; -inf where excluded
    log_no_match = F.logsigmoid(-logits)  # log (1 - P); 0 where excluded
    # right_sums[i, j] = sum of log(1 - P_ik) over i < k <= j;  left_sums[i, j] = the same over j <= k < i
    right_sums = log_no_match.masked_fill(~indices.key_is_right, 0.0).cumsum(-1)
    left_sums = log_no_match.masked_fill(~indices.key_is_left, 0.0).flip(-1).cumsum(-1).flip(-1)
    # closer keys on j's own side: i < k < j (right) or j < k < i (left)
    same_side = torch.where(
        indices.key_is_right, F.pad(right_sums[..., :-1], (1, 0)), F.pad(left_sums[..., 1:], (0, 1))
    )
    pad = (*logits.shape[:-1], n - 1)
    table = torch.cat([left_sums[..., :1].expand(pad), left_sums, right_sums, right_sums[..., -1:].expand(pad)], -1)
    other = table.gather(-1, indices.other_side.expand(logits.shape))  # (b, h, n, n)
    log_weights = log_match + same_side + other
    smallest_normal = math.log(torch.finfo(log_weights.dtype).tiny)
    return torch.exp(log_weights.masked_fill(log_weights < smallest_normal, float("-inf")))


# ------------------------------------------------------------------------------------------ the fused CPU kernel


# compiler flags per CPU capability, as torch's own C++ code generator (inductor) uses them with ATen's vectors
_ISA_FLAGS = {
    "AVX512": ["-DCPU_CAPABILITY_AVX512", "-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma"],
    "AVX2": ["-DCPU_CAPABILITY_AVX2", "-mavx2", "-mfma"],
}
_kernel_lock = threading.Lock()
_kernel_state: dict = {}


# What `geometric_attention_weights(..., kernel=...)` accepts; a model chooses among them with transformers'
# `attn_implementation`, once, when it is made or loaded (never saved in `config.json`; no weight depends on it):
# "eager", transformers' default, is the NDR's own code (the fused CPU kernel on CPU tensors where it builds, PyTorch
# operations elsewhere); the NDR's two others are registered with transformers' `AttentionInterface` (modeling_ndr.py)
# so that `from_pretrained(..., attn_implementation="ndr_triton")` and `set_attn_implementation` accept them.
KERNELS = ("auto", "cpu", "torch", "triton")
ATTENTION_KERNELS = {"eager": "auto", "ndr_torch": "torch", "ndr_triton": "triton"}


def attention_kernel(implementation: str | None) -> str:
    """The `kernel` a model's `config._attn_implementation` asks for (None: `"eager"`)."""
    if (implementation or "eager") not in ATTENTION_KERNELS:
        expected = ", ".join(map(repr, ATTENTION_KERNELS))
        raise ValueError(f'attn_implementation="{implementation}" is not one the NDR has: expected one of {expected}')
    return ATTENTION_KERNELS[implementation or "eager"]


# Next to this file in the package; a `trust_remote_code` copy holds only the .py files, so it has none.
KERNEL_SOURCE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "geometric_ndr_cpu.cpp")


def _kernel_name(source: str, capability: str, flags: list[str]) -> str:
    """The build's name: one per source, flags and torch installation. Two virtual environments with the same torch
    version compile against different include paths, and under one name each would rebuild the other's build."""
    key = " ".join([source, *flags, torch.__version__, os.path.dirname(torch.__file__)])
    return f"ndr_geometric_{capability.lower()}_{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def kernel_build_directory(name: str) -> str:
    """The folder the kernel `name` is built and cached in: `$TORCH_EXTENSIONS_DIR/<name>` if that is set, else
    `<torch's default build root>/ndr/<name>` (`~/.cache/torch_extensions/ndr/...`). ndr names the folder itself and
    gives it to torch (`load_inline(build_directory=...)`), so it knows where the build's files are."""
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(get_default_build_root(), "ndr")
    folder = os.path.join(root, name)
    os.makedirs(folder, exist_ok=True)
    return folder


@contextlib.contextmanager
def _build_lock(folder: str):
    """Hold the build lock of the kernel built in `folder`, clearing a build lock that a killed build left behind.

    torch marks a build in progress with a file `lock` in the build folder, which outlives a build that was killed
    (Ctrl-C, a timeout during the first build); every later process then waits for it forever, without a word. Builds
    of this kernel also hold an `flock` (released by the kernel however the process ends), so whoever holds it knows
    that a `lock` file there is a dead build's. (The file's name is torch's `FileBaton` convention, listed in
    docs/contributing.md with the other upstream details ndr relies on; tests/unit/test_geometric_attention.py pins
    it.)
    """
    try:
        import fcntl
    except ImportError:  # no flock (Windows): torch's own lock alone
        yield
        return
    with open(os.path.join(folder, ".ndr-build.flock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process building it: wait for that build
        stale = os.path.join(folder, "lock")
        if os.path.exists(stale):
            logger.warning("Removing %s, left by a build of the CPU kernel that was killed", stale)
            os.remove(stale)
        yield


def load_cpu_kernel(required: bool = False):
    """The compiled CPU kernel module, building it on first use (cached in `kernel_build_directory`), or
    `None` if it cannot be built here (no C++ compiler, no OpenMP, or no `geometric_ndr_cpu.cpp` next to this file);
    with `required`, a `RuntimeError` saying why instead of None."""
    with _kernel_lock:
        if "module" not in _kernel_state:
            _kernel_state["module"] = _build_cpu_kernel()
        if _kernel_state["module"] is None and required:
            raise RuntimeError(f"kernel='cpu' but the CPU kernel did not build: {_kernel_state.get('error')}")
        return _kernel_state["module"]


def _build_cpu_kernel():
    """`load_cpu_kernel`'s build (under its lock): the module, or None with the reason in `_kernel_state["error"]`."""
    module, error = None, None
    try:
        with open(KERNEL_SOURCE_FILE) as f:
            source = f.read()
    except OSError as caught:
        source, error = None, caught
    if source is not None:
        try:
            from torch.utils.cpp_extension import load_inline

            capability = torch.backends.cpu.get_cpu_capability()
            flags = _ISA_FLAGS.get(capability, [])
            name = _kernel_name(source, capability, flags)
            folder = kernel_build_directory(name)
            with _build_lock(folder):
                if not os.path.isfile(os.path.join(folder, f"{name}.so")):  # else ~30 s of silence
                    logger.warning(
                        "building the geometric-attention CPU kernel for this machine (once: about 30 s, then "
                        "cached in %s)",
                        folder,
                    )
                module = load_inline(
                    name=name,
                    build_directory=folder,
                    cpp_sources=source,
                    functions=["geometric_forward", "geometric_backward"],
                    extra_cflags=["-O3", "-fopenmp", *flags],
                    extra_ldflags=["-fopenmp"],
                )
        except Exception as caught:  # noqa: BLE001 - no compiler, no OpenMP, no ninja: fall back, say why
            error = caught
    if module is None:
        message = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        _kernel_state["error"] = message
        if source is None:  # the expected case of a remote-code copy: nothing to warn about
            logger.info("No geometric-attention CPU kernel source (%s); using the PyTorch path.", message[:300])
        else:
            logger.warning(
                "The fused geometric-attention CPU kernel did not build (%s); using the PyTorch implementation, "
                "which computes the same weights more slowly.",
                message[:300],
            )
    return module


# One op namespace per copy of this module: a process may import the package and a model's remote-code copy of it.
_OPS = "ndr_" + hashlib.sha1(__name__.encode()).hexdigest()[:8]


# CPU only (`device_types`): the kernel reads host memory, so the op has no implementation a CUDA tensor could reach.
@torch.library.custom_op(f"{_OPS}::geometric_attention", mutates_args=(), device_types="cpu")
def _geometric_attention_cpu(
    content: torch.Tensor, left: torch.Tensor, right: torch.Tensor, key_valid: torch.Tensor | None
) -> torch.Tensor:
    return load_cpu_kernel().geometric_forward(content, left, right, key_valid)


@_geometric_attention_cpu.register_fake
def _(content, left, right, key_valid):
    return torch.empty_like(content)


@torch.library.custom_op(f"{_OPS}::geometric_attention_backward", mutates_args=(), device_types="cpu")
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


register_kernel_autograd(_geometric_attention_cpu, _geometric_attention_cpu_backward)


@torch.compiler.assume_constant_result  # evaluated once when torch.compile traces, not a graph break
def cpu_kernel_available() -> bool:
    """Whether the fused CPU kernel builds here."""
    return load_cpu_kernel() is not None


def uses_cpu_kernel(tensor: torch.Tensor, kernel: str = "auto") -> bool:
    """Whether `geometric_attention_weights(..., kernel=kernel)` computes `tensor`'s weights with the fused CPU
    kernel: `"auto"` or `"cpu"` (and `"triton"` where the Triton kernels do not run), a CPU tensor, and a kernel that
    builds (`"cpu"`: a `RuntimeError` saying why it did not)."""
    if kernel == "torch" or tensor.device.type != "cpu":
        return False
    return _cpu_kernel_built() if kernel == "cpu" else cpu_kernel_available()


@torch.compiler.assume_constant_result
def _cpu_kernel_built() -> bool:
    return load_cpu_kernel(required=True) is not None


@torch.compiler.assume_constant_result  # evaluated once when torch.compile traces, not a graph break
def triton_kernel_device_type() -> str:
    """The device type the Triton kernels run on: `"cuda"`, `"cpu"` under Triton's interpreter, `""` where triton is
    not installed. Imports triton on first use, so that `import modeling_ndr` does not."""
    from .geometric_ndr_triton import kernel_device_type

    return kernel_device_type()


def uses_triton_kernel(tensor: torch.Tensor, kernel: str = "triton") -> bool:
    """Whether `geometric_attention_weights(..., kernel=kernel)` computes `tensor`'s weights with the Triton kernels:
    asked for, triton installed, and `tensor` float32, bfloat16 or float16 on the device the kernels run on."""
    if kernel != "triton" or tensor.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return False
    return tensor.device.type == triton_kernel_device_type()


def _autocast_device_types() -> frozenset[str]:
    names = ("cpu", "cuda", "xpu", "mps", "hpu", "mtia", "maia", "xla", torch._C._get_privateuse1_backend_name())
    types = set()
    for device_type in names:
        try:
            if torch.amp.is_autocast_available(device_type):
                types.add(device_type)
        except (RuntimeError, ValueError):  # a device type this build does not know
            pass
    return frozenset(types)


# The device types with autocast, read once: `torch.amp.is_autocast_available` is a C builtin that torch.compile
# (torch 2.11 on an H100, 2026-11-27) cannot trace, so calling it in the forward broke the compiled graph there.
_AUTOCAST_DEVICE_TYPES = _autocast_device_types()


def _has_autocast(device_type: str) -> bool:
    """Whether `device_type` has autocast (a constant set while compiling; asked of torch for another type)."""
    if device_type in _AUTOCAST_DEVICE_TYPES:
        return True
    return not torch.compiler.is_compiling() and torch.amp.is_autocast_available(device_type)


def geometric_attention_weights(
    logits: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    left: torch.Tensor | None = None,
    right: torch.Tensor | None = None,
    kernel: str = "auto",
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
        kernel (`str`, *optional*, defaults to `"auto"`):
            `"auto"`: the fused CPU kernel for CPU tensors where it builds, else the PyTorch path. `"cpu"`: the same,
            but a CPU kernel that does not build is a `RuntimeError`. `"torch"`: the PyTorch path on every device.
            `"triton"`: the Triton kernels where they run (CUDA tensors with triton installed; CPU tensors under
            `TRITON_INTERPRET=1`), reading float32, bfloat16 or float16 logits as they are; elsewhere `"auto"`. A
            model chooses with `attn_implementation` (`eager`, `ndr_torch`, `ndr_triton`).

    Returns:
        `torch.Tensor` `(batch, heads, seq, seq)`, the weights `A` (diagonal 0): float32 (float64 for float64 logits;
        bfloat16 from the CPU kernel for bfloat16 logits under autocast, computed in float32).
    """
    if (left is None) != (right is None):
        raise ValueError("Pass both left and right, or neither.")
    if kernel not in KERNELS:
        raise ValueError(f"kernel={kernel!r} is invalid: expected one of {', '.join(map(repr, KERNELS))}.")
    dtype = torch.promote_types(logits.dtype, torch.float32)
    device_type = logits.device.type
    autocast_off = contextlib.nullcontext()  # devices without autocast (meta) compute in the given dtype anyway
    under_autocast = _has_autocast(device_type) and torch.is_autocast_enabled(device_type)
    if _has_autocast(device_type):
        autocast_off = torch.autocast(device_type, enabled=False)
    with autocast_off:
        if uses_triton_kernel(logits, kernel):
            from .geometric_ndr_triton import geometric_attention_triton

            key_valid = None if attention_mask is None else attention_mask != 0
            return geometric_attention_triton(logits, left, right, key_valid)
        # under autocast the CPU kernel reads bf16 logits as they are and writes bf16 (float32 inside): no full copies
        on_cpu_kernel = uses_cpu_kernel(logits, kernel)  # never for CUDA tensors: the op is CPU-only
        as_they_are = under_autocast and logits.dtype == torch.bfloat16 and on_cpu_kernel
        content, small = (logits, torch.float32) if as_they_are else (logits.to(dtype), dtype)
        if left is not None:
            left, right = left.to(small), right.to(small)
        if on_cpu_kernel:
            if left is None:
                left = right = content.new_zeros(content.shape[:-1], dtype=small)
            key_valid = None if attention_mask is None else (attention_mask != 0).to(small).contiguous()
            return _geometric_attention_cpu(content.contiguous(), left.contiguous(), right.contiguous(), key_valid)
        key_valid = None if attention_mask is None else attention_mask != 0
        return geometric_attention_torch(content, left, right, key_valid)


__all__ = [
    "geometric_attention_weights",
    "geometric_attention_torch",
    "direction_logits",
    "load_cpu_kernel",
    "uses_cpu_kernel",
    "uses_triton_kernel",
]
