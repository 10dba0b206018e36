"""Geometric attention weights, both implementations (fused CPU kernel and PyTorch path), against the definition:
a brute-force triple loop in float64, gradcheck, and inputs at the edge (±inf, huge logits, low precision).

The kernel-specific checks need a C++ compiler: without one (a GPU image, say) they skip and everything else runs on
the PyTorch path. Where a compiler exists, the kernel must build."""

import contextlib
import os
import shutil
import subprocess
import sys
import warnings

import pytest
import torch
from test_modeling_ndr import brute_force_geometric_attention

from modeling_ndr import geometric_attention_weights
from modeling_ndr import geometric_ndr as geometric
from modeling_ndr.geometric_ndr import geometric_attention_torch, load_cpu_kernel, scan_indices, uses_cpu_kernel


IMPLEMENTATIONS = ["cpu_kernel", "torch"]
# what torch.utils.cpp_extension compiles with
HAS_COMPILER = shutil.which(os.environ.get("CXX", "c++")) is not None
needs_compiler = pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: the CPU kernel cannot be built here")


# the `kernel` of `geometric_attention_weights` each implementation runs with ("cpu": the kernel must build)
KERNEL = {"cpu_kernel": "cpu", "torch": "torch"}


@pytest.fixture(params=IMPLEMENTATIONS)
def implementation(request):
    """Run the test once with the fused CPU kernel (where a compiler exists, it must build) and once with the PyTorch
    path (`kernel=KERNEL[implementation]`)."""
    if request.param == "cpu_kernel":
        if not HAS_COMPILER:
            pytest.skip("no C++ compiler: the CPU kernel cannot be built here")
        assert load_cpu_kernel() is not None, "with a C++ compiler the CPU kernel must build"
    return request.param


def direction_terms(batch, heads, n, seed, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, n, generator=generator, dtype=dtype) for _ in range(2)]


def brute_force_with_direction(logits, left, right, mask=None):
    n = logits.shape[-1]
    key_is_right = torch.ones(n, n, dtype=torch.bool).triu(1)
    full = logits.double() + torch.where(key_is_right, right.double()[..., None], left.double()[..., None])
    return brute_force_geometric_attention(full, mask)


def random_mask(batch, n, seed):
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, n, dtype=torch.long)
    for row in range(batch):
        kind = torch.randint(0, 3, (), generator=generator).item()
        cut = torch.randint(1, n + 1, (), generator=generator).item()
        if kind == 1:
            mask[row, cut:] = 0  # right padding
        elif kind == 2:
            mask[row, : n - cut] = 0  # left padding
    return mask


@needs_compiler
def test_the_cpu_kernel_is_the_default_on_the_cpu():
    assert uses_cpu_kernel(torch.zeros(1)), "on a CPU with a compiler the fused kernel is used"
    assert not uses_cpu_kernel(torch.zeros(1), kernel="torch"), "kernel='torch' selects the PyTorch path"
    assert not uses_cpu_kernel(torch.zeros(1, device="meta")), "only CPU tensors ever go to the kernel"


def test_the_kernel_op_has_a_cpu_implementation_only():
    """The op hands raw pointers to host code: a CUDA tensor must find no implementation rather than reach it."""
    for name in ("geometric_attention", "geometric_attention_backward"):
        qualified = f"{geometric._OPS}::{name}"
        assert torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CPU"), f"{name} runs on the CPU"
        for device in ("CUDA", "XPU", "MPS"):
            assert not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, device), f"{name} on {device}"


