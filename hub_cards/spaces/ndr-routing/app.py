"""The routing explorer: how a released Neural Data Router routes information, step by step (a Gradio Space).

    python hub_cards/spaces/ndr-routing/app.py      # from a checkout (make space): http://127.0.0.1:7860

Pick a released model and type an input or draw a random one at a chosen depth (a token model's: length); the page
shows the prediction (and the true answer of a drawn input; a token model's answer position by position), the copy
gate of every column at every step and the attention of every step (`modeling_ndr.plotting.plot_routing`), with the
fixed step count and with adaptive steps side by side, and the attention of one chosen step and head. `/classify`
(model name, text) -> (label, probability, steps) is the API; a token model's label is its answer, the labels of the
answer's words joined by spaces, and the probability that of its least sure word.

Run from the checkout it loads the folders in `hub_cards/models/`; elsewhere (on the Hub) the repositories
`$NDR_ORG/<name>` (default `ndr-org`).
"""

import contextlib
import functools
import io
import json
import os
import random
from pathlib import Path


os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
import matplotlib  # noqa: E402


matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

import modeling_ndr  # noqa: E402, F401  (registers NDR with the Auto classes)
from modeling_ndr.plotting import plot_routing  # noqa: E402
from modeling_ndr.tables import markdown_table  # noqa: E402
from modeling_ndr.tasks import ctl_compositions, task_label_names  # noqa: E402
from modeling_ndr.tasks.arithmetic import arithmetic_stream  # noqa: E402
from modeling_ndr.tasks.listops import listops_stream  # noqa: E402
from modeling_ndr.tasks.token_tasks import EQUALS, TOKEN_TASK_NAMES, draw_row  # noqa: E402


MODELS = ("ndr-ctl-forward", "ndr-ctl-backward", "ndr-arithmetic", "ndr-listops", "ndr-addition", "ndr-copy",
          "ndr-reverse")  # fmt: skip
CHECKOUT_MODELS = Path(__file__).resolve().parents[2] / "models"  # hub_cards/models/ in a checkout
ORG = os.environ.get("NDR_ORG", "ndr-org")
# CTL composes freely; arithmetic and ListOps fit 50 tokens to depth 8; a token task's "depth" is its length, kept to
# about 40 tokens so that the maps stay readable (the carry task: a token per position; copy, reverse: 2n + 1)
MAX_DEPTH = {"ctl": 14, "arithmetic": 8, "listops": 8, "carry": 40, "copy": 20, "reverse": 20, "addition": 12}
DEFAULT_DEPTH = 4


def model_source(name: str) -> str:
    """The checkout's folder of a released model if there is one, else its Hub id."""
    folder = CHECKOUT_MODELS / name
    return str(folder) if (folder / "config.json").is_file() else f"{ORG}/{name}"


def read_run_config(source: str) -> dict:
    if os.path.isdir(source):
        return json.loads((Path(source) / "run_config.json").read_text())
    from huggingface_hub import hf_hub_download

    return json.loads(Path(hf_hub_download(source, "run_config.json")).read_text())


