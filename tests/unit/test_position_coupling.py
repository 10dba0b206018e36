"""Position coupling for the token tasks (`--position_coupling`): the positions each row's words get, the model's
`position_ids` (read by `position_encoding="absolute"` only, refused elsewhere with the field named), the encoded
column with its training offsets, its padding in a batch, and a run of `train.py` that hands the ids to the model."""

import functools
import json
import os
import subprocess
import sys

import pytest
import torch
from scripts import load_script
from test_token_classification import REMOTE_CODE
from tiny import encoder_or_head_output, left_padded_batch, random_ids, tiny_config
from transformers import AutoTokenizer, pipeline

import datasets
import modeling_ndr
from modeling_ndr import NDRForSequenceClassification, NDRForTokenClassification, NDRModel
from modeling_ndr.position_coupling import BLANK, COUPLING_WORDS, coupled_position_ids
from modeling_ndr.tasks import coupled_positions, load_token_task, token_task_label_names, token_task_tokenizer
from modeling_ndr.tasks.token_tasks import addition_row, string_row
from modeling_ndr.training import UsageError
from ndr_training.token_labels import DataCollatorForTokenClassificationWithPositions, encode_token_task


# ---------------------------------------------------------------------------------------------------------------
# The positions of a row's words
# ---------------------------------------------------------------------------------------------------------------


def test_copy_and_reverse_give_a_symbol_and_the_blank_that_answers_it_one_position():
    for task in ("copy", "reverse"):
        words, labels = string_row(task, list("3141"))
        positions = coupled_positions(task, words)
        assert len(positions) == len(words), "one position per word"
        assert positions[4] == 5, "`=` one past the symbols"
        for blank in range(5, 9):  # each blank shares its position with the symbol it answers, and only with it
            partners = [i for i in range(4) if positions[i] == positions[blank]]
            assert len(partners) == 1 and words[partners[0]] == labels[blank], f"{task}: blank {blank}"
    assert coupled_positions("reverse", string_row("reverse", list("314"))[0]) == [1, 2, 3, 4, 3, 2, 1]


def test_addition_gives_the_digits_of_one_place_value_one_position():
    words, labels = addition_row("5", "168")  # 5 + 168 = 0173
    positions = coupled_positions("addition", words)
    assert positions == [1, 5, 3, 2, 1, 5, 4, 3, 2, 1], "units 1, tens 2, ...; `+` and `=` one past the highest"
    places = {position: [w for w, p in zip(words, positions) if p == position] for position in (1, 2, 3)}
    assert places == {1: ["5", "8", "_"], 2: ["6", "_"], 3: ["1", "_"]}, "each place's digits and its answer blank"


@pytest.mark.parametrize(
    ("task", "words", "message"),
    [
        ("carry", ["00", "56"], "defined for copy, reverse, addition, not 'carry'"),
        ("copy", ["3", "1", "=", "_"], "not a copy row"),
        ("reverse", ["3", "=", "3"], "not a reverse row"),
        ("addition", ["5", "=", "7", "+", "_"], "not an addition row"),
        ("addition", ["5", "+", "x", "=", "_", "_"], "not an addition row"),
        ("copy", ["=", "1", "=", "_", "_"], "not a copy row"),
    ],
)
def test_a_row_the_coupling_cannot_read_is_one_error_naming_it(task, words, message):
    with pytest.raises(ValueError, match=message):
        coupled_positions(task, words)


# ---------------------------------------------------------------------------------------------------------------
# The model's position_ids
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_class", [NDRModel, NDRForSequenceClassification, NDRForTokenClassification])
def test_position_ids_move_the_absolute_encodings_and_default_to_the_token_index(model_class):
    torch.manual_seed(0)
    model = model_class(tiny_config(position_encoding="absolute")).eval()
    ids, mask, counted = left_padded_batch()  # left padding: the default counts the real tokens only
    output = functools.partial(encoder_or_head_output, model, ids, mask)
    torch.testing.assert_close(output(), output(position_ids=counted)), "the default is each real token's index"
    shared = torch.tensor([[0, 1, 2, 3, 1, 2, 4]] * 2)
    assert not torch.allclose(output(), output(position_ids=shared)), "other positions, other outputs"


