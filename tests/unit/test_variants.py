"""The paper's baselines and metric-tensor attention as configurations of one model (`configuration/variants/`)."""

import itertools
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from tiny import random_ids, tiny_config

import ndr_training
from modeling_ndr import NDRConfig, NDRForSequenceClassification, NDRModel
from modeling_ndr import configuration_ndr as configuration
from modeling_ndr.attention_ndr import (
    ATTENTION_CLASSES,
    ATTENTION_WEIGHT_FUNCTIONS,
    METRIC_PARAMETRIZATIONS,
    POSITION_TERMS,
    NDRDotProductAttention,
    NDRMetricAttention,
    _relative_index,
    position_ids,
    sinusoidal_encoding,
)


REPO = Path(__file__).resolve().parents[2]
VARIANT_DIR = REPO / "configuration" / "variants"
# each variant's NDRConfig fields (its top level; its recipe sections: tests/unit/test_variant_recipes.py)
VARIANTS = {
    path.stem: {k: v for k, v in yaml.safe_load(path.read_text()).items() if k not in ("tasks", "presets")}
    for path in sorted(VARIANT_DIR.glob("*.yaml"))
}


def test_the_paper_variants_are_all_defined():
    expected = {"transformer", "rel", "rel_gate", "absrel_gate", "geom_att", "ndr", "ndr_metric"}
    assert expected <= set(VARIANTS), f"configuration/variants/ holds {sorted(VARIANTS)}"
    assert VARIANTS["ndr"] == {k: getattr(NDRConfig(), k) for k in VARIANTS["ndr"]}, "ndr is the default config"


def test_every_allowed_value_has_an_implementation():
    assert set(ATTENTION_CLASSES) == set(configuration.ATTENTION_SCORES)
    assert set(ATTENTION_WEIGHT_FUNCTIONS) == set(configuration.ATTENTION_TYPES)
    assert set(METRIC_PARAMETRIZATIONS) == set(configuration.METRIC_TENSORS)
    assert set(POSITION_TERMS) | {"absolute"} == set(configuration.POSITION_ENCODINGS)
    input_ids = random_ids(2, 6, seed=0)
    axes = (configuration.ATTENTION_TYPES, configuration.POSITION_ENCODINGS, configuration.ATTENTION_SCORES,
            configuration.METRIC_TENSORS, (True, False), configuration.HALTINGS, configuration.READOUTS)  # fmt: skip
    built = 0
    for attention_type, position, scores, metric, gate, halting, readout in itertools.product(*axes):
        if scores == "dot" and metric != "symmetric":
            continue  # metric_tensor only matters for metric scores
        try:
            config = tiny_config(attention_type=attention_type, position_encoding=position, attention_scores=scores,
                                 metric_tensor=metric, copy_gate=gate, halting=halting, readout=readout)  # fmt: skip
        except ValueError as error:
            assert scores == "metric" and position in ("relative", "gated"), f"refused a valid combination: {error}"
            continue
        logits = NDRForSequenceClassification(config).eval()(input_ids).logits
        assert torch.isfinite(logits).all(), f"{config.to_diff_dict()} gives non-finite logits"
        built += 1
    assert built == 2 * (5 + 3 * 3) * 2 * 2 * 2, "every valid combination was built and run"


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_trains_saves_and_reloads(name, tmp_path):
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(**VARIANTS[name]))
    input_ids = random_ids(4, 7, seed=1)
    out = model(input_ids, labels=torch.tensor([0, 1, 2, 0]))
    out.loss.backward()
    without_gradient = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not without_gradient, f"{name}: parameters without a finite gradient: {without_gradient}"
    model.eval().save_pretrained(tmp_path / name)
    reloaded = NDRForSequenceClassification.from_pretrained(tmp_path / name).eval()
    torch.testing.assert_close(reloaded(input_ids).logits, model(input_ids).logits, msg=f"{name}: save → reload")


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_variant_classifier_is_padding_invariant(name, padding_side):
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(**VARIANTS[name])).eval()
    short, longer = random_ids(1, 5, seed=2), random_ids(2, 9, seed=3)
    padded, mask = torch.zeros(3, 9, dtype=torch.long), torch.zeros(3, 9, dtype=torch.long)
    padded[1:], mask[1:] = longer, 1
    where = slice(0, 5) if padding_side == "right" else slice(4, 9)
    padded[0, where], mask[0, where] = short, 1
    alone = model(short).logits
    in_batch = model(padded, attention_mask=mask).logits[:1]
    torch.testing.assert_close(in_batch, alone, atol=1e-5, rtol=1e-5, msg=f"{name}, {padding_side} padding")


