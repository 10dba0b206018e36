"""Tests of the NDR model against the paper's definitions (Csordás et al., 2022, Sec. 3: the copy gate and geometric
attention) and the Hugging Face conventions."""

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tiny
import torch
from hub_cache import install_in_hub_cache
from safetensors import safe_open
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

from modeling_ndr import NDRConfig, NDRForSequenceClassification, NDRModel, geometric_attention_weights
from modeling_ndr.dropout_ndr import NDRDropout
from modeling_ndr.geometric_ndr import uses_cpu_kernel
from modeling_ndr.modeling_ndr import readout_positions
from modeling_ndr.training.export import head_class


# the released sequence classifiers (a token release's head reads every column:
# tests/unit/test_token_classification.py)
RELEASED = sorted(
    path
    for path in (Path(__file__).resolve().parents[2] / "hub_cards" / "models").glob("ndr-*")
    if head_class(str(path)) is NDRForSequenceClassification
)


BATCH, SEQ, VOCAB = 13, 7, 12


def tiny_config(**overrides) -> NDRConfig:
    """tests/tiny.py's config at transformers' model-tester sizes (hidden 32, 2 layers)."""
    return tiny.tiny_config(**{"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, **overrides})


def random_batch(batch=BATCH, seq=SEQ, seed=0):
    """tests/tiny.py's token ids ([BOS] ... [EOS]) and an attention mask of ones."""
    input_ids = tiny.random_ids(batch, seq, seed)
    return input_ids, torch.ones_like(input_ids)


# ---------------------------------------------------------------------------------------------- geometric attention


def brute_force_geometric_attention(logits: torch.Tensor, attention_mask=None) -> torch.Tensor:
    """The definition, with explicit loops: A_ij = P_ij * prod over closer keys k of (1 - P_ik); ties: right wins."""
    batch, heads, n, _ = logits.shape
    match = torch.sigmoid(logits.double())
    weights = torch.zeros(batch, heads, n, n, dtype=torch.float64)

    def usable(b, i, k):
        return k != i and (attention_mask is None or attention_mask[b, k] == 1)

    for b in range(batch):
        for h in range(heads):
            for i in range(n):
                for j in range(n):
                    if not usable(b, i, j):
                        continue
                    weight = match[b, h, i, j]
                    for k in range(n):
                        closer = abs(k - i) < abs(j - i) or (abs(k - i) == abs(j - i) and k > i > j)
                        if usable(b, i, k) and closer:
                            weight = weight * (1 - match[b, h, i, k])
                    weights[b, h, i, j] = weight
    return weights


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 16])
@pytest.mark.parametrize("padded", [False, True])
def test_geometric_attention_equals_brute_force(n, padded):
    logits = 2 * torch.randn(3, 2, n, n, generator=torch.Generator().manual_seed(n))
    mask = None
    if padded:
        mask = torch.ones(3, n, dtype=torch.long)
        mask[1, max(1, n - 2) :] = 0  # right padding
        mask[2, : n // 2] = 0  # left padding
    fast = geometric_attention_weights(logits, mask)
    assert fast.dtype == torch.float32, "float32 logits give float32 weights"
    expected = brute_force_geometric_attention(logits, mask)
    torch.testing.assert_close(fast.double(), expected, atol=2e-6, rtol=1e-5)


def test_geometric_attention_tie_goes_to_the_right_key():
    # three positions, every match probability 1/2; query 1 has keys 0 and 2 at the same distance
    weights = geometric_attention_weights(torch.zeros(1, 1, 3, 3))[0, 0]
    assert weights[1, 2].item() == pytest.approx(0.5), "the right key is scanned first and takes P"
    assert weights[1, 0].item() == pytest.approx(0.25), "the left key only wins if the right one did not match"
    assert weights[0, 2].item() == pytest.approx(0.25), "key 2 of query 0 is behind key 1"
    assert torch.all(weights.diagonal() == 0), "a column never attends to itself"


def test_geometric_attention_rows_are_unnormalised_and_padded_rows_finite():
    logits = torch.randn(2, 3, 6, 6)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]])
    weights = geometric_attention_weights(logits, mask)
    assert torch.isfinite(weights).all(), "padded query rows must stay finite"
    assert (weights[0, :, :, 4:] == 0).all() and (weights[1, :, :, :2] == 0).all(), "padded keys never match"
    assert (weights.sum(-1) <= 1 + 1e-6).all(), "the weights of one query sum to at most 1 (the rest: no match)"


