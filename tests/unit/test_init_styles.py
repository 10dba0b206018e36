"""`init_style="official"`, `embedding_init`, `embedding_dropout` and the official ACT details (`act_ponder_cost`,
`act_ut_variant`): each checked against the formula of the official code (RobertCsordas/ndr at da20530), which
docs/model.md ("Initialisation") lists choice by choice.

A Xavier-uniform weight is U(±gain sqrt(6 / (fan_in + fan_out))); `nn.Linear`'s own init (what the official code keeps
wherever it does not re-initialise) is U(±1/sqrt(fan_in)) for the weight and for the bias. A weight of a few thousand
uniform draws reaches within 3% of its bound, so `max |w|` tells the bounds apart. Opt in with `-m official` (and
`NDR_OFFICIAL_DIR`, a checkout of the official code) to compare every weight with the official code's own init."""

import math
import os

import pytest
import torch

from modeling_ndr import NDRConfig, NDRForSequenceClassification


D, HEADS, D_FF = 64, 4, 128
E = D // HEADS


def official_model(**fields) -> NDRForSequenceClassification:
    torch.manual_seed(0)
    config = NDRConfig(hidden_size=D, num_attention_heads=HEADS, intermediate_size=D_FF, num_labels=8, **fields)
    return NDRForSequenceClassification(config)


def xavier_bound(fan_in: int, fan_out: int, gain: float = 1.0) -> float:
    return gain * math.sqrt(6.0 / (fan_in + fan_out))


def assert_uniform_bound(tensor: torch.Tensor, bound: float, what: str):
    largest = tensor.abs().max().item()
    assert 0.97 * bound <= largest <= bound, f"{what}: max |w| {largest:.4f}, expected just under {bound:.4f}"


def assert_pytorch_default(linear: torch.nn.Linear, what: str):
    """`nn.Linear`'s own init: U(±1/sqrt(fan_in)) for the weight and the bias (a small bias only below its bound)."""
    bound = 1.0 / math.sqrt(linear.in_features)
    if linear.weight.numel() >= 1000:
        assert_uniform_bound(linear.weight, bound, f"{what} weight")
    else:
        assert linear.weight.abs().max() <= bound, f"{what} weight"
    if linear.bias is not None:
        bias = linear.bias.abs()
        assert bias.max() <= bound and bias.min() > 0, f"{what} bias: U(±{bound:.4f}), not a constant"


def test_official_geometric_attention_takes_the_head_size_as_fan():
    attention = official_model(attention_type="geometric", init_style="official").ndr.layer.attention
    for name in ("q_proj", "k_proj", "v_proj"):  # xavier_manual_(w, fan_in=d, fan_out=e)
        assert_uniform_bound(getattr(attention, name).weight, xavier_bound(D, E), f"geometric {name}")
    assert_uniform_bound(attention.o_proj.weight, xavier_bound(E, D), "geometric o_proj: fan_in e, fan_out d")
    assert xavier_bound(D, E) > 1.2 * xavier_bound(D, D), "the test tells the head-size fan from torch's"
    assert torch.all(attention.q_proj.bias == 0), "the content bias (global_content_bias) starts at 0"


def test_official_softmax_attention_is_xavier_with_keys_and_values_as_one_projection():
    for position_encoding in ("absolute", "relative"):
        attention = official_model(
            attention_type="softmax", position_encoding=position_encoding, copy_gate=False, init_style="official"
        ).ndr.layer.attention
        what = f"softmax, {position_encoding}"
        assert_uniform_bound(attention.q_proj.weight, xavier_bound(D, D), f"{what}: data_to_q")
        for name in ("k_proj", "v_proj"):  # data_to_kv, one (2d, d) weight: fan_out 2d
            assert_uniform_bound(getattr(attention, name).weight, xavier_bound(D, 2 * D), f"{what}: {name}")
        assert_pytorch_default(attention.o_proj, f"{what}: multi_head_merge keeps its default")
        assert torch.all(attention.q_proj.bias == 0), what
    assert_uniform_bound(attention.relative_proj.weight, xavier_bound(D, D), "pos_to_pq")


