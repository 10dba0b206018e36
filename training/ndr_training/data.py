"""Your own data for training and evaluation, once read (`data_files` reads the csv / json(l) / parquet files or the
`datasets.load_dataset` source; its names are importable from here too): checking that each split has the text,
label (and depth) columns filled in every row, the label set, and encoding the splits for the model (labels looked up
by name in the model's `label2id`).

Every problem is a one-line `UsageError` naming the file or split and, where it applies, the line (JSON lines, a JSON
array, csv; blank lines count, the header is line 1) or the row (parquet, a `--dataset_name` split, counted from 0),
the column, and what was expected. The checks run on whole columns with pyarrow compute (a million rows take well
under a second); a file is read again line by line only once a problem is known, to say where it is."""

import json
import logging
import re

import pyarrow as pa
import pyarrow.compute as pc

import datasets
from modeling_ndr.training.errors import UsageError

from . import token_labels
from .arguments import DataArguments
from .data_files import (  # noqa: F401  (re-exported: the reading half of own data lives in data_files)
    DATA_FILE_FORMATS,
    Source,
    first_problem_in_file,
    load_dataset_splits,
    locate_row,
    read_data_file,
    read_own_data,
)


logger = logging.getLogger(__name__)
# what each column must hold, for the error messages
EXPECTED = {
    "text": "the input as text (space-separated tokens)",
    "label": "a class: a name or an integer",
    "depth": "an integer",
}


# ------------------------------------------------------------------------------------------------ column checks


def _first(mask) -> int:
    """The first row where a boolean pyarrow array is true (nulls are not), or -1."""
    return pc.index(mask, True).as_py()


def _invalid_utf8_row(values) -> int:
    """The first row of a string column holding bytes that are not UTF-8 (possible in JSON lines), or -1."""
    offset = 0
    for chunk in values.chunks:
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid as error:
            if match := re.search(r"string index (\d+)", str(error)):
                return offset + int(match[1])
            raise
        offset += len(chunk)
    return -1


def _json_values(values) -> list:
    """The decoded values of a `datasets.Json` column (JSON values of several types), stored as JSON texts."""
    return [
        None if text is None else json.loads(text) for chunk in values.chunks for text in chunk.storage.to_pylist()
    ]


def _column_values(dataset: datasets.Dataset, column: str) -> pa.ChunkedArray:
    """A column as a pyarrow array: no copy into Python objects."""
    return dataset.with_format("arrow")[column]


def _replace_column(dataset: datasets.Dataset, name: str, values: list, feature) -> datasets.Dataset:
    return dataset.remove_columns(name).add_column(name, values).cast_column(name, feature)


class _ColumnCheck:
    """The errors about one column of a split: `SOURCE line 7: column 'label' holds 1.5; expected ...`."""

    def __init__(self, source: str, role: str, column: str):
        self.source, self.role, self.column = source, role, column

    def where(self, row: int) -> str:
        return self.source.where(row) if isinstance(self.source, Source) else f"row {row}"

    def fail(self, row: int, what: str, expected: str | None = None) -> UsageError:
        flag = "" if self.column == self.role else f" (--{self.role}_column)"
        return UsageError(f"{self.source} {self.where(row)}: column {self.column!r}{flag} {what}; expected "
                          f"{expected or EXPECTED[self.role]}")  # fmt: skip

    def missing(self, row: int) -> UsageError:
        record = self.source.record(row) if isinstance(self.source, Source) else None
        if isinstance(record, dict):
            what = "is missing (no such key)" if self.column not in record else "is null"
        elif isinstance(record, list):
            what = "is empty (an empty or missing field)"
        else:
            what = "has no value"
        return self.fail(row, what)


def _not_integral(values) -> int:
    """The first row of a float column whose value is not a whole number (or not finite), or -1."""
    return _first(pc.invert(pc.and_(pc.is_finite(values), pc.equal(values, pc.floor(values)))))


def _check_text(dataset: datasets.Dataset, check: _ColumnCheck) -> datasets.Dataset:
    feature = dataset.features["text"]
    if isinstance(feature, datasets.Json):  # texts and numbers mixed: numbers are texts too, objects are not
        values = _json_values(_column_values(dataset, "text"))
        if (row := next((i for i, value in enumerate(values) if isinstance(value, (dict, list))), -1)) >= 0:
            raise check.fail(row, f"holds {json.dumps(values[row])[:60]}")
        dataset = _replace_column(dataset, "text", [str(value) for value in values], datasets.Value("string"))
    elif not isinstance(feature, datasets.Value):
        raise UsageError(f"{check.source}: column {check.column!r} holds {feature}; expected {EXPECTED['text']}")
    elif feature.dtype not in ("string", "large_string"):
        dataset = dataset.cast_column("text", datasets.Value("string"))
    values = _column_values(dataset, "text")
    if (row := _first(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0))) >= 0:
        raise check.fail(row, "holds an empty text")
    return dataset


