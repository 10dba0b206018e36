"""The token tasks and their metric: labels re-computed independently (sums digit by digit, as on paper), the formats
(blanks after `=`, the carry task's leading `00`), the lengths of each split, long carry chains, no evaluation row in
`train`, determinism across processes, the `token_accuracy` metric on hand-made predictions, and a tiny
`NDRForTokenClassification` on an encoded carry batch.

Small sizes keep the file to seconds; the splits share one temporary `datasets` cache.
"""

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch
from tiny import tiny_config
from transformers import DataCollatorForTokenClassification

from modeling_ndr import NDRForTokenClassification
from modeling_ndr.metrics import load_token_accuracy
from modeling_ndr.tasks import (
    TOKEN_SPLIT_NAMES,
    TOKEN_TASK_NAMES,
    encode_token_rows,
    load_token_task,
    token_generation,
    token_split_lengths,
    token_task_label_names,
    token_task_tokenizer,
)


N_TRAIN, N_EVAL = 400, 12  # train: ten rows of each length 1-40 (addition: twenty of 1-20)
REPOSITORY_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    cache_dir = str(tmp_path_factory.mktemp("datasets_cache"))
    return {
        name: load_token_task(name, seed=0, n_train=N_TRAIN, n_eval=N_EVAL, cache_dir=cache_dir)
        for name in TOKEN_TASK_NAMES
    }


def column_sum(first: str, second: str) -> list[str]:
    """`first + second` as on paper: right to left, a carry per column; one digit more than the longer operand."""
    width = max(len(first), len(second))
    first, second = first.zfill(width), second.zfill(width)
    digits, carry = [], 0
    for a, b in zip(reversed(first), reversed(second)):
        total = int(a) + int(b) + carry
        digits.append(str(total % 10))
        carry = total // 10
    digits.append(str(carry))
    return digits[::-1]


def carry_operands(text: str) -> tuple[str, str]:
    """`00 56 78` -> ("57", "68")."""
    pairs = text.split()[1:]
    return "".join(pair[0] for pair in pairs), "".join(pair[1] for pair in pairs)


def chain_length(first: str, second: str) -> int:
    """The most neighbouring columns that each pass a carry on (column by column, right to left)."""
    longest = run = carry = 0
    for a, b in zip(reversed(first), reversed(second)):
        carry = 1 if int(a) + int(b) + carry >= 10 else 0
        run = run + 1 if carry else 0
        longest = max(longest, run)
    return longest


def scored(labels: list) -> list[str]:
    return [label for label in labels if label is not None]


# ---------------------------------------------------------------------------------------------------------------
# Labels and formats
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["copy", "reverse"])
def test_string_tasks_write_the_digits_then_blanks_and_score_only_the_blanks(generated, name):
    for split, dataset in generated[name].items():
        for row in dataset:
            tokens, labels = row["text"].split(), row["labels"]
            n = row["length"]
            symbols = tokens[:n]
            assert tokens == [*symbols, "=", *["_"] * n], f"{split}: the input, '=', one blank per symbol: {row}"
            assert all(symbol.isdigit() and len(symbol) == 1 for symbol in symbols), f"{split}: digits only: {row}"
            assert labels[: n + 1] == [None] * (n + 1), f"{split}: the input and '=' are not scored: {row}"
            expected = symbols if name == "copy" else symbols[::-1]
            assert labels[n + 1 :] == expected, f"{split}: the blanks hold the {name}d input: {row}"


def test_addition_labels_are_the_sum_computed_column_by_column(generated):
    for split, dataset in generated["addition"].items():
        for row in dataset:
            tokens = row["text"].split()
            plus, equals = tokens.index("+"), tokens.index("=")
            first, second = "".join(tokens[:plus]), "".join(tokens[plus + 1 : equals])
            width = max(len(first), len(second))
            assert tokens[equals + 1 :] == ["_"] * (width + 1), f"{split}: one blank more than the longer operand"
            assert row["labels"][: equals + 1] == [None] * (equals + 1), f"{split}: only the blanks are scored: {row}"
            assert row["labels"][equals + 1 :] == column_sum(first, second), f"{split}: the zero-padded sum: {row}"
            assert row["length"] == width, f"{split}: length counts the longer operand's digits: {row}"
            if split != "train":
                assert len(first) == len(second) == width, f"{split}: both evaluation operands have `length` digits"


