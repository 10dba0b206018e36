"""The routing plot draws the copy gate and every step's attention for one input."""

import matplotlib


matplotlib.use("Agg")

from modeling_ndr import NDRConfig, NDRForSequenceClassification, task_tokenizer  # noqa: E402
from modeling_ndr.plotting import plot_routing  # noqa: E402


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
    from modeling_ndr.plotting import first_token_curves, plot_first_token_curves

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
