"""The routing plot draws the copy gate and every step's attention for one input; CTL++'s representation study
tells a model with one representation per symbol from one with a representation per group."""

import types

import matplotlib
import pytest
import torch


matplotlib.use("Agg")

from modeling_ndr import NDRConfig, NDRForSequenceClassification, task_tokenizer  # noqa: E402
from modeling_ndr.plotting import ctlpp_group_accuracy, plot_representation_similarity, plot_routing  # noqa: E402
from modeling_ndr.tasks import ctlpp_world  # noqa: E402
from modeling_ndr.tasks.ctlpp import CTLPP_FUNCTIONS  # noqa: E402


def test_plot_routing_draws_gate_and_one_panel_per_step(tmp_path):
    tokenizer = task_tokenizer("ctl")
    config = NDRConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=16,
        num_hidden_layers=3,
        num_labels=8,
        id2label={i: f"{i:03b}" for i in range(8)},
    )
    model = NDRForSequenceClassification(config)
    figure = plot_routing(model, tokenizer, "b a 101", path=tmp_path / "routing.png")
    assert len(figure.axes) == 1 + 3 + 1, "gate map, one attention map per step, and the gate's colour bar"
    assert (tmp_path / "routing.png").stat().st_size > 1000
    assert model.training, "the model's train/eval mode is restored"


def test_plot_routing_marks_where_an_adaptive_sample_stops(tmp_path):
    tokenizer = task_tokenizer("ctl")
    config = NDRConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=16, num_hidden_layers=3,
                       num_labels=8, adaptive_steps=True, adaptive_threshold=1e-12, max_adaptive_steps=5)  # fmt: skip
    figure = plot_routing(NDRForSequenceClassification(config), tokenizer, "b a 101", path=tmp_path / "routing.png")
    assert "stops after step 5" in figure._suptitle.get_text(), "the title says where the sample stopped"
    assert len(figure.axes) == 1 + 5 + 1, "the steps up to the stop are drawn"
    assert any(line.get_color() == "red" for line in figure.axes[0].lines), "a red line marks the stop"


def test_plot_routing_of_a_token_classifier_titles_the_label_of_every_token(tmp_path):
    """`NDRForTokenClassification` (ndr-addition): one label per word between [BOS] and [EOS] in the title."""
    from modeling_ndr import NDRForTokenClassification, token_task_tokenizer

    tokenizer = token_task_tokenizer("carry")
    config = NDRConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=16, num_hidden_layers=2,
                       num_labels=10, id2label={i: str(i) for i in range(10)})  # fmt: skip
    figure = plot_routing(NDRForTokenClassification(config), tokenizer, "00 56 78", path=tmp_path / "routing.png")
    title = figure._suptitle.get_text()
    assert title.startswith("00 56 78  →  ") and len(title.split("→")[1].split()) == 3, title
    assert len(figure.axes) == 1 + 2 + 1 and (tmp_path / "routing.png").stat().st_size > 1000