def test_geometric_attention_row_sum_is_one_minus_probability_of_no_match():
    logits = torch.randn(1, 1, 5, 5, dtype=torch.float64)
    weights = geometric_attention_weights(logits)
    match = torch.sigmoid(logits).masked_fill(torch.eye(5, dtype=torch.bool), 0)
    expected = 1 - torch.prod(1 - match, dim=-1)
    torch.testing.assert_close(weights.sum(-1).double(), expected, atol=1e-6, rtol=1e-6)


def test_geometric_attention_gradcheck_float64():
    logits = torch.randn(2, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    assert geometric_attention_weights(logits, mask).dtype == torch.float64, "float64 logits are computed in float64"
    assert torch.autograd.gradcheck(lambda z: geometric_attention_weights(z, mask), (logits,))


def test_geometric_attention_is_float32_for_low_precision_logits():
    logits = torch.randn(1, 1, 6, 6)
    for dtype in (torch.bfloat16, torch.float16):
        weights = geometric_attention_weights(logits.to(dtype))
        assert weights.dtype == torch.float32, f"{dtype} logits must be computed in float32"
        torch.testing.assert_close(weights, geometric_attention_weights(logits.to(dtype).float()))


# ------------------------------------------------------------------------------------------------------ the model


def test_gates_start_near_sigmoid_minus_three():
    torch.manual_seed(0)  # the mean gate at init varies with the draw (0.05-0.09 over seeds): make the test exact
    model = NDRModel(tiny_config()).eval()
    input_ids, mask = random_batch()
    gates = model(input_ids, attention_mask=mask, output_gates=True).gates
    mean = torch.stack(gates).mean().item()
    assert abs(mean - 1 / (1 + math.exp(3))) < 0.03, f"gate bias -3 should make the layer start copying, got {mean}"


def test_gate_forced_shut_copies_the_input():
    model = NDRModel(tiny_config()).eval()
    with torch.no_grad():
        model.layer.copy_gate.fc_out.weight.zero_()
        model.layer.copy_gate.fc_out.bias.fill_(-1e4)
    input_ids, mask = random_batch()
    output = model(input_ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(output, model.embeddings(input_ids), msg="a shut gate copies the state unchanged")


def test_gate_dropout_forces_whole_columns_to_copy_in_training_only():
    model = NDRModel(tiny_config(gate_dropout=0.5))
    input_ids, mask = random_batch()
    model.train()
    gate = model(input_ids, attention_mask=mask, output_gates=True).gates[0]
    shut_columns = (gate == 0).all(dim=-1).float().mean().item()
    assert 0.25 < shut_columns < 0.75, f"about half the columns should be forced to copy, got {shut_columns}"
    model.eval()
    gate = model(input_ids, attention_mask=mask, output_gates=True).gates[0]
    assert (gate > 0).all(), "no gate dropout at evaluation"


def test_outputs_per_step_and_num_steps_override():
    model = NDRModel(tiny_config()).eval()
    input_ids, mask = random_batch()
    out = model(input_ids, attention_mask=mask, output_attentions=True, output_hidden_states=True, output_gates=True)
    assert len(out.hidden_states) == 3 and len(out.attentions) == 2 and len(out.gates) == 2
    assert out.attentions[0].shape == (BATCH, 2, SEQ, SEQ) and out.gates[0].shape == (BATCH, SEQ, 32)
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)
    longer = model(input_ids, attention_mask=mask, num_steps=5, output_attentions=True)
    assert len(longer.attentions) == 5, "num_steps overrides config.num_hidden_layers"
    model.config.eval_num_hidden_layers = 4
    assert len(model(input_ids, output_attentions=True).attentions) == 4, "evaluation uses eval_num_hidden_layers"
    model.train()
    assert len(model(input_ids, output_attentions=True).attentions) == 2, "training uses num_hidden_layers"
    model.eval()
    plain = model(input_ids, attention_mask=mask)
    assert plain.attentions is None and plain.hidden_states is None and plain.gates is None
    assert isinstance(model(input_ids, return_dict=False), tuple)
    with pytest.raises(ValueError, match="num_steps"):
        model(input_ids, num_steps=0)


def test_one_layer_module_is_shared_by_every_step():
    model = NDRModel(tiny_config(num_hidden_layers=14))
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == sum(p.numel() for p in NDRModel(tiny_config(num_hidden_layers=1)).parameters()), (
        "the step count must not change the parameter count"
    )


@pytest.mark.parametrize("readout", ["first", "last"])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_classifier_is_padding_invariant(readout, padding_side):
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(readout=readout)).eval()
    short, _ = random_batch(batch=1, seq=5, seed=1)
    longer, _ = random_batch(batch=3, seq=9, seed=2)
    padded = torch.zeros(4, 9, dtype=torch.long)
    mask = torch.zeros(4, 9, dtype=torch.long)
    padded[1:], mask[1:] = longer, 1
    if padding_side == "right":
        padded[0, :5], mask[0, :5] = short, 1
    else:
        padded[0, 4:], mask[0, 4:] = short, 1
    alone = model(short, attention_mask=torch.ones_like(short)).logits
    in_batch = model(padded, attention_mask=mask).logits[:1]
    torch.testing.assert_close(in_batch, alone, atol=1e-5, rtol=1e-5)