def test_official_init_keeps_pytorch_defaults_where_the_official_code_does():
    model = official_model(init_style="official", halting="act")  # the NDR with ACT: direction and halting units
    assert_pytorch_default(model.ndr.layer.attention.direction_proj, "data_to_qp (direction)")
    assert_pytorch_default(model.classifier, "the classifier (its xavier init compares the module with a string)")
    assert_pytorch_default(model.ndr.halting.proj, "ACT's p_map")
    halting_bias = model.ndr.halting.proj.bias.item()
    assert abs(halting_bias) <= 1 / math.sqrt(D), "no halting bias of -3: columns start halting with p near 0.5"
    gated = official_model(attention_type="softmax", position_encoding="gated", init_style="official")
    assert_pytorch_default(gated.ndr.layer.attention.position_gate_proj, "data_to_absgate")


def test_official_feed_forward_gains_and_default_biases_per_layer_type():
    relu = math.sqrt(2.0)
    plain = official_model(
        attention_type="softmax", position_encoding="absolute", copy_gate=False, init_style="official"
    )
    feed_forward = plain.ndr.layer.feed_forward
    assert_uniform_bound(feed_forward.fc_in.weight, xavier_bound(D, D_FF, relu), "linear1: gain('relu')")
    assert_uniform_bound(feed_forward.fc_out.weight, xavier_bound(D_FF, D), "linear2: gain 1, not the NDR's 5/3")
    for layer, fan_in in ((feed_forward.fc_in, D), (feed_forward.fc_out, D_FF)):
        assert 0 < layer.bias.abs().max() <= 1 / math.sqrt(fan_in), "the biases keep nn.Linear's U(±1/sqrt(fan_in))"

    ndr = official_model(init_style="official").ndr.layer  # NDRGeometric
    assert_uniform_bound(ndr.update.fc_in.weight, xavier_bound(D, D_FF, relu), "p1")
    assert_uniform_bound(ndr.update.fc_out.weight, xavier_bound(D_FF, D, 5.0 / 3.0), "p2: gain('tanh')")
    assert_uniform_bound(ndr.copy_gate.fc_in.weight, xavier_bound(D, D, relu), "g1")
    assert_uniform_bound(ndr.copy_gate.fc_out.weight, xavier_bound(D, D), "g2: gain('sigmoid') = 1")
    assert torch.all(ndr.copy_gate.fc_out.bias == -3.0), "g2's bias is filled with -3"
    assert 0 < ndr.update.fc_in.bias.abs().max() <= 1 / math.sqrt(D), "p1's bias keeps its default"

    residual = official_model(attention_type="softmax", position_encoding="relative", init_style="official")
    assert_pytorch_default(residual.ndr.layer.update.fc_out, "NDRResidual's p2 (its xavier line is commented out)")


def test_embedding_inits():
    for embedding_init, check in (
        ("normal", lambda w: abs(w.std().item() - 1.0) < 0.05),
        ("kaiming", lambda w: abs(w.std().item() - math.sqrt(2.0 / D)) < 0.1 * math.sqrt(2.0 / D)),
        ("xavier", lambda w: 0.9 * xavier_bound(D, 200) <= w.abs().max().item() <= xavier_bound(D, 200)),
    ):
        weight = official_model(vocab_size=200, embedding_init=embedding_init).ndr.embeddings.weight
        assert check(weight), f"{embedding_init}: std {weight.std():.4f}, max {weight.abs().max():.4f}"


def test_ndr_init_is_the_default_and_differs_from_the_official():
    default, ndr = official_model(), official_model(init_style="ndr")
    assert all(torch.equal(a, b) for a, b in zip(default.state_dict().values(), ndr.state_dict().values()))
    assert torch.all(default.ndr.layer.attention.direction_proj.bias == 0), "the release: biases 0"
    official = official_model(init_style="official")
    assert not torch.all(official.ndr.layer.attention.direction_proj.bias == 0), "official: nn.Linear's bias"


def test_official_init_of_metric_scores_is_refused_naming_the_fields():
    with pytest.raises(ValueError, match="init_style='official' with NDRConfig.attention_scores='metric'"):
        NDRConfig(init_style="official", attention_scores="metric")


def first_step_input(model, input_ids, attention_mask) -> torch.Tensor:
    """What the shared layer gets at its first step: the embeddings after positions and embedding dropout."""
    seen = []
    handle = model.ndr.layer.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach()))
    try:
        model(input_ids=input_ids, attention_mask=attention_mask)
    finally:
        handle.remove()
    return seen[0]


