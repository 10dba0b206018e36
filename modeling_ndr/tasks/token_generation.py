"""The token tasks as `datasets.DatasetDict`s (`load_token_task`) and their rows as model inputs (`encode_token_rows`).

How the data is made (the formats are in `token_tasks.py`):

- Every (seed, task, split family, length) has its own random stream, a `random.Random` seeded arithmetically
  (`token_task_seed`; nothing reads Python's `hash` or a global random state), so a call gives the same rows in any
  process on any machine. Within a stream every text appears at most once.
- `train` is balanced over its lengths (1-40; addition 1-20), as the paper's tasks are over depths: a length with
  fewer distinct rows than its share (copy's length 1 has ten) keeps what it has and passes the rest on. Its rows
  are shuffled. Each evaluation split holds `n_eval` rows of one length.
- `train` never holds the text of a row of an evaluation split at a length it trains on (`test_40`, and the carry
  task's `long_chains_40`; addition's `test_20`): those rows are drawn first and skipped in `train`'s streams, so
  changing `n_eval` changes `train` slightly. The longer evaluation lengths cannot occur in `train`.
"""

import random
from collections.abc import Iterator

import datasets

from .common import check_seed, distinct_draws, shuffle
from .generation import _balanced_counts, _check_size
from .token_tasks import (
    TOKEN_GENERATOR_VERSION,
    TOKEN_LABEL_NAMES,
    TOKEN_SPLIT_NAMES,
    TRAIN_LONG_CHAIN_SHARE,
    TRAIN_MAX_LENGTH,
    check_token_task_name,
    distinct_rows,
    draw_row,
    split_family_and_length,
    token_task_seed,
)


# Defaults: train as large as a CPU run of an hour gets through; evaluation splits of a few hundred rows, which the
# 1000-position carry splits need (pure Python: all default splits of a task take seconds).
DEFAULT_N_TRAIN = 100_000
DEFAULT_N_EVAL = 500
_MAX_FAILED_DRAWS = 100_000
_LABEL_IDS = {name: index for index, name in enumerate(TOKEN_LABEL_NAMES)}


def _row_stream(task: str, seed: int, family: str, length: int, excluded: set[str] = frozenset()) -> Iterator[dict]:
    """Distinct rows of one (task, seed, family, length), none of whose texts is in `excluded`."""
    rng = random.Random(token_task_seed(seed, task, family, length))

    def rows():
        while True:
            tokens, labels = draw_row(task, rng, family, length)
            yield {"text": " ".join(tokens), "labels": labels, "length": length}

    what = f"{task}: no new {family} row of length {length}"
    yield from distinct_draws(rows(), lambda row: row["text"], what, _MAX_FAILED_DRAWS, seen=set(excluded))


def _evaluation_rows(task: str, seed: int, split: str, n_eval: int) -> list[dict]:
    family, length = split_family_and_length(split)
    stream = _row_stream(task, seed, family, length)
    return [next(stream) for _ in range(n_eval)]


def _splits_inside_train(task: str) -> list[str]:
    """The evaluation splits at a length that `train` also has (their rows are kept out of `train`)."""
    return [
        split for split in TOKEN_SPLIT_NAMES[task][1:] if split_family_and_length(split)[1] <= TRAIN_MAX_LENGTH[task]
    ]


def _train_counts(task: str, n_train: int, n_eval: int) -> dict[int, int]:
    """Rows of `train` per length: balanced, within what each length has once the evaluation rows are kept out."""
    kept_out = dict.fromkeys(range(1, TRAIN_MAX_LENGTH[task] + 1), 0)
    for split in _splits_inside_train(task):
        kept_out[split_family_and_length(split)[1]] += n_eval
    capacities = {}
    for length, count in kept_out.items():
        capacity = distinct_rows(task, length)
        capacities[length] = None if capacity is None else max(capacity - count, 0)
    return _balanced_counts(n_train, capacities, "n_train")


def _generate_split(task: str, seed: int, split: str, n_train: int, n_eval: int, generator_version: int) -> Iterator:
    """Rows of one split (the `Dataset.from_generator` function; every argument is part of the cache key)."""
    del generator_version  # only in the cache key, so that a changed generator regenerates the data
    if split != "train":
        yield from _evaluation_rows(task, seed, split, n_eval)
        return
    excluded: dict[int, set[str]] = {}
    for other in _splits_inside_train(task):
        texts = (row["text"] for row in _evaluation_rows(task, seed, other, n_eval))
        excluded.setdefault(split_family_and_length(other)[1], set()).update(texts)
    rows = []
    for length, count in _train_counts(task, n_train, n_eval).items():
        stream = _row_stream(task, seed, "train", length, excluded.get(length, frozenset()))
        rows.extend(next(stream) for _ in range(count))
    shuffle(rows, random.Random(token_task_seed(seed, task, "shuffle", 0)))
    yield from rows


def _features() -> datasets.Features:
    return datasets.Features(
        {
            "text": datasets.Value("string"),
            "labels": datasets.List(datasets.Value("string")),
            "length": datasets.Value("int32"),
        }
    )