def test_problem_types_give_the_hf_losses():
    input_ids, mask = random_batch()
    model = NDRForSequenceClassification(tiny_config())
    out = model(input_ids, attention_mask=mask, labels=torch.zeros(BATCH, dtype=torch.long))
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits, torch.zeros(BATCH).long()))
    multi = NDRForSequenceClassification(tiny_config(problem_type="multi_label_classification"))
    targets = torch.randint(0, 2, (BATCH, 3)).float()
    out = multi(input_ids, attention_mask=mask, labels=targets)
    torch.testing.assert_close(out.loss, torch.nn.functional.binary_cross_entropy_with_logits(out.logits, targets))
    regression = NDRForSequenceClassification(tiny_config(num_labels=1))
    targets = torch.randn(BATCH)
    out = regression(input_ids, attention_mask=mask, labels=targets)
    torch.testing.assert_close(out.loss, torch.nn.functional.mse_loss(out.logits.squeeze(), targets))


def test_input_embeddings_accessors():
    model = NDRForSequenceClassification(tiny_config())
    assert model.get_input_embeddings() is model.ndr.embeddings
    new = torch.nn.Embedding(VOCAB + 4, 32)
    model.set_input_embeddings(new)
    assert model.ndr.get_input_embeddings() is new


@pytest.mark.parametrize("use_reentrant", [False, True])
@pytest.mark.parametrize(
    "fields", [{}, {"position_encoding": "gated", "attention_type": "softmax"}], ids=["ndr", "gated"]
)
def test_gradient_checkpointing_gives_the_same_gradients(use_reentrant, fields):
    """Both of torch's checkpointing modes; the gated variant also has a position table, computed once per forward
    without checkpointing and per step with it."""
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(**fields))
    input_ids, mask = random_batch()
    labels = torch.randint(0, 3, (BATCH,))
    model.train()
    model(input_ids, attention_mask=mask, labels=labels).loss.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    if hasattr(model, "activation_checkpointing_enable"):  # its name since transformers 5.2x (5.24 has it)
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": use_reentrant})
    else:  # transformers 5.17 (the GPU image's)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    model(input_ids, attention_mask=mask, labels=labels).loss.backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], msg=f"checkpointed gradient of {name} differs")


