"""The Triton kernels of geometric attention (`modeling_ndr.geometric_ndr_triton`) against the PyTorch path and the
definition: weights and gradients, odd lengths, padding (a fully padded row too), the direction terms, bfloat16
logits, ±inf, and the model with `attn_implementation="ndr_triton"`.

Without a GPU they run in Triton's interpreter (conftest sets `TRITON_INTERPRET=1`), which executes a kernel with numpy
one program at a time: the sizes are small and most tests shrink the kernels' tiles to 4 x 4, so that a length of 13
already spans several row blocks and distance chunks. On a GPU the same tests run the compiled kernels on CUDA
tensors. They skip only where triton is not installed (it is in the `test` extra on Linux)."""

import logging

import pytest
import torch
from test_geometric_attention import brute_force_with_direction, direction_terms, random_mask
from test_modeling_ndr import brute_force_geometric_attention, random_batch, tiny_config

from modeling_ndr import NDRForSequenceClassification, geometric_attention_weights
from modeling_ndr import geometric_ndr_triton as triton_kernels
from modeling_ndr.attention_ndr import attention
from modeling_ndr.geometric_ndr import geometric_attention_torch, uses_triton_kernel


# -m triton: on a GPU, make test-gpu and make gpu-session run them with the CUDA tests (-m "gpu or triton")
pytestmark = pytest.mark.triton
DEVICE = triton_kernels.kernel_device_type()  # "cpu" in the interpreter, "cuda" compiled, "" without triton
needs_triton = pytest.mark.skipif(not DEVICE, reason="triton is not installed (pip install -e '.[triton]')")


@pytest.fixture
def small_tiles(monkeypatch):
    """4 queries x 4 distances per tile: several tiles per row at the lengths tested (and fast in the interpreter)."""
    monkeypatch.setattr(triton_kernels, "BLOCK_ROWS", 4)
    monkeypatch.setattr(triton_kernels, "BLOCK_DISTANCES", 4)


def weights_and_gradients(function, logits, left, right, key_valid, upstream):
    """`function(logits, left, right, key_valid)` and the gradients of `(weights * upstream).sum()` for its three
    tensor inputs, on DEVICE, returned on the CPU."""
    inputs = [t.to(DEVICE).requires_grad_() for t in (logits, left, right)]
    mask = None if key_valid is None else key_valid.to(DEVICE)
    weights = function(*inputs, mask)
    (weights * upstream.to(DEVICE)).sum().backward()
    return [t.detach().cpu() for t in (weights, *(i.grad for i in inputs))]


def random_inputs(batch, heads, n, seed, scale=3.0):
    generator = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(batch, heads, n, n, generator=generator)
    left, right = direction_terms(batch, heads, n, seed=seed + 1, dtype=torch.float32)
    upstream = torch.randn(batch, heads, n, n, generator=generator)
    return logits, left, right, upstream


def assert_same_as_the_pytorch_path(logits, left, right, key_valid, upstream, atol=1e-5, rtol=1e-4):
    fast = weights_and_gradients(triton_kernels.geometric_attention_triton, logits, left, right, key_valid, upstream)
    reference = weights_and_gradients(geometric_attention_torch, logits, left, right, key_valid, upstream)
    for got, expected, name in zip(fast, reference, ("weights", "logits' gradient", "left's", "right's")):
        torch.testing.assert_close(got, expected, atol=atol, rtol=rtol, msg=f"{name}: Triton vs PyTorch path")
    return fast


@needs_triton
@pytest.mark.parametrize("n", [1, 2, 7, 13])
def test_weights_and_gradients_equal_the_pytorch_path(small_tiles, n):
    logits, left, right, upstream = random_inputs(3, 1, n, seed=n)
    key_valid = random_mask(3, n, seed=n) != 0  # right and left padding
    assert_same_as_the_pytorch_path(logits, left, right, key_valid, upstream)


@needs_triton
def test_weights_equal_the_definition_with_direction_terms_and_padding(small_tiles):
    logits, left, right, _ = random_inputs(2, 2, 9, seed=5)
    mask = random_mask(2, 9, seed=6)
    weights = triton_kernels.geometric_attention_triton(
        logits.to(DEVICE), left.to(DEVICE), right.to(DEVICE), (mask != 0).to(DEVICE)
    )
    expected = brute_force_with_direction(logits, left, right, mask)
    torch.testing.assert_close(weights.cpu().double(), expected, atol=2e-6, rtol=1e-5)
    assert (weights.diagonal(dim1=-2, dim2=-1) == 0).all(), "a column never attends to itself"


@needs_triton
def test_the_key_on_the_right_wins_a_tie(small_tiles):
    """Query 1 of three keys that all match for sure: key 2 (right) comes before key 0 (left) and takes everything."""
    logits = torch.full((1, 1, 3, 3), float("inf"), device=DEVICE)
    row = triton_kernels.geometric_attention_triton(logits)[0, 0, 1].cpu()
    assert row.tolist() == [0.0, 0.0, 1.0], f"right wins the tie at equal distance: {row.tolist()}"


