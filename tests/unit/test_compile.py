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


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_s_training_step_compiles_with_inductor_and_matches_eager(variant, precision):
    """Inductor on CPU tensors, as `train.py --torch_compile true` compiles (`fullgraph=True`, dynamic lengths), in
    fp32 and under bf16 autocast as the CPU presets train where the CPU has native bf16: the same loss and gradients
    as eager, at two sequence lengths without a graph break. About a minute per compile on two cores: `-m slow`
    (`make bench` times the compiled step against eager at the presets' sizes)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    no_dropout = dict(hidden_dropout_prob=0.0, attention_dropout=0.0, gate_dropout=0.0)
    eager, compiled_model = tiny_model(variant, **no_dropout).train(), tiny_model(variant, **no_dropout).train()
    compiled = torch.compile(compiled_model, backend="inductor", fullgraph=True, dynamic=True)
    bf16 = precision == "bf16"
    for length in (7, 11):
        ids, mask, labels = batch()
        ids = torch.cat([ids, ids], dim=1)[:, :length]
        mask = torch.ones_like(ids)
        mask[1, length - 2 :] = 0
        for model in (eager, compiled_model):
            model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            eager_loss = eager(input_ids=ids, attention_mask=mask, labels=labels).loss
            compiled_loss = compiled(input_ids=ids, attention_mask=mask, labels=labels).loss
        tolerance = dict(atol=2e-2, rtol=2e-2) if bf16 else dict(atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(compiled_loss, eager_loss, **tolerance)
        eager_loss.backward()
        compiled_loss.backward()
        for (name, a), b in zip(eager.named_parameters(), compiled_model.parameters()):
            if a.grad is not None:
                scale = a.grad.abs().max().clamp(min=1e-3)
                torch.testing.assert_close(b.grad / scale, a.grad / scale, **tolerance, msg=f"{name} ({length})")
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
