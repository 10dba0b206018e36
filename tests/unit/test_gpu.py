"""The model on CUDA: geometric attention against the brute-force loop (float32, bf16 and fp16 autocast, float64
gradcheck), every variant equal to the CPU on the same weights, ACT and adaptive steps, save/load across devices,
torch.compile without graph breaks, dropout and host syncs.

Every test carries the `gpu` marker: `make test-gpu` runs them, and they skip where CUDA is missing.
`NDR_TEST_DEVICE=cpu pytest -m gpu tests/unit/test_gpu.py` runs the same checks with the CPU as "the device" (the
CPU side of a comparison then uses the fused CPU kernel, the device side the PyTorch path), so the test code itself is
exercised on machines without a GPU. (Training with train.py and accelerate on GPUs: tests/e2e/test_gpu_training.py.)

Tolerances: float32 on both sides with TF32 off; a CUDA float32 matrix product sums in another order than the CPU's,
and 3 steps of the shared layer carry that on, so outputs agree to 1e-4 (absolute and relative) and gradients to 1e-4
absolute / 1e-3 relative. Weights computed from the same bf16/fp16 logits agree with float64 to float32 rounding.
"""

import contextlib
import os
import traceback
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from test_adaptive_computation import per_sample_changes, threshold_between
from test_modeling_ndr import brute_force_geometric_attention
from tiny import tiny_config

from modeling_ndr import NDRForSequenceClassification, geometric_attention_weights
from modeling_ndr import geometric_ndr as geometric
from modeling_ndr.dropout_ndr import NDRDropout


pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
VARIANTS = {  # each variant's NDRConfig fields, without its recipe sections and its dropout (the tests set their own)
    path.stem: {
        k: v for k, v in yaml.safe_load(path.read_text()).items() if k not in ("tasks", "presets", "embedding_dropout")
    }
    for path in sorted(REPO.glob("configuration/variants/*.yaml"))
}
OUTPUTS = dict(atol=1e-4, rtol=1e-4)
GRADIENTS = dict(atol=1e-4, rtol=1e-3)


@pytest.fixture
def device(monkeypatch) -> torch.device:
    """The device under test: CUDA, or what NDR_TEST_DEVICE names. Float32 products stay float32 (no TF32)."""
    device = torch.device(os.environ.get("NDR_TEST_DEVICE", "cuda"))
    if device.type == "cuda":
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    return device


@contextlib.contextmanager
def device_kernel(device: torch.device):
    """On the device side of a comparison, geometric attention takes the path that device takes: the PyTorch path
    (on the CPU the kernel would otherwise be compared with itself), in every call and every model, as
    `kernel="torch"` and `attn_implementation="ndr_torch"` would ask for it."""
    chosen = geometric.uses_cpu_kernel
    geometric.uses_cpu_kernel = lambda tensor, kernel="auto": False
    try:
        yield
    finally:
        geometric.uses_cpu_kernel = chosen


def padded_batch(batch=5, seq=9, seed=0):
    """Token ids with right and left padding, their mask and labels (CPU tensors)."""
    ids = torch.randint(4, 12, (batch, seq), generator=torch.Generator().manual_seed(seed))
    ids[:, 0], ids[:, -1] = 2, 3
    mask = torch.ones_like(ids)
    mask[1, 6:], mask[3, :2] = 0, 0
    ids[1, 5] = 3
    return ids, mask, torch.arange(batch) % 3


def random_logits(n: int, seed: int, scale: float = 2.0) -> torch.Tensor:
    return scale * torch.randn(2, 3, n, n, generator=torch.Generator().manual_seed(seed))


def random_mask(n: int) -> torch.Tensor:
    mask = torch.ones(2, n, dtype=torch.long)
    mask[1, : n // 3] = 0
    return mask


# ------------------------------------------------------------------------------------------- geometric attention


@pytest.mark.parametrize("precision", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("n", [1, 5, 16, 33])
def test_geometric_attention_matches_the_brute_force_loop(device, precision, n):
    """Under autocast the logits arrive in half precision and the weights are computed in float32 from them."""
    dtype = getattr(torch, precision)
    logits, mask = random_logits(n, seed=n).to(dtype), random_mask(n)
    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32), device_kernel(device):
        weights = geometric_attention_weights(logits.to(device), mask.to(device))
    assert weights.dtype == torch.float32 and weights.device.type == device.type
    expected = brute_force_geometric_attention(logits.double(), mask)
    torch.testing.assert_close(weights.cpu().double(), expected, atol=2e-6, rtol=1e-5)


def test_geometric_attention_gradcheck_float64(device):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 2, 6, 6, dtype=torch.float64, generator=generator).to(device).requires_grad_()
    left, right = (torch.randn(2, 2, 6, dtype=torch.float64, generator=generator).to(device).requires_grad_()
                   for _ in range(2))  # fmt: skip
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]], device=device)
    with device_kernel(device):
        assert torch.autograd.gradcheck(
            lambda z, a, b: geometric_attention_weights(z, mask, left=a, right=b), (logits, left, right)
        )


