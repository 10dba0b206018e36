"""Your own token task: one label per word of the text, trained with `NDRForTokenClassification`.

A row of a JSON lines file is `{"text": "1 0 1 1", "label": ["1", "1", "0", "1"]}`: a list, one label per
whitespace-separated word, `null` where nothing is scored (the words that carry no answer, e.g. an input copied
before the blanks that hold the output). In a csv file the label column holds the labels space-separated (`1 1 0 1`,
the word `null` where nothing is scored) and `--token_labels true` says so (a list in a JSON file needs no flag).

Every problem is one line naming the file and line: a label list whose length differs from the text's word count, a
row with no scored word, a single label in a file of label lists (or the other way round), a label of an
evaluation file never seen in training. Encoded, a row's labels line up with its tokens (the word-level tokenizer
gives one token per word, between [BOS] and [EOS]); the special tokens, the unscored words and the padding are -100,
which the loss and the metric skip. Each row also gets its `length` (its word count), for accuracy per length.

The metric (`token_metrics_function`, on the package's `token_accuracy`): `accuracy` is the sequence accuracy (every
scored word of a row right: the exact answer, as `accuracy` is for one label per text), `character_accuracy` the share
of scored words right; both per length (`accuracy_length_<n>`, `character_accuracy_length_<n>`).
"""

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from transformers import DataCollatorForTokenClassification

import datasets
from modeling_ndr.tasks import coupled_positions, encode_token_rows
from modeling_ndr.training.errors import UsageError
from modeling_ndr.training.evaluation import pad_position_ids

from .data_files import Source


NULL_LABEL = "null"  # in a csv's space-separated labels: a word that is not scored
LABELS = datasets.List(datasets.Value("string"))


def _where(source, row: int) -> str:
    return f"{source} {source.where(row) if isinstance(source, Source) else f'row {row}'}"


def has_token_labels(dataset: datasets.Dataset, label_column: str, token_labels: bool | None) -> bool:
    """Whether a split's labels are per token: a list column (JSON lines), one that holds lists among other values
    (`datasets`' `Json` feature: a mix, refused later with its line), or a text column with `--token_labels true`."""
    feature = dataset.features.get(label_column)
    if isinstance(feature, (datasets.List, datasets.Sequence, datasets.LargeList)):
        return True
    if isinstance(feature, datasets.Json):
        return any(isinstance(value, list) for value in dataset[label_column])
    return bool(token_labels)


def token_columns(
    dataset: datasets.Dataset, source, text_column: str, label_column: str, labels_as_text: bool = False
) -> datasets.Dataset:
    """A split of a token task with the columns `text` and `label` (a list of label names, None where not scored),
    every row checked: one line naming the file and line at the first problem.

    Args:
        dataset: the split as read.
        source: the words that name the split (a `Source` finds the line of a bad row).
        text_column: `--text_column`.
        label_column: `--label_column`.
        labels_as_text: the labels are space-separated text (`--token_labels`, a csv); otherwise a row's labels are a
            list, and a single label is refused with its line (a file, or the files of a run, hold one kind).
    """
    for column in (text_column, label_column):
        if column not in dataset.column_names:
            raise UsageError(f"{source}: no column {column!r}; its columns are {dataset.column_names}")
    texts, labels = dataset[text_column], dataset[label_column]
    rows = []
    for row, (text, label) in enumerate(zip(texts, labels)):
        if not isinstance(text, str) or not text.split():
            raise UsageError(f"{_where(source, row)}: column {text_column!r} holds no words; expected the input as "
                             "text (space-separated tokens)")  # fmt: skip
        if label is None:
            raise UsageError(f"{_where(source, row)}: column {label_column!r} is missing or null; expected one label "
                             "per word")  # fmt: skip
        if isinstance(label, str) and labels_as_text:
            label = [None if word == NULL_LABEL else word for word in label.split()]
        elif not isinstance(label, list):
            raise UsageError(f"{_where(source, row)}: column {label_column!r} holds a single label {label!r} where "
                             "the training data has one label per word (a list); the rows of a run hold one kind "
                             "(a csv of space-separated labels: --token_labels true)")  # fmt: skip
        label = [None if value is None else str(value) for value in label]
        words = text.split()
        if len(label) != len(words):
            raise UsageError(f"{_where(source, row)}: {len(label)} labels for {len(words)} words; expected one label "
                             "per word (null where nothing is scored): a list of labels is a token task, train.py "
                             "trains no multi-label classification")  # fmt: skip
        if all(value is None for value in label):
            raise UsageError(f"{_where(source, row)}: every label is null; a row needs at least one scored word")
        rows.append(label)
    features = datasets.Features({"text": datasets.Value("string"), "label": LABELS})
    return datasets.Dataset.from_dict({"text": list(texts), "label": rows}, features=features)


def is_token_task(data) -> bool:
    """Whether checked splits (`prepare_own_data`) are a token task: their `label` holds a list per row."""
    return data["train"].features["label"] == LABELS


def token_label_names(train: datasets.Dataset) -> list[str]:
    """The labels of a token task's training split, sorted (numerically where they are all numbers)."""
    names = {value for value in pc.list_flatten(train.with_format("arrow")["label"]).to_pylist() if value is not None}
    numeric = all(name.lstrip("-").isdigit() for name in names)
    return sorted(names, key=int) if numeric else sorted(names)