def test_carry_labels_are_the_sum_computed_column_by_column(generated):
    for split, dataset in generated["carry"].items():
        for row in dataset:
            first, second = carry_operands(row["text"])
            assert row["labels"] == column_sum(first, second), f"{split}: every token holds its column's digit: {row}"


def test_carry_rows_start_with_00_which_holds_the_carry_out(generated):
    for split, dataset in generated["carry"].items():
        for row in dataset:
            tokens = row["text"].split()
            first, second = carry_operands(row["text"])
            carry_out = "1" if int(first) + int(second) >= 10 ** len(first) else "0"
            assert tokens[0] == "00", f"{split}: the leading 00 is the column of the carry out: {row}"
            assert row["labels"][0] == carry_out, f"{split}: 00's label is the carry out: {row}"
            assert len(tokens) == row["length"] + 1, f"{split}: length counts the digit positions, not the 00: {row}"


def test_the_issue_s_examples_come_out_as_written():
    from modeling_ndr.tasks.token_tasks import addition_row, carry_row, string_row

    assert string_row("copy", list("314")) == ("3 1 4 = _ _ _".split(), [None] * 4 + list("314"))
    assert string_row("reverse", list("314")) == ("3 1 4 = _ _ _".split(), [None] * 4 + list("413"))
    assert addition_row("57", "68") == ("5 7 + 6 8 = _ _ _".split(), [None] * 6 + list("125"))
    assert carry_row("57", "68") == (["00", "56", "78"], list("125")), "57 + 68 -> 00 56 78, labels 1 2 5"


# ---------------------------------------------------------------------------------------------------------------
# Splits: lengths, long carry chains, no evaluation row in train, determinism
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TOKEN_TASK_NAMES)
def test_every_split_has_its_lengths_and_its_size(generated, name):
    dataset = generated[name]
    assert tuple(dataset) == TOKEN_SPLIT_NAMES[name], "the splits of TOKEN_SPLIT_NAMES, in order"
    for split, lengths in token_split_lengths(name).items():
        assert sorted(set(dataset[split]["length"])) == list(lengths), f"{split} holds exactly lengths {lengths}"
        assert len(dataset[split]) == (N_TRAIN if split == "train" else N_EVAL), f"{split} has the size asked for"
    expected = {"copy": 40, "reverse": 40, "addition": 20, "carry": 40}[name]
    assert token_split_lengths(name)["train"] == tuple(range(1, expected + 1)), "train lengths as in the issue"


def test_long_chain_splits_carry_through_at_least_half_of_the_positions(generated):
    for split in TOKEN_SPLIT_NAMES["carry"]:
        if split.startswith("long_chains_"):
            for row in generated["carry"][split]:
                chain = chain_length(*carry_operands(row["text"]))
                assert 2 * chain >= row["length"], f"{split}: a chain of {chain} of {row['length']} positions: {row}"


@pytest.mark.parametrize("name", ["copy", "reverse", "addition"])
def test_the_validation_split_holds_other_rows_of_the_longest_length(generated, name):
    """`valid_<n>` is for choosing a checkpoint at the longest length without reading `test_<n>`: the same kind of
    rows (addition: both operands of n digits), drawn from a stream of their own."""
    longest = max(length for split, (length, *_) in token_split_lengths(name).items() if split.startswith("test_"))
    valid, test = generated[name][f"valid_{longest}"], generated[name][f"test_{longest}"]
    assert set(valid["length"]) == {longest}, "the longest evaluation length"
    assert not set(valid["text"]) & set(test["text"]), "no row of test_<n> in valid_<n>"
    if name == "addition":
        for text in valid["text"]:
            first, second = text.split(" = ")[0].split(" + ")
            assert len(first.split()) == len(second.split()) == longest, f"operands of {longest} digits: {text[:80]}"