@functools.lru_cache(maxsize=len(MODELS))
def load(name: str):
    """(model, tokenizer, task) of a released model; `task` is its run's task settings (task, direction, seed)."""
    if name not in MODELS:
        raise gr.Error(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    source = model_source(name)
    config = AutoConfig.from_pretrained(source)
    per_token = "NDRForTokenClassification" in (config.architectures or [])
    auto_class = AutoModelForTokenClassification if per_token else AutoModelForSequenceClassification
    model = auto_class.from_pretrained(source, config=config).eval()
    # the explorer shows what the model does with any text: a word it never saw reads as [UNK], with a warning on the
    # page (`page`), where the tokenizer alone would refuse the text
    tokenizer = AutoTokenizer.from_pretrained(source, unknown_words="unk")
    return model, tokenizer, read_run_config(source)["task"]


def draw_sample(name: str, depth: int, sample_seed: int) -> tuple[str, str]:
    """A random input of `depth` for the model's task, and its true answer (drawn as `modeling_ndr.load_task` does; a
    token task's row of length `depth` as its test splits draw them, and the labels of its answer's words)."""
    _, _, task = load(name)
    depth = int(depth)
    if task["task"] in TOKEN_TASK_NAMES:
        words, labels = draw_row(task["task"], random.Random(sample_seed), "test", depth)
        return " ".join(words), " ".join(label for label in labels if label is not None)
    labels = task_label_names(task["task"])
    if task["task"] == "ctl":
        seed, direction = task["task_seed"], task["direction"]
        row = ctl_compositions([depth], 1, seed=seed, direction=direction, sample_seed=sample_seed)[0]
        return row["text"], labels[row["label"]]
    rng = random.Random(sample_seed)
    if task["task"] == "arithmetic":
        stream = arithmetic_stream(rng, depth, 0.2 if depth <= 5 else 0.3)  # the splits' sub-operation probabilities
    else:
        stream = listops_stream(rng, depth, max(depth, 5), 0.3)
    for _ in range(200_000):
        draw = next(stream)
        if draw is not None:
            return draw[0], labels[draw[1]]
    raise gr.Error(f"no {task['task']} input of depth {depth} within 50 tokens was found; try a smaller depth")


def is_per_token(model) -> bool:
    return isinstance(model, modeling_ndr.NDRForTokenClassification)


def answer_words(task: str, words: list[str]) -> list[int]:
    """The words a token model's answer is read at: every word (the carry task), else the blanks after `=` (copy,
    reverse, addition). Raises `gr.Error` where there are none."""
    if task == "carry":
        answer = list(range(len(words)))
    else:
        answer = list(range(words.index(EQUALS) + 1, len(words))) if EQUALS in words else []
    if not answer:
        shape = "digit pairs (`00 56 78`)" if task == "carry" else "the input, `=`, one blank `_` per answer symbol"
        raise gr.Error(f"no word of {' '.join(words)!r} holds an answer; a {task} row is {shape}")
    return answer


@contextlib.contextmanager
def shown_errors():
    """A model's `ValueError` (a row a coupled model cannot read, ...) as a `gr.Error`: the page shows its message."""
    try:
        yield
    except gr.Error:  # (a ValueError itself)
        raise
    except ValueError as error:
        raise gr.Error(str(error)) from None


@torch.no_grad()
def word_predictions(model, tokenizer, text: str, adaptive: bool | None) -> tuple[list[str], list[float], int]:
    """(label, probability) of every word of `text` and the steps run, for a token model (the word-level tokenizer
    gives each word one token; [BOS] and [EOS] are left out); `adaptive=None` runs the model as its config says."""
    inputs = tokenizer([text], return_tensors="pt")
    outputs = model(**inputs, adaptive_steps=adaptive)
    probabilities = outputs.logits[0].float().softmax(-1)
    labels, scores = [], []
    for index, word in enumerate(inputs.word_ids(0)):
        if word is not None:
            label = int(probabilities[index].argmax())
            labels.append(model.config.id2label[label])
            scores.append(float(probabilities[index, label]))
    return labels, scores, steps_run(model, outputs)


def steps_run(model, outputs) -> int:
    if outputs.num_steps_taken is not None:
        return int(outputs.num_steps_taken[0])
    return model.config.eval_num_hidden_layers or model.config.num_hidden_layers


def token_answer(answer: list[int], predictions: tuple[list[str], list[float], int]) -> tuple[str, float, int]:
    """A token model's (label, probability, steps) from its `word_predictions`: the labels of the `answer` words
    joined by spaces, and the lowest of their probabilities."""
    labels, scores, steps = predictions
    return " ".join(labels[i] for i in answer), min(scores[i] for i in answer), steps


@torch.no_grad()
def predict(model, tokenizer, text: str, adaptive: bool | None, task: str) -> tuple[str, float, int]:
    """(label, probability, steps run) for one text; `adaptive=None` runs the model as its config says. A token
    model's label is its answer (the labels of `answer_words`, joined by spaces), its probability their lowest."""
    if is_per_token(model):
        answer = answer_words(task, text.split())
        return token_answer(answer, word_predictions(model, tokenizer, text, adaptive))
    inputs = tokenizer([text], return_tensors="pt")
    outputs = model(**inputs, adaptive_steps=adaptive)
    probabilities = outputs.logits[0].softmax(-1)
    label = int(probabilities.argmax())
    return model.config.id2label[label], float(probabilities[label]), steps_run(model, outputs)


def classify(model_name: str, text: str) -> tuple[str, float, int]:
    """Classify `text` with a released model, as loaded (`pipeline("text-classification")` gives the same label; for a
    token model, `pipeline("token-classification")` the same label at each word of the answer).

    Returns the predicted label (a token model: its answer), its probability (a token model: that of the least sure
    word of the answer) and the number of steps the model ran."""
    model, tokenizer, task = load(model_name)
    with shown_errors():
        return predict(model, tokenizer, text.strip(), adaptive=None, task=task["task"])


def to_image(figure) -> Image.Image:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    plt.close(figure)
    buffer.seek(0)
    return Image.open(buffer).convert("RGB")


def attention_figure(model, tokenizer, text: str, step: int, head: int):
    """The attention matrix of one step and head (rows: queries, columns: keys), fixed steps."""
    inputs = tokenizer([text], return_tensors="pt")
    steps = max(step, model.config.eval_num_hidden_layers or model.config.num_hidden_layers)
    with torch.no_grad():
        attentions = model(**inputs, num_steps=steps, adaptive_steps=False, output_attentions=True).attentions
    weights = attentions[step - 1][0, head].float().numpy()  # (seq, seq)
    tokens = tokenizer.convert_ids_to_tokens(inputs["input_ids"][0])
    figure, axis = plt.subplots(figsize=(1.2 + 0.45 * len(tokens), 1.0 + 0.45 * len(tokens)), constrained_layout=True)
    image = axis.imshow(weights, vmin=0, vmax=1, cmap="Blues")
    axis.set_xticks(range(len(tokens)), tokens, rotation=90)
    axis.set_yticks(range(len(tokens)), tokens)
    axis.set_xlabel("key")
    axis.set_ylabel("query")
    axis.set_title(f"step {step}, head {head}")
    figure.colorbar(image, ax=axis)
    return figure


def explore(name: str, text: str, step: int, head: int, drawn: dict | None):
    """Everything the page shows for one input: the predictions (and the true answer of a drawn input), the routing
    maps with fixed and with adaptive steps, and the attention of the chosen step and head."""
    model, tokenizer, task = load(name)
    text = " ".join(text.split())
    if not text:
        raise gr.Error("type an input, or draw one")
    with shown_errors():
        return page(name, model, tokenizer, task["task"], text, int(step), int(head), drawn)


def page(name: str, model, tokenizer, task: str, text: str, step: int, head: int, drawn: dict | None):
    config = model.config
    unknown = sorted({word for word in text.split() if word not in tokenizer.get_vocab()})
    if unknown:
        gr.Warning(f"{name} does not know {unknown}: they read as [UNK]")
    fixed_steps = config.eval_num_hidden_layers or config.num_hidden_layers
    head = min(head, config.num_attention_heads - 1)
    if is_per_token(model):  # one pass each with fixed and adaptive steps, for the answer and its table
        answer = answer_words(task, text.split())
        fixed_words = word_predictions(model, tokenizer, text, adaptive=False)
        adaptive_words = word_predictions(model, tokenizer, text, adaptive=True)
        label, probability, _ = token_answer(answer, fixed_words)
        adaptive_label, adaptive_probability, adaptive_steps = token_answer(answer, adaptive_words)
    else:
        label, probability, _ = predict(model, tokenizer, text, adaptive=False, task=task)
        adaptive_label, adaptive_probability, adaptive_steps = predict(
            model, tokenizer, text, adaptive=True, task=task
        )
    loaded = "adaptive" if config.adaptive_steps else "fixed"
    steps = [
        ["fixed steps", f"**{label}**", f"{probability:.3f}", fixed_steps],
        ["adaptive steps", f"**{adaptive_label}**", f"{adaptive_probability:.3f}", adaptive_steps],
    ]
    lines = [
        f"**{name}** on `{text}` ({len(text.split())} tokens); as loaded, the model runs **{loaded}** steps.",
        "",
        markdown_table(steps, ["", "prediction", "probability", "steps"]),
    ]
    truth = drawn["label"] if drawn and drawn.get("text") == text else None
    if truth is not None:
        kind = "length" if is_per_token(model) else "depth"
        lines += ["", f"True answer: **{truth}** (a drawn input of {kind} {drawn['depth']})."]
    if is_per_token(model):
        lines += ["", position_table(text.split(), answer, fixed_words, adaptive_words, truth)]
    fixed = to_image(plot_routing(model, tokenizer, text, head=head, adaptive=False))
    adaptive = to_image(plot_routing(model, tokenizer, text, head=head, adaptive=True))
    attention = to_image(attention_figure(model, tokenizer, text, step, head))
    return "\n".join(lines), fixed, adaptive, attention


def position_table(
    words: list[str], answer: list[int], fixed_words: tuple, adaptive_words: tuple, truth: str | None
) -> str:
    """A token model's answer word by word: its label and probability with fixed and with adaptive steps (its
    `word_predictions`), and the true label of a drawn input."""
    (fixed, fixed_scores, _), (adaptive, adaptive_scores, _) = fixed_words, adaptive_words
    true = truth.split() if truth is not None and len(truth.split()) == len(answer) else None
    rows = []
    for number, index in enumerate(answer):
        row = [index + 1, f"`{words[index]}`", f"{fixed[index]} ({fixed_scores[index]:.2f})",
               f"{adaptive[index]} ({adaptive_scores[index]:.2f})"]  # fmt: skip
        if true is not None:
            mark = "" if fixed[index] == true[number] else " ✗"
            row.append(true[number] + mark)
        rows.append(row)
    header = ["word", "input", "fixed steps", "adaptive steps", *(["true (✗: fixed steps wrong)"] if true else [])]
    return markdown_table(rows, header)


def choose_model(name: str, depth: int):
    """A new model: its depth range and heads, and a drawn input of the chosen depth."""
    model, _, task = load(name)
    depth = min(int(depth), MAX_DEPTH[task["task"]])
    text, label = draw_sample(name, depth, sample_seed=0)
    heads = model.config.num_attention_heads
    return (
        gr.update(maximum=MAX_DEPTH[task["task"]], value=depth),
        gr.update(choices=list(range(heads)), value=0),
        text,
        {"text": text, "label": label, "depth": depth},
    )


def draw(name: str, depth: int):
    text, label = draw_sample(name, depth, sample_seed=random.randrange(2**31))
    return text, {"text": text, "label": label, "depth": int(depth)}


INTRODUCTION = """\
# NDR routing explorer

The [Neural Data Router](https://arxiv.org/abs/2110.07732) applies one Transformer layer step after step. Each
column's **copy gate** decides whether it takes its update (1) or keeps its state (0), and **geometric attention**
lets it read the closest matching column. Pick a model, type an input or draw one at a depth, and watch the
information flow: on CTL, each function's column opens its gate one step after the column it reads.
"""


# The page opens on a drawn input of the first model, computed here, so it shows the maps without waiting for an event
FIRST_DEPTH, FIRST_HEADS, FIRST_TEXT, FIRST_DRAWN = choose_model(MODELS[0], DEFAULT_DEPTH)
FIRST_STEP = 3
FIRST_OUTPUTS = explore(MODELS[0], FIRST_TEXT, FIRST_STEP, 0, FIRST_DRAWN)

with gr.Blocks(title="NDR routing explorer") as demo:
    gr.Markdown(INTRODUCTION)
    drawn = gr.State(FIRST_DRAWN)
    with gr.Row():
        model_name = gr.Dropdown(list(MODELS), value=MODELS[0], label="Released model", scale=2)
        depth = gr.Slider(1, MAX_DEPTH["ctl"], value=DEFAULT_DEPTH, step=1, scale=2,
                          label="Depth of a drawn input (a token model's: its length)")  # fmt: skip
        draw_button = gr.Button("Draw a random input", scale=1)
    with gr.Row():
        text = gr.Textbox(FIRST_TEXT, label="Input (tokens separated by spaces)", scale=4)
        run_button = gr.Button("Run", variant="primary", scale=1)
    with gr.Row():
        step = gr.Slider(1, 28, value=FIRST_STEP, step=1, label="Attention of step")
        head = gr.Dropdown(FIRST_HEADS["choices"], value=0, label="Head")
    prediction = gr.Markdown(FIRST_OUTPUTS[0])
    with gr.Row():
        fixed_image = gr.Image(FIRST_OUTPUTS[1], label="Fixed steps: copy gates (top), attention per step", type="pil")
        adaptive_image = gr.Image(FIRST_OUTPUTS[2], label="Adaptive steps: the red line is where it stops", type="pil")
    attention_image = gr.Image(FIRST_OUTPUTS[3], label="Attention of the chosen step and head", type="pil")

    inputs = [model_name, text, step, head, drawn]
    outputs = [prediction, fixed_image, adaptive_image, attention_image]
    # the public endpoints first: a later event of the same function would otherwise take its name
    run_button.click(explore, inputs, outputs, api_name="explore")
    gr.api(classify, api_name="classify")
    model_name.input(choose_model, [model_name, depth], [depth, head, text, drawn], api_visibility="private").then(
        explore, inputs, outputs, api_visibility="private"
    )
    draw_button.click(draw, [model_name, depth], [text, drawn], api_visibility="private").then(
        explore, inputs, outputs, api_visibility="private"
    )
    text.submit(explore, inputs, outputs, api_visibility="private")
    step.release(explore, inputs, outputs, api_visibility="private")
    head.input(explore, inputs, outputs, api_visibility="private")


if __name__ == "__main__":
    demo.launch()