def _whole_number(value) -> bool:
    """Whether a decoded JSON value is a whole number (`3` or `3.0`, not `true`, `"3"` or `3.5`)."""
    return not isinstance(value, bool) and (
        isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    )


def _check_depth(dataset: datasets.Dataset, check: _ColumnCheck) -> datasets.Dataset:
    feature, values = dataset.features["depth"], _column_values(dataset, "depth")
    if isinstance(feature, datasets.Json):  # integers mixed with something else
        decoded = _json_values(values)
        for row, value in enumerate(decoded):
            if not _whole_number(value):
                raise check.fail(row, f"holds {json.dumps(value)[:60]}")
        return _replace_column(dataset, "depth", [int(value) for value in decoded], datasets.Value("int64"))
    if pa.types.is_integer(values.type):
        row = -1
    elif pa.types.is_floating(values.type):
        row = _not_integral(values)
    elif pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        row = _first(pc.invert(pc.match_substring_regex(values, r"^\s*[+-]?\d+\s*$")))
    else:  # booleans, lists, ...
        row = 0
    if row >= 0:
        raise check.fail(row, f"holds {values[row].as_py()!r}")
    return dataset if feature == datasets.Value("int64") else dataset.cast_column("depth", datasets.Value("int64"))


# train.py trains single-label classification: what a label must be, and what it is not
ONE_CLASS = (
    "one class per row, a name or an integer (train.py trains single-label classification; a number like 1.5 is a "
    "regression target and a list of classes a multi-label one, which it does not train)"
)


def _check_label(dataset: datasets.Dataset, check: _ColumnCheck) -> datasets.Dataset:
    feature, values = dataset.features["label"], _column_values(dataset, "label")
    if isinstance(feature, datasets.ClassLabel):
        if (row := _first(pc.less(values, 0))) >= 0:  # -1: no label, as in the test splits of GLUE
            raise check.fail(row, f"holds {values[row].as_py()} (no class: a split without answers?)")
        return dataset
    if isinstance(feature, datasets.Json):  # names and numbers mixed: whole numbers are names too
        decoded = _json_values(values)
        for row, value in enumerate(decoded):
            if isinstance(value, (dict, list)) or (isinstance(value, float) and not _whole_number(value)):
                raise check.fail(row, f"holds {json.dumps(value)[:60]}", ONE_CLASS)
        names = [str(int(value)) if isinstance(value, float) else str(value) for value in decoded]
        return _replace_column(dataset, "label", names, datasets.Value("string"))
    if not isinstance(feature, datasets.Value):  # a list of classes, an object
        raise check.fail(0, f"holds {json.dumps(dataset[0]['label'], default=str)[:60]}", ONE_CLASS)
    if pa.types.is_floating(values.type):
        if (row := _not_integral(values)) >= 0:
            raise check.fail(row, f"holds {values[row].as_py()!r}", ONE_CLASS)
        dataset = dataset.cast_column("label", datasets.Value("int64"))  # 1.0 is class 1, as in a file of integers
    return dataset


def standard_columns(dataset: datasets.Dataset, source: str, data_args: DataArguments) -> datasets.Dataset:
    """A split with the columns the training reads, after checking that each is there and filled in every row with
    a value of the kind it needs.

    Args:
        dataset: the split as read.
        source: the words that name the split in an error (a `Source` also finds the line of a bad row).
        data_args: the column names (`text_column`, `label_column`, `depth_column`).

    Returns:
        The split with the columns `text` (strings), `label` (names, integers or a `ClassLabel`) and, with a depth
        column, `depth` (integers); a one-line `UsageError` at the first problem.
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
    checks = {role: _ColumnCheck(source, role, column) for role, column in columns.items()}
    for role, column in columns.items():
        values = dataset.with_format("arrow")[column]  # a pyarrow array: no copy into Python objects
        if values.null_count:
            raise checks[role].missing(_first(pc.is_null(values)))
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            if (row := _invalid_utf8_row(values)) >= 0:
                raise checks[role].fail(row, "holds bytes that are not UTF-8", "UTF-8 text (save the file as UTF-8)")
    dataset = dataset.select_columns(list(columns.values())).rename_columns(
        {column: role for role, column in columns.items() if column != role}
    )
    dataset = _check_text(dataset, checks["text"])
    dataset = _check_label(dataset, checks["label"])
    if "depth" in columns:
        dataset = _check_depth(dataset, checks["depth"])
    return dataset


# ------------------------------------------------------------------------------------------------------ labels


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


def _label_name_array(dataset: datasets.Dataset):
    """The name of every row's label as one pyarrow string array (`label_namer` applied, without Python loops)."""
    feature, values = dataset.features["label"], _column_values(dataset, "label")
    if isinstance(feature, datasets.ClassLabel):
        return pc.take(pa.array(feature.names, pa.string()), values)
    if pa.types.is_boolean(values.type):
        return pc.if_else(values, "True", "False")
    return pc.cast(values, pa.string())


