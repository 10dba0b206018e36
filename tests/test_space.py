"""The routing explorer Space (hub_cards/spaces/ndr-routing/): launched locally, its `/classify` endpoint answers with
the label `pipeline("text-classification")` gives, and `/explore` shows the predictions and the routing maps."""

import os
import socket
from pathlib import Path

import pytest
import yaml


os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
gradio_client = pytest.importorskip("gradio_client", reason="the Space needs gradio (pip install -e '.[space]')")

from scripts import load_script  # noqa: E402


# gradio's queue calls pandas options that pandas 3 deprecates; nothing of ours
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|The copy keyword).*")

SPACE = Path(__file__).resolve().parents[1] / "hub_cards" / "spaces" / "ndr-routing"
MODELS = Path(__file__).resolve().parents[1] / "hub_cards" / "models"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def space():
    """(the app module, a client of it launched on a free local port)."""
    app = load_script("hub_cards/spaces/ndr-routing/app.py", "ndr_space_app")
    port = free_port()
    app.demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield app, gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
    finally:
        app.demo.close()


def test_the_space_metadata_names_its_app_and_sdk():
    text = (SPACE / "README.md").read_text()
    metadata = yaml.safe_load(text.split("---")[1])
    assert metadata["sdk"] == "gradio" and metadata["app_file"] == "app.py", metadata
    assert (SPACE / metadata["app_file"]).is_file() and (SPACE / "requirements.txt").is_file()


@pytest.mark.parametrize(
    "name, text", [("ndr-ctl-forward", "101 d a b i"), ("ndr-listops", "[MED 4 8 5 [MAX 8 4 9 ] ]")]
)
def test_classify_answers_with_the_pipeline_s_label(space, name, text):
    from transformers import pipeline

    _, client = space
    label, probability, steps = client.predict(name, text, api_name="/classify")
    expected = pipeline("text-classification", model=str(MODELS / name))(text)[0]
    assert label == expected["label"], f"the Space says {label}, the pipeline {expected}"
    assert probability == pytest.approx(expected["score"], abs=1e-4) and steps >= 1


def test_explore_shows_fixed_and_adaptive_predictions_and_three_maps(space):
    app, client = space
    text, truth = app.draw_sample("ndr-ctl-backward", 3, sample_seed=0)
    assert len(text.split()) == 4, "a depth-3 CTL input: three functions and the symbol"
    prediction, *images = client.predict("ndr-ctl-backward", text, 2, 0, api_name="/explore")
    label, _, _ = client.predict("ndr-ctl-backward", text, api_name="/classify")
    assert "| fixed steps |" in prediction and "| adaptive steps |" in prediction, prediction
    assert f"**{label}**" in prediction, "the page shows the label /classify gives"
    assert len(images) == 3 and all(Path(image).stat().st_size > 1000 for image in images)


def test_a_drawn_input_has_the_depth_asked_for_and_its_true_answer(space):
    from modeling_ndr.tasks import ctl_tables

    app, _ = space

    text, truth = app.draw_sample("ndr-ctl-forward", 5, sample_seed=7)
    symbol, *functions = text.split()
    tables, value = ctl_tables(0), int(symbol, 2)
    for function in functions:
        value = tables[function][value]
    assert len(functions) == 5 and truth == format(value, "03b"), (text, truth)
    arithmetic, answer = app.draw_sample("ndr-arithmetic", 2, sample_seed=3)
    assert eval(arithmetic) % 10 == int(answer), (arithmetic, answer)  # digits, +, * and brackets only