def test_without_the_kernel_source_the_torch_path_is_used(monkeypatch, tmp_path):
    """A trust_remote_code copy of geometric_ndr.py has no .cpp next to it: it falls back, quietly unless the kernel
    was asked for."""
    monkeypatch.setattr(geometric, "KERNEL_SOURCE_FILE", str(tmp_path / "missing.cpp"))
    monkeypatch.setattr(geometric, "_kernel_state", {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_cpu_kernel() is None and not uses_cpu_kernel(torch.zeros(1))
    logits = torch.randn(2, 1, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(geometric_attention_weights(logits), brute_force_geometric_attention(logits))
    monkeypatch.setattr(geometric, "_kernel_state", {})
    with pytest.raises(RuntimeError, match="kernel='cpu' but the CPU kernel did not build"):
        geometric_attention_weights(logits, kernel="cpu")


def test_a_build_lock_left_by_a_killed_build_does_not_hang_the_next_process(monkeypatch, tmp_path, caplog):
    """torch waits forever on the `lock` file of a build that was killed; the kernel's own flock tells it is stale."""
    import torch.utils.cpp_extension as cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(geometric, "_kernel_state", {})
    seen = {}

    def fake_load_inline(name, **kwargs):  # torch's FileBaton would wait here while `lock` exists
        seen["lock"] = os.path.exists(os.path.join(tmp_path, name, "lock"))
        return "built"

    monkeypatch.setattr(cpp_extension, "load_inline", fake_load_inline)
    capability = torch.backends.cpu.get_cpu_capability()
    with open(geometric.KERNEL_SOURCE_FILE) as f:
        source = f.read()
    folder = tmp_path / geometric._kernel_name(source, capability, geometric._ISA_FLAGS.get(capability, []))
    folder.mkdir()
    (folder / "lock").touch()  # what a Ctrl-C during the first build leaves
    assert load_cpu_kernel() == "built"
    assert seen == {"lock": False}, "the stale lock was removed before the build"
    assert "left by a build of the CPU kernel that was killed" in caplog.text


def test_torch_still_marks_a_build_in_progress_with_a_file_named_lock_in_the_build_directory():
    """`_build_lock` clears a stale `lock` file: the name of torch's `FileBaton` in the folder it builds in. If torch
    renames it, the stale-lock guard above would guard nothing: this fails first (docs/contributing.md)."""
    import inspect

    import torch.utils.cpp_extension as cpp_extension

    source = inspect.getsource(cpp_extension)
    assert "FileBaton(os.path.join(build_directory, 'lock'))" in source, "torch's build lock moved or was renamed"


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 17, 33])
def test_weights_and_direction_terms_equal_the_brute_force(implementation, n):
    generator = torch.Generator().manual_seed(n)
    logits = 2 * torch.randn(3, 2, n, n, generator=generator, dtype=torch.float64)
    left, right = direction_terms(3, 2, n, seed=n)
    mask = random_mask(3, n, seed=n)
    fast = geometric_attention_weights(logits, mask, left=left, right=right, kernel=KERNEL[implementation])
    torch.testing.assert_close(fast, brute_force_with_direction(logits, left, right, mask), atol=1e-12, rtol=1e-10)
    single = geometric_attention_weights(
        logits.float(), mask, left=left.float(), right=right.float(), kernel=KERNEL[implementation]
    )
    assert single.dtype == torch.float32
    torch.testing.assert_close(single.double(), fast, atol=2e-6, rtol=1e-5, msg="float32 agrees with float64")


def test_gradcheck_float64(implementation):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 2, 6, 6, dtype=torch.float64, generator=generator, requires_grad=True)
    left, right = (t.requires_grad_() for t in direction_terms(2, 2, 6, seed=1))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]])
    assert torch.autograd.gradcheck(
        lambda z, a, b: geometric_attention_weights(z, mask, left=a, right=b, kernel=KERNEL[implementation]),
        (logits, left, right),
    )


@needs_compiler
def test_kernel_and_torch_path_gradients_agree():
    generator = torch.Generator().manual_seed(3)
    logits = 3 * torch.randn(4, 3, 13, 13, generator=generator)
    left, right = direction_terms(4, 3, 13, seed=4, dtype=torch.float32)
    mask = random_mask(4, 13, seed=5)
    upstream = torch.randn(4, 3, 13, 13, generator=generator)
    grads = {}
    for mode in ("cpu", "torch"):
        inputs = [t.clone().requires_grad_() for t in (logits, left, right)]
        weights = geometric_attention_weights(inputs[0], mask, left=inputs[1], right=inputs[2], kernel=mode)
        (weights * upstream).sum().backward()
        grads[mode] = (weights.detach(), *(t.grad for t in inputs))
    for fast, reference, name in zip(grads["cpu"], grads["torch"], ("weights", "logits", "left", "right")):
        torch.testing.assert_close(fast, reference, atol=1e-5, rtol=1e-4, msg=f"{name}: kernel vs PyTorch path")


def test_plus_and_minus_infinity_at_every_position_give_finite_weights_and_gradients(implementation):
    n = 5
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(n, n, generator=generator, dtype=torch.float64)
    for sign in (1, -1):
        for i in range(n):
            for j in range(n):
                logits = base.clone()
                logits[i, j] = sign * float("inf")
                logits = logits.view(1, 1, n, n).requires_grad_()
                weights = geometric_attention_weights(logits, kernel=KERNEL[implementation])
                where = f"logit {sign:+d}inf at ({i}, {j})"
                assert torch.isfinite(weights).all(), f"{where}: the weights must be finite"
                torch.testing.assert_close(weights, brute_force_geometric_attention(logits.detach()), msg=where)
                weights.pow(2).sum().backward()
                assert torch.isfinite(logits.grad).all(), f"{where}: the gradient must be finite"