@needs_triton
def test_a_fully_padded_row_has_zero_weights_and_gradients(small_tiles):
    logits, left, right, upstream = random_inputs(2, 2, 7, seed=11)
    key_valid = torch.ones(2, 7, dtype=torch.bool)
    key_valid[1] = False  # a sample that is all padding
    weights, grad_logits, grad_left, grad_right = assert_same_as_the_pytorch_path(
        logits, left, right, key_valid, upstream
    )
    assert (weights[1] == 0).all(), "no key can match in a fully padded sample"
    for gradient in (grad_logits[1], grad_left[1], grad_right[1]):
        assert (gradient == 0).all(), "nothing flows back from a sample without keys"


@needs_triton
def test_the_default_tiles_equal_the_pytorch_path():
    """One run at the tile sizes the GPU uses (16 queries x 64 distances: a length of 9 fits one tile)."""
    logits, left, right, upstream = random_inputs(1, 2, 9, seed=21)
    assert_same_as_the_pytorch_path(logits, left, right, random_mask(1, 9, seed=22) != 0, upstream)


@needs_triton
def test_bfloat16_logits_are_read_as_they_are_and_computed_in_float32(small_tiles):
    logits, left, right, upstream = random_inputs(2, 2, 11, seed=31)
    logits = logits.to(torch.bfloat16)
    key_valid = random_mask(2, 11, seed=32) != 0
    fast = weights_and_gradients(triton_kernels.geometric_attention_triton, logits, left, right, key_valid, upstream)
    # the PyTorch path on the same values in float32 (what geometric_attention_weights computes for bf16 logits)
    reference = weights_and_gradients(
        lambda z, a, b, m: geometric_attention_torch(z.float(), a, b, m), logits, left, right, key_valid, upstream
    )
    assert fast[0].dtype == torch.float32, "the weights are float32"
    assert fast[1].dtype == torch.bfloat16, "the logits' gradient has the logits' dtype"
    torch.testing.assert_close(fast[0], reference[0], atol=1e-5, rtol=1e-4, msg="weights of bf16 logits")
    # both round a float32 gradient to bfloat16 once
    torch.testing.assert_close(fast[1], reference[1], atol=1e-2, rtol=1.6e-2, msg="logits' gradient in bf16")
    for got, expected, name in zip(fast[2:], reference[2:], ("left", "right")):
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4, msg=f"{name}'s gradient")


@needs_triton
def test_infinite_logits_give_finite_weights_and_gradients(small_tiles):
    """+inf and -inf at every position of a 4 x 4 map, one sample each: finite weights equal to the definition's, and
    finite gradients."""
    n = 4
    base = torch.randn(n, n, generator=torch.Generator().manual_seed(0))
    samples = []
    for sign in (1, -1):
        for i in range(n):
            for j in range(n):
                logits = base.clone()
                logits[i, j] = sign * float("inf")
                samples.append(logits)
    logits = torch.stack(samples).unsqueeze(1).to(DEVICE).requires_grad_()  # (32, 1, n, n)
    weights = triton_kernels.geometric_attention_triton(logits)
    assert torch.isfinite(weights).all(), "the weights must be finite"
    torch.testing.assert_close(
        weights.detach().cpu().double(), brute_force_geometric_attention(logits.detach().cpu()), atol=1e-6, rtol=1e-5
    )
    weights.pow(2).sum().backward()
    assert torch.isfinite(logits.grad).all(), "the gradients must be finite"


@needs_triton
def test_huge_logits_agree_with_float64(small_tiles):
    """Logits scaled by 30 and 1e4 (saturated sigmoids, sums of log(1 - P) far below -87): the weights within 1e-5 of
    a float64 computation, as the other implementations are tested."""
    generator = torch.Generator().manual_seed(41)
    for scale in (30.0, 1e4):
        logits = scale * torch.randn(2, 2, 11, 11, generator=generator)
        mask = random_mask(2, 11, seed=int(scale))
        weights = triton_kernels.geometric_attention_triton(logits.to(DEVICE), key_valid=(mask != 0).to(DEVICE))
        reference = geometric_attention_torch(logits.double(), key_valid=mask != 0)
        worst = (weights.cpu().double() - reference).abs().max().item()
        assert worst < 1e-5, f"scale {scale:g}: largest difference to float64 {worst:.2e}"


