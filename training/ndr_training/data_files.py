"""Reading your own data: csv / json(l) / parquet files (`read_data_file`) or a `datasets.load_dataset` source
(`load_dataset_splits`), the splits a run names (`read_own_data`), and, once a problem is known, the line of a file a
row came from (`Source`, `locate_row`, `first_problem_in_file`): JSON lines, a JSON array and csv are read again line
by line to say where it is (blank lines count, the header is line 1); parquet and `--dataset_name` splits give the
row, counted from 0. The checks of the columns are in `data`."""

import codecs
import contextlib
import csv
import json
import logging
import os
import warnings
from collections.abc import Iterator

import datasets
from modeling_ndr.training.errors import UsageError, first_line

from .arguments import DataArguments, evaluation_files


# the readers of `datasets.load_dataset` for --train_file / --validation_file / --test_file / --eval_files
DATA_FILE_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
# pandas reads "NA", "None", "null", "nan", ... in a csv as missing values by default; here only an empty field is
# missing, so such words stay text (a class may be called "None")
CSV_OPTIONS = {"keep_default_na": False, "na_values": [""]}


class Source(str):
    """The words that name a split in an error (`--train_file data/train.jsonl`), and where its rows are.

    A `str`, so it goes into messages as it is; `where(row)` turns a row of the split into the place a reader finds it
    at: `line 19` for a csv or JSON file (read again only then), `row 17` for parquet or a `datasets` split.

    `Source(text, path=None)`: `text` is the words that name the split, `path` the file the split was read from, or
    None (a `--dataset_name` split). (A `str` subclass is built in `__new__`, so these are not `__init__` arguments.)
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
    """`datasets` logs a reader's failure at ERROR level, a second report of what `read_data_file` says in one line;
    pandas warns of a csv column with mixed types (two lines), which the column checks then name with its line."""
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Columns \(.*\) have mixed types")
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
        # types cover every row, and the column checks name the line of the odd value. (pandas' C engine still infers
        # types on pieces of ~1 MB inside a block; its python engine infers them on the whole, ~5 s a million rows.)
        whole_file = {"chunksize": os.path.getsize(path) + 1}  # rows for csv, bytes for JSON: either way, all of it
        if file_format == "csv":
            whole_file["engine"] = "python"
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