def test_position_ids_are_refused_by_a_model_without_absolute_positions_and_their_shape_checked():
    ids = random_ids(2, 5, seed=2)
    positions = torch.arange(5).expand(2, 5)
    for encoding in ("direction", "relative", "gated", "none"):
        model = NDRForTokenClassification(tiny_config(position_encoding=encoding)).eval()
        with pytest.raises(ValueError, match=f"position_encoding='{encoding}' and relative_key_window=0, which read"):
            model(ids, position_ids=positions)
    model = NDRForTokenClassification(tiny_config(position_encoding="absolute")).eval()
    with pytest.raises(ValueError, match=r"position_ids must have shape \(batch, seq\) = \(2, 5\)"):
        model(ids, position_ids=positions[:, :4])
    with pytest.raises(ValueError, match="position_ids must be integers"):
        model(ids, position_ids=positions.float())
    one_row = model(ids, position_ids=torch.tensor([[0, 1, 1, 2, 3]])).logits
    (
        torch.testing.assert_close(one_row, model(ids, position_ids=torch.tensor([[0, 1, 1, 2, 3]] * 2)).logits),
        ("one row of positions (1, seq) serves the whole batch"),
    )


# ---------------------------------------------------------------------------------------------------------------
# NDRConfig.position_coupling: the model computes the ids from input_ids (the pipeline and a release give none)
# ---------------------------------------------------------------------------------------------------------------


def coupling_words(task: str, blank: bool = False) -> dict:
    tokenizer = token_task_tokenizer(task)
    return {word: tokenizer.convert_tokens_to_ids(word) for word in (*COUPLING_WORDS[task], *[BLANK] * blank)}


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("task", ["copy", "reverse", "addition"])
def test_the_model_s_rule_gives_every_row_the_positions_the_words_get(tmp_path, task, side):
    rows = load_token_task(task, seed=3, n_train=40, n_eval=2, cache_dir=str(tmp_path))
    texts = list(rows["train"]["text"][:12]) + list(rows[list(rows)[2]]["text"])  # short rows beside longer ones
    tokenizer = token_task_tokenizer(task)
    tokenizer.padding_side = side
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    ids = coupled_position_ids(encoded["input_ids"], encoded["attention_mask"], task, coupling_words(task))
    label2id = {name: i for i, name in enumerate(token_task_label_names(task))}
    column = encode_token_task(datasets.DatasetDict({"rows": datasets.Dataset.from_dict({
        "text": texts, "label": [[None] * len(text.split()) for text in texts]})}), tokenizer, label2id, task
    )["rows"]["position_ids"]  # what training gives the model (train.py --position_coupling)  # fmt: skip
    for row, text in enumerate(texts):
        real = encoded["attention_mask"][row].bool()
        assert ids[row][real].tolist() == column[row], f"{task}, {side} padding: {text}"
        assert not ids[row][~real].any(), "0 at the padding"
    alone = coupled_position_ids(encoded["input_ids"][:1][:, encoded["attention_mask"][0].bool()], None, task,
                                 coupling_words(task))  # fmt: skip
    assert alone.tolist()[0] == ids[0][encoded["attention_mask"][0].bool()].tolist(), "no mask: no padding"


def coupled_copy_model(**overrides) -> NDRForTokenClassification:  # the blank's id too, as train.py writes it
    tokenizer = token_task_tokenizer("copy")
    labels = token_task_label_names("copy")
    torch.manual_seed(0)
    fields = dict(vocab_size=len(tokenizer), num_labels=len(labels), id2label=dict(enumerate(labels)),
                  label2id={name: i for i, name in enumerate(labels)}, relative_key_window=1, position_coupling="copy",
                  position_coupling_token_ids=coupling_words("copy", blank=True))  # fmt: skip
    config = tiny_config(**{**fields, **overrides})
    return NDRForTokenClassification(config).eval()


