"""Your own data for training and evaluation: reading csv / json(l) / parquet files or a `datasets.load_dataset`
source, checking that each split has the text, label (and depth) columns filled in every row, the label set, and
encoding the splits for the model (labels looked up by name in the model's `label2id`).

Every problem is a one-line `UsageError` naming the file or split and, where it applies, the line (JSON lines, a JSON
array, csv; blank lines count, the header is line 1) or the row (parquet, a `--dataset_name` split, counted from 0),
the column, and what was expected. The checks run on whole columns with pyarrow compute (a million rows take well
under a second); a file is read again line by line only once a problem is known, to say where it is."""

import codecs
import contextlib
import csv
import json
import logging
import os
import re
from collections.abc import Iterator

import datasets
import pyarrow as pa
import pyarrow.compute as pc

from .arguments import DataArguments, evaluation_files
from .errors import UsageError, first_line


logger = logging.getLogger(__name__)
# the readers of `datasets.load_dataset` for --train_file / --validation_file / --test_file / --eval_files
DATA_FILE_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
# pandas reads "NA", "None", "null", "nan", ... in a csv as missing values by default; here only an empty field is
# missing, so such words stay text (a class may be called "None")
CSV_OPTIONS = {"keep_default_na": False, "na_values": [""]}
# what each column must hold, for the error messages
EXPECTED = {
    "text": "the input as text (space-separated tokens)",
    "label": "a class: a name or an integer",
    "depth": "an integer",
}


class Source(str):
    """The words that name a split in an error (`--train_file data/train.jsonl`), and where its rows are.

    A `str`, so it goes into messages as it is; `where(row)` turns a row of the split into the place a reader finds it
    at: `line 19` for a csv or JSON file (read again only then), `row 17` for parquet or a `datasets` split.

    Args:
        text: the words that name the split.
        path: the file the split was read from, or None (a `--dataset_name` split).
    """

    path: str | None

    def __new__(cls, text: str, path: str | None = None):
        source = super().__new__(cls, text)
        source.path = path
        return source

    def where(self, row: int) -> str:
        """Where row `row` (counted from 0) of the split is: `line N` in a text file, else `row N`."""
        return locate_row(self.path, row)

    def record(self, row: int):
        """Row `row` as the file holds it: a JSON value, the csv fields (a list), or None (parquet, a dataset)."""
        return next((record for _, record in _records(self.path, start=row)), None) if self.path else None


def _file_format(path: str | None) -> str | None:
    return DATA_FILE_FORMATS.get(os.path.splitext(path)[1].lower()) if path else None