def test_bf16_autocast_on_cpu_computes_geometric_weights_in_float32():
    """Under autocast the weights are computed in float32 and handed on as the product with the values reads them:
    float32 from the PyTorch path, bfloat16 from the CPU kernel (which computes in float32 a row at a time)."""
    model = NDRForSequenceClassification(tiny_config())
    input_ids, mask = random_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids, attention_mask=mask, labels=torch.zeros(BATCH).long(), output_attentions=True)
        model.set_attn_implementation("ndr_torch")
        reference = model(input_ids, attention_mask=mask, output_attentions=True)
        model.set_attn_implementation("eager")
    handed_on = torch.bfloat16 if uses_cpu_kernel(input_ids.float()) else torch.float32
    assert all(a.dtype == handed_on for a in out.attentions)
    assert all(a.dtype == torch.float32 for a in reference.attentions), "the PyTorch path's weights are float32"
    for weights, expected in zip(out.attentions, reference.attentions):
        torch.testing.assert_close(weights.float(), expected, rtol=2**-7, atol=2**-7)
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss)
    out.loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), f"gradient of {name} is missing or not finite"


def test_copy_gates_are_float32_under_autocast():
    """The gate's sigmoid runs in float32 (a bf16 gate is rounded to 8 bits of mantissa)."""
    model = NDRModel(tiny_config()).eval()
    input_ids, mask = random_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids, attention_mask=mask, output_gates=True)
        gate = model.layer.copy_gate(torch.randn(2, 3, 32))
    assert all(g.dtype == torch.float32 for g in out.gates) and gate.dtype == torch.float32
    assert out.last_hidden_state.dtype == torch.float32, "the state stays float32 under autocast"


def test_dropout_scales_bf16_activations_by_the_exact_inverse_keep_probability():
    """1 / (1 - p) is applied as a float32 scalar: rounded to bf16 it would be 1.109 for p = 0.1, not 1.111, and every
    kept activation would come out 0.16% small."""
    torch.manual_seed(0)
    x = (1 + torch.rand(1_000_000)).to(torch.bfloat16)
    y = NDRDropout(0.1).train()(x)
    kept = y != 0
    ratio = y[kept].double().sum() / x[kept].double().sum()
    assert abs(ratio.item() - 1 / 0.9) < 2e-4, f"kept values are scaled by {ratio.item():.5f}, not 1/0.9"


def test_normalized_attention_rows_sum_to_one():
    model = NDRModel(tiny_config(normalize_attention=True, copy_gate=False)).eval()
    input_ids, mask = random_batch()
    weights = model(input_ids, attention_mask=mask, output_attentions=True).attentions[0]
    torch.testing.assert_close(weights.sum(-1), torch.ones(BATCH, 2, SEQ), msg="L1-normalised rows sum to 1")
    assert not hasattr(model.layer, "copy_gate"), "copy_gate=False builds the plain Transformer layer"