@pytest.mark.parametrize("overrides", [{}, {"halting": "act"}, {"adaptive_steps": True}, {"relative_key_window": 0,
                                       "position_encoding": "absolute"}])  # fmt: skip
def test_a_coupled_model_given_no_ids_answers_as_given_the_coupled_ids(overrides):
    model = coupled_copy_model(**overrides)
    tokenizer = token_task_tokenizer("copy")
    tokenizer.padding_side = "left"
    encoded = tokenizer(["3 1 4 1 = _ _ _ _", "2 7 = _ _"], padding=True, return_tensors="pt")
    ids = coupled_position_ids(encoded["input_ids"], encoded["attention_mask"], "copy", coupling_words("copy"))
    with torch.no_grad():
        computed, given = model(**encoded).logits, model(**encoded, position_ids=ids).logits
        model.config.position_coupling = None
        plain = model(**encoded).logits
    torch.testing.assert_close(computed, given, msg="the computed ids are the coupled ones")
    assert not torch.allclose(computed, plain), "and not the token indices"


def test_a_coupled_model_names_a_row_it_cannot_read_and_needs_input_ids():
    model = coupled_copy_model()
    tokenizer = token_task_tokenizer("copy")
    for text, problem in (
        ("3 1 = _", "as many words after `=` as before"),
        ("3 1 _ _", "holds 0 `=`"),
        ("3 1 4 = _ 1 _", "a word after `=` is not the blank"),
        ("3 _ 4 = _ _ _", "the blank"),
    ):
        message = f"position_coupling='copy' .* row 0 is not a copy row: (it )?(does not hold )?{problem}"
        with pytest.raises(ValueError, match=message):
            model(**tokenizer(text, return_tensors="pt"))
    with pytest.raises(ValueError, match="does not start with \\[BOS\\]"):
        model(torch.tensor([[5, 14, 6, 15, 3]]))
    with pytest.raises(ValueError, match="with inputs_embeds, give position_ids as well"):
        model(inputs_embeds=torch.zeros(1, 5, 16))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"position_coupling": "carry"}, "NDRConfig.position_coupling='carry' is invalid: expected one of"),
        ({"position_coupling": "copy", "position_coupling_token_ids": {"=": 5}}, "would not read them"),
        (
            {"position_coupling": "addition", "relative_key_window": 1, "position_coupling_token_ids": {"=": 5}},
            "give {'=': id} \\(addition: also '\\+'\\)",
        ),
        ({"position_coupling_token_ids": {"=": "5"}}, "position_coupling_token_ids=.* expected None or a dict"),
    ],
)
def test_a_coupling_the_config_cannot_use_names_its_fields(fields, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**fields)


def test_the_pipeline_and_remote_code_answer_a_coupled_export_with_the_coupled_ids(tmp_path):
    model, tokenizer = coupled_copy_model(), token_task_tokenizer("copy")
    model.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    text = "3 1 4 1 5 = _ _ _ _ _"
    encoded = tokenizer(text, return_tensors="pt")
    ids = coupled_position_ids(encoded["input_ids"], None, "copy", coupling_words("copy"))
    with torch.no_grad():
        expected = model(**encoded, position_ids=ids).logits
    tag = pipeline("token-classification", model=str(tmp_path / "saved"), ignore_labels=[])
    answers = [entry["entity"] for entry in tag(text)]
    assert answers == [model.config.id2label[i] for i in expected[0, 1:-1].argmax(-1).tolist()]
    torch.save(encoded["input_ids"], tmp_path / "ids.pt")
    (tmp_path / "load.py").write_text(REMOTE_CODE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "load.py", str(tmp_path / "saved"), str(tmp_path / "ids.pt")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "saved" / "position_coupling.py").is_file(), "the rule's module ships with the code"
    torch.testing.assert_close(torch.tensor(eval(result.stdout.strip().splitlines()[-1].split(" ", 1)[1])), expected)