def test_infinite_logit_behind_a_closer_key_is_the_documented_smallest_case(implementation):
    logits = torch.zeros(1, 1, 3, 3)
    logits[0, 0, 2, 0] = float("inf")
    row = geometric_attention_weights(logits, kernel=KERNEL[implementation])[0, 0, 2]
    torch.testing.assert_close(row, torch.tensor([0.5, 0.5, 0.0]), msg="key 1 matches half the time, key 0 the rest")


def extreme_batches(draws: int, implementation: str):
    """Random logits scaled by 30 and 1e4 with random padding, in float32 and under bf16 autocast: finite weights and
    gradients, rows <= 1 + 1e-5, and the same weights as a float64 computation of the same logits."""
    generator = torch.Generator().manual_seed(len(implementation))
    worst = 0.0
    for draw in range(draws):
        n = int(torch.randint(2, 12, (), generator=generator))
        scale = (30.0, 1e4)[draw % 2]
        logits = (scale * torch.randn(2, 2, n, n, generator=generator)).requires_grad_()
        mask = random_mask(2, n, seed=draw)
        low_precision = draw % 4 >= 2
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low_precision):
            given = logits.to(torch.bfloat16) if low_precision else logits
            weights = geometric_attention_weights(given, mask, kernel=KERNEL[implementation])
        what = f"draw {draw} (n={n}, scale {scale:g}, {'bf16' if low_precision else 'fp32'})"
        # the CPU kernel reads bfloat16 as it is and writes bfloat16, computed in float32: the float32 weights rounded
        rounded = low_precision and uses_cpu_kernel(given, KERNEL[implementation])
        assert weights.dtype == (torch.bfloat16 if rounded else torch.float32), f"{what}: the weights' dtype"
        assert torch.isfinite(weights).all(), f"{what}: weights must be finite"
        assert (weights.float().sum(-1) <= 1 + (2**-7 if rounded else 1e-5)).all(), f"{what}: a row sums to at most 1"
        reference = geometric_attention_weights(given.detach().double(), mask, kernel=KERNEL[implementation])
        if (
            rounded
        ):  # at most half a bfloat16 step (2^-8 of the value at most) from the float64 weights, plus float32's error
            assert ((weights.double() - reference).abs() <= 2**-8 * reference.abs() + 1e-6).all(), what
        else:
            worst = max(worst, (weights.double() - reference).abs().max().item())
        weights.sum().backward()
        assert torch.isfinite(logits.grad).all(), f"{what}: gradients must be finite"
    assert worst < 1e-5, f"largest difference to float64 over {draws} draws: {worst:.2e}"


def test_random_extreme_batches(implementation):
    extreme_batches(200, implementation)


@pytest.mark.slow
def test_random_extreme_batches_full_count(implementation):
    extreme_batches(10_000, implementation)


def test_float64_reference_of_extreme_batches_equals_the_brute_force(implementation):
    generator = torch.Generator().manual_seed(7)
    for scale in (30.0, 1e4):
        logits = scale * torch.randn(2, 2, 7, 7, generator=generator, dtype=torch.float64)
        torch.testing.assert_close(
            geometric_attention_weights(logits, kernel=KERNEL[implementation]),
            brute_force_geometric_attention(logits),
            atol=1e-12,
            rtol=1e-9,
        )


def test_weights_below_the_smallest_normal_float_are_exactly_zero(implementation):
    # 40 keys, each matching with probability 0.9: the farthest keys get weights around 1e-40
    logits = torch.full((1, 1, 40, 40), 2.2)
    weights = geometric_attention_weights(logits, kernel=KERNEL[implementation])
    tiny = torch.finfo(torch.float32).tiny
    assert ((weights == 0) | (weights >= tiny)).all(), "denormal weights slow the matrix products that follow"
    assert (weights == 0).any() and (weights > 0).sum() > 40, "only the vanishing weights are flushed"


# ------------------------------------------------------------------------------------------------ the PyTorch path


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_the_gather_reads_each_column_once_per_row(n):
    """`other_side` indexes a table of 4n - 2 columns; within one query row no two keys read the same column, so the
    gather's backward adds each gradient once (no atomic additions in varying order on CUDA)."""
    other_side = scan_indices(n, torch.device("cpu")).other_side
    assert other_side.min() >= 0 and other_side.max() < max(4 * n - 2, 1)
    for row in other_side.tolist():
        assert len(set(row)) == n, f"repeated columns in {row}"