@needs_triton
def test_weights_below_the_smallest_normal_float_are_exactly_zero(monkeypatch):
    monkeypatch.setattr(triton_kernels, "BLOCK_ROWS", 8)
    monkeypatch.setattr(triton_kernels, "BLOCK_DISTANCES", 16)
    # 40 keys, each matching with probability 0.9: the farthest keys get weights around 1e-40
    weights = triton_kernels.geometric_attention_triton(torch.full((1, 1, 40, 40), 2.2, device=DEVICE)).cpu()
    tiny = torch.finfo(torch.float32).tiny
    assert ((weights == 0) | (weights >= tiny)).all(), "denormal weights slow the matrix products that follow"
    assert (weights == 0).any() and (weights > 0).sum() > 40, "only the vanishing weights are flushed"


@needs_triton
def test_geometric_attention_weights_dispatches_to_the_kernel_where_it_runs():
    logits = torch.randn(1, 1, 4, 4, device=DEVICE)
    assert uses_triton_kernel(logits), f"float32 logits on {DEVICE} take the Triton kernel"
    assert uses_triton_kernel(logits.to(torch.bfloat16)), "bfloat16 logits too"
    assert not uses_triton_kernel(logits.double()), "float64 stays on the PyTorch path"
    assert not uses_triton_kernel(logits, kernel="auto"), "only when asked for"
    assert not uses_triton_kernel(torch.zeros(1, device="meta")), "no other device"


@needs_triton
@pytest.mark.parametrize("variant", [{}, {"normalize_attention": True, "copy_gate": False}], ids=["ndr", "geom_att"])
def test_the_model_computes_the_same_with_the_triton_kernel(small_tiles, variant):
    """A training forward and backward of the NDR (and of "+geom. att.", whose rows are L1-normalised after the
    kernel) with attn_implementation="ndr_triton" against the default: logits, loss and every gradient."""
    input_ids, mask = random_batch(batch=2, seq=7)
    mask[1, 5:] = 0  # padding
    labels = torch.tensor([0, 2])
    results = []
    for implementation in ("eager", "ndr_triton"):
        torch.manual_seed(0)
        config = tiny_config(attn_implementation=implementation, hidden_dropout_prob=0.1, **variant)
        model = NDRForSequenceClassification(config).to(DEVICE).train()
        torch.manual_seed(1)  # the same dropout masks
        output = model(input_ids.to(DEVICE), attention_mask=mask.to(DEVICE), labels=labels.to(DEVICE))
        output.loss.backward()
        results.append((output.logits.detach().cpu(), {k: p.grad.cpu() for k, p in model.named_parameters()}))
    (reference_logits, reference_grads), (logits, grads) = results
    torch.testing.assert_close(logits, reference_logits, atol=1e-5, rtol=1e-4, msg="logits")
    for name, gradient in grads.items():
        torch.testing.assert_close(gradient, reference_grads[name], atol=1e-5, rtol=1e-4, msg=f"{name}'s gradient")


@needs_triton
def test_normalised_rows_of_the_kernel_sum_to_one_where_a_key_matches(small_tiles):
    query, key, value = (torch.randn(2, 2, 7, 4, generator=torch.Generator().manual_seed(s)) for s in range(3))
    mask = random_mask(2, 7, seed=4).to(DEVICE)
    inputs = [t.to(DEVICE) for t in (query, key, value)]
    output, weights = attention(*inputs, mask, "geometric", normalize=True, kernel="triton")
    reference_output, reference = attention(*inputs, mask, "geometric", normalize=True)
    torch.testing.assert_close(weights, reference, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(output, reference_output, atol=1e-5, rtol=1e-4)
    sums = weights.sum(-1)[mask.bool()[:, None, :].expand(-1, 2, -1)]
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=0, msg="normalised rows sum to 1")


@needs_triton
def test_torch_compile_keeps_the_kernel_in_one_graph(small_tiles):
    """The kernel is a custom op: `torch.compile(fullgraph=True)` traces through the dispatch without a graph break."""
    logits, left, right, _ = random_inputs(1, 2, 6, seed=51)
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]], device=DEVICE)

    def weights(z, a, b):
        return geometric_attention_weights(z, mask, left=a, right=b, kernel="triton")

    compiled = torch.compile(weights, fullgraph=True, backend="eager")
    inputs = [t.to(DEVICE) for t in (logits, left, right)]
    torch.testing.assert_close(compiled(*inputs), weights(*inputs), atol=0, rtol=0)


def test_without_triton_the_model_warns_and_uses_the_pytorch_path(monkeypatch, caplog):
    monkeypatch.setattr(triton_kernels, "TRITON_AVAILABLE", False)
    logits = torch.randn(1, 1, 5, 5)
    assert not uses_triton_kernel(logits), "nothing to run the kernel with"
    torch.testing.assert_close(
        geometric_attention_weights(logits, kernel="triton"), geometric_attention_torch(logits), atol=1e-6, rtol=1e-5
    )
    with caplog.at_level(logging.WARNING, logger="modeling_ndr.attention_ndr"):
        NDRForSequenceClassification(tiny_config(attn_implementation="ndr_triton"))
    assert "triton is not installed" in caplog.text, "a model that asks for the kernel says why it does not get it"
