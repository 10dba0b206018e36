"""Split plans and generation: which depths each split holds, how many samples each, from which random stream.

- Sizes are split evenly over a split's depths ("balanced per depth"). A depth that has fewer distinct samples than
  its share keeps what it has and the rest moves to the other depths (counts of the uncapped depths differ by at
  most one).
- Depth 1 of CTL and of arithmetic is enumerated in full into `train`; `iid_test` of these two tasks covers depths
  2-5.
- `iid_test` and `train` read the same per-depth streams: `iid_test` takes the first samples of each stream and
  `train` the samples after them, so the two are disjoint and identically distributed. `iid_test` takes at most a
  quarter of a depth's distinct samples.
- `ood_valid` / `ood_test` have depths that `train` lacks, so they cannot leak into it.
"""

import math
import os
import pickle
import random
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tqdm.auto import tqdm

import datasets

from .arithmetic import arithmetic_space, arithmetic_stream
from .common import (
    GENERATOR_VERSION,
    MAX_TOKENS,
    SPLIT_NAMES,
    check_seed,
    check_task_name,
    derive_seed,
    distinct_draws,
    shuffle,
)
from .ctl import CTL_DIRECTIONS, CTL_SYMBOLS, ctl_space, ctl_stream, ctl_tables, ctl_text_in_direction
from .ctlpp import ctlpp_world
from .listops import listops_stream
from .vocabulary import task_label_names


_OPTIONS = {"ctl": {"direction": CTL_DIRECTIONS}, "arithmetic": {}, "listops": {}}
_SPLIT_CODES = {name: index + 1 for index, name in enumerate(SPLIT_NAMES)}
_MAX_FAILED_DRAWS = 1_000_000


@dataclass(frozen=True)
class _TaskDefaults:
    n_train: int
    n_eval: int
    train_depths: tuple[int, ...]
    iid_depths: tuple[int, ...]
    ood_valid_depths: tuple[int, ...]
    ood_test_depths: tuple[int, ...]
    # Per split family: arithmetic's probability of a sub-operation, ListOps' probability of a sub-list.
    p_in_distribution: float = 0.0
    p_ood: float = 0.0


_DEFAULTS = {
    "ctl": _TaskDefaults(53_700, 1_000, (1, 2, 3, 4, 5), (2, 3, 4, 5), (6, 7, 8), (9, 10)),
    "arithmetic": _TaskDefaults(100_000, 1_000, (1, 2, 3, 4, 5), (2, 3, 4, 5), (6,), (7, 8), 0.2, 0.3),
    "listops": _TaskDefaults(1_000_000, 1_000, (1, 2, 3, 4, 5), (1, 2, 3, 4, 5), (6,), (7, 8), 0.3, 0.3),
    # CTL++: the same lengths in every split (2-6 functions); its test splits are named by the pattern they hold
    "ctlpp": _TaskDefaults(300_000, 1_000, (2, 3, 4, 5, 6), (3, 4, 5, 6), (), ()),
}

# The evaluation splits do not depend on n_train: the smallest train set a task allows keeps their generation quick
# (CTL and arithmetic put all of depth 1 into train: 72 and 200 samples). `load_task(name, seed,
# n_train=SMALLEST_N_TRAIN[name], n_eval=n)` draws fresh evaluation splits.
SMALLEST_N_TRAIN = {"ctl": 72, "arithmetic": 200, "listops": 1, "ctlpp": 4_096}