def check_eval_token_labels(data: datasets.DatasetDict, sources: dict, label_names: list[str]) -> None:
    """A label of an evaluation split that training never saw is one line naming the file and line."""
    if len(label_names) < 2:
        raise UsageError(f"{sources['train']}: only one label ({label_names}) in the training data: nothing to learn")
    known = pa.array(label_names, pa.string())
    for split, dataset in data.items():
        column = dataset.with_format("arrow")["label"]
        flat = pc.list_flatten(column)
        unseen = pc.and_(pc.is_valid(flat), pc.invert(pc.is_in(flat, value_set=known)))
        if (index := pc.index(unseen, True).as_py()) >= 0:
            row = pc.list_parent_indices(column)[index].as_py()
            raise UsageError(f"{_where(sources[split], row)}: label {flat[index].as_py()!r} never occurs in the "
                             f"training data, whose labels are {label_names[:10]}; the model cannot predict a label "
                             "it was not trained on")  # fmt: skip


def encode_token_task(
    data: datasets.DatasetDict,
    tokenizer,
    label2id: dict,
    position_coupling: str | None = None,
    max_position_offset: int = 0,
    seed: int = 0,
) -> datasets.DatasetDict:
    """Tokenize every split and line its labels up with the tokens (`tasks.encode_token_rows`): `input_ids`,
    `attention_mask`, `labels` (ids, -100 at [BOS], [EOS] and unscored words) and `length`: the row's own `length`
    where it has one (a generated task's evaluation length), else its word count.

    Args:
        data: splits with `text` and `label` (a list per row: `token_columns`; a generated task's `labels`).
        tokenizer: the model's tokenizer.
        label2id: the model's `config.label2id`.
        position_coupling: a task of `tasks.COUPLED_TASKS`: also a `position_ids` column, the coupled positions of
            `tasks.coupled_positions` with [BOS] at 0 and [EOS] one past the highest (for a model with
            `position_encoding="absolute"`).
        max_position_offset: with `position_coupling`, each row of `train` has its positions shifted by a random
            offset in `[0, max_position_offset]` (one per row, drawn from `seed` and the row's index: the same on
            every run), so that training shows the positions that longer evaluation rows reach; the evaluation
            splits are not shifted.
        seed: the seed of those offsets.
    """

    def encode_batch(batch, indices, shifted):
        labels = batch["label"] if "label" in batch else batch["labels"]
        encoded = encode_token_rows({"text": batch["text"], "labels": labels}, tokenizer, label2id)
        lengths = batch["length"] if "length" in batch else [len(text.split()) for text in batch["text"]]
        if position_coupling is None:
            return {**encoded, "length": lengths}
        positions = []
        for row, (index, text) in enumerate(zip(indices, batch["text"])):
            words = coupled_positions(position_coupling, text.split())
            offset = int(random.Random(f"{seed}:{index}").random() * (max_position_offset + 1)) if shifted else 0
            row_positions = [offset + position for position in (0, *words, max(words) + 1)]
            if len(row_positions) != len(encoded["input_ids"][row]):  # one token per word, between [BOS] and [EOS]
                raise ValueError(f"row {index}: {len(encoded['input_ids'][row])} tokens for {len(words)} words")
            positions.append(row_positions)
        return {**encoded, "length": lengths, "position_ids": positions}

    return datasets.DatasetDict({
        split: dataset.map(
            encode_batch, batched=True, with_indices=True, remove_columns=dataset.column_names,
            fn_kwargs={"shifted": split == "train" and max_position_offset > 0},
        )
        for split, dataset in data.items()
    })  # fmt: skip


class DataCollatorForTokenClassificationWithPositions(DataCollatorForTokenClassification):
    """transformers' `DataCollatorForTokenClassification` that also pads a `position_ids` column (with 0, on the
    tokenizer's padding side; the padding is masked), as `encode_token_task(position_coupling=...)` writes it."""

    def torch_call(self, features):
        if "position_ids" not in features[0]:
            return super().torch_call(features)
        features = [dict(feature) for feature in features]
        positions = [feature.pop("position_ids") for feature in features]
        batch = super().torch_call(features)
        batch["position_ids"] = pad_position_ids(positions, batch["input_ids"].shape[1], self.tokenizer.padding_side)
        return batch


def token_metrics_function(token_accuracy):
    """`compute_metrics` for Trainer on a token task, with `label_names = ["labels", "length"]`: `accuracy` (sequence
    accuracy), `character_accuracy`, and both per length (`accuracy_length_<n>`, `character_accuracy_length_<n>`).

    Args:
        token_accuracy: the loaded metric (`modeling_ndr.metrics.load_token_accuracy`).
    """

    def compute_metrics(prediction) -> dict:
        labels, lengths = prediction.label_ids, None
        if isinstance(labels, (tuple, list)):
            labels, lengths = labels
        logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        predicted = np.asarray(logits).argmax(-1)
        labels = np.asarray(labels)
        predicted, labels = predicted[:, : labels.shape[1]], labels[:, : predicted.shape[1]]  # (batch, seq)
        result = token_accuracy.compute(
            predictions=predicted.tolist(),
            references=labels.tolist(),
            lengths=None if lengths is None else np.asarray(lengths).reshape(-1).tolist(),
        )
        return token_metrics(result)

    return compute_metrics


def token_metrics(result: dict) -> dict:
    """The `token_accuracy` metric's keys as a run reports them: `sequence_accuracy[_length_<n>]` is `accuracy[...]`
    (the exact answer, as for one label per text), the others as they are."""
    return {key.replace("sequence_accuracy", "accuracy"): value for key, value in result.items()}