def test_random_operands_rarely_carry_far_and_train_mixes_in_long_chains(generated):
    """Why the long-chain splits exist: random operands almost never carry through half of 40 positions; train has a
    share of such rows (a quarter) so that a model sees carries travel."""
    test = [chain_length(*carry_operands(text)) for text in generated["carry"]["test_40"]["text"]]
    assert sum(2 * chain >= 40 for chain in test) <= 1, f"random 40-digit operands carry far: {test}"
    train = [row for row in generated["carry"]["train"] if row["length"] >= 10]
    long_share = sum(2 * chain_length(*carry_operands(row["text"])) >= row["length"] for row in train) / len(train)
    assert 0.15 <= long_share <= 0.35, f"about a quarter of train's rows (lengths 10-40) carry far: {long_share:.2f}"


@pytest.mark.parametrize("name", TOKEN_TASK_NAMES)
def test_train_holds_no_row_of_an_evaluation_split(generated, name):
    train = set(generated[name]["train"]["text"])
    for split in TOKEN_SPLIT_NAMES[name][1:]:
        assert not train & set(generated[name][split]["text"]), f"{split} rows leaked into train"


def test_train_skips_evaluation_rows_at_a_length_it_trains_on(monkeypatch):
    """With an evaluation split at copy's length 2 (100 strings), train's length-2 rows must avoid its 30; drawn
    without that rule, ten of 100 would almost surely hit one of them."""
    monkeypatch.setitem(token_generation.TOKEN_SPLIT_NAMES, "copy", ("train", "test_2"))
    kept_out = {row["text"] for row in token_generation._evaluation_rows("copy", 0, "test_2", 30)}
    train = list(token_generation._generate_split("copy", 0, "train", 400, 30, 1))
    length_2 = {row["text"] for row in train if row["length"] == 2}
    assert len(kept_out) == 30 and len(length_2) == 10, "thirty evaluation rows, ten train rows of length 2"
    assert not length_2 & kept_out, "train's length-2 rows avoid the evaluation split's"


def test_short_lengths_keep_the_rows_they_have_and_pass_the_rest_on(generated):
    lengths = generated["copy"]["train"]["length"]
    assert lengths.count(1) == 10, "copy's length 1 has ten distinct strings, all in train"
    texts = generated["copy"]["train"]["text"]
    assert len(set(texts)) == len(texts), "no train row appears twice"


def digest(name: str, seed: int, cache_dir: str) -> str:
    dataset = load_token_task(name, seed=seed, n_train=N_TRAIN, n_eval=4, cache_dir=cache_dir)
    rows = {split: dataset[split].to_list() for split in dataset}
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def test_the_same_seed_gives_the_same_rows_in_another_process(tmp_path):
    script = (
        "import sys; sys.path[:0] = ['tests', 'tests/unit']; from test_token_tasks import digest; "
        f"print(digest('carry', 3, {str(tmp_path / 'child')!r}))"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345", OMP_NUM_THREADS="1")
    child = subprocess.run([sys.executable, "-c", script], cwd=REPOSITORY_ROOT, env=env, capture_output=True,
                           text=True, timeout=300, check=True)  # fmt: skip
    here = digest("carry", 3, str(tmp_path / "here"))
    assert child.stdout.strip().splitlines()[-1] == here, "a seed gives the same rows whatever the hash seed"
    assert digest("carry", 4, str(tmp_path / "here")) != here, "another seed gives other rows"


def test_a_bad_name_or_size_is_one_error_naming_it():
    with pytest.raises(ValueError, match="unknown token task name 'sort'"):
        load_token_task("sort")
    with pytest.raises(ValueError, match="n_eval must be a positive int"):
        load_token_task("copy", n_eval=0)


# ---------------------------------------------------------------------------------------------------------------
# Encoding, the metric and the model
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TOKEN_TASK_NAMES)
def test_encoded_labels_sit_on_their_tokens_and_nothing_else_is_scored(generated, name):
    tokenizer = token_task_tokenizer(name)
    rows = generated[name][TOKEN_SPLIT_NAMES[name][1]][:3]  # three rows of the in-distribution evaluation split
    encoded = encode_token_rows(rows, tokenizer)
    label_names = token_task_label_names(name)
    unknown = tokenizer.unk_token_id
    for text, labels, input_ids, label_ids in zip(
        rows["text"], rows["labels"], encoded["input_ids"], encoded["labels"]
    ):
        assert unknown not in input_ids, f"every token of {name} is in its vocabulary"
        assert tokenizer.convert_ids_to_tokens(input_ids) == ["[BOS]", *text.split(), "[EOS]"], "one id per token"
        expected = [-100] + [-100 if label is None else label_names.index(label) for label in labels] + [-100]
        assert label_ids == expected, "each label on its token, -100 at [BOS], [EOS] and unscored tokens"
    assert tokenizer.model_max_length >= max(len(ids) for ids in encoded["input_ids"]), "the longest row fits"