def test_embedding_dropout_acts_on_the_embeddings_with_positions_in_training_only():
    model = official_model(
        attention_type="softmax", position_encoding="absolute", copy_gate=False, embedding_dropout=0.5, vocab_size=20
    )
    input_ids = torch.randint(4, 20, (8, 12))
    attention_mask = torch.ones_like(input_ids)
    model.train()
    dropped = first_step_input(model, input_ids, attention_mask)
    zeros = (dropped == 0).float().mean().item()
    assert 0.4 < zeros < 0.6, f"half of the embedding entries (positions included) are dropped, got {zeros:.2f}"
    model.eval()
    kept = first_step_input(model, input_ids, attention_mask)
    assert (kept == 0).float().mean() < 0.01, "no dropout at inference"
    kept_where_not_dropped = dropped[dropped != 0] / kept[dropped != 0]
    assert torch.allclose(kept_where_not_dropped, torch.full_like(kept_where_not_dropped, 2.0)), "kept: scaled by 2"


def official_act(model, input_ids, attention_mask, steps: int, ut_variant: bool):
    """The official ACTTransformerEncoder loop (act_transformer.py) written out: (output, remainders.mean())."""
    encoder = model.ndr
    real = attention_mask.bool()
    hidden = encoder.embeddings(input_ids)
    p_halt = (~real).float().unsqueeze(-1)  # padding is already "stopped"
    remainders, output = torch.zeros_like(p_halt), 0
    for i in range(steps):
        p = encoder.halting(hidden).unsqueeze(-1)
        still_running = (p_halt < 1.0).float()
        stopped = ((p_halt + p * still_running) > model.config.act_threshold).float()
        if i == steps - 1 and not ut_variant:
            stopped.fill_(1.0)
        new_halted = stopped * still_running
        still_running = (1 - stopped) * still_running
        p_halt = p_halt + p * still_running
        remainders = remainders + new_halted * (1 - p_halt)
        p_halt = p_halt + new_halted * remainders
        update_weights = p * still_running + new_halted * remainders
        hidden = encoder.layer(hidden, real, update_mask=real)  # every column is updated, halted or not
        output = (output * (1 - update_weights) if ut_variant else output) + update_weights * hidden
        if still_running.sum() == 0:
            break
    return output, remainders.mean()


@pytest.mark.parametrize("init_style", ["official", "ndr"])  # official: halting mid-way; ndr: p ~ 0.05, at the cap
@pytest.mark.parametrize("ut_variant", [False, True])
def test_act_with_the_official_ponder_cost_and_ut_variant_computes_as_the_official_loop(init_style, ut_variant):
    model = official_model(
        vocab_size=20, halting="act", act_update_halted=True, act_ponder_cost="official", act_ut_variant=ut_variant,
        init_style=init_style, hidden_dropout_prob=0.0, attention_dropout=0.0, gate_dropout=0.0, num_hidden_layers=5,
    ).eval()  # fmt: skip
    input_ids = torch.randint(4, 20, (6, 10))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[:3, 7:] = 0  # padding counts in the mean over all positions
    with torch.no_grad():
        outputs = model.ndr(input_ids=input_ids, attention_mask=attention_mask)
        expected, ponder = official_act(model, input_ids, attention_mask, steps=5, ut_variant=ut_variant)
    real = attention_mask.bool()
    assert torch.allclose(outputs.last_hidden_state[real], expected[real], atol=1e-5), "the output mix"
    assert torch.allclose(outputs.ponder_cost.mean(), ponder, atol=1e-6), "the batch's ponder cost: remainders.mean()"


def test_ut_variant_does_not_make_running_columns_halt_at_the_last_step():
    fields = dict(vocab_size=20, halting="act", act_halting_bias_init=-10.0, num_hidden_layers=3)
    input_ids = torch.randint(4, 20, (2, 6))
    with torch.no_grad():
        act = official_model(**fields).eval().ndr(input_ids=input_ids).last_hidden_state
        ut = official_model(act_ut_variant=True, **fields).eval().ndr(input_ids=input_ids).last_hidden_state
    # p ~ 5e-5 per step: ACT gives the last step the remainder (the output is about the last state); the UT variant
    # never halts these columns, so their weights stay near 0
    assert ut.norm(dim=-1).max() < 1e-2 * act.norm(dim=-1).min(), "the UT variant's weights do not sum to 1"


# ------------------------------------------------------------------------- against the official code's own init

OFFICIAL_DIR = os.environ.get("NDR_OFFICIAL_DIR")
# ours -> (official variant, its CTL sweep's embedding_init): each as the official CTL sweeps build it
OFFICIAL_COUNTERPARTS = {
    "transformer": ("universal", "kaiming"),  # the sweep says kaiming; create_model does not pass it on
    "rel": ("relative_universal", "kaiming"),
    "geom_att": ("geometric_transformer", "kaiming"),
    "ndr": ("ndr_geometric", "auto"),
    "transformer_act": ("act_universal", "kaiming"),
}