def test_tiny_model_fits_random_sequences():
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(num_labels=4))
    input_ids, mask = random_batch(batch=64, seq=6, seed=3)
    labels = torch.randint(0, 4, (64,), generator=torch.Generator().manual_seed(4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(300):
        optimizer.zero_grad()
        model(input_ids, attention_mask=mask, labels=labels).loss.backward()
        optimizer.step()
    model.eval()
    accuracy = (model(input_ids, attention_mask=mask).logits.argmax(-1) == labels).float().mean().item()
    assert accuracy == 1.0, f"the training path should memorise 64 sequences, got train accuracy {accuracy}"


def test_initialising_a_projection_does_not_search_the_model():
    """`_init_weights` runs once per module; for a projection it reads the role the projection carries, so building a
    model costs O(modules), not O(modules^2)."""
    model = NDRForSequenceClassification(tiny_config(halting="act"))
    linears = [module for module in model.ndr.modules() if isinstance(module, torch.nn.Linear)]
    assert linears and all(hasattr(module, "init_role") for module in linears), "every encoder projection has a role"
    walks = []
    original = torch.nn.Module.modules

    def counting_modules(self):
        walks.append(self)
        return original(self)

    torch.nn.Module.modules = counting_modules
    try:
        for module in linears:
            model._init_weights(module)
    finally:
        torch.nn.Module.modules = original
    assert not walks, "initialising one projection walked the model"
    assert model.ndr.layer.copy_gate.fc_out.bias.eq(-3.0).all(), "gate_output's bias is gate_bias_init"
    assert model.ndr.halting.proj.bias.eq(-3.0).all(), "the halting unit's bias is act_halting_bias_init"


def test_one_host_sync_per_forward_for_the_input_checks(monkeypatch):
    """The value checks (attention_mask values, rows without a token, label range) are one host sync per forward
    (free on the CPU, a stall on CUDA), and the step loop adds none."""
    model = NDRForSequenceClassification(tiny_config(num_hidden_layers=4)).train()
    input_ids, mask = random_batch()
    mask[1, 5:] = 0
    labels = torch.randint(0, 3, (BATCH,))
    syncs = []
    for name in ("__bool__", "item", "tolist"):
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            syncs.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    model(input_ids, attention_mask=mask, labels=labels).loss.backward()
    assert syncs == ["__bool__"], f"host syncs in one training forward: {syncs}"
    syncs.clear()
    model.ndr(input_ids, attention_mask=mask)
    assert syncs == ["__bool__"], f"the encoder alone checks its mask once: {syncs}"
    syncs.clear()
    model.ndr(input_ids, attention_mask=mask.bool())
    assert syncs == [], "a bool mask needs no check"


# ----------------------------------------------------------------------------------------------- released weights


def step_by_step_logits(model: NDRForSequenceClassification, input_ids, attention_mask) -> torch.Tensor:
    """The classifier of an NDR model computed from its child modules, each run on its own (nothing shared between
    steps or between the update and the gate): the plain reference of the model's once-per-forward fusion."""
    layer = model.ndr.layer
    hidden = model.ndr.embeddings(input_ids)
    steps = model.config.eval_num_hidden_layers or model.config.num_hidden_layers
    for _ in range(steps):
        attended, _ = layer.attention(hidden, attention_mask)
        mixed = layer.attention_layer_norm(hidden + attended)
        update, gate = layer.update(mixed), layer.copy_gate(mixed)
        hidden = gate * update + (1 - gate) * hidden
    positions = readout_positions(attention_mask, model.config.readout)
    return model.classifier(hidden[torch.arange(len(hidden)), positions])


@pytest.mark.parametrize("folder", RELEASED, ids=[path.name for path in RELEASED])
def test_released_weights_load_key_for_key_and_compute_what_their_modules_compute(folder):
    model, info = NDRForSequenceClassification.from_pretrained(folder, output_loading_info=True)
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    model.eval()
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(4, model.config.vocab_size, (6, 11), generator=generator)
    input_ids[:, 0] = 2
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 7:], attention_mask[3, 9:] = 0, 0  # right padding
    attention_mask[4, :3] = 0  # left padding
    with torch.no_grad():
        # the fixed step count (a release may choose adaptive steps at inference;
        # tests/unit/test_adaptive_computation.py)
        logits = model(input_ids, attention_mask=attention_mask, adaptive_steps=False).logits
        expected = step_by_step_logits(model, input_ids, attention_mask)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "field, value",
    [
        ("hidden_size", 30),  # not divisible by 4 heads
        ("num_attention_heads", 0),
        ("num_hidden_layers", 0),
        ("eval_num_hidden_layers", 0),
        ("vocab_size", -1),
        ("intermediate_size", 0),
        ("hidden_dropout_prob", 1.0),
        ("attention_dropout", -0.1),
        ("gate_dropout", 1.5),
        ("readout", "middle"),
        ("attention_type", "softmax_typo"),
        ("copy_gate", "yes"),
        ("normalize_attention", 1),
        ("layer_norm_eps", 0),
        ("gate_bias_init", "low"),
    ],
)
def test_config_validation_names_the_field(field, value):
    kwargs = {"num_attention_heads": 4, field: value}
    with pytest.raises(ValueError, match=f"NDRConfig.{field}="):
        NDRConfig(**kwargs)


# --------------------------------------------------------------------------------------------- saving and loading