def test_a_row_the_pipeline_cuts_at_model_max_length_names_the_limit_and_a_larger_one_answers(tmp_path):
    """pipeline() truncates a text longer than its tokenizer's model_max_length, which leaves a copy row with fewer
    blanks than symbols: the error says so; a tokenizer loaded with a larger limit answers every blank."""
    model, tokenizer = coupled_copy_model(), token_task_tokenizer("copy")
    tokenizer.model_max_length = 13  # [BOS], 5 symbols, `=`, 5 blanks, [EOS]: rows of up to 5 symbols
    model.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    text = "3 1 4 1 5 9 2 = _ _ _ _ _ _ _"
    with pytest.raises(ValueError, match=r"not a copy row: .*model_max_length.*model_max_length=N"):
        pipeline("token-classification", model=str(tmp_path / "saved"), ignore_labels=[])(text)
    longer = AutoTokenizer.from_pretrained(tmp_path / "saved", model_max_length=64)
    tag = pipeline("token-classification", model=str(tmp_path / "saved"), tokenizer=longer, ignore_labels=[])
    assert len(tag(text)) == 15, "every word of the 7-symbol row answered"


# ---------------------------------------------------------------------------------------------------------------
# The encoded column, its offsets and its padding
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def copy_rows(tmp_path_factory):
    return load_token_task("copy", seed=0, n_train=200, n_eval=4, cache_dir=str(tmp_path_factory.mktemp("cache")))


def encoded(rows, offset: int, seed: int = 0):
    label2id = {name: i for i, name in enumerate(token_task_label_names("copy"))}
    return encode_token_task(
        rows, token_task_tokenizer("copy"), label2id, position_coupling="copy", max_position_offset=offset, seed=seed
    )


def test_encoded_rows_get_the_coupled_positions_between_bos_and_eos(copy_rows):
    data = encoded(copy_rows, offset=0)
    for split in ("train", "test_40"):
        for text, row in zip(copy_rows[split]["text"][:4], data[split].select(range(4))):
            words = coupled_positions("copy", text.split())
            assert row["position_ids"] == [0, *words, max(words) + 1], f"{split}: [BOS] 0, the words, [EOS] after"
            assert len(row["position_ids"]) == len(row["input_ids"]), "one position per token"


def test_training_rows_are_shifted_by_a_seeded_offset_and_evaluation_rows_are_not(copy_rows):
    plain, shifted, again, other = (encoded(copy_rows, offset, seed) for offset, seed in
                                    ((0, 0), (300, 0), (300, 0), (300, 1)))  # fmt: skip
    offsets = [s[0] - p[0] for s, p in zip(shifted["train"]["position_ids"], plain["train"]["position_ids"])]
    assert all(
        [a - b for a, b in zip(s, p)] == [offset] * len(p)
        for s, p, offset in zip(shifted["train"]["position_ids"], plain["train"]["position_ids"], offsets)
    ), "a row's positions move together"
    assert min(offsets) >= 0 and max(offsets) <= 300 and len(set(offsets)) > 50, "offsets spread over [0, 300]"
    assert again["train"]["position_ids"] == shifted["train"]["position_ids"], "the same seed, the same offsets"
    assert other["train"]["position_ids"] != shifted["train"]["position_ids"], "another seed, other offsets"
    assert shifted["test_400"]["position_ids"] == plain["test_400"]["position_ids"], "evaluation rows unshifted"


