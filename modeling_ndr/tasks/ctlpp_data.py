"""CTL++'s splits as a `datasets.DatasetDict` (`load_task("ctlpp", ...)`): which rows each split takes from which
stream, and the generator `Dataset.from_generator` caches. The task itself (functions, groups, patterns) is
`ctlpp.py`."""

import random
from collections.abc import Iterator

import datasets

from .common import GENERATOR_VERSION, derive_seed, shuffle
from .ctlpp import (
    CTLPP_DIRECTIONS,
    CTLPP_FUNCTIONS,
    CTLPP_SYMBOLS,
    ENUMERATE_UP_TO,
    ctlpp_stream,
    ctlpp_text,
    ctlpp_world,
)
from .generation import _DEFAULTS, _balanced_counts, _check_size, _features


def _ctlpp_plans(world, n_train: int, n_eval: int) -> dict[str, dict]:
    """Per split: its depth counts and the samples it skips (train skips what iid_test took from the same streams).
    `train` holds every depth-2 sample of its pattern; a split of depth 2 only holds them all."""
    capacity = {}  # a depth that is enumerated whole can be used whole; a drawn one up to half (no coupon collecting)
    for split, (pattern, depths) in world.splits.items():
        for depth in depths:
            count = world.count(pattern, depth)
            capacity[split, depth] = count if count <= ENUMERATE_UP_TO else count // 2
    _, train_depths = world.splits["train"]
    pairs = capacity["train", 2]
    iid = _balanced_counts(n_eval, {d: capacity["iid_test", d] // 4 for d in world.splits["iid_test"][1]}, "n_eval")
    if n_train < pairs:
        raise ValueError(f"n_train={n_train} is too small for ctlpp: train holds all {pairs} depth-2 samples")
    rest = {d: capacity["train", d] - iid.get(d, 0) for d in train_depths if d != 2}
    plans = {
        "train": {"counts": {2: pairs, **_balanced_counts(n_train - pairs, rest, "n_train", requested=n_train)},
                  "skips": iid},
        "iid_test": {"counts": iid, "skips": {}},
    }  # fmt: skip
    for split, (_, depths) in list(world.splits.items())[2:]:
        if depths == (2,):
            counts = {2: capacity[split, 2]}
        else:
            counts = _balanced_counts(n_eval, {d: capacity[split, d] for d in depths}, "n_eval")
        plans[split] = {"counts": counts, "skips": {}}
    return {split: {key: tuple(sorted(value.items())) for key, value in plan.items()} for split, plan in plans.items()}


def _generate_ctlpp_split(
    seed, split, variant, function_overlap, symbol_overlap, direction, counts, skips, generator_version
) -> Iterator[dict]:
    """Rows of one CTL++ split (the `Dataset.from_generator` function; every argument is part of the cache key)."""
    del generator_version
    world = ctlpp_world(seed, variant, function_overlap, symbol_overlap)
    pattern, _ = world.splits[split]
    family = "in_distribution" if split in ("train", "iid_test") else split
    skip = dict(skips)
    rows = []
    for depth, count in counts:
        stream = ctlpp_stream(world, pattern, depth, random.Random(derive_seed(seed, "ctlpp", family, depth)))
        for _ in range(skip.get(depth, 0)):
            next(stream)
        for _ in range(count):
            symbol, functions = next(stream)
            rows.append((ctlpp_text(symbol, functions, direction), world.apply(symbol, functions), depth))
    shuffle(rows, random.Random(derive_seed(seed, "ctlpp", "shuffle", list(world.splits).index(split))))
    for text, label, depth in rows:
        yield {"text": text, "label": label, "depth": depth}


def load_ctlpp(
    seed: int,
    n_train: int | None,
    n_eval: int | None,
    cache_dir: str | None,
    variant: str = "parallel_branch",
    function_overlap: int = 0,
    symbol_overlap: int | None = None,
    direction: str = "backward",
) -> datasets.DatasetDict:
    """`load_task("ctlpp", ...)`: the variant's splits, generated (or read from the `datasets` cache)."""
    if direction not in CTLPP_DIRECTIONS:
        raise ValueError(f"direction={direction!r} is not allowed for task 'ctlpp'; choose one of {CTLPP_DIRECTIONS}")
    world = ctlpp_world(seed, variant, function_overlap, symbol_overlap)
    n_train = _DEFAULTS["ctlpp"].n_train if n_train is None else n_train
    n_eval = _DEFAULTS["ctlpp"].n_eval if n_eval is None else n_eval
    _check_size("n_train", n_train)
    _check_size("n_eval", n_eval)
    call = (f"modeling_ndr.load_task('ctlpp', seed={seed}, variant={variant!r}, function_overlap={function_overlap}, "
            f"symbol_overlap={world.symbol_overlap}, direction={direction!r})")  # fmt: skip
    tables = "; ".join(
        f"{name}: {' '.join(CTLPP_SYMBOLS[v] for v in table)}" for name, table in zip(CTLPP_FUNCTIONS, world.tables)
    )
    groups = "; ".join(f"{group}: {' '.join(CTLPP_FUNCTIONS[f] for f in members)}"
                       for group, members in world.groups.items() if members)  # fmt: skip
    splits = {}
    for split, plan in _ctlpp_plans(world, n_train, n_eval).items():
        dataset = datasets.Dataset.from_generator(
            _generate_ctlpp_split,
            features=_features("ctlpp"),
            cache_dir=cache_dir,
            split=datasets.NamedSplit(split),
            gen_kwargs={
                "seed": seed, "split": split, "variant": variant, "function_overlap": function_overlap,
                "symbol_overlap": world.symbol_overlap, "direction": direction, **plan,
                "generator_version": GENERATOR_VERSION,
            },
        )  # fmt: skip
        depths = ", ".join(f"depth {depth}: {count}" for depth, count in plan["counts"])
        dataset.info.description = (
            f"{split} split of {call}, generator version {GENERATOR_VERSION}; {depths}. Label: the resulting symbol. "
            f"Backward text `b C 5` means b(C(5)); forward writes `5 C b`. Depth: the number of functions. Groups: "
            f"{groups}. Function tables (f(0) ... f(7)): {tables}."
        )
        splits[split] = dataset
    return datasets.DatasetDict(splits)