@pytest.mark.official
@pytest.mark.skipif(not OFFICIAL_DIR, reason="NDR_OFFICIAL_DIR is not set to a checkout of RobertCsordas/ndr")
@pytest.mark.parametrize("variant", OFFICIAL_COUNTERPARTS)
def test_official_init_draws_every_weight_as_the_official_code_does(variant):
    """Our variant's recipe for CTL with `init_style="official"` and the official model built by its own
    `create_model`: every weight under its official name (tests/official_helpers.py maps them) from the same
    distribution, compared by its spread (std within 10% for tensors of 1,000 values or more; a bias: zero, a
    constant, or below the official one's bound)."""
    from official_helpers import build_official_model, official_arguments, official_weights

    from modeling_ndr.training.presets import read_variant

    official_variant, embedding_init = OFFICIAL_COUNTERPARTS[variant]
    d, heads, words, classes = 128, 4, 100, 8
    arguments = official_arguments(official_variant, state_size=d, transformer__n_heads=heads,
                                   embedding_init=embedding_init)  # fmt: skip
    torch.manual_seed(0)
    official = build_official_model(OFFICIAL_DIR, arguments, words, classes).state_dict()
    fields = {**read_variant(variant, "ctl"), "init_style": "official"}  # the NDR's recipe keeps the release's init
    fields.update(vocab_size=words + 2, hidden_size=d, intermediate_size=2 * d, num_attention_heads=heads)
    torch.manual_seed(1)
    ours = official_weights(
        NDRForSequenceClassification(NDRConfig(num_labels=classes, **fields)), official_variant, words
    )
    compared = 0
    for name, value in ours.items():
        theirs = official.get(name)
        if theirs is None or not value.is_floating_point() or name.split(".")[-1] in ("pe", "pos_encoding"):
            continue
        unused = ("pos_to_pq.weight" if "geometric" in official_variant else "s_bias", "int_seq")
        if name.endswith(unused):
            continue  # not used by the official forward (the mapping fills it with noise)
        theirs = theirs.float()
        constant = torch.all(theirs == theirs.flatten()[0]) and not name.endswith("p_map.bias")  # p_map's is drawn
        if constant:  # zeros, the gate's -3, the scales
            assert torch.allclose(value, theirs), (
                f"{name}: {value.flatten()[:3]} vs the official {theirs.flatten()[:3]}"
            )
        elif theirs.numel() >= 1000:
            assert abs(value.std() - theirs.std()) <= 0.1 * theirs.std(), (
                f"{name}: {value.std():.4f} vs {theirs.std():.4f}"
            )
        else:  # a small drawn tensor (biases, p_map): nn.Linear's U(±1/sqrt(fan_in)), fan_in = d
            bound = max(1.0 / math.sqrt(d), theirs.abs().max())
            assert 0 < value.abs().max() <= bound, f"{name}: drawn like the official one"
        compared += 1
    assert compared >= 10, f"{variant}: compared {compared} tensors"


@pytest.mark.parametrize(
    "variant", [{}, {"attention_type": "softmax", "position_encoding": "gated"}]
)  # ndr, absrel_gate
def test_a_new_head_loaded_for_new_labels_starts_as_transformers_starts_one(variant, tmp_path):
    """Fine-tuning on new labels (`ignore_mismatched_sizes=True`) creates the head: N(0, initializer_range) and bias 0,
    whatever `init_style` the loaded model trained with; built from scratch, the official style keeps PyTorch's own
    init of the classifier (the official code never re-initialises it)."""
    trained = official_model(init_style="official", **variant)
    assert_pytorch_default(trained.classifier, "the classifier of a new official-style model")
    trained.save_pretrained(tmp_path)
    loaded = NDRForSequenceClassification.from_pretrained(tmp_path, num_labels=3, ignore_mismatched_sizes=True)
    head = loaded.classifier
    assert torch.equal(head.bias, torch.zeros(3)), "a new head's bias starts at 0"
    std = loaded.config.initializer_range
    assert 0.8 * std < head.weight.std().item() < 1.2 * std, f"weight std {head.weight.std():.4f}, expected {std}"
    for name, weight in trained.ndr.state_dict().items():
        assert torch.equal(loaded.ndr.state_dict()[name], weight), f"{name}: the encoder is the loaded one"