@pytest.mark.parametrize("side", ["right", "left"])
def test_the_collator_pads_position_ids_on_the_tokenizer_s_side(copy_rows, side):
    data = encoded(copy_rows, offset=0)["test_40"].remove_columns("length")
    tokenizer = token_task_tokenizer("copy")
    tokenizer.padding_side = side
    features = [data[0], {key: value[:9] for key, value in data[1].items()}]  # a short row beside a long one
    batch = DataCollatorForTokenClassificationWithPositions(tokenizer)(features)
    short, width = batch["position_ids"][1], batch["input_ids"].shape[1]
    assert batch["position_ids"].shape == batch["input_ids"].shape
    real = short[:9] if side == "right" else short[width - 9 :]
    assert real.tolist() == data[1]["position_ids"][:9], "the row's own positions where its tokens are"
    assert (batch["attention_mask"][1] == (torch.arange(width) < 9 if side == "right" else
                                           torch.arange(width) >= width - 9)).all()  # fmt: skip
    plain = DataCollatorForTokenClassificationWithPositions(tokenizer)(
        [{k: v for k, v in f.items() if k != "position_ids"} for f in features]
    )
    assert "position_ids" not in plain, "without the column, the plain collator's batch"


# ---------------------------------------------------------------------------------------------------------------
# train.py
# ---------------------------------------------------------------------------------------------------------------


def train(argv: list[str]) -> dict:
    return load_script("training/train.py", "ndr_train_coupled").main(argv)


TINY_COPY = ["--task", "copy", "--n_train", "300", "--n_eval", "4", "--hidden_size", "32", "--intermediate_size",
             "64", "--num_hidden_layers", "3", "--per_device_train_batch_size", "16", "--max_steps", "3",
             "--eval_steps", "3", "--save_steps", "3", "--disable_tqdm", "true", "--report_to", "none"]  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--task", "carry", "--position_coupling"], "--position_coupling is defined for the tasks copy, reverse"),
        (["--task", "copy", "--max_position_offset", "40"], "--max_position_offset .* needs --position_coupling"),
        (["--task", "copy", "--position_coupling", "--max_position_offset", "-1"], "must be 0 or more, got -1"),
        (
            ["--task", "copy", "--position_coupling"],
            "this model has position_encoding=direction and relative_key_window=0",
        ),
    ],
)
def test_train_refuses_a_coupling_it_cannot_use_in_one_line(tmp_path, flags, message):
    with pytest.raises(UsageError, match=message):
        train([*TINY_COPY, *flags, "--output_dir", str(tmp_path / "run")])


@pytest.mark.parametrize("reader", ["position_encoding=absolute", "relative_key_window=1"])
def test_a_coupled_run_hands_the_positions_to_the_model_in_training_and_evaluation(tmp_path, monkeypatch, reader):
    seen = []
    forward = modeling_ndr.NDRForTokenClassification.forward

    @functools.wraps(forward)
    def recording(self, *args, position_ids=None, **kwargs):
        seen.append((self.training, None if position_ids is None else int(position_ids.max())))
        return forward(self, *args, position_ids=position_ids, **kwargs)

    monkeypatch.setattr(modeling_ndr.NDRForTokenClassification, "forward", recording)
    results = train([*TINY_COPY, "--config_overrides", reader, "--position_coupling",
                     "--max_position_offset", "500", "--output_dir", str(tmp_path / "run")])  # fmt: skip
    assert set(results) == {"test_40", "test_100", "test_200", "test_400", "valid_400"}, "evaluated at every length"
    training = [top for is_training, top in seen if is_training]
    evaluation = [top for is_training, top in seen if not is_training]
    assert training and all(top is not None for top in training), "every training batch carries position_ids"
    assert max(training) > 42, "training positions shifted past the 42 of a 40-symbol row"
    assert evaluation and all(top is not None for top in evaluation), "every evaluation batch carries them"
    assert max(evaluation) == 402, "test_400 unshifted: [BOS] 0, symbols 1-400, `=` 401, [EOS] 402"
    config = json.loads((tmp_path / "run" / "export" / "config.json").read_text())
    assert config["position_coupling"] == "copy", "the export computes the ids where the pipeline gives none"
    assert config["position_coupling_token_ids"] == coupling_words("copy", blank=True)