def _is_json_array(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(4096).removeprefix(codecs.BOM_UTF8).lstrip()[:1] == b"["


def _records(path: str, start: int = 0) -> Iterator[tuple[int, object]]:
    """`(line, record)` for each row a reader makes of a csv or JSON file, from row `start` on: the line it starts at
    (1-based) and the row as parsed (a JSON value, or None where the line is not JSON; a list of csv fields)."""
    file_format = _file_format(path)
    if file_format == "csv":
        with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:
            reader, end, row = csv.reader(f), 0, -1  # row -1: the header
            for fields in reader:
                line, end = end + 1, reader.line_num
                if fields:  # pandas skips blank lines
                    if row >= start:
                        yield line, fields
                    row += 1
    elif file_format == "json" and _is_json_array(path):
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            text = f.read()
        decoder, position, row = json.JSONDecoder(), text.index("[") + 1, 0
        while True:
            while position < len(text) and text[position] in " \t\r\n,":
                position += 1
            if position >= len(text) or text[position] == "]":
                return
            value, end = decoder.raw_decode(text, position)
            if row >= start:
                yield text.count("\n", 0, position) + 1, value
            position, row = end, row + 1
    elif file_format == "json":
        with open(path, "rb") as f:
            row = 0
            for line, raw in enumerate(f, 1):
                if raw.strip():  # blank lines are skipped by the reader
                    if row >= start:
                        try:
                            yield line, json.loads(raw.decode("utf-8", errors="replace").removeprefix("\ufeff"))
                        except ValueError:
                            yield line, None
                    row += 1


def locate_row(path: str | None, row: int) -> str:
    """Where row `row` (from 0) of a split read from `path` is: `line N` in a csv or JSON file, else `row N`."""
    if _file_format(path) in ("csv", "json"):
        with contextlib.suppress(ValueError):  # a JSON array that does not parse: fall back to the row
            for line, _ in _records(path, start=row):
                return f"line {line}"
    return f"row {row}"


def first_problem_in_file(path: str) -> str | None:
    """The first problem in a csv or JSON file that a reader stopped on, with its line, or None if none is found.

    Looked for in this order: bytes that are not UTF-8; a JSON line (or a JSON file) that does not parse, or a JSON
    line that is not an object; a csv record with more fields than the header.

    Args:
        path: the file.

    Returns:
        E.g. `line 7: malformed JSON (Expecting ',' delimiter at column 31)`.
    """
    file_format = _file_format(path)
    if file_format not in ("csv", "json"):
        return None
    with open(path, "rb") as f:
        for line, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as error:
                bad = raw[error.start : error.end].hex(" ")
                return (
                    f"line {line}: bytes that are not UTF-8 (0x{bad} at byte {error.start + 1} of the line); save the "
                    "file as UTF-8"
                )
    if file_format == "json" and _is_json_array(path):
        with open(path, encoding="utf-8-sig") as f:
            try:
                json.load(f)
            except json.JSONDecodeError as error:
                return f"line {error.lineno}, column {error.colno}: malformed JSON ({error.msg})"
        return None
    if file_format == "json":
        with open(path, encoding="utf-8-sig") as f:
            for line, text in enumerate(f, 1):
                if not text.strip():
                    continue
                try:
                    value = json.loads(text.rstrip("\r\n"))
                except json.JSONDecodeError as error:
                    return f"line {line}, column {error.colno}: malformed JSON ({error.msg})"
                if not isinstance(value, dict):
                    return (
                        f'line {line}: expected a JSON object per line ({{"text": ..., "label": ...}}), found '
                        f"{type(value).__name__} {text.strip()[:40]!r}"
                    )
        return None
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader, end, header = csv.reader(f), 0, None
        try:
            for fields in reader:
                line, end = end + 1, reader.line_num
                if not fields:
                    continue
                if header is None:
                    header = fields
                elif len(fields) > len(header):
                    return (
                        f"line {line}: {len(fields)} fields where the header has {len(header)} (a comma in an "
                        'unquoted text? write it in double quotes: "a, b")'
                    )
        except csv.Error as error:
            return f"line {reader.line_num}: malformed csv ({error})"
    return None


@contextlib.contextmanager
def _quiet_datasets():
    """`datasets` logs a reader's failure at ERROR level, a second report of what `read_data_file` says in one line."""
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(logging.CRITICAL)
    try:
        yield
    finally:
        datasets.logging.set_verbosity(verbosity)


def read_data_file(flag: str, path: str, split: str) -> datasets.Dataset:
    """One data file as a `Dataset`.

    Args:
        flag: the flag that named the file (for the error message), e.g. `--train_file`.
        path: a csv, json, jsonl or parquet file.
        split: the split name to give it.

    Returns:
        The file's rows; a one-line `UsageError` naming the file (and the line) if it is missing, empty or unreadable.
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
    options = CSV_OPTIONS if file_format == "csv" else {}
    try:
        with _quiet_datasets():
            return datasets.load_dataset(file_format, data_files={split: path}, split=split, **options)
    except Exception as error:  # noqa: BLE001 - whatever the reader raises, the file is named in one line
        reason = first_line(error)
    if problem := first_problem_in_file(path):
        raise UsageError(f"{flag} {path} {problem}")
    if "corresponds to no data" in reason:  # what `datasets` says of a file with no rows (a csv header alone)
        raise UsageError(f"{flag} {path}: the file holds no rows")
    if file_format in ("csv", "json"):
        # The readers fix each column's type on the file's first block (10,000 csv rows, 10 MB of JSON) and fail on a
        # later value of another type (an integer column with a 1.5 or an "x" further down). Read in one block, the
        # types cover every row, and the column checks name the line of the odd value.
        whole_file = {"chunksize": os.path.getsize(path) + 1}  # rows for csv, bytes for JSON: either way, all of it
        try:
            with _quiet_datasets():
                return datasets.load_dataset(
                    file_format, data_files={split: path}, split=split, **options, **whole_file
                )
        except Exception:  # noqa: BLE001 - the first reason is the one to report
            pass
    raise UsageError(f"{flag} {path}: cannot read it as {file_format} ({reason})")


def load_dataset_splits(name: str, config_name: str | None = None) -> datasets.DatasetDict:
    """`datasets.load_dataset(name, config_name)`, or a one-line `UsageError` naming `--dataset_name`."""
    try:
        return datasets.load_dataset(name, config_name)
    except Exception as error:  # noqa: BLE001 - a missing dataset, an offline hub, a bad config: one line
        raise UsageError(f"--dataset_name {name!r}: cannot load it ({first_line(error)})") from None


def read_own_data(data_args: DataArguments) -> tuple[datasets.DatasetDict, dict[str, Source]]:
    """The user's splits as they are in the files.

    Args:
        data_args: `--dataset_name` (its `train` split and the others) or `--train_file`, plus the evaluation files.

    Returns:
        `(splits, sources)`: the splits, and for each split the words that name it in an error
        (`--eval_files ood.jsonl`, ...), as a `Source` that also finds its rows in the file.
    """
    splits, sources = {}, {}
    if data_args.dataset_name:
        name = data_args.dataset_name
        loaded = load_dataset_splits(name, data_args.dataset_config_name)
        if "train" not in loaded:
            raise UsageError(f"--dataset_name {name!r} has no train split (its splits: {list(loaded)})")
        for split, dataset in loaded.items():
            splits[split], sources[split] = dataset, Source(f"split {split!r} of --dataset_name {name}")
    else:
        splits["train"] = read_data_file("--train_file", data_args.train_file, "train")
        sources["train"] = Source(f"--train_file {data_args.train_file}", data_args.train_file)
    for split, (flag, path) in evaluation_files(data_args).items():
        if split in splits:
            raise UsageError(f"{flag} {path}: --dataset_name {data_args.dataset_name} already has a split {split!r}")
        splits[split], sources[split] = read_data_file(flag, path, split), Source(f"{flag} {path}", path)
    return datasets.DatasetDict(splits), sources


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


def warn_unknown_words(data: datasets.DatasetDict, tokenizer) -> None:
    """Log how many evaluation words training never showed: they map to [UNK], and accuracy will suffer."""
    vocabulary = tokenizer.get_vocab()
    for split, dataset in data.items():
        unknown = sorted({word for text in dataset["text"] for word in text.split()} - set(vocabulary))
        if unknown:
            logger.warning(
                "%s: %d words are not in the tokenizer and read as [UNK]: %s", split, len(unknown), unknown[:10]
            )