def test_cached_masks_made_under_inference_mode_serve_training():
    """The per-length masks are cached; the first call may come from `torch.inference_mode()` (a pipeline), and a
    later training step must still be able to save them for backward."""
    n = 23  # a length no other test uses, so the cache is filled here
    logits = torch.randn(1, 2, n, n)
    with torch.inference_mode():
        geometric_attention_torch(logits)
    trained = logits.clone().requires_grad_()
    geometric_attention_torch(trained).sum().backward()
    assert torch.isfinite(trained.grad).all()
    assert not any(mask.is_inference() for mask in scan_indices(n, torch.device("cpu")))


@contextlib.contextmanager
def deterministic_algorithms():
    """`torch.use_deterministic_algorithms(True)` inside the block (it raises for ops without a deterministic
    implementation)."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def test_the_torch_path_is_deterministic_under_torch_deterministic_algorithms():
    logits = torch.randn(2, 2, 9, 9, generator=torch.Generator().manual_seed(1))
    left, right = direction_terms(2, 2, 9, seed=2, dtype=torch.float32)
    mask = random_mask(2, 9, seed=3)
    gradients = []
    with deterministic_algorithms():
        for _ in range(2):
            inputs = [t.clone().requires_grad_() for t in (logits, left, right)]
            geometric_attention_weights(inputs[0], mask, left=inputs[1], right=inputs[2], kernel="torch").pow(
                2
            ).sum().backward()
            gradients.append([t.grad for t in inputs])
    for first, second in zip(*gradients):
        assert torch.equal(first, second)


def test_under_autocast_the_weights_are_computed_in_float32_without_asking_torch_at_each_call(monkeypatch):
    """The device types with autocast are read once (`torch.amp.is_autocast_available` is a builtin that
    torch.compile could not trace on torch 2.11, which broke the graph on a GPU): a forward does not ask again, and
    still computes the weights in float32 (the PyTorch path in float32; the CPU kernel in float32 a row at a time
    from the bfloat16 logits, writing bfloat16)."""
    logits = torch.randn(2, 2, 5, 5)

    def asked(device_type):
        raise AssertionError(f"asked torch whether {device_type} has autocast during a forward")

    monkeypatch.setattr(torch.amp, "is_autocast_available", asked)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        weights = geometric_attention_weights(logits.to(torch.bfloat16), kernel="auto")
    reference = geometric_attention_weights(logits.to(torch.bfloat16).float(), kernel="torch")
    if uses_cpu_kernel(logits, "auto"):  # computed in float32 from the bfloat16 logits as they are, written bfloat16
        assert weights.dtype == torch.bfloat16
        torch.testing.assert_close(weights.float(), reference, rtol=2**-8, atol=1e-6)
    else:
        assert weights.dtype == torch.float32
        torch.testing.assert_close(weights, reference)


def test_attn_implementation_chooses_the_kernel_at_load_and_changes_no_number(tmp_path):
    """transformers' `attn_implementation` is the one switch: `eager` (the default: the CPU kernel where it builds),
    `ndr_torch` and `ndr_triton` (registered with transformers); it is not saved, and the logits agree."""
    from tiny import random_ids, tiny_config

    from modeling_ndr import NDRForSequenceClassification

    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config()).eval()
    assert model.config._attn_implementation == "eager"
    model.save_pretrained(tmp_path)
    assert "attn" not in (tmp_path / "config.json").read_text(), "chosen at load, never part of the model"
    ids = random_ids(2, 9, seed=1)
    logits = {}
    for name in geometric.ATTENTION_KERNELS:
        loaded = NDRForSequenceClassification.from_pretrained(tmp_path, attn_implementation=name).eval()
        assert loaded.config._attn_implementation == name
        logits[name] = loaded(ids).logits
    for name, values in logits.items():
        torch.testing.assert_close(values, logits["eager"], atol=1e-5, rtol=1e-4, msg=name)
    model.set_attn_implementation("ndr_torch")
    assert geometric.attention_kernel(model.config._attn_implementation) == "torch"
    with pytest.raises(ValueError, match="does not support an attention implementation through .*scaled_dot_product"):
        NDRForSequenceClassification.from_pretrained(tmp_path, attn_implementation="sdpa")
    with pytest.raises(ValueError, match="not one the NDR has: expected one of 'eager', 'ndr_torch', 'ndr_triton'"):
        geometric.attention_kernel("flex_attention")


def test_under_bf16_autocast_the_cpu_kernel_adds_no_full_size_copies():
    """The attention op of an NDR step under bf16 autocast (forward and backward): no (b, h, n, n) tensor is made in
    float32 around the CPU kernel (it reads the bfloat16 logits as they are and writes bfloat16 weights), and its
    gradients match the float32 PyTorch path's to bfloat16's precision."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from modeling_ndr.attention_ndr import attention

    if not uses_cpu_kernel(torch.zeros(1), "auto"):
        pytest.skip("no CPU kernel builds here")
    b, h, n, e = 2, 2, 9, 8
    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(b, n, 16, generator=generator, requires_grad=True)
    projection = torch.nn.Linear(16, 3 * h * e + 2 * h)  # query, key, value and the direction terms, as a step has
    mask = random_mask(b, n, seed=1)
    leaves = (inputs, projection.weight, projection.bias)

    class FullSizeFloat32(TorchDispatchMode):
        made = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for tensor in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(tensor, torch.Tensor) and tensor.shape == (b, h, n, n) and tensor.dtype == torch.float32:
                    self.made.append(str(func))
            return out

    def run(kernel):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            projected = projection(inputs)  # bfloat16, as autocast makes them in a model
            qkv = projected[..., : 3 * h * e].view(b, n, 3, h, e).permute(2, 0, 3, 1, 4)
            left, right = projected[..., 3 * h * e :].view(b, n, 2, h).permute(2, 0, 3, 1)
            output, _ = attention(*qkv, mask, "geometric", left, right, kernel=kernel)
        output.float().pow(2).sum().backward()
        grads = [t.grad.clone() for t in leaves]
        for t in leaves:
            t.grad = None
        return output, grads

    with FullSizeFloat32() as mode:
        output, grads = run("cpu")
    assert mode.made == [], f"full-size float32 tensors around the kernel: {mode.made}"
    reference, reference_grads = run("torch")
    torch.testing.assert_close(output.float(), reference.float(), rtol=0.02, atol=0.02)
    for grad, expected in zip(grads, reference_grads):
        assert (grad - expected).abs().max() <= 0.03 * expected.abs().max(), "gradients to bfloat16's precision"


