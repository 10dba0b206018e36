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
