"""What every task generator shares: seeding, shuffling, and the limits of a sample.

Each depth has its own random stream, seeded arithmetically from `(seed, task, family, depth)` with a
`random.Random` instance; nothing reads Python's `hash` or a global random state, so a call gives the same data in any
process on any machine.
"""

import random
from collections.abc import Callable, Iterable, Iterator


TASK_NAMES = ("ctl", "arithmetic", "listops", "ctlpp")
SPLIT_NAMES = ("train", "iid_test", "ood_valid", "ood_test")
MAX_TOKENS = 50
# Part of every split's cache key: bump it whenever a generator changes the data it writes.
GENERATOR_VERSION = 2
DIGITS = tuple(str(value) for value in range(10))

_TASK_CODES = {"ctl": 1, "arithmetic": 2, "listops": 3, "ctlpp": 4}
# iid_test and train share the "in_distribution" streams; the ood splits have their own.
_FAMILY_CODES = {"in_distribution": 1, "ood_valid": 2, "ood_test": 3, "shuffle": 4, "ctl_tables": 5}
_FAMILY_CODES["ctlpp_overlap"] = 6  # CTL++'s overlap gates; then a stream per CTL++ test split
_CTLPP_TEST_SPLITS = ("test_group_alternate", "test_self_loop", "test_all", "test_all_overlap",
                      "test_cross_unseen_symbols", "test_unseen_pairs", "test_all_pairs")  # fmt: skip
_FAMILY_CODES.update({split: 10 + index for index, split in enumerate(_CTLPP_TEST_SPLITS)})

# A grown expression (arithmetic, ListOps) is (text, value, depth, number of tokens).
Expression = tuple[str, int, int, int]
RandomFloat = Callable[[], float]


def derive_seed(seed: int, task: str, family: str, index: int) -> int:
    """The integer seed of one random stream: `seed`, then three codes below 1000, mixed in base 1000 (injective)."""
    return ((seed * 1000 + _TASK_CODES[task]) * 1000 + _FAMILY_CODES[family]) * 1000 + index


def shuffle(items: list, rng: random.Random) -> None:
    """Fisher-Yates with `rng.random()` only, whose stream Python keeps stable across versions."""
    for i in range(len(items) - 1, 0, -1):
        j = int(rng.random() * (i + 1))
        items[i], items[j] = items[j], items[i]


def check_seed(seed) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")


def check_task_name(name: str) -> None:
    if name not in TASK_NAMES:
        raise ValueError(f"unknown task name {name!r}; choose one of {', '.join(TASK_NAMES)}")


def distinct_draws(draws: Iterable, key: Callable, what: str, limit: int, seen: set | None = None) -> Iterator:
    """The draws of a random stream that are new by `key` (and not in `seen`), a failed draw (None) skipped; a stream
    that gives nothing new in `limit` draws in a row is a `RuntimeError`: "`what` in `limit` draws"."""
    seen = set() if seen is None else seen
    failed = 0
    for draw in draws:
        if draw is None or key(draw) in seen:
            failed += 1
            if failed > limit:
                raise RuntimeError(f"{what} in {limit} draws")
            continue
        failed = 0
        seen.add(key(draw))
        yield draw