def test_token_accuracy_scores_characters_and_whole_rows_per_length_and_skips_minus_100():
    token_accuracy = load_token_accuracy()
    result = token_accuracy.compute(
        predictions=[[5, 1, 2, 0], [3, 3, 0, 7], [4, 4, 9, 9]],
        references=[[-100, 1, 2, -100], [3, 4, -100, -100], [4, 4, -100, 9]],
        lengths=[2, 2, 3],
    )
    # right of scored: row 0 2/2, row 1 1/2, row 2 3/3 -> characters 6/7, rows 2/3
    assert result["character_accuracy"] == pytest.approx(6 / 7), "right scored tokens over scored tokens"
    assert result["sequence_accuracy"] == pytest.approx(2 / 3), "rows whose every scored token is right"
    assert result["character_accuracy_length_2"] == pytest.approx(3 / 4), "length 2: 3 of its 4 scored tokens"
    assert result["sequence_accuracy_length_2"] == 0.5, "length 2: one of its two rows whole"
    assert result["character_accuracy_length_3"] == result["sequence_accuracy_length_3"] == 1.0, "length 3 is right"
    assert (result["count"], result["count_length_2"], result["count_length_3"]) == (3, 2, 1), "rows per length"
    without_lengths = token_accuracy.compute(predictions=[[1, 0]], references=[[1, -100]])
    assert without_lengths == {"character_accuracy": 1.0, "sequence_accuracy": 1.0, "count": 1}, "no length keys"


def test_token_accuracy_refuses_a_row_with_nothing_scored_or_mismatched_lists():
    token_accuracy = load_token_accuracy()
    with pytest.raises(ValueError, match="row 1 has no scored token"):
        token_accuracy.compute(predictions=[[1], [2]], references=[[1], [-100]])
    with pytest.raises(ValueError, match="row 0 has 2 predictions for 1 references"):
        token_accuracy.compute(predictions=[[1, 2]], references=[[1]])


def test_a_tiny_token_classifier_trains_on_a_carry_batch(generated):
    tokenizer = token_task_tokenizer("carry")
    rows = generated["carry"]["train"].select(range(6))
    encoded = rows.map(encode_token_rows, batched=True, fn_kwargs={"tokenizer": tokenizer}, remove_columns=["text"])
    features = [{key: row[key] for key in ("input_ids", "attention_mask", "labels")} for row in encoded]
    batch = DataCollatorForTokenClassification(tokenizer)(features)  # pads labels with -100
    torch.manual_seed(0)
    model = NDRForTokenClassification(tiny_config(vocab_size=len(tokenizer), num_labels=10))
    output = model(**batch)
    assert output.logits.shape == (*batch["input_ids"].shape, 10), "ten digit scores per token"
    assert torch.isfinite(output.loss), "a finite loss over the scored tokens"
    output.loss.backward()
    assert model.classifier.weight.grad.abs().sum() > 0, "the loss reaches the head"