def test_geometric_attention_backward_is_deterministic(device):
    """Each gathered column is read once per row, so no gradient is summed by atomics in a varying order; and
    torch.use_deterministic_algorithms(True) finds no op without a deterministic implementation."""
    logits = random_logits(40, seed=1).to(device)
    mask = random_mask(40).to(device)
    upstream = torch.randn(logits.shape, generator=torch.Generator().manual_seed(2)).to(device)
    before = torch.are_deterministic_algorithms_enabled()
    gradients = []
    try:
        for deterministic in (False, False, True):
            torch.use_deterministic_algorithms(deterministic)
            given = logits.clone().requires_grad_()
            with device_kernel(device):
                (geometric_attention_weights(given, mask) * upstream).sum().backward()
            gradients.append(given.grad)
    finally:
        torch.use_deterministic_algorithms(before)
    assert torch.equal(gradients[0], gradients[1]), "two runs give the same bits"
    torch.testing.assert_close(gradients[2], gradients[0])


def test_device_tensors_never_reach_the_cpu_kernel(device, monkeypatch):
    """The fused kernel reads host memory: on any other device (CUDA here; `meta` when the CPU is under test) the
    PyTorch path runs."""
    other = device if device.type != "cpu" else torch.device("meta")

    def refuse(*args):
        raise AssertionError("the CPU kernel was called with non-CPU tensors")

    monkeypatch.setattr(geometric, "_geometric_attention_cpu", refuse)
    assert not geometric.uses_cpu_kernel(torch.zeros(1, device=other))
    weights = geometric_attention_weights(random_logits(7, seed=3).to(other), random_mask(7).to(other))
    assert weights.device.type == other.type and weights.shape == (2, 3, 7, 7)


# ------------------------------------------------------------------------------------------------- the variants


def cpu_and_device_results(model, device, ids, mask, labels):
    """(logits, loss, gradients) of one training-mode forward/backward on the CPU and on `device`, same weights."""
    results = []
    for where in (torch.device("cpu"), device):
        twin = NDRForSequenceClassification(model.config)
        twin.load_state_dict(model.state_dict())
        twin.to(where).train()
        with device_kernel(where) if where is device else contextlib.nullcontext():
            out = twin(ids.to(where), attention_mask=mask.to(where), labels=labels.to(where))
            out.loss.backward()
        gradients = {name: p.grad.cpu() for name, p in twin.named_parameters() if p.grad is not None}
        results.append((out.logits.detach().cpu(), out.loss.detach().cpu(), gradients))
    return results


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_variant_computes_on_the_device_what_it_computes_on_the_cpu(device, name):
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(**VARIANTS[name]))
    ids, mask, labels = padded_batch()
    (cpu_logits, cpu_loss, cpu_grads), (logits, loss, grads) = cpu_and_device_results(model, device, ids, mask, labels)
    torch.testing.assert_close(logits, cpu_logits, **OUTPUTS, msg=f"{name}: logits")
    torch.testing.assert_close(loss, cpu_loss, **OUTPUTS, msg=f"{name}: loss")
    assert grads.keys() == cpu_grads.keys()
    for parameter, gradient in grads.items():
        torch.testing.assert_close(gradient, cpu_grads[parameter], **GRADIENTS, msg=f"{name}: {parameter}")