def token_split_description(name: str, split: str, seed: int, n_train: int, n_eval: int) -> str:
    """How one split was made (also stored as the split's `info.description`)."""
    call = f"modeling_ndr.tasks.load_token_task({name!r}, seed={seed})"
    family, length = split_family_and_length(split)
    if family == "train":
        counts = _train_counts(name, n_train, n_eval)
        what = f"{n_train} rows, lengths {min(counts)}-{max(counts)} balanced"
        if name == "carry":
            what += f", a share of {TRAIN_LONG_CHAIN_SHARE} with a long carry chain"
    elif family == "valid":
        what = f"{n_eval} rows of length {length} for checkpoint selection (their own stream, not test_{length}'s)"
    elif family == "long_chains":
        what = f"{n_eval} rows of length {length} whose longest carry chain covers at least half of the positions"
    else:
        what = f"{n_eval} rows of length {length}"
    return (
        f"{split} split of {call}, token generator version {TOKEN_GENERATOR_VERSION}: {what}. Labels: a digit per "
        "scored token, null elsewhere."
    )


def load_token_task(
    name: str,
    seed: int = 0,
    n_train: int | None = None,
    n_eval: int | None = None,
    *,
    cache_dir: str | None = None,
) -> datasets.DatasetDict:
    """Generate (or load from the `datasets` cache) a token task: one output per input token.

    Args:
        name (`str`): `"copy"`, `"reverse"`, `"addition"` (the Universal Transformer's string tasks) or `"carry"`
            (addition with the operands aligned, one token per digit position).
        seed (`int`, *optional*, defaults to 0): selects the data; the same seed gives the same rows in any process
            and on any machine.
        n_train (`int`, *optional*, defaults to 100,000): size of `train`.
        n_eval (`int`, *optional*, defaults to 500): size of each evaluation split.
        cache_dir (`str`, *optional*): where `Dataset.from_generator` caches the splits (default: the `datasets`
            cache).

    Returns:
        `datasets.DatasetDict` with the splits `TOKEN_SPLIT_NAMES[name]` (`train`, `test_<length>` per evaluation
        length, for `carry` also `long_chains_<length>`, for the others `valid_<longest length>`) and columns `text`
        (tokens separated by single spaces), `labels` (one per token: a digit `"0"`-`"9"` where the answer is read,
        `None` elsewhere) and `length` (copy and reverse: input symbols; addition: digits of the longer operand; carry:
        digit positions).
    """
    check_token_task_name(name)
    check_seed(seed)
    n_train = DEFAULT_N_TRAIN if n_train is None else n_train
    n_eval = DEFAULT_N_EVAL if n_eval is None else n_eval
    _check_size("n_train", n_train)
    _check_size("n_eval", n_eval)
    _train_counts(name, n_train, n_eval)  # too many rows for the short lengths: one error before anything is drawn
    splits = {}
    for split in TOKEN_SPLIT_NAMES[name]:
        dataset = datasets.Dataset.from_generator(
            _generate_split,
            features=_features(),
            cache_dir=cache_dir,
            split=datasets.NamedSplit(split),
            gen_kwargs={
                "task": name,
                "seed": seed,
                "split": split,
                # train skips the rows of the evaluation splits it could contain, so it depends on n_eval too
                "n_train": n_train if split == "train" else 0,
                "n_eval": n_eval,
                "generator_version": TOKEN_GENERATOR_VERSION,
            },
        )
        dataset.info.description = token_split_description(name, split, seed, n_train, n_eval)
        splits[split] = dataset
    return datasets.DatasetDict(splits)


def encode_token_rows(batch: dict, tokenizer, label2id: dict[str, int] | None = None) -> dict:
    """Token ids and label ids of a batch of rows, for `NDRForTokenClassification`; the function of
    `dataset.map(encode_token_rows, batched=True, fn_kwargs={"tokenizer": tokenizer}, remove_columns=["text"])`.

    Args:
        batch (`dict`): columns `text` and `labels` (a list per row, one label per space-separated token, `None`
            where nothing is scored).
        tokenizer: a word-level tokenizer (`token_task_tokenizer(name)`), which gives each text token one id.
        label2id (`dict`, *optional*): the id of each label (a model's `config.label2id`); default: the position in
            `TOKEN_LABEL_NAMES`.

    Returns:
        `dict` with `input_ids`, `attention_mask` and `labels`: the id of each label in `TOKEN_LABEL_NAMES`, -100
        at [BOS], [EOS] and the unscored tokens.
    """
    encoded = tokenizer(batch["text"], verbose=False)
    label2id = _LABEL_IDS if label2id is None else label2id
    label_ids = []
    for row, (text, labels) in enumerate(zip(batch["text"], batch["labels"])):
        if len(labels) != len(text.split()):
            raise ValueError(f"row {row} has {len(labels)} labels for {len(text.split())} tokens: {text[:60]!r}")
        ids = []
        for word in encoded.word_ids(row):
            label = None if word is None else labels[word]
            if label is not None and label not in label2id:
                raise ValueError(f"row {row}: label {label!r} is not one of {', '.join(label2id)}")
            ids.append(-100 if label is None else label2id[label])
        label_ids.append(ids)
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"], "labels": label_ids}


__all__ = ["DEFAULT_N_TRAIN", "DEFAULT_N_EVAL", "load_token_task", "token_split_description", "encode_token_rows"]