REMOTE_CODE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.modules["modeling_ndr"] = None  # this Python cannot import the package
    import torch
    from transformers import AutoModelForSequenceClassification
    results = {}
    for name in sys.argv[2:]:
        model = AutoModelForSequenceClassification.from_pretrained(f"{sys.argv[1]}/{name}", trust_remote_code=True)
        assert "modeling_ndr" not in type(model).__module__.split(".")[0]
        results[name] = model.eval()(torch.load(f"{sys.argv[1]}/ids.pt")).logits.tolist()
    print(json.dumps(results))
    """
)


@pytest.mark.parametrize("attention_type", ["geometric", "softmax"])
def test_the_attention_takes_its_weights_from_the_registry(attention_type, monkeypatch):
    """The forward reads `ATTENTION_WEIGHT_FUNCTIONS[config.attention_type]` (as llama reads its attention-function
    registry): a function put there is the one every step calls."""
    calls = []
    original = ATTENTION_WEIGHT_FUNCTIONS[attention_type]

    def recorded(*args, **kwargs):
        calls.append(attention_type)
        return original(*args, **kwargs)

    monkeypatch.setitem(ATTENTION_WEIGHT_FUNCTIONS, attention_type, recorded)
    model = NDRModel(tiny_config(attention_type=attention_type)).eval()
    model(random_ids(2, 6, seed=0), output_attentions=True)
    assert calls == [attention_type] * 3, f"one call per step of the 3, got {calls}"


def test_every_variant_loads_with_remote_code_without_the_package(tmp_path):
    input_ids = random_ids(2, 6, seed=4)
    torch.save(input_ids, tmp_path / "ids.pt")
    expected = {}
    for name, values in VARIANTS.items():
        model = NDRForSequenceClassification(tiny_config(**values)).eval()
        model.save_pretrained(tmp_path / name)
        expected[name] = model(input_ids).logits
    (tmp_path / "load.py").write_text(REMOTE_CODE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "load.py", str(tmp_path), *VARIANTS], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    for name in VARIANTS:
        torch.testing.assert_close(torch.tensor(loaded[name]), expected[name], msg=f"{name} via trust_remote_code")


# --------------------------------------------------------------------------------------------- position encodings


def test_sinusoidal_encoding_matches_the_closed_formula():
    positions, dim = torch.tensor([0, 1, 5, -3]), 6
    encoding = sinusoidal_encoding(positions, dim)
    for row, position in enumerate(positions.tolist()):
        for k in range(dim // 2):
            angle = position / 10000 ** (2 * k / dim)
            assert encoding[row, 2 * k].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert encoding[row, 2 * k + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def relative_scores_by_hand(attention: NDRDotProductAttention, hidden: torch.Tensor) -> torch.Tensor:
    """s [(q_i + u) . k_j + (q_i + v) . W_p P(j - i)], one (i, j) at a time (Transformer-XL, Dai et al. 2019)."""
    _, n, d = hidden.shape
    h, e = attention.num_heads, attention.head_size
    q = (hidden[0] @ attention.q_proj.weight.T).view(n, h, e)  # without the bias u
    k = (hidden[0] @ attention.k_proj.weight.T).view(n, h, e)
    u = attention.q_proj.bias.view(h, e)
    v = attention.relative_position_bias
    s = attention.scale.item()
    scores = torch.zeros(1, h, n, n)
    for head in range(h):
        for i in range(n):
            for j in range(n):
                position = attention.relative_proj(sinusoidal_encoding(torch.tensor(j - i), d)).view(h, e)[head]
                content = (q[i, head] + u[head]) @ k[j, head]
                scores[0, head, i, j] = s * (content + (q[i, head] + v[head]) @ position)
    return scores


def test_relative_attention_equals_a_direct_computation():
    torch.manual_seed(0)
    attention = NDRModel(tiny_config(**VARIANTS["rel"])).layer.attention.eval()
    with torch.no_grad():
        attention.relative_position_bias.normal_()  # u != v, so that the two biases are told apart
        attention.q_proj.bias.normal_()
    hidden = torch.randn(1, 5, 16)
    _, weights = attention(hidden)
    expected = torch.softmax(relative_scores_by_hand(attention, hidden), dim=-1)
    torch.testing.assert_close(weights, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("gate_value, equals", [(1.0, "relative"), (0.0, "absolute")])
def test_gated_position_term_is_relative_when_the_gate_is_open_and_absolute_when_shut(gate_value, equals):
    torch.manual_seed(0)
    gated = NDRModel(tiny_config(**VARIANTS["absrel_gate"])).layer.attention.eval()
    with torch.no_grad():
        gated.position_gate_proj.weight.zero_()
        gated.position_gate_proj.bias.fill_(1e4 if gate_value == 1.0 else -1e4)
    hidden = torch.randn(2, 6, 16)
    query = gated._split_heads(gated.q_proj(hidden)) * gated.scale
    position_query = query + gated.scale * (
        gated.relative_position_bias.unsqueeze(1) - gated.q_proj.bias.view(2, 1, 8)
    )
    term = gated.relative_logits(hidden, position_query, None)
    table = gated.relative_proj(sinusoidal_encoding(torch.arange(6), 16)).view(6, 2, 8).transpose(0, 1)
    if equals == "absolute":
        expected = position_query @ table.transpose(-1, -2)  # (q_i + v) . W_p P(j)
    else:
        gated.position_encoding = "relative"
        expected = gated.relative_logits(hidden, position_query, None)
    torch.testing.assert_close(term, expected, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------- metric attention


def metric_attention(metric_tensor: str, attention_type="geometric", seed=0) -> NDRMetricAttention:
    torch.manual_seed(seed)
    config = tiny_config(attention_scores="metric", metric_tensor=metric_tensor, attention_type=attention_type)
    attention = NDRModel(config).layer.attention.eval()
    with torch.no_grad():
        attention.metric.add_(0.3 * torch.randn_like(attention.metric))  # away from the identity
    return attention


@pytest.mark.parametrize("metric_tensor", ["symmetric", "psd", "diagonal"])
def test_metric_scores_are_symmetric_before_the_direction_term(metric_tensor):
    attention = metric_attention(metric_tensor)
    p = attention._split_heads(attention.p_proj(torch.randn(2, 6, 16)))
    scores = (p @ attention.metric_tensor()) @ p.transpose(-1, -2)  # r_ij without the 1/sqrt(e)
    torch.testing.assert_close(scores, scores.transpose(-1, -2), msg="r_ij = r_ji")
    metric = attention.metric_tensor()
    torch.testing.assert_close(metric, metric.transpose(-1, -2), msg="M is symmetric")
    if metric_tensor == "psd":
        assert (torch.linalg.eigvalsh(metric) >= -1e-6).all(), "a PSD metric has no negative eigenvalue"
    if metric_tensor == "diagonal":
        assert torch.count_nonzero(metric - torch.diag_embed(torch.diagonal(metric, dim1=-2, dim2=-1))) == 0


@pytest.mark.parametrize("attention_type", ["geometric", "softmax"])
def test_metric_attention_at_initialisation_is_tied_dot_product_attention(attention_type):
    torch.manual_seed(0)
    common = dict(attention_type=attention_type)
    metric = NDRModel(tiny_config(attention_scores="metric", **common)).layer.attention.eval()
    dot = NDRModel(tiny_config(attention_scores="dot", **common)).layer.attention.eval()
    with torch.no_grad():
        for projection in (dot.q_proj, dot.k_proj, dot.v_proj):
            projection.weight.copy_(metric.p_proj.weight)  # query = key = value = p
        dot.q_proj.bias.zero_()
        dot.o_proj.weight.copy_(metric.o_proj.weight)
        dot.direction_proj.load_state_dict(metric.direction_proj.state_dict())  # the same direction terms
        if attention_type == "geometric":
            dot.scale.fill_(1 / math.sqrt(8))  # learned there; fixed at 1/sqrt(e) for metric scores
    hidden = torch.randn(2, 6, 16)
    torch.testing.assert_close(metric(hidden)[0], dot(hidden)[0], msg="M = I: p_i . p_j / sqrt(e)")


@pytest.mark.parametrize("metric_tensor", ["symmetric", "psd", "diagonal"])
def test_metric_attention_gradcheck_float64(metric_tensor):
    attention = metric_attention(metric_tensor).double()
    hidden = torch.randn(1, 4, 16, dtype=torch.float64, requires_grad=True)
    metric = attention.metric.detach().clone().requires_grad_()

    def output(hidden, metric):  # the attention output as a function of its input and of the metric parameter
        return torch.func.functional_call(attention, {"metric": metric}, (hidden,))[0]

    assert torch.autograd.gradcheck(output, (hidden, metric))


# ---------------------------------------------------------------------------------- what every step reuses


# ACT's step loop weighs the states; its layer calls are those of "ndr" and "transformer"
# (tests/unit/test_adaptive_computation.py)
@pytest.mark.parametrize("name", sorted(name for name, fields in VARIANTS.items() if fields.get("halting") != "act"))
def test_precomputing_once_per_forward_equals_each_step_on_its_own(name):
    """The model concatenates projection weights and builds the position table once per forward; a layer called
    without them computes them itself at every step. Same outputs and gradients, with left and right padding."""
    torch.manual_seed(0)
    model = NDRModel(tiny_config(**{**VARIANTS[name], "embedding_dropout": 0.0})).train()  # no dropout anywhere
    ids = random_ids(3, 8, seed=5)
    mask = torch.ones_like(ids)
    mask[1, 6:], mask[2, :3] = 0, 0
    fused = model(ids, attention_mask=mask, num_steps=3).last_hidden_state
    fused.square().sum().backward()
    expected_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    hidden = model.embeddings(ids)
    if model.config.position_encoding == "absolute":
        hidden = hidden + sinusoidal_encoding(position_ids(mask, 3, 8, hidden.device), 16)
    for _ in range(3):
        hidden = model.layer(hidden, mask)  # no precomputed weights: each step computes its own
    torch.testing.assert_close(fused, hidden, atol=1e-5, rtol=1e-5)
    hidden.square().sum().backward()
    for n, p in model.named_parameters():
        if n in expected_grads:
            torch.testing.assert_close(p.grad, expected_grads[n], atol=1e-5, rtol=1e-4, msg=n)


def test_relative_position_indices_read_each_offset_once_per_row_and_survive_inference_mode():
    """One offset per (i, j) of a row, so the gather's backward adds each gradient once (deterministic on CUDA); the
    cached index may first be built under `torch.inference_mode()` and still serve training."""
    n = 19  # a length no other test uses, so the cache is filled here
    with torch.inference_mode():
        index = _relative_index(n, torch.device("cpu"))
    assert not index.is_inference()
    assert all(len(set(row)) == n for row in index.tolist())
    attention = NDRModel(tiny_config(**VARIANTS["rel"])).layer.attention
    with torch.inference_mode():
        attention(torch.randn(1, n, 16))
    attention(torch.randn(1, n, 16, requires_grad=True))[0].sum().backward()


# ------------------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "field, value",
    [("attention_type", "linear"), ("position_encoding", "rotary"), ("attention_scores", "cosine"),
     ("metric_tensor", "full"), ("halting", "pondernet"), ("act_threshold", 0.0), ("act_threshold", 1.5),
     ("act_ponder_weight", -0.1), ("adaptive_steps", "yes"), ("adaptive_threshold", 0.0),
     ("max_adaptive_steps", 0), ("act_halting_bias_init", math.nan)],
)  # fmt: skip
def test_each_bad_value_names_its_field(field, value):
    with pytest.raises(ValueError, match=f"NDRConfig.{field}="):
        tiny_config(**{field: value})


@pytest.mark.parametrize(
    "values, fields",
    [
        ({"normalize_attention": True, "attention_type": "softmax"}, ("normalize_attention", "attention_type")),
        ({"attention_scores": "metric", "position_encoding": "relative"}, ("attention_scores", "position_encoding")),
        ({"attention_scores": "metric", "position_encoding": "gated"}, ("attention_scores", "position_encoding")),
        ({"halting": "act", "adaptive_steps": True}, ("halting", "adaptive_steps")),
    ],
)
def test_each_bad_combination_names_both_fields(values, fields):
    with pytest.raises(ValueError) as error:
        tiny_config(**values)
    for field in fields:
        assert f"NDRConfig.{field}=" in str(error.value), f"the message names {field}: {error.value}"


@pytest.mark.parametrize("metric_tensor", ["symmetric", "psd", "diagonal"])
def test_the_metric_starts_at_the_identity(metric_tensor):
    attention = NDRModel(tiny_config(attention_scores="metric", metric_tensor=metric_tensor)).layer.attention
    torch.testing.assert_close(attention.metric_tensor(), torch.eye(8).expand(2, 8, 8), msg="M = I at init")


# ------------------------------------------------------------------------------------------------ train.py --variant


def load_train():
    from scripts import load_script

    return load_script("training/train.py", "ndr_train_variants")


def test_a_variant_layers_over_the_preset_and_flags_still_win(tmp_path):
    from modeling_ndr import training

    preset = tmp_path / "preset.yaml"
    preset.write_text("task: ctl\nhidden_size: 64\ncopy_gate: true\nattention_type: geometric\n")
    argv = ["--preset", str(preset), "--variant", "transformer", "--hidden_size", "32", "--output_dir", str(tmp_path)]
    _, model_args, run_args, _, _ = ndr_training.parse_arguments(argv)
    values = ndr_training.config_values(
        model_args, training.read_variant(run_args.variant), ndr_training.flags_on_command_line(argv)
    )
    assert values["attention_type"] == "softmax" and values["copy_gate"] is False, "the variant wins over the preset"
    assert values["hidden_size"] == 32, "a command-line flag wins over everything but --config_overrides"
    with pytest.raises(training.UsageError, match="available variants"):
        training.read_variant("no_such_variant")


def test_train_with_a_variant_exports_a_card_that_names_it(tmp_path):
    train = load_train()
    argv = ["--preset", "ctl_cpu", "--variant", "rel_gate", "--n_train", "200", "--n_eval", "16",
            "--hidden_size", "16", "--intermediate_size", "16", "--num_hidden_layers", "2", "--max_steps", "2",
            "--per_device_train_batch_size", "8", "--eval_steps", "2", "--save_steps", "2", "--report_to", "none",
            "--disable_tqdm", "true", "--output_dir", str(tmp_path / "run")]  # fmt: skip
    train.main(argv)
    export = tmp_path / "run" / "export"
    config = json.loads((export / "config.json").read_text())
    assert (config["attention_type"], config["position_encoding"], config["copy_gate"]) == (
        "softmax",
        "relative",
        True,
    )
    card = (export / "README.md").read_text()
    assert "the **rel_gate** variant" in card and "variant-rel_gate" in card, "the card names the variant"
