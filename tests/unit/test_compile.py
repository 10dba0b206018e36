"""torch.compile: the shared-layer step loop compiles to one graph (no breaks) for training and inference, the
compiled model computes what the eager one does, and `train.py --torch_compile` trains."""

from pathlib import Path

import pytest
import torch

from modeling_ndr import NDRConfig, NDRForSequenceClassification


REPO = Path(__file__).resolve().parents[2]
VARIANTS = ("ndr", "transformer", "rel_gate", "ndr_metric", "ndr_act")


def tiny_model(variant: str, **overrides) -> NDRForSequenceClassification:
    import yaml

    with open(REPO / "configuration" / "variants" / f"{variant}.yaml") as f:
        fields = {k: v for k, v in yaml.safe_load(f).items() if k not in ("tasks", "presets")}  # NDRConfig fields
    fields.update(vocab_size=12, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_hidden_layers=3)
    fields.update(num_labels=3, **overrides)
    torch.manual_seed(0)
    return NDRForSequenceClassification(NDRConfig(**fields))


def batch():
    ids = torch.randint(4, 12, (4, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    return ids, mask, torch.tensor([0, 1, 2, 1])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_the_step_loop_compiles_to_one_graph(variant, training):
    torch._dynamo.reset()
    model = tiny_model(variant).train(training)

    def step(ids, mask, labels):
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss

    explanation = torch._dynamo.explain(step)(*batch())
    assert explanation.graph_break_count == 0, [reason.reason for reason in explanation.break_reasons]
    assert explanation.graph_count == 1


def test_compiled_training_step_matches_eager():
    """Same loss and gradients through a compiled model (aot_eager: the autograd graph dynamo and AOTAutograd build,
    without inductor's C++ build time; train.py's path through inductor is tested below)."""
    torch._dynamo.reset()
    eager = tiny_model("ndr", hidden_dropout_prob=0.0, attention_dropout=0.0, gate_dropout=0.0).train()
    compiled_model = tiny_model("ndr", hidden_dropout_prob=0.0, attention_dropout=0.0, gate_dropout=0.0).train()
    compiled = torch.compile(compiled_model, backend="aot_eager", fullgraph=True)
    ids, mask, labels = batch()
    eager_loss = eager(input_ids=ids, attention_mask=mask, labels=labels).loss
    compiled_loss = compiled(input_ids=ids, attention_mask=mask, labels=labels).loss
    torch.testing.assert_close(compiled_loss, eager_loss)
    eager_loss.backward()
    compiled_loss.backward()
    for (name, a), b in zip(eager.named_parameters(), compiled_model.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)


# Measured 2026-12-06 (torch 2.13.0+cpu): compiled in bf16, these two variants' gradients are 2.6-3.3% of their scale
# off the fp32 step, four times eager bf16's error (ndr.embeddings.weight; direction_proj.bias); in fp32 they match.
# Not on a preset's path (the presets train eager, faster on the CPU); strict, so a fix shows up as a failure here.
BF16_DEVIATES = pytest.mark.xfail(strict=True, reason="inductor's bf16 gradients deviate from fp32 more than eager's")
INDUCTOR_CASES = [
    pytest.param(variant, precision, marks=BF16_DEVIATES if (variant, precision) in {
        ("transformer", "bf16"), ("ndr_metric", "bf16")} else ())
    for variant in VARIANTS for precision in ("fp32", "bf16")
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("variant, precision", INDUCTOR_CASES)
def test_every_variant_s_training_step_compiles_with_inductor_and_matches_eager(variant, precision):
    """Inductor on CPU tensors, as `train.py --torch_compile true` compiles (`fullgraph=True`, dynamic lengths), in
    fp32 and under bf16 autocast as the CPU presets train where the CPU has native bf16, at two sequence lengths
    without a graph break. fp32: the same loss and gradients as eager. bf16: inductor keeps some intermediates in
    float32 where eager rounds every operation to bfloat16, so both are compared with the fp32 eager step, and the
    compiled step may be no farther from it than the eager bf16 step (twice as far, plus bf16's resolution). About a
    minute per compile on two cores: `-m slow` (`make bench` times the compiled step against eager)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    no_dropout = dict(hidden_dropout_prob=0.0, attention_dropout=0.0, gate_dropout=0.0, embedding_dropout=0.0)
    reference, eager, compiled_model = (tiny_model(variant, **no_dropout).train() for _ in range(3))
    compiled = torch.compile(compiled_model, backend="inductor", fullgraph=True, dynamic=True)
    bf16 = precision == "bf16"

    def step(model, ids, mask, labels, autocast):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        return loss.detach()

    for length in (7, 11):
        ids, mask, labels = batch()
        ids = torch.cat([ids, ids], dim=1)[:, :length]
        mask = torch.ones_like(ids)
        mask[1, length - 2 :] = 0
        exact = step(reference, ids, mask, labels, False)
        eager_loss, compiled_loss = step(eager, ids, mask, labels, bf16), step(compiled, ids, mask, labels, bf16)
        if not bf16:
            torch.testing.assert_close(compiled_loss, eager_loss, atol=1e-5, rtol=1e-4)
        else:
            allowed = 2 * (eager_loss - exact).abs() + 2**-7 * exact.abs()
            assert (compiled_loss - exact).abs() <= allowed, f"loss ({length}): {compiled_loss} {eager_loss} {exact}"
        for (name, r), e, c in zip(reference.named_parameters(), eager.parameters(), compiled_model.parameters()):
            if r.grad is None:
                continue
            scale = r.grad.abs().max().clamp(min=1e-3)
            if not bf16:
                torch.testing.assert_close(c.grad / scale, e.grad / scale, atol=1e-5, rtol=1e-4, msg=f"{name}")
            else:
                eager_error = ((e.grad - r.grad).abs().max() / scale).item()
                compiled_error = ((c.grad - r.grad).abs().max() / scale).item()
                assert compiled_error <= 2 * eager_error + 2**-7, f"{name} ({length}): {compiled_error} {eager_error}"
    assert not counters["graph_break"], f"graph breaks: {dict(counters['graph_break'])}"


# (batch, length) pairs over batches 1-512 and lengths 10-200; batch 1 comes first and again last
GEOMETRIC_SIZES = [(1, 10), (3, 37), (512, 12), (2, 200), (64, 50), (1, 100)]


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_geometric_attention_compiles_to_at_most_two_graphs_for_every_length_and_batch(backend):
    """The PyTorch path of geometric attention (the one CUDA runs; `kernel="torch"` keeps the CPU kernel out),
    compiled with `dynamic=True`, forward and backward: no graph break, and two graphs in all, because PyTorch
    gives batch 1 a graph of its own (it specialises every dimension of size 1); every other batch size and every
    length share the second. aot_eager traces what inductor is given (dynamo's and AOTAutograd's guards) in
    seconds; inductor itself, which may add guards of its own, takes minutes on two cores (`-m slow`)."""
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._dynamo.utils import counters

    from modeling_ndr.attention_ndr import attention

    torch._dynamo.reset()
    counters.clear()
    counter = CompileCounterWithBackend(backend)

    def geometric(query, key, value, mask, left, right):
        return attention(query, key, value, mask, "geometric", left, right, kernel="torch")[0]

    compiled = torch.compile(geometric, backend=counter, dynamic=True)
    for batch_size, length in GEOMETRIC_SIZES:
        generator = torch.Generator().manual_seed(length)
        inputs = [torch.randn(batch_size, 2, length, 4, generator=generator, requires_grad=True) for _ in range(3)]
        mask = torch.ones(batch_size, length, dtype=torch.long)
        mask[0, length // 2 :] = 0
        inputs += [mask] + [torch.randn(batch_size, 2, length, generator=generator) for _ in range(2)]
        output = compiled(*inputs)
        output.sum().backward()
        if (batch_size, length) == (3, 37):
            torch.testing.assert_close(output, geometric(*inputs), msg="the compiled path computes what eager does")
    assert not counters["graph_break"], f"graph breaks: {dict(counters['graph_break'])}"
    assert counter.frame_count <= 2, f"{counter.frame_count} graphs for {GEOMETRIC_SIZES}: it recompiles"
