"""The routing explorer Space (hub_cards/spaces/ndr-routing/): launched locally, its `/classify` endpoint answers with
the label `pipeline("text-classification")` gives, and `/explore` shows the predictions and the routing maps."""

import os
import re
import socket
from pathlib import Path

import pytest
import yaml


os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
gradio_client = pytest.importorskip("gradio_client", reason="the Space needs gradio (pip install -e '.[space]')")

from scripts import load_script  # noqa: E402


# gradio's queue calls pandas options that pandas 3 deprecates; nothing of ours
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|The copy keyword).*")

SPACE = Path(__file__).resolve().parents[2] / "hub_cards" / "spaces" / "ndr-routing"
MODELS = Path(__file__).resolve().parents[2] / "hub_cards" / "models"


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


@pytest.mark.parametrize(
    "name, text, answer",
    [
        ("ndr-addition", "00 56 78", "1 2 5"),
        ("ndr-copy", "3 1 4 = _ _ _", "3 1 4"),
        ("ndr-reverse", "3 1 4 = _ _ _", "4 1 3"),
    ],
)
def test_a_token_model_answers_with_the_token_pipeline_s_labels_at_its_answer_words(space, name, text, answer):
    """A token model's /classify label is its answer (the blanks after `=`; the carry task: every word), the labels
    `pipeline("token-classification")` gives those words, and its probability that of the least sure one."""
    from transformers import pipeline

    _, client = space
    label, probability, steps = client.predict(name, text, api_name="/classify")
    tagged = pipeline("token-classification", model=str(MODELS / name), ignore_labels=[])(text)
    words = text.split()
    first = words.index("=") + 1 if "=" in words else 0
    expected = [entity for entity in tagged if entity["index"] > first]  # index 0 is [BOS]
    assert label == " ".join(entity["entity"] for entity in expected) == answer, (label, tagged)
    assert probability == pytest.approx(min(entity["score"] for entity in expected), abs=1e-4) and steps >= 1


def test_explore_shows_a_token_model_s_answer_word_by_word_against_a_drawn_row(space):
    app, client = space
    text, truth = app.draw_sample("ndr-reverse", 6, sample_seed=1)
    digits = text.split()[:6]
    assert text.split()[6:] == ["=", *["_"] * 6] and truth == " ".join(reversed(digits)), (text, truth)
    page = app.explore("ndr-reverse", text, 2, 0, {"text": text, "label": truth, "depth": 6})
    prediction, *images = page
    rows = [line for line in prediction.splitlines() if line.startswith("| ") and "`_`" in line]
    assert len(rows) == 6, f"a row per answer word (the six blanks): {prediction}"
    for row, digit in zip(rows, reversed(digits)):
        assert row.rstrip(" |").endswith(digit), f"the true label of its blank: {row}"
    assert "True answer: **" + truth + "** (a drawn input of length 6)" in prediction
    carry, answer = app.draw_sample("ndr-addition", 9, sample_seed=2)
    first = "".join(word[0] for word in carry.split()[1:])
    second = "".join(word[1] for word in carry.split()[1:])
    assert answer.replace(" ", "") == str(int(first) + int(second)).zfill(10), (carry, answer)
    assert len(images) == 3 and all(image.size[0] > 100 for image in images)


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("ndr-copy", "3 1 4 =", "no word of '3 1 4 =' holds an answer; a copy row is the input, `=`, one blank"),
        ("ndr-copy", "3 1 4 = _ _", "not a copy row: it does not hold as many words after `=` as before it"),
    ],
)
def test_an_input_without_an_answer_or_that_a_coupled_model_cannot_read_gets_its_message_on_the_page(
    space, name, text, message
):
    import gradio as gr

    app, _ = space
    for call in (lambda: app.classify(name, text), lambda: app.explore(name, text, 1, 0, None)):
        with pytest.raises(gr.Error, match=re.escape(message)):
            call()


def test_a_carry_model_answers_at_every_word_whatever_they_are(space):
    app, _ = space
    answer, probability, _ = app.classify("ndr-addition", "00 56 = 78")
    assert len(answer.split()) == 4 and 0 < probability <= 1, "every word, `=` ([UNK] to this model) included"
