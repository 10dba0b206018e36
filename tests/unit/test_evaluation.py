"""The one evaluation path (`modeling_ndr.training.evaluation.predict`) and the one table writer
(`modeling_ndr.tables.markdown_table`) that every script which predicts or prints a table goes through."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import datasets
from modeling_ndr import NDRConfig, NDRForSequenceClassification, load_task
from modeling_ndr.tables import markdown_table
from modeling_ndr.training.evaluation import padded_batches, predict


REPO = Path(__file__).resolve().parents[2]


def test_a_table_has_a_header_a_rule_and_one_line_per_row():
    table = markdown_table([["ood_test", "0.983"], ["deeper", 1]], ["split", "accuracy"])
    assert table == "| split | accuracy |\n|---|---|\n| ood_test | 0.983 |\n| deeper | 1 |", table


def test_mapping_rows_give_their_columns_in_order_of_first_appearance_and_empty_missing_cells():
    table = markdown_table([{"a": 1, "b": "x"}, {"a": 2, "c": None}])
    assert table.splitlines() == ["| a | b | c |", "|---|---|---|", "| 1 | x |  |", "| 2 |  | None |"], (
        "a cell a row lacks is empty; a None the row holds is written as it is (the caller formats values)"
    )


# ------------------------------------------------------------------------------------------- the evaluation path

MODEL = REPO / "hub_cards" / "models" / "ndr-ctl-forward"


@pytest.fixture(scope="module")
def released():
    """The released CTL model (adaptive steps as loaded) and texts of very different lengths: 2 to 10 functions."""
    model = AutoModelForSequenceClassification.from_pretrained(MODEL).eval()
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    data = load_task("ctl", seed=0, n_train=72, n_eval=12)
    return model, tokenizer, list(data["iid_test"]["text"]) + list(data["ood_test"]["text"])


@pytest.mark.parametrize("adaptive_steps", [True, False])
def test_predictions_in_padded_batches_are_those_of_each_text_alone(released, adaptive_steps):
    model, tokenizer, texts = released
    predicted = predict(model, tokenizer, texts, batch_size=5, adaptive_steps=adaptive_steps)
    fixed = model.config.eval_num_hidden_layers or model.config.num_hidden_layers
    for index, text in enumerate(texts):
        with torch.no_grad():
            alone = model(**tokenizer([text], return_tensors="pt"), adaptive_steps=adaptive_steps)
        assert predicted.label_ids[index] == alone.logits.argmax(-1).item(), f"{text!r}: padding changed the answer"
        steps = alone.num_steps_taken.item() if adaptive_steps else fixed
        assert predicted.steps[index] == steps, f"{text!r}: ran {steps} steps alone"
    assert predicted.model_chose_steps == adaptive_steps and predicted.readout_steps is None
    if adaptive_steps:
        assert len(set(predicted.steps.tolist())) > 1, "the texts stop at different steps: the test can tell"


def test_encoded_rows_give_what_their_texts_give(released):
    model, tokenizer, texts = released
    rows = datasets.Dataset.from_dict({"text": texts, "labels": [0] * len(texts)})
    rows = rows.map(lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"])
    from_rows, from_texts = predict(model, tokenizer, rows, batch_size=7), predict(model, tokenizer, texts)
    assert from_rows.label_ids.tolist() == from_texts.label_ids.tolist()
    assert from_rows.steps.tolist() == from_texts.steps.tolist(), "columns other than the model's inputs are left out"


def test_a_threshold_for_one_call_is_used_and_the_config_keeps_its_own(released):
    model, tokenizer, texts = released
    kept = model.config.adaptive_threshold
    eager = predict(model, tokenizer, texts, adaptive_steps=True, adaptive_threshold=0.3)
    patient = predict(model, tokenizer, texts, adaptive_steps=True, adaptive_threshold=0.01)
    assert eager.steps.mean() < patient.steps.mean(), "a larger threshold stops earlier"
    assert model.config.adaptive_threshold == kept, "the config's threshold is restored"


def test_act_steps_are_the_mean_halting_step_of_the_real_columns_and_that_of_the_readout_column(released):
    _, tokenizer, texts = released
    torch.manual_seed(0)
    config = NDRConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_attention_heads=2,
                       num_hidden_layers=6, halting="act", num_labels=8, readout="last")  # fmt: skip
    model = NDRForSequenceClassification(config).eval()
    with torch.no_grad():
        model.ndr.halting.proj.bias.fill_(-1.5)  # columns halt after different numbers of steps
    predicted = predict(model, tokenizer, texts, batch_size=4)
    assert predicted.model_chose_steps
    for index, text in enumerate(texts):
        with torch.no_grad():
            halting = model(**tokenizer([text], return_tensors="pt")).halting_steps[0].float()  # (n,)
        assert predicted.steps[index] == pytest.approx(halting.mean().item()), text
        assert predicted.readout_steps[index] == halting[-1].item(), f"{text}: the [EOS] column's halting step"
    assert len(set(predicted.steps.tolist())) > 1, "the samples' means differ: the test can tell"


def test_padding_batches_leaves_the_tokenizer_saving_without_padding(released, tmp_path):
    _, tokenizer, texts = released
    assert [len(batch["input_ids"]) for batch in padded_batches(tokenizer, texts, 10)] == [10, 10, 4]
    tokenizer.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "tokenizer.json").read_text())["padding"] is None, (
        "an exported tokenizer must not pad single texts"
    )