def test_bf16_autocast_training_step(device):
    """bf16 products, float32 geometric weights, gates and state; finite loss and gradients; close to float32."""
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(hidden_dropout_prob=0.1, gate_dropout=0.1)).to(device).train()
    ids, mask, labels = (t.to(device) for t in padded_batch())
    with torch.autocast(device.type, dtype=torch.bfloat16), device_kernel(device):
        out = model(ids, attention_mask=mask, labels=labels, output_attentions=True, output_gates=True)
    assert all(a.dtype == torch.float32 for a in out.attentions) and all(g.dtype == torch.float32 for g in out.gates)
    out.loss.backward()
    assert torch.isfinite(out.loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()
    with torch.no_grad(), device_kernel(device):
        full = model(ids, attention_mask=mask).logits
        with torch.autocast(device.type, dtype=torch.bfloat16):
            half = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(half.float(), full, atol=0.05, rtol=0.05, msg="bf16 stays near float32")


def test_dropout_rate_and_scale_on_the_device(device):
    """p of the values dropped; what is kept scaled by 1/(1 - p) in float32, also for bf16 activations."""
    torch.manual_seed(0)
    x = (1 + torch.rand(1_000_000, device=device)).to(torch.bfloat16)
    y = NDRDropout(0.1).train()(x)
    kept = y != 0
    assert abs(1 - kept.float().mean().item() - 0.1) < 0.003, "drop rate"
    ratio = (y[kept].double().sum() / x[kept].double().sum()).item()
    assert abs(ratio - 1 / 0.9) < 2e-4, f"kept values scaled by {ratio:.5f}, not 1/0.9"


# --------------------------------------------------------------------------------------------- ACT and adaptive


def test_act_on_the_device_is_batch_invariant_and_respects_the_cap(device):
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(halting="act", num_hidden_layers=6)).to(device).eval()
    with torch.no_grad():
        model.ndr.halting.proj.bias.fill_(-1.0)  # sigmoid(-1) = 0.27: columns halt after a few steps
    ids, mask, _ = (t.to(device) for t in padded_batch())
    with device_kernel(device):
        batch = model(ids, attention_mask=mask)
        for row in range(len(ids)):
            real = mask[row].bool()
            alone = model(ids[row : row + 1, real])
            assert torch.equal(alone.halting_steps[0].cpu(), batch.halting_steps[row, real].cpu()), f"sample {row}"
            torch.testing.assert_close(alone.logits[0], batch.logits[row], **OUTPUTS, msg=f"sample {row}")
        assert 1 < batch.halting_steps.max() < 6, "columns halt before the cap"
        model.config.act_threshold = 1.0  # never reached: every real column runs to the cap
        capped = model(ids, attention_mask=mask, num_steps=4)
    assert torch.equal(capped.halting_steps.cpu(), 4 * mask.cpu()), "the cap, and no step for padding"


def test_adaptive_steps_on_the_device_are_batch_invariant_and_respect_the_cap(device):
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(adaptive_steps=True, max_adaptive_steps=12)).to(device).eval()
    ids, mask, _ = (t.to(device) for t in padded_batch(batch=6))
    with device_kernel(device):
        model.config.adaptive_threshold = threshold_between(per_sample_changes(model, ids, mask, steps=12).cpu())
        batch = model(ids, attention_mask=mask)
        assert len(set(batch.num_steps_taken.tolist())) > 1, "the samples finish at different steps"
        for row in range(len(ids)):
            real = mask[row].bool()
            alone = model(ids[row : row + 1, real])
            assert alone.num_steps_taken.item() == batch.num_steps_taken[row].item(), f"sample {row}: steps"
            torch.testing.assert_close(alone.logits[0], batch.logits[row], **OUTPUTS, msg=f"sample {row}")
        model.config.adaptive_threshold = 1e-12
        assert model(ids, attention_mask=mask, num_steps=5).num_steps_taken.tolist() == [5] * 6, "the cap"


# --------------------------------------------------------------------------------------- host syncs, save, compile


class HostRead(str):
    """A read's name (`__bool__`, `item`, `tolist`), comparing as the name, with `where`: the innermost frames of the
    repository that led to it (so that a failure on a GPU, whose message is all that comes back, names the line)."""

    where: str = ""


def calling_lines(limit: int = 3) -> str:
    """The innermost `limit` frames of the call stack in the repository's own files (not this module's helpers)."""
    frames = [frame for frame in traceback.extract_stack()[:-2] if str(REPO) in frame.filename]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames[-limit:]))


