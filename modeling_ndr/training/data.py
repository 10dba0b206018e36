"""Your own data for training and evaluation: reading csv / json(l) / parquet files or a `datasets.load_dataset`
source, checking that each split has the text, label (and depth) columns filled in every row, the label set, and
encoding the splits for the model (labels looked up by name in the model's `label2id`). Every problem is a one-line
`UsageError` naming the file or split."""

import logging
import os

import datasets
import pyarrow.compute as pc

from .arguments import DataArguments, evaluation_files
from .errors import UsageError, first_line


logger = logging.getLogger(__name__)
# the readers of `datasets.load_dataset` for --train_file / --validation_file / --test_file / --eval_files
DATA_FILE_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def read_data_file(flag: str, path: str, split: str) -> datasets.Dataset:
    """One data file as a `Dataset`.

    Args:
        flag: the flag that named the file (for the error message), e.g. `--train_file`.
        path: a csv, json, jsonl or parquet file.
        split: the split name to give it.

    Returns:
        The file's rows; a one-line `UsageError` naming the file if it is missing, empty or unreadable.
    """
    if not os.path.isfile(path):
        raise UsageError(f"{flag} {path}: no such file")
    extension = os.path.splitext(path)[1].lower()
    if extension not in DATA_FILE_FORMATS:
        raise UsageError(
            f"{flag} {path}: unknown file type {extension or '(none)'!r}; use {', '.join(DATA_FILE_FORMATS)}"
        )
    if os.path.getsize(path) == 0:
        raise UsageError(f"{flag} {path}: the file is empty")
    file_format = DATA_FILE_FORMATS[extension]
    try:
        return datasets.load_dataset(file_format, data_files={split: path}, split=split)
    except Exception as error:  # noqa: BLE001 - whatever the reader raises, the file is named in one line
        reason = first_line(error)
        if "corresponds to no data" in reason:  # what `datasets` says of a csv with a header and no rows
            raise UsageError(f"{flag} {path}: the file holds no rows") from None
        raise UsageError(f"{flag} {path}: cannot read it as {file_format} ({reason})") from None


def load_dataset_splits(name: str, config_name: str | None = None) -> datasets.DatasetDict:
    """`datasets.load_dataset(name, config_name)`, or a one-line `UsageError` naming `--dataset_name`."""
    try:
        return datasets.load_dataset(name, config_name)
    except Exception as error:  # noqa: BLE001 - a missing dataset, an offline hub, a bad config: one line
        raise UsageError(f"--dataset_name {name!r}: cannot load it ({first_line(error)})") from None


def read_own_data(data_args: DataArguments) -> tuple[datasets.DatasetDict, dict[str, str]]:
    """The user's splits as they are in the files.

    Args:
        data_args: `--dataset_name` (its `train` split and the others) or `--train_file`, plus the evaluation files.

    Returns:
        `(splits, sources)`: the splits, and for each split the words that name it in an error
        (`--eval_files ood.jsonl`, ...).
    """
    splits, sources = {}, {}
    if data_args.dataset_name:
        name = data_args.dataset_name
        loaded = load_dataset_splits(name, data_args.dataset_config_name)
        if "train" not in loaded:
            raise UsageError(f"--dataset_name {name!r} has no train split (its splits: {list(loaded)})")
        for split, dataset in loaded.items():
            splits[split], sources[split] = dataset, f"split {split!r} of --dataset_name {name}"
    else:
        splits["train"] = read_data_file("--train_file", data_args.train_file, "train")
        sources["train"] = f"--train_file {data_args.train_file}"
    for split, (flag, path) in evaluation_files(data_args).items():
        if split in splits:
            raise UsageError(f"{flag} {path}: --dataset_name {data_args.dataset_name} already has a split {split!r}")
        splits[split], sources[split] = read_data_file(flag, path, split), f"{flag} {path}"
    return datasets.DatasetDict(splits), sources


def standard_columns(dataset: datasets.Dataset, source: str, data_args: DataArguments) -> datasets.Dataset:
    """A split with the columns the training reads, after checking that each is there and filled in every row.

    Args:
        dataset: the split as read.
        source: the words that name the split in an error.
        data_args: the column names (`text_column`, `label_column`, `depth_column`).

    Returns:
        The split with the columns `text` (strings), `label` and, with a depth column, `depth` (integers).
    """
    if len(dataset) == 0:
        raise UsageError(f"{source}: the split is empty")
    columns = {"text": data_args.text_column, "label": data_args.label_column}
    if data_args.depth_column:
        columns["depth"] = data_args.depth_column
    for role, column in columns.items():
        if column not in dataset.column_names:
            raise UsageError(
                f"{source}: no column {column!r} (--{role}_column); its columns are {dataset.column_names}"
            )
        values = dataset.with_format("arrow")[column]  # a pyarrow array: no copy into Python objects
        if values.null_count:
            row = pc.index(pc.is_null(values), True).as_py()
            raise UsageError(f"{source}: row {row} has no {role} (column {column!r} is empty there)")
    dataset = dataset.select_columns(list(columns.values())).rename_columns(
        {column: role for role, column in columns.items() if column != role}
    )
    text_feature = dataset.features["text"]
    if not isinstance(text_feature, datasets.Value):
        raise UsageError(
            f"{source}: column {data_args.text_column!r} holds {text_feature}; expected text (space-separated tokens)"
        )
    if text_feature.dtype != "string":
        dataset = dataset.cast_column("text", datasets.Value("string"))
    if "depth" in columns and dataset.features["depth"] != datasets.Value("int64"):
        try:
            dataset = dataset.cast_column("depth", datasets.Value("int64"))
        except Exception as error:  # noqa: BLE001 - pyarrow's cast errors have several types
            raise UsageError(
                f"{source}: column {data_args.depth_column!r} (--depth_column) must hold integers "
                f"({first_line(error)})"
            ) from None
    return dataset