def test_first_token_curves_follow_each_operator_as_training_goes(tmp_path):
    """`--eval_by_first_token` logs `eval_<split>_accuracy_first_<token>[_depth_<d>]`; the curves are read back per
    token and drawn per run (ListOps: when [SM leaves chance)."""
    from ndr_training.curves import first_token_curves, plot_first_token_curves

    state = {"log_history": [
        {"step": 250, "eval_iid_test_accuracy_first_SM": 0.1, "eval_iid_test_accuracy_first_SM_depth_1": 0.05,
         "eval_iid_test_accuracy_first_MIN": 0.6, "eval_ood_test_accuracy_first_SM": 0.1},
        {"step": 500, "eval_iid_test_accuracy_first_SM": 0.3, "eval_iid_test_accuracy_first_SM_depth_1": 0.9,
         "eval_iid_test_accuracy_first_MIN": 0.8, "loss": 1.0},
    ]}  # fmt: skip
    curves = first_token_curves(state, "iid_test")
    assert curves == {"SM": [(250, 0.1), (500, 0.3)], "SM_depth_1": [(250, 0.05), (500, 0.9)],
                      "MIN": [(250, 0.6), (500, 0.8)]}  # fmt: skip
    plot_first_token_curves({"a run": (state, 128)}, path=tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 5000, "a figure was drawn"


class _OracleCtlpp(torch.nn.Module):
    """A stand-in CTL++ classifier that answers right: its head reads a one-hot state of (the answer, and with
    `by_group` the group of the last function applied), as a model that keeps a cluster per group would."""

    def __init__(self, tokenizer, world, by_group: bool):
        super().__init__()
        self.tokenizer, self.world, self.by_group = tokenizer, world, by_group
        self.classifier = torch.nn.Linear(16, 8, bias=False)
        with torch.no_grad():
            self.classifier.weight.copy_(torch.eye(8).repeat_interleave(2, dim=1))  # state 2s + g -> label s
        self.config = types.SimpleNamespace(id2label={i: str(i) for i in range(8)})

    @property
    def device(self):
        return torch.device("cpu")

    def forward(self, input_ids, attention_mask=None, **kwargs):
        states = torch.zeros(len(input_ids), 16)
        for row, ids in enumerate(input_ids.tolist()):
            words = [w for w in self.tokenizer.convert_ids_to_tokens(ids) if not w.startswith("[")]
            symbol, functions = int(words[-1]), [CTLPP_FUNCTIONS.index(w) for w in reversed(words[:-1])]
            group = list(self.world.groups).index(self.world.group_of(functions[-1])) if self.by_group else 0
            states[row, 2 * self.world.apply(symbol, functions) + group] = 1.0
        return types.SimpleNamespace(logits=self.classifier(states))


def test_the_ctlpp_representation_study_tells_one_representation_from_one_per_group(tmp_path):
    tokenizer, world = task_tokenizer("ctlpp"), ctlpp_world(2, "parallel_branch")
    shared = _OracleCtlpp(tokenizer, world, by_group=False)
    figure, summary = plot_representation_similarity(shared, tokenizer, world, path=tmp_path / "shared.png")
    assert summary["within_group"] == pytest.approx(1.0) and summary["between_groups"] == pytest.approx(1.0)
    assert summary["accuracy"] == {"a->a": 1.0, "a->b": 1.0, "b->a": 1.0, "b->b": 1.0}
    assert (tmp_path / "shared.png").stat().st_size > 1000 and len(figure.axes) == 8 + 1 + 1
    _, summary = plot_representation_similarity(_OracleCtlpp(tokenizer, world, by_group=True), tokenizer, world)
    assert summary["within_group"] == pytest.approx(1.0) and summary["between_groups"] == pytest.approx(0.0)
    assert summary["groups"] == {"a~a": pytest.approx(1.0), "a~b": pytest.approx(0.0), "b~b": pytest.approx(1.0)}
    one = ctlpp_world(2, "parallel_branch", 1)  # an overlap group of one function: no pair within it
    _, summary = plot_representation_similarity(_OracleCtlpp(tokenizer, one, by_group=False), tokenizer, one)
    assert summary["groups"]["o~o"] is None and summary["groups"]["a~o"] == pytest.approx(1.0)


def test_ctlpp_group_accuracy_counts_every_pair_of_functions_by_their_groups():
    tokenizer, world = task_tokenizer("ctlpp"), ctlpp_world(0, "parallel_branch_2stage", 4, 3)
    config = NDRConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=16, num_hidden_layers=2,
                       num_labels=8, id2label={i: str(i) for i in range(8)}, readout="first")  # fmt: skip
    model = NDRForSequenceClassification(config).eval()  # as the study evaluates it: no dropout
    accuracy = ctlpp_group_accuracy(model, tokenizer, world)
    assert set(accuracy) == {(a, b) for a in world.groups for b in world.groups}
    first, second = world.groups["a1"], world.groups["b2"]  # one pair of groups, recomputed here
    texts, answers = [], []
    for x in range(8):
        for f1 in first:
            for f2 in second:
                texts.append(f"{CTLPP_FUNCTIONS[f2]} {CTLPP_FUNCTIONS[f1]} {x}")
                answers.append(world.tables[f2][world.tables[f1][x]])
    with torch.no_grad():
        predicted = model(**tokenizer(texts, return_tensors="pt")).logits.argmax(-1).tolist()
    assert accuracy["a1", "b2"] == pytest.approx(sum(p == a for p, a in zip(predicted, answers)) / len(answers))