def test_a_coupled_model_fine_tuned_on_other_rows_trains_on_token_indices(tmp_path, caplog):
    train([*TINY_COPY, "--config_overrides", "relative_key_window=1", "--position_coupling",
           "--output_dir", str(tmp_path / "copy")])  # fmt: skip
    copy = json.loads((tmp_path / "copy" / "export" / "config.json").read_text())
    assert copy["position_coupling"] == "copy" and copy["position_coupling_token_ids"] == {"=": 14, "_": 15}
    tuned = [*TINY_COPY, "--model_name_or_path", str(tmp_path / "copy" / "export")]
    train([*tuned, "--output_dir", str(tmp_path / "same")])  # its own task: the model still computes the ids
    assert json.loads((tmp_path / "same" / "export" / "config.json").read_text())["position_coupling"] == "copy"
    with caplog.at_level("WARNING", logger="ndr.train"):
        train([*tuned[: tuned.index("copy")], "reverse", *tuned[tuned.index("copy") + 1 :],
               "--output_dir", str(tmp_path / "reverse")])  # fmt: skip
    assert "computed copy's coupled positions" in caplog.text, "said, not silent"
    reverse = json.loads((tmp_path / "reverse" / "export" / "config.json").read_text())
    assert reverse["position_coupling"] is None and reverse["position_coupling_token_ids"] is None


def test_evaluate_model_gives_a_coupled_model_its_positions_and_refuses_them_elsewhere(tmp_path, monkeypatch, capsys):
    train([*TINY_COPY, "--config_overrides", "position_encoding=absolute", "--position_coupling",
           "--output_dir", str(tmp_path / "run")])  # fmt: skip
    evaluate_model = load_script("training/evaluate_model.py", "ndr_evaluate_coupled")
    export = str(tmp_path / "run" / "export")
    common = [export, "--task", "copy", "--split", "test_40", "--n_eval", "4"]
    seen = []
    forward = modeling_ndr.NDRForTokenClassification.forward

    @functools.wraps(forward)
    def recording(self, *args, position_ids=None, **kwargs):
        seen.append(None if position_ids is None else position_ids.tolist())
        return forward(self, *args, position_ids=position_ids, **kwargs)

    monkeypatch.setattr(modeling_ndr.NDRForTokenClassification, "forward", recording)
    coupled = evaluate_model.main([*common, "--position_coupling"])
    rows = [row for batch in seen for row in batch]
    expected = [0, *range(1, 42), *range(1, 41), 42]  # [BOS], symbols 1-40, `=` 41, blanks 1-40, [EOS]
    assert len(rows) == 4 and all(row == expected for row in rows), "each row's coupled positions reach the model"
    seen.clear()
    assert evaluate_model.main(common) == coupled, "without the flag, the run's record turns the coupling on"
    assert "trained with --position_coupling" in capsys.readouterr().out
    assert len(seen) == 1 and seen[0] is not None, "and the positions reach the model"
    monkeypatch.undo()
    as_trained = json.loads((tmp_path / "run" / "test_40_results.json").read_text())
    assert coupled["test_40"]["character_accuracy"] == pytest.approx(as_trained["test_40_character_accuracy"]), (
        "with the coupled positions the model scores what Trainer measured"
    )
    with pytest.raises(
        UsageError, match="--position_coupling is defined for --task copy / reverse / addition, not carry"
    ):
        evaluate_model.main([export, "--task", "carry", "--position_coupling"])
    direction = tmp_path / "direction"
    train([*TINY_COPY, "--output_dir", str(direction)])
    with pytest.raises(
        UsageError, match="has position_encoding=direction and relative_key_window=0, which read no position ids"
    ):
        evaluate_model.main([str(direction / "export"), *common[1:], "--position_coupling"])