def label_namer(feature):
    """The function from a label value to its name: a `ClassLabel`'s names, else the value as text (`3` → `"3"`)."""
    return feature.int2str if isinstance(feature, datasets.ClassLabel) else str


def label_names_of(train: datasets.Dataset) -> list[str]:
    """The classes of the training split, in id order.

    Args:
        train: a split with a `label` column.

    Returns:
        A `ClassLabel`'s names, else the distinct labels sorted (numerically if they are numbers), as text.
    """
    # Not `Dataset.class_encode_column`: it sorts numbers as text ([2, 10] -> ["10", "2"]). `encode` looks labels up
    # by exact name rather than with `align_labels_with_mapping`, which lowercases them ("A" and "a" become one).
    feature = train.features["label"]
    if isinstance(feature, datasets.ClassLabel):
        return list(feature.names)
    values = train.unique("label")
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    return [str(v) for v in sorted(values)] if numeric else sorted(str(v) for v in values)


def check_eval_labels(data: datasets.DatasetDict, sources: dict[str, str], label_names: list[str]) -> None:
    """Check that every evaluation label is one the model learns from `train` (it can predict no other).

    Args:
        data: the splits, with a `label` column.
        sources: the words that name each split in an error.
        label_names: the training labels.
    """
    if len(label_names) < 2:
        raise UsageError(
            f"{sources['train']}: only one label ({label_names}) in the training data: nothing to classify"
        )
    known = set(label_names)
    for split, dataset in data.items():
        name = label_namer(dataset.features["label"])
        unseen = sorted({name(value) for value in dataset.unique("label")} - known)
        if unseen:
            raise UsageError(
                f"{sources[split]}: labels {unseen[:5]}{' ...' if len(unseen) > 5 else ''} never occur in the "
                f"training data, whose labels are {label_names[:10]}{' ...' if len(label_names) > 10 else ''}; the "
                "model cannot predict a label it was not trained on"
            )


def prepare_own_data(data_args: DataArguments) -> tuple[datasets.DatasetDict, dict[str, str], list[str]]:
    """Read and check the user's splits.

    Args:
        data_args: the run's data arguments (own data).

    Returns:
        `(data, sources, label_names)`: the splits with text/label[/depth] columns, the words that name each split
        in an error, and the training labels in id order.
    """
    data, sources = read_own_data(data_args)
    data = datasets.DatasetDict(
        {split: standard_columns(dataset, sources[split], data_args) for split, dataset in data.items()}
    )
    label_names = label_names_of(data["train"])
    check_eval_labels(data, sources, label_names)
    return data, sources, label_names


def encode(data: datasets.DatasetDict, tokenizer, label2id: dict[str, int]) -> datasets.DatasetDict:
    """Tokenize every split and map its labels to the model's class ids.

    Args:
        data: splits with `text` and `label` (and optionally `depth`) columns.
        tokenizer: the model's tokenizer.
        label2id: the model's `config.label2id`; labels are looked up by name, so a checkpoint's own order of its
            labels is kept.

    Returns:
        The splits with `input_ids`, `attention_mask`, `labels` (and `depth`).
    """

    def encode_split(dataset):
        name = label_namer(dataset.features["label"])

        def encode_batch(batch):
            return {**tokenizer(batch["text"]), "labels": [label2id[name(value)] for value in batch["label"]]}

        return dataset.map(encode_batch, batched=True, remove_columns=["text", "label"])

    return datasets.DatasetDict({split: encode_split(dataset) for split, dataset in data.items()})


def warn_unknown_words(data: datasets.DatasetDict, tokenizer) -> None:
    """Log how many evaluation words training never showed: they map to [UNK], and accuracy will suffer."""
    vocabulary = tokenizer.get_vocab()
    for split, dataset in data.items():
        unknown = sorted({word for text in dataset["text"] for word in text.split()} - set(vocabulary))
        if unknown:
            logger.warning(
                "%s: %d words are not in the tokenizer and read as [UNK]: %s", split, len(unknown), unknown[:10]
            )