def test_save_and_reload_gives_identical_outputs(tmp_path):
    model = NDRForSequenceClassification(tiny_config()).eval()
    model.save_pretrained(tmp_path)
    files = set(os.listdir(tmp_path))
    assert "model.safetensors" in files and {"configuration_ndr.py", "modeling_ndr.py"} <= files
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        keys = list(f.keys())
    assert sum(k.endswith("attention.q_proj.weight") for k in keys) == 1, f"one shared layer is saved once: {keys}"
    assert len(keys) == len(dict(model.named_parameters())), "no tensor is duplicated or missing"
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert set(auto_map) == {"AutoConfig", "AutoModel", "AutoModelForSequenceClassification",
                             "AutoModelForTokenClassification"}  # fmt: skip
    reloaded = NDRForSequenceClassification.from_pretrained(tmp_path).eval()
    input_ids, mask = random_batch()
    torch.testing.assert_close(
        reloaded(input_ids, attention_mask=mask).logits, model(input_ids, attention_mask=mask).logits
    )


def test_auto_classes_load_hub_ids_from_the_offline_cache(tmp_path, hf_home, monkeypatch):
    model = NDRForSequenceClassification(tiny_config()).eval()
    model.save_pretrained(tmp_path / "saved")
    install_in_hub_cache(str(tmp_path / "saved"), "org/ndr-tiny", hf_home)
    monkeypatch.chdir(tmp_path)  # no ./org/ndr-tiny here: the id must come from the cache
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert isinstance(AutoConfig.from_pretrained("org/ndr-tiny"), NDRConfig)
    classifier = AutoModelForSequenceClassification.from_pretrained("org/ndr-tiny").eval()
    assert isinstance(classifier, NDRForSequenceClassification)
    encoder = AutoModel.from_pretrained("org/ndr-tiny").eval()
    assert isinstance(encoder, NDRModel)
    input_ids, mask = random_batch()
    torch.testing.assert_close(
        classifier(input_ids, attention_mask=mask).logits, model(input_ids, attention_mask=mask).logits
    )
    torch.testing.assert_close(
        encoder(input_ids, attention_mask=mask).last_hidden_state,
        model.ndr(input_ids, attention_mask=mask).last_hidden_state,
    )


REMOTE_CODE_SCRIPT = textwrap.dedent(
    """
    import importlib, sys
    sys.modules["modeling_ndr"] = None  # this Python cannot import the package
    sys.modules["triton"] = None  # nor triton: the copy of the optional Triton kernels must import without it
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification
    folder = sys.argv[1]
    classifier = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
    encoder = AutoModel.from_pretrained(folder, trust_remote_code=True)
    assert "modeling_ndr" not in type(classifier).__module__.split(".")[0], type(classifier).__module__
    # the copy holds the .py files only: no kernel source, so geometric attention takes the PyTorch path
    geometric = importlib.import_module(type(classifier).__module__.rsplit(".", 1)[0] + ".geometric_ndr")
    assert geometric.load_cpu_kernel() is None and not geometric.uses_cpu_kernel(torch.zeros(1))
    assert not geometric.uses_triton_kernel(torch.zeros(1))
    input_ids = torch.load(sys.argv[2])
    print(repr(classifier(input_ids).logits.tolist()))
    print(type(encoder).__name__)
    """
)


def test_trust_remote_code_loads_without_the_package(tmp_path):
    model = NDRForSequenceClassification(tiny_config()).eval()
    model.save_pretrained(tmp_path / "saved")
    assert (tmp_path / "saved" / "geometric_ndr_triton.py").is_file(), "geometric_ndr.py imports it: it travels along"
    input_ids, _ = random_batch()
    torch.save(input_ids, tmp_path / "ids.pt")
    (tmp_path / "load.py").write_text(REMOTE_CODE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "load.py", str(tmp_path / "saved"), str(tmp_path / "ids.pt")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    logits_line, encoder_class = result.stdout.strip().splitlines()[-2:]
    torch.testing.assert_close(torch.tensor(eval(logits_line)), model(input_ids).logits.detach())
    assert encoder_class == "NDRModel"