def count_host_syncs(device: torch.device, run) -> tuple[list[str], list[str]]:
    """The host syncs `run()` makes: (Python-level reads of tensor values, on any device, each a `HostRead` that knows
    where it was made; on CUDA, every sync the CUDA sync debug mode reports, also those inside torch, with the line
    that made it)."""
    syncs = []
    originals = {name: getattr(torch.Tensor, name) for name in ("__bool__", "item", "tolist")}

    def counting(name):
        def read(self, *args, **kwargs):
            entry = HostRead(name)
            entry.where = calling_lines()
            syncs.append(entry)
            return originals[name](self, *args, **kwargs)

        return read

    for name in originals:
        setattr(torch.Tensor, name, counting(name))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode("warn")
            try:
                run()
            finally:
                if device.type == "cuda":
                    torch.cuda.set_sync_debug_mode("default")
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    cuda_syncs = [f"{w.message} ({Path(w.filename).name}:{w.lineno})" for w in caught
                  if "synchroniz" in str(w.message).lower()]  # fmt: skip
    return syncs, cuda_syncs


def described(reads: list) -> list[str]:
    return [f"{read} at {getattr(read, 'where', '?')}" for read in reads]


@pytest.mark.parametrize("halting", ["none", "act"])
def test_a_training_step_syncs_with_the_host_only_on_the_cpu(device, halting):
    """On CUDA a training step reads nothing on the host: the input value checks (one read per forward) run at
    inference and on the CPU only, and ACT runs every step instead of asking whether all columns have halted (the same
    is checked without a GPU, for every variant, on simulated CUDA: tests/fake_cuda/)."""
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(halting=halting, num_hidden_layers=5)).to(device).train()
    ids, mask, labels = (t.to(device) for t in padded_batch())

    def step():
        with device_kernel(device):
            model(ids, attention_mask=mask, labels=labels).loss.backward()

    step()  # warm-up: first-call work (caches, lazy initialisation) is not a per-step cost
    reads, cuda_syncs = count_host_syncs(device, step)
    if device.type == "cpu" and halting == "act":
        # on the CPU a sync is free: the input checks, and ACT asks at every step whether every column has halted
        assert len(reads) > 1 and set(reads) == {"__bool__"}
    elif device.type == "cpu":
        assert reads == ["__bool__"], f"on the CPU the input checks are the one read: {described(reads)}"
    else:
        assert reads == [], f"reads of tensor values in one training step: {described(reads)}"
    if device.type == "cuda":
        assert cuda_syncs == [], f"CUDA syncs in one training step: {cuda_syncs}"


def test_saved_on_the_device_loads_on_the_cpu_and_back(device, tmp_path):
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(halting="act")).to(device).eval()
    ids, mask, _ = padded_batch()
    with torch.no_grad(), device_kernel(device):
        on_device = model(ids.to(device), attention_mask=mask.to(device)).logits
    model.save_pretrained(tmp_path / "saved")
    on_cpu = NDRForSequenceClassification.from_pretrained(tmp_path / "saved").eval()
    assert next(on_cpu.parameters()).device.type == "cpu"
    with torch.no_grad():
        torch.testing.assert_close(on_cpu(ids, attention_mask=mask).logits, on_device.cpu(), **OUTPUTS)
    on_cpu.save_pretrained(tmp_path / "again")
    back = NDRForSequenceClassification.from_pretrained(tmp_path / "again").to(device).eval()
    for name, tensor in model.state_dict().items():
        assert torch.equal(back.state_dict()[name], tensor), f"{name} changed on the way"
    with torch.no_grad(), device_kernel(device):
        torch.testing.assert_close(back(ids.to(device), attention_mask=mask.to(device)).logits, on_device)


@pytest.mark.parametrize("name", ["ndr", "rel_gate", "ndr_act"])
def test_torch_compile_on_the_device_has_no_graph_break_and_matches_eager(device, name):
    """One graph for the training step (inductor on CUDA; aot_eager on the CPU, which needs no C++ build)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(**VARIANTS[name])).to(device).train()
    ids, mask, labels = (t.to(device) for t in padded_batch())

    def step(ids, mask, labels):
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss

    with device_kernel(device):
        explanation = torch._dynamo.explain(step)(ids, mask, labels)
        assert explanation.graph_break_count == 0, [reason.reason for reason in explanation.break_reasons]
        eager = step(ids, mask, labels)
        compiled = torch.compile(step, backend="inductor" if device.type == "cuda" else "aot_eager", fullgraph=True)
        torch.testing.assert_close(compiled(ids, mask, labels), eager, **OUTPUTS)
