"""CTL, compositional table lookup: 8 symbols `000`-`111` and 9 random bijections `a`-`i` drawn from the seed.

Forward `101 d a b` = b(a(d(101))); backward writes the same sample fully reversed, `b a d 101`. Compositions are
uniform over functions and symbols at each depth.
"""

import random
from collections.abc import Iterator

from .common import check_seed, derive_seed, shuffle


CTL_SYMBOLS = tuple(f"{value:03b}" for value in range(8))
CTL_FUNCTIONS = tuple("abcdefghi")
CTL_DIRECTIONS = ("forward", "backward")


def ctl_tables(seed: int = 0) -> dict[str, list[int]]:
    """The 9 functions of CTL for `seed`: `{"a": [f(0), ..., f(7)], ...}`, each a permutation of 0..7.

    Drawn from `seed` alone; the tables are all distinct and none is the identity.
    """
    check_seed(seed)
    rng = random.Random(derive_seed(seed, "ctl", "ctl_tables", 0))
    tables: dict[str, list[int]] = {}
    identity = list(range(len(CTL_SYMBOLS)))
    for name in CTL_FUNCTIONS:
        while True:
            table = list(identity)
            shuffle(table, rng)
            if table != identity and table not in tables.values():
                break
        tables[name] = table
    return tables


def ctl_sample(tables: dict[str, list[int]], symbol: int, functions: tuple[str, ...]) -> tuple[str, int]:
    """Forward text (`symbol f1 f2 ...`, functions in order of application) and the resulting symbol."""
    value = symbol
    for function in functions:
        value = tables[function][value]
    return " ".join((CTL_SYMBOLS[symbol], *functions)), value


def ctl_stream(rng: random.Random, tables: dict[str, list[int]], depth: int) -> Iterator[tuple[str, int]]:
    """Distinct (forward text, label) pairs of `depth` functions in random order (uniform over the space)."""
    n_functions = len(CTL_FUNCTIONS)
    if ctl_space(depth) <= 60_000:  # small enough to enumerate and shuffle: every sample, no coupon collecting
        everything = []
        for number in range(ctl_space(depth)):  # number = symbol + 8 * (f_1 + 9 * (f_2 + 9 * ...))
            rest, symbol = divmod(number, len(CTL_SYMBOLS))
            functions = []
            for _ in range(depth):
                rest, function = divmod(rest, n_functions)
                functions.append(CTL_FUNCTIONS[function])
            everything.append(ctl_sample(tables, symbol, tuple(functions)))
        shuffle(everything, rng)
        yield from everything
        return
    rnd = rng.random
    while True:
        symbol = int(rnd() * len(CTL_SYMBOLS))
        functions = tuple(CTL_FUNCTIONS[int(rnd() * n_functions)] for _ in range(depth))
        yield ctl_sample(tables, symbol, functions)


def ctl_space(depth: int) -> int:
    return len(CTL_SYMBOLS) * len(CTL_FUNCTIONS) ** depth


def ctl_text_in_direction(forward_text: str, direction: str) -> str:
    return forward_text if direction == "forward" else " ".join(reversed(forward_text.split(" ")))


def ctl_compositions(
    depths, n_per_depth: int, seed: int = 0, direction: str = "forward", sample_seed: int = 1
) -> list[dict]:
    """CTL samples of any depth with the tables of `seed` (e.g. compositions longer than any split): `n_per_depth`
    distinct rows per depth, `{"text", "label", "depth"}`, drawn from a stream seeded by `sample_seed` and the depth.

    The splits of `load_task` stop at depth 10; this makes deeper test sets for the same functions. A CTL export's
    split `deeper` is `ctl_compositions((11, 12), n_eval, seed=task_seed, direction=...)`; measure a model on it with
    `python training/evaluate_model.py MODEL --task ctl --direction D --depths 11 12`."""
    if direction not in CTL_DIRECTIONS:
        raise ValueError(f"direction={direction!r} is not allowed; choose one of {CTL_DIRECTIONS}")
    tables = ctl_tables(seed)
    rows = []
    for depth in depths:
        if n_per_depth > ctl_space(depth):
            raise ValueError(f"depth {depth} has only {ctl_space(depth)} distinct samples, not {n_per_depth}")
        stream = ctl_stream(random.Random(derive_seed(sample_seed, "ctl", "ood_test", depth)), tables, depth)
        seen = set()
        while len(seen) < n_per_depth:
            text, label = next(stream)
            if text not in seen:
                seen.add(text)
                if direction == "backward":
                    text = " ".join(reversed(text.split(" ")))
                rows.append({"text": text, "label": label, "depth": depth})
    return rows