def check_eval_labels(data: datasets.DatasetDict, sources: dict[str, str], label_names: list[str]) -> None:
    """Check that every evaluation label is one the model learns from `train` (it can predict no other).

    Args:
        data: the splits, with a `label` column.
        sources: the words that name each split in an error (a `Source` also finds the line of the first such label).
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
            row = _first(pc.is_in(_label_name_array(dataset), value_set=pa.array(unseen, pa.string())))
            source = sources[split]
            where = source.where(row) if isinstance(source, Source) else f"row {row}"
            more, more_known = " ..." if len(unseen) > 5 else "", " ..." if len(label_names) > 10 else ""
            raise UsageError(
                f"{source}: labels {unseen[:5]}{more} never occur in the training data (the first at {where}), whose "
                f"labels are {label_names[:10]}{more_known}; the model cannot predict a label it was not trained on"
            )


def prepare_own_data(data_args: DataArguments) -> tuple[datasets.DatasetDict, dict[str, Source], list[str]]:
    """Read and check the user's splits.

    Args:
        data_args: the run's data arguments (own data).

    Returns:
        `(data, sources, label_names)`: the splits with text/label[/depth] columns (a token task's `label`: a list per
        row, `token_labels.is_token_task`), the words that name each split in an error, and the training labels in
        id order.
    """
    data, sources = read_own_data(data_args)
    if token_labels.has_token_labels(data["train"], data_args.label_column, data_args.token_labels):
        if data_args.depth_column:
            raise UsageError(f"{sources['train']}: --depth_column is for one label per text; this data has one label "
                             "per word (a token task: its accuracy is reported per length)")  # fmt: skip
        data = datasets.DatasetDict({
            split: token_labels.token_columns(dataset, sources[split], data_args.text_column, data_args.label_column,
                                              data_args.token_labels)
            for split, dataset in data.items()
        })  # fmt: skip
        label_names = token_labels.token_label_names(data["train"])
        token_labels.check_eval_token_labels(data, sources, label_names)
        return data, sources, label_names
    data = datasets.DatasetDict(
        {split: standard_columns(dataset, sources[split], data_args) for split, dataset in data.items()}
    )
    label_names = label_names_of(data["train"])
    check_eval_labels(data, sources, label_names)
    return data, sources, label_names


# ------------------------------------------------------------------------------------------------------ encoding


def encode(
    data: datasets.DatasetDict, tokenizer, label2id: dict[str, int], sources: dict[str, str] | None = None
) -> datasets.DatasetDict:
    """Tokenize every split and map its labels to the model's class ids. Texts longer than the tokenizer's
    `model_max_length` are kept whole (the NDR has no length limit of its own, and cutting a text can change its
    answer) and a warning says how many there are and where the first one is.

    Args:
        data: splits with `text` and `label` (and optionally `depth`) columns.
        tokenizer: the model's tokenizer.
        label2id: the model's `config.label2id`; labels are looked up by name, so a checkpoint's own order of its
            labels is kept.
        sources: the words that name each split in a warning (default: the split's name).

    Returns:
        The splits with `input_ids`, `attention_mask`, `labels` (and `depth`).
    """

    def encode_split(dataset):
        name = label_namer(dataset.features["label"])

        def encode_batch(batch):
            # verbose=False: transformers' own warning about long inputs speaks of indexing errors, which this model
            # (no position table) does not have; `warn_long_texts` says what happens instead
            encoded = tokenizer(batch["text"], verbose=False)
            return {**encoded, "labels": [label2id[name(value)] for value in batch["label"]]}

        return dataset.map(encode_batch, batched=True, remove_columns=["text", "label"])

    encoded = datasets.DatasetDict({split: encode_split(dataset) for split, dataset in data.items()})
    warn_long_texts(encoded, tokenizer.model_max_length, sources or {})
    return encoded


def check_encoded(data: datasets.DatasetDict, config, sources: dict[str, str] | None = None) -> None:
    """Check the encoded splits before the first step, because a training step on a GPU does not check its inputs'
    values (`modeling_ndr.modeling_ndr.may_read_values`): there a wrong id fails the step with a device-side assert,
    or trains on nonsense, instead of naming the row. Every token id is in `[0, config.vocab_size)`, every
    `attention_mask` holds only 0 and 1 and at least one 1, and every label is in `[0, config.num_labels)`. The
    tokenizer and the label lookup make such data by construction (the paper's tasks, your own data read by
    `prepare_own_data`); this checks it (pyarrow on whole columns: seconds for a million rows) instead of trusting it.

    Args:
        data: encoded splits (`input_ids`, `attention_mask`, `labels`).
        config: the model's `NDRConfig`.
        sources: the words that name each split in an error (a `Source` also finds the line).

    Raises:
        UsageError: naming the split, the row, the column and the value.
    """
    for split, dataset in data.items():
        source = (sources or {}).get(split, split)
        columns = dataset.column_names
        ranges = {"input_ids": config.vocab_size, "attention_mask": 2}  # values in [0, n)
        if "labels" in columns and pa.types.is_integer(_column_values(dataset, "labels").type):
            ranges["labels"] = config.num_labels
        for column, size in ranges.items():
            if column not in columns:
                continue
            values = _column_values(dataset, column)
            nested = pa.types.is_list(values.type) or pa.types.is_large_list(values.type)
            flat = pc.list_flatten(values) if nested else values
            if (index := _first(pc.or_(pc.less(flat, 0), pc.greater_equal(flat, size)))) >= 0:
                row = pc.list_parent_indices(values)[index].as_py() if nested else index
                expected = {"input_ids": f"the model's vocab_size={size} token ids (0 to {size - 1})",
                            "attention_mask": "0 (padding) and 1 (token)",
                            "labels": f"the model's num_labels={size} classes (0 to {size - 1})"}[column]  # fmt: skip
                raise UsageError(f"{_where(source, row)}: column {column!r} holds {flat[index].as_py()}, outside "
                                 f"{expected}")  # fmt: skip
        if "attention_mask" in columns:
            mask = _column_values(dataset, "attention_mask").combine_chunks()
            rows_with_a_token = pc.unique(pc.filter(pc.list_parent_indices(mask), pc.equal(pc.list_flatten(mask), 1)))
            no_token = pc.invert(pc.is_in(pa.array(range(len(mask)), pa.int64()), value_set=rows_with_a_token))
            if (row := _first(no_token)) >= 0:
                raise UsageError(f"{_where(source, row)}: column 'attention_mask' holds no token (no 1)")


def _where(source, row: int) -> str:
    """`SOURCE line 7` (a file) or `SPLIT row 7`."""
    return f"{source} {source.where(row) if isinstance(source, Source) else f'row {row}'}"


def warn_long_texts(data: datasets.DatasetDict, max_length: int, sources: dict[str, str]) -> None:
    """Log, for each split, how many of its encoded texts are longer than `max_length` tokens, and where the first is.

    Args:
        data: encoded splits (with `input_ids`).
        max_length: the tokenizer's `model_max_length`.
        sources: the words that name each split (a `Source` also finds the line).
    """
    for split, dataset in data.items():
        lengths = pc.list_value_length(_column_values(dataset, "input_ids"))
        too_long = pc.greater(lengths, max_length)
        count = pc.sum(too_long).as_py() or 0
        if count:
            row, source = _first(too_long), sources.get(split, split)
            where = source.where(row) if isinstance(source, Source) else f"row {row}"
            logger.warning(
                "%s: %d texts are longer than the tokenizer's model_max_length of %d tokens ([BOS] and [EOS] "
                "included; the longest has %d, the first is at %s). They are not truncated: the NDR has no length "
                "limit of its own, but attention memory grows with the square of the length",
                source, count, max_length, pc.max(lengths).as_py(), where,
            )  # fmt: skip


def cache_files(*splits: datasets.DatasetDict) -> list[str]:
    """The files of the `datasets` cache that the splits are read from (the generated or read data and the encoded
    splits made from it), each once; empty for splits held in memory."""
    files = (entry["filename"] for data in splits for dataset in data.values() for entry in dataset.cache_files)
    return list(dict.fromkeys(files))


def warn_unknown_words(data: datasets.DatasetDict, tokenizer, unknown_words: str = "unk") -> None:
    """Evaluation words that training never showed: `unknown_words="error"` (train.py's default) raises a `UsageError`
    naming the split and the words; `"unk"` logs them (encode such data in `tokenizer.reading_unknown_words()`)."""
    vocabulary = set(tokenizer.get_vocab())  # NDRTokenizerFast splits words as the model reads them (punctuation too)
    find = getattr(tokenizer, "unknown_words_in", lambda texts: {w for t in texts for w in t.split()} - vocabulary)
    for split, dataset in data.items():
        if (unknown := sorted(find(dataset["text"]))) and unknown_words == "error":
            raise UsageError(f"{split}: {len(unknown)} words are not in the model's tokenizer: {unknown[:10]}; "
                             "--unknown_words unk reads them as [UNK]")  # fmt: skip
        if unknown:
            logger.warning("%s: %d words are not in the tokenizer and read as [UNK]: %s", split, len(unknown),
                           unknown[:10])  # fmt: skip