# the kernel's other build on this CPU: ATen's vectors are 8 floats wide under AVX2 and 16 under AVX-512, so each
# build has its own loop tails; the build torch's capability picks is tested above, the others in a process that holds
# the capability back (ATEN_CPU_CAPABILITY, as a CPU without AVX-512 would report it)
OTHER_BUILD_CHECK = """
import torch
from modeling_ndr.geometric_ndr import geometric_attention_weights, load_cpu_kernel
assert torch.backends.cpu.get_cpu_capability() == "{capability}", torch.backends.cpu.get_cpu_capability()
assert load_cpu_kernel() is not None, "the kernel must build"
generator = torch.Generator().manual_seed(0)
for n in (5, 13, 37):  # below, at and past one vector of either width, with tails
    logits = 3 * torch.randn(3, 2, n, n, generator=generator)
    left, right = (torch.randn(3, 2, n, generator=generator) for _ in range(2))
    mask = torch.ones(3, n, dtype=torch.long)
    mask[1, n // 2 :] = 0
    upstream = torch.randn(3, 2, n, n, generator=generator)
    for dtype, tolerance in ((torch.float32, (1e-5, 1e-4)), (torch.bfloat16, (2e-2, 2e-2))):
        results = {{}}
        for kernel in ("cpu", "torch"):
            inputs = [t.to(dtype).clone().requires_grad_() for t in (logits, left, right)]
            weights = geometric_attention_weights(inputs[0], mask, left=inputs[1], right=inputs[2], kernel=kernel)
            (weights.float() * upstream).sum().backward()
            results[kernel] = [weights.detach().float(), *(t.grad.float() for t in inputs)]
        for fast, reference, name in zip(results["cpu"], results["torch"], ("weights", "logits", "left", "right")):
            message = f"n={{n}} {{dtype}} {{name}}: kernel vs torch"
            torch.testing.assert_close(fast, reference, atol=tolerance[0], rtol=tolerance[1], msg=message)
print("ok")
"""


@needs_compiler
def test_the_kernel_s_avx2_build_equals_the_torch_path_where_the_cpu_has_avx512():
    """Where torch picks the AVX-512 build, the AVX2 build (what an AVX2-only CPU runs) is built and checked against
    the PyTorch path too, fp32 and bf16, forward and backward."""
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        pytest.skip(f"this CPU's build is {torch.backends.cpu.get_cpu_capability()}, the one the tests above check")
    environment = dict(os.environ, ATEN_CPU_CAPABILITY="avx2")
    done = subprocess.run([sys.executable, "-c", OTHER_BUILD_CHECK.format(capability="AVX2")], env=environment,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