def _capacity(task: str, depth: int) -> int | None:
    """How many distinct samples a depth's stream can deliver without endless duplicate draws (None: plenty)."""
    if task == "ctl":
        space = ctl_space(depth)
        return space if space <= 60_000 else space // 2
    if task == "arithmetic":
        space = arithmetic_space(depth)
        return None if space is None else (space if depth == 1 else space // 2)
    return None


def _balanced_counts(
    total: int, capacities: dict[int, int | None], argument: str, requested: int | None = None
) -> dict[int, int]:
    """Split `total` evenly over the depths; a depth with fewer samples than its share passes the rest on.
    `requested` is the size the caller asked for, when `total` is only the part left after fixed samples."""
    order = sorted(capacities, key=lambda depth: (math.inf if capacities[depth] is None else capacities[depth], depth))
    counts, remaining = {}, total
    for index, depth in enumerate(order):
        share = math.ceil(remaining / (len(order) - index))
        capacity = capacities[depth]
        counts[depth] = share if capacity is None else min(share, capacity)
        remaining -= counts[depth]
    if remaining > 0:
        fixed = 0 if requested is None else requested - total
        available = fixed + total - remaining
        raise ValueError(
            f"{argument}={total if requested is None else requested} is more than the {available} distinct samples "
            "these depths have"
        )
    return dict(sorted(counts.items()))


def _split_plans(task: str, n_train: int, n_eval: int) -> dict[str, dict]:
    """The generation parameters of each split: depth counts, samples to skip, stream family, p, nesting limit."""
    defaults = _DEFAULTS[task]
    capacity = {depth: _capacity(task, depth) for depth in defaults.train_depths}
    # iid_test takes at most a quarter of a depth's distinct samples; train gets what iid_test leaves.
    iid_capacity = {depth: None if capacity[depth] is None else capacity[depth] // 4 for depth in defaults.iid_depths}
    iid_counts = _balanced_counts(n_eval, iid_capacity, "n_eval")
    # Depth 1 of CTL and arithmetic goes whole into train (every function on every symbol, every operation).
    enumerated = {1: capacity[1]} if task in ("ctl", "arithmetic") else {}
    if n_train < sum(enumerated.values()):
        raise ValueError(
            f"n_train={n_train} is too small for {task}: train holds all {sum(enumerated.values())} depth-1 samples"
        )
    train_capacity = {
        depth: None if capacity[depth] is None else capacity[depth] - iid_counts.get(depth, 0)
        for depth in defaults.train_depths
        if depth not in enumerated
    }
    rest = _balanced_counts(n_train - sum(enumerated.values()), train_capacity, "n_train", requested=n_train)
    train_counts = {**enumerated, **rest}

    def plan(family, counts, skips, p, depths):
        return {
            "family": family,
            "counts": tuple(sorted(counts.items())),
            "skips": tuple(sorted(skips.items())),
            "p": p,
            # ListOps sub-lists nest at most as deep as the family's deepest depth (train and iid_test share it).
            "max_depth": max(depths),
        }

    ood_valid_counts = _balanced_counts(n_eval, dict.fromkeys(defaults.ood_valid_depths), "n_eval")
    ood_test_counts = _balanced_counts(n_eval, dict.fromkeys(defaults.ood_test_depths), "n_eval")
    p_in, p_ood = defaults.p_in_distribution, defaults.p_ood
    return {
        "train": plan("in_distribution", train_counts, iid_counts, p_in, defaults.train_depths),
        "iid_test": plan("in_distribution", iid_counts, {}, p_in, defaults.train_depths),
        "ood_valid": plan("ood_valid", ood_valid_counts, {}, p_ood, defaults.ood_valid_depths),
        "ood_test": plan("ood_test", ood_test_counts, {}, p_ood, defaults.ood_test_depths),
    }


# ---------------------------------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------------------------------


def _depth_stream(task: str, seed: int, family: str, depth: int, p: float, max_depth: int) -> Iterator:
    """Distinct (text, label) pairs of one depth; CTL texts are in forward order."""
    rng = random.Random(derive_seed(seed, task, family, depth))
    if task == "ctl":
        draws = ctl_stream(rng, ctl_tables(seed), depth)
    elif task == "arithmetic":
        draws = arithmetic_stream(rng, depth, p)
    else:
        draws = listops_stream(rng, depth, max_depth, p)
    what = f"{task}: no new sample of depth {depth}"
    yield from distinct_draws(draws, lambda draw: draw[0], what, _MAX_FAILED_DRAWS)


# Splits of at least this many rows draw their depths in parallel processes (`data_processes`).
PARALLEL_MIN_ROWS = 200_000


def data_processes() -> int:
    """How many processes draw a large split's depths: `NDR_DATA_PROCESSES` if set (1: none beside this one), else
    the CPUs this process may use. ListOps' 1M training rows, five depths: 100 s on one core of a GPU machine."""
    value = os.environ.get("NDR_DATA_PROCESSES")
    if value is None:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"NDR_DATA_PROCESSES={value!r} is invalid: expected a positive number of processes")
    return int(value)


def _draw_depth(task, seed, family, depth, p, max_depth, skip, count, progress=None) -> list[tuple[str, int, int]]:
    """`count` rows `(text, label, depth)` of one depth's stream, after its first `skip` (drawn by another split)."""
    stream = _depth_stream(task, seed, family, depth, p, max_depth)
    for _ in range(skip):
        next(stream)
    rows = []
    for _ in range(count):
        text, label = next(stream)
        rows.append((text, label, depth))
        if progress is not None:
            progress.update()
    return rows


# The child imports the package's `tasks` only, without the package's `__init__` (torch, transformers: 3 of its 4 s
# of start-up): a bare `modeling_ndr` module whose path is the package's folder.
_DRAW_IN_SUBPROCESS = (
    "import pickle, sys, types; package = types.ModuleType('modeling_ndr'); package.__path__ = [sys.argv[1]]; "
    "sys.modules['modeling_ndr'] = package; from modeling_ndr.tasks.generation import _draw_depth; "
    "sys.stdout.buffer.write(pickle.dumps(_draw_depth(*pickle.load(sys.stdin.buffer))))"
)


def _draw_in_subprocess(job: tuple) -> list[tuple[str, int, int]]:
    """`_draw_depth(*job)` in a fresh interpreter: not `multiprocessing`, whose spawn would run the caller's script
    again in each child (a script without `if __name__ == "__main__":`) and whose fork copies a process that may hold
    threads (torch's, the tokenizers')."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", _DRAW_IN_SUBPROCESS, package], input=pickle.dumps(job),
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"drawing depth {job[3]} of {job[0]} in a subprocess failed (exit status "
                           f"{done.returncode}): " + " | ".join(error))  # fmt: skip
    return pickle.loads(done.stdout)


def _generate_split(
    task: str,
    seed: int,
    split: str,
    family: str,
    counts: tuple[tuple[int, int], ...],
    skips: tuple[tuple[int, int], ...],
    p: float,
    max_depth: int,
    direction: str,
    max_tokens: int,
    generator_version: int,
) -> Iterator[dict]:
    """Rows of one split (the `Dataset.from_generator` function; every argument is part of the cache key)."""
    del max_tokens, generator_version  # only in the cache key, so that changing them regenerates the data
    skip = dict(skips)
    jobs = [(task, seed, family, depth, p, max_depth, skip.get(depth, 0), count) for depth, count in counts if count]
    total = sum(count for _, count in counts)
    workers = min(len(jobs), data_processes()) if total >= PARALLEL_MIN_ROWS else 1
    rows = []
    # rows are drawn and shuffled before `datasets` sees the first one: show the drawing of large splits
    with tqdm(total=total, desc=f"{task} {split}: drawing samples", unit=" rows", disable=total < 200_000) as bar:
        if workers > 1:  # each depth's stream is independent of the others: the same rows, in the same order
            with ThreadPoolExecutor(max_workers=workers) as pool:  # threads that wait for an interpreter each
                # the deepest depths first (they take longest: ListOps' depth 5 1.7 times its depth 1)
                futures = {job: pool.submit(_draw_in_subprocess, job) for job in sorted(jobs, key=lambda j: -j[3])}
                for job in jobs:
                    drawn = futures[job].result()
                    rows += drawn
                    bar.update(len(drawn))
        else:
            for job in jobs:
                rows += _draw_depth(*job, progress=bar)
    shuffle(rows, random.Random(derive_seed(seed, task, "shuffle", _SPLIT_CODES[split])))
    for text, label, depth in rows:
        if task == "ctl":
            text = ctl_text_in_direction(text, direction)
        yield {"text": text, "label": label, "depth": depth}


def _features(task: str) -> datasets.Features:
    return datasets.Features(
        {
            "text": datasets.Value("string"),
            "label": datasets.ClassLabel(names=task_label_names(task)),
            "depth": datasets.Value("int32"),
        }
    )


# A split is generated in memory and shuffled before it is written (about 200 bytes a row in Python objects), and the
# streams are pure Python (ListOps: about 7,000 rows a second): sizes above this would take hours and tens of GB.
MAX_SPLIT_SIZE = 20_000_000


def _check_size(argument: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{argument} must be a positive int (or None for the paper's size), got {value!r}")
    if value > MAX_SPLIT_SIZE:
        raise ValueError(
            f"{argument}={value:,} is too large: a split is generated and shuffled in memory (about 200 bytes a row) "
            f"by a pure-Python generator; at most {MAX_SPLIT_SIZE:,} rows per split"
        )


def _check_options(name: str, options: dict) -> dict:
    allowed = _OPTIONS[name]
    for option, value in options.items():
        if option not in allowed:
            choices = ", ".join(allowed) if allowed else "none"
            raise ValueError(f"unknown option {option!r} for task {name!r}; allowed options: {choices}")
        if value not in allowed[option]:
            raise ValueError(f"{option}={value!r} is not allowed for task {name!r}; choose one of {allowed[option]}")
    return {option: options.get(option, choices[0]) for option, choices in allowed.items()}


def split_description(name: str, split: str, seed: int, counts: dict[int, int], direction: str | None = None) -> str:
    """How one split was generated (also stored as the split's `info.description`)."""
    depths = ", ".join(f"depth {depth}: {count}" for depth, count in counts.items())
    call = f"modeling_ndr.load_task({name!r}, seed={seed}" + (f", direction={direction!r}" if direction else "") + ")"
    lines = [f"{split} split of {call}, generator version {GENERATOR_VERSION}; {depths}."]
    if name == "ctl":
        lines.append(
            "Label: the resulting symbol as an integer (000 -> 0 ... 111 -> 7). Forward text `101 d a b` means "
            "b(a(d(101))); backward writes it reversed, `b a d 101`."
        )
        tables = ctl_tables(seed)
        lines.append(
            "Function tables (f(000) ... f(111)): "
            + "; ".join(f"{function}: {' '.join(CTL_SYMBOLS[v] for v in table)}" for function, table in tables.items())
            + "."
        )
    elif name == "arithmetic":
        lines.append("Label: the value of the fully bracketed expression mod 10. Depth: nesting levels of operations.")
    else:
        lines.append(
            "Label: the value of the list (MIN, MAX, MED = middle of a stable sort, floor of the mean of the two "
            "middle values for an even count, SM = sum mod 10). Depth: dependency depth, counting only the arguments "
            "an operation uses (MIN/MAX ties go to the leftmost argument)."
        )
    return " ".join(lines)


def load_task(
    name: str,
    seed: int = 0,
    n_train: int | None = None,
    n_eval: int | None = None,
    *,
    cache_dir: str | None = None,
    **options,
) -> datasets.DatasetDict:
    """Generate (or load from the `datasets` cache) one of the paper's tasks.

    Args:
        name (`str`): `"ctl"`, `"arithmetic"`, `"listops"` or `"ctlpp"` (CTL++).
        seed (`int`, *optional*, defaults to 0): selects the data (and CTL's function tables); the same seed gives
            the same data in any process and on any machine.
        n_train (`int`, *optional*): size of `train` (defaults: CTL 53,700, arithmetic 100,000, ListOps 1,000,000).
        n_eval (`int`, *optional*): size of each evaluation split (default 1,000).
        cache_dir (`str`, *optional*): where `Dataset.from_generator` caches the splits (default: the `datasets`
            cache).
        **options: CTL takes `direction="forward"` (`101 d a b`) or `"backward"` (`b a d 101`). CTL++ takes
            `variant` (`"alternate"`, `"parallel_branch"`, the default, or `"parallel_branch_2stage"`),
            `function_overlap` (0-16, default 0), `symbol_overlap` (1-8, default 8) and `direction` (`"backward"`,
            the default, or `"forward"`); see `modeling_ndr.tasks.ctlpp`.

    Returns:
        `datasets.DatasetDict` with splits `train`, `iid_test`, `ood_valid`, `ood_test` (CTL++: `train`,
        `iid_test` and its variant's test splits, `ctlpp_split_names`) and columns `text` (tokens separated by
        single spaces), `label` (`ClassLabel`, names from `task_label_names`) and `depth`.
    """
    check_task_name(name)
    check_seed(seed)
    if name == "ctlpp":
        from .ctlpp_data import load_ctlpp

        return load_ctlpp(seed, n_train, n_eval, cache_dir, **options)
    options = _check_options(name, options)
    defaults = _DEFAULTS[name]
    n_train = defaults.n_train if n_train is None else n_train
    n_eval = defaults.n_eval if n_eval is None else n_eval
    _check_size("n_train", n_train)
    _check_size("n_eval", n_eval)
    direction = options.get("direction", "forward")

    splits = {}
    for split, plan in _split_plans(name, n_train, n_eval).items():
        dataset = datasets.Dataset.from_generator(
            _generate_split,
            features=_features(name),
            cache_dir=cache_dir,
            split=datasets.NamedSplit(split),
            gen_kwargs={
                "task": name,
                "seed": seed,
                "split": split,
                **plan,
                # Only CTL's text depends on the direction; keep it out of the other tasks' cache keys.
                "direction": direction if name == "ctl" else "",
                "max_tokens": MAX_TOKENS,
                "generator_version": GENERATOR_VERSION,
            },
        )
        dataset.info.description = split_description(
            name, split, seed, dict(plan["counts"]), direction if name == "ctl" else None
        )
        splits[split] = dataset
    return datasets.DatasetDict(splits)


def split_depths(name: str) -> dict[str, tuple[int, ...]]:
    """The depths of each split of a task: `{"train": (1, ..., 5), "iid_test": ..., "ood_valid": ..., ...}`."""
    check_task_name(name)
    if name == "ctlpp":  # the default variant's splits (every variant's: the same lengths, 2-6 functions)
        return {split: depths for split, (_, depths) in ctlpp_world().splits.items()}
    defaults = _DEFAULTS[name]
    return {
        "train": defaults.train_depths,
        "iid_test": defaults.iid_depths,
        "ood_valid": defaults.ood_valid_depths,
        "ood_test": defaults.ood_test_depths,
    }
