"""The paper's three algorithmic tasks as `datasets.DatasetDict`s: CTL, simple arithmetic and ListOps.

Every sample is one line of tokens separated by single spaces, one integer label and one depth:

| task         | example                       | label | depth                                        |
|--------------|-------------------------------|-------|----------------------------------------------|
| `ctl`        | `101 d a b` (= b(a(d(101))))  | 0-7   | number of functions applied                  |
| `arithmetic` | `( ( 4 * 7 ) + 2 )`           | 0-9   | nesting levels of operations (a digit is 0)  |
| `listops`    | `[MED 4 8 5 [MAX 8 4 9 ] ]`   | 0-9   | dependency depth (unused branches pruned)    |

Each task has four splits: `train`, `iid_test` (train's distribution, held out), `ood_valid` (deeper; used to pick
checkpoints) and `ood_test` (deeper still; the paper's "longer" number). Depths per split:

| task         | train (default size)  | iid_test      | ood_valid        | ood_test         |
|--------------|-----------------------|---------------|------------------|------------------|
| `ctl`        | 1-5 (53,700)          | 2-5 (1,000)   | 6-8 (1,000)      | 9-10 (1,000)     |
| `arithmetic` | 1-5 (100,000)         | 2-5 (1,000)   | 6 (1,000)        | 7-8 (1,000)      |
| `listops`    | 1-5 (1,000,000)       | 1-5 (1,000)   | 6 (1,000)        | 7-8 (1,000)      |

How the data is made (one stream of distinct samples per (task, seed, split family, depth)):

- Each depth has its own random stream, seeded arithmetically from `(seed, task, family, depth)` with a
  `random.Random` instance; nothing reads Python's `hash` or a global random state, so a call gives the same data
  in any process on any machine. Within a stream every text appears at most once.
- Sizes are split evenly over a split's depths ("balanced per depth"). A depth that has fewer distinct samples than
  its share keeps what it has and the rest moves to the other depths (counts of the uncapped depths differ by at
  most one).
- Depth 1 of CTL (9 functions x 8 symbols = 72 samples) and of arithmetic (2 operations x 10 x 10 digits = 200
  samples) is enumerated in full into `train`: every single function on every symbol and every single operation is
  seen in training. `iid_test` of these two tasks therefore covers depths 2-5.
- `iid_test` and `train` read the same per-depth streams: `iid_test` takes the first samples of each stream and
  `train` the samples after them, so the two are disjoint and identically distributed. `iid_test` takes at most a
  quarter of a depth's distinct samples (CTL depth 2 has only 648: 162 go to `iid_test`, 486 to `train`). Changing
  `n_eval` therefore shifts which samples land in `train`.
- `ood_valid` / `ood_test` have depths that `train` lacks, so they cannot leak into it.

Task details:

- CTL: 8 symbols `000`-`111` and 9 random bijections `a`-`i` drawn from the seed (`ctl_tables(seed)`; all distinct,
  none the identity). Forward `101 d a b` = b(a(d(101))); backward writes the same sample fully reversed,
  `b a d 101`. Compositions are uniform over functions and symbols at each depth.
- Arithmetic: operators `+` and `*` on digits, fully bracketed, result mod 10. For a target depth `D`, an expression
  is grown with each operand becoming a sub-operation with probability `p` (0.2 in train/iid_test, 0.3 in the ood
  splits, at most `D` levels); while it is shallower than `D` it is wrapped as one operand of a new operation
  whose other operand is grown the same way (at most `D - 1` levels), as the paper's release does. Expressions of
  more than 50 tokens are rejected.
- ListOps: `[MIN`, `[MAX`, `[MED`, `[SM` with 2-5 arguments, each a digit or (p = 0.3) a sub-list, closing `]`.
  MIN/MAX break ties toward the leftmost argument, MED is the middle value of a stable sort (floor of the mean of
  the two middle values for an even count), SM is the sum mod 10. Dependency depth keeps only the arguments an
  operation uses (MIN/MAX the selected one, MED the middle one(s), SM all) and counts nested levels (a digit is 0).
  For a target depth `D`, a random list is grown (sub-lists nested at most as deep as the split's deepest depth);
  while its dependency depth is below `D` it is inserted at a random position of a new random operation, retried
  (at most 20 times) until the new operation uses it without overshooting `D`. Lists over 50 tokens or of another
  depth are rejected. (The paper's release grows lists to a structural depth and rejects whole lists by dependency
  depth; retrying only the wrapping step makes deep lists cheap: the full 1M-sample train set takes about 140 s on
  two CPU cores, writing the Arrow cache included.)
"""

import math
import random
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import datasets

TASK_NAMES = ("ctl", "arithmetic", "listops")
SPLIT_NAMES = ("train", "iid_test", "ood_valid", "ood_test")
MAX_TOKENS = 50
# Part of every split's cache key: bump it whenever a generator changes the data it writes.
GENERATOR_VERSION = 2

CTL_SYMBOLS = tuple(f"{value:03b}" for value in range(8))
CTL_FUNCTIONS = tuple("abcdefghi")
CTL_DIRECTIONS = ("forward", "backward")
DIGITS = tuple(str(value) for value in range(10))
ARITHMETIC_OPERATORS = ("+", "*")
LISTOPS_OPERATIONS = ("[MIN", "[MAX", "[MED", "[SM")

_OPTIONS = {"ctl": {"direction": CTL_DIRECTIONS}, "arithmetic": {}, "listops": {}}
_TASK_CODES = {"ctl": 1, "arithmetic": 2, "listops": 3}
# iid_test and train share the "in_distribution" streams; the ood splits have their own.
_FAMILY_CODES = {"in_distribution": 1, "ood_valid": 2, "ood_test": 3, "shuffle": 4, "ctl_tables": 5}
_SPLIT_CODES = {name: index + 1 for index, name in enumerate(SPLIT_NAMES)}
_MAX_FAILED_DRAWS = 1_000_000


def _derive_seed(seed: int, task: str, family: str, index: int) -> int:
    """The integer seed of one random stream: `seed`, then three codes below 1000, mixed in base 1000 (injective)."""
    return ((seed * 1000 + _TASK_CODES[task]) * 1000 + _FAMILY_CODES[family]) * 1000 + index


def _shuffle(items: list, rng: random.Random) -> None:
    """Fisher-Yates with `rng.random()` only, whose stream Python keeps stable across versions."""
    for i in range(len(items) - 1, 0, -1):
        j = int(rng.random() * (i + 1))
        items[i], items[j] = items[j], items[i]


# ---------------------------------------------------------------------------------------------------------------
# Small public facts about the tasks (the training script builds its tokenizer, id2label and readout from these)
# ---------------------------------------------------------------------------------------------------------------


def _check_task_name(name: str) -> None:
    if name not in TASK_NAMES:
        raise ValueError(f"unknown task name {name!r}; choose one of {', '.join(TASK_NAMES)}")


def task_vocabulary(name: str) -> list[str]:
    """The task's fixed symbols (no special tokens), in a readable order."""
    _check_task_name(name)
    if name == "ctl":
        return list(CTL_SYMBOLS + CTL_FUNCTIONS)
    if name == "arithmetic":
        return ["(", ")", *ARITHMETIC_OPERATORS, *DIGITS]
    return [*LISTOPS_OPERATIONS, "]", *DIGITS]


def task_label_names(name: str) -> list[str]:
    """Name of each class id: CTL's 3-bit symbols `000`-`111`, the digits `0`-`9` otherwise."""
    _check_task_name(name)
    return list(CTL_SYMBOLS) if name == "ctl" else list(DIGITS)


def task_readout(name: str) -> str:
    """Which column the classifier reads: `"first"` ([BOS]) for ListOps, `"last"` ([EOS]) otherwise (spec §2)."""
    _check_task_name(name)
    return "first" if name == "listops" else "last"


# ---------------------------------------------------------------------------------------------------------------
# CTL: compositional table lookup
# ---------------------------------------------------------------------------------------------------------------


def ctl_tables(seed: int = 0) -> dict[str, list[int]]:
    """The 9 functions of CTL for `seed`: `{"a": [f(0), ..., f(7)], ...}`, each a permutation of 0..7.

    Drawn from `seed` alone; the tables are all distinct and none is the identity.
    """
    _check_seed(seed)
    rng = random.Random(_derive_seed(seed, "ctl", "ctl_tables", 0))
    tables: dict[str, list[int]] = {}
    identity = list(range(len(CTL_SYMBOLS)))
    for name in CTL_FUNCTIONS:
        while True:
            table = list(identity)
            _shuffle(table, rng)
            if table != identity and table not in tables.values():
                break
        tables[name] = table
    return tables


def _ctl_sample(tables: dict[str, list[int]], symbol: int, functions: tuple[str, ...]) -> tuple[str, int]:
    """Forward text (`symbol f1 f2 ...`, functions in order of application) and the resulting symbol."""
    value = symbol
    for function in functions:
        value = tables[function][value]
    return " ".join((CTL_SYMBOLS[symbol], *functions)), value


def _ctl_stream(rng: random.Random, tables: dict[str, list[int]], depth: int) -> Iterator[tuple[str, int]]:
    """Distinct (forward text, label) pairs of `depth` functions in random order (uniform over the space)."""
    n_functions = len(CTL_FUNCTIONS)
    if _ctl_space(depth) <= 60_000:  # small enough to enumerate and shuffle: every sample, no coupon collecting
        everything = []
        for number in range(_ctl_space(depth)):  # number = symbol + 8 * (f_1 + 9 * (f_2 + 9 * ...))
            rest, symbol = divmod(number, len(CTL_SYMBOLS))
            functions = []
            for _ in range(depth):
                rest, function = divmod(rest, n_functions)
                functions.append(CTL_FUNCTIONS[function])
            everything.append(_ctl_sample(tables, symbol, tuple(functions)))
        _shuffle(everything, rng)
        yield from everything
        return
    rnd = rng.random
    while True:
        symbol = int(rnd() * len(CTL_SYMBOLS))
        functions = tuple(CTL_FUNCTIONS[int(rnd() * n_functions)] for _ in range(depth))
        yield _ctl_sample(tables, symbol, functions)


def _ctl_space(depth: int) -> int:
    return len(CTL_SYMBOLS) * len(CTL_FUNCTIONS) ** depth


def _ctl_text_in_direction(forward_text: str, direction: str) -> str:
    return forward_text if direction == "forward" else " ".join(reversed(forward_text.split(" ")))


# ---------------------------------------------------------------------------------------------------------------
# Simple arithmetic mod 10
# ---------------------------------------------------------------------------------------------------------------

# A grown expression is (text, value, depth, number of tokens).
_Expression = tuple[str, int, int, int]


def _combine_arithmetic(left: _Expression, right: _Expression, operator: str) -> _Expression:
    value = (left[1] + right[1]) % 10 if operator == "+" else (left[1] * right[1]) % 10
    return f"( {left[0]} {operator} {right[0]} )", value, max(left[2], right[2]) + 1, left[3] + right[3] + 3


def _grow_arithmetic(rnd: Callable[[], float], levels: int, p_operation: float) -> _Expression:
    """A digit, or with probability `p_operation` an operation on two grown operands (at most `levels` deep)."""
    if levels == 0 or rnd() >= p_operation:
        digit = int(rnd() * 10)
        return str(digit), digit, 0, 1
    left = _grow_arithmetic(rnd, levels - 1, p_operation)
    right = _grow_arithmetic(rnd, levels - 1, p_operation)
    return _combine_arithmetic(left, right, ARITHMETIC_OPERATORS[int(rnd() * 2)])


def _sample_arithmetic(rnd: Callable[[], float], depth: int, p_operation: float) -> Optional[_Expression]:
    """An expression of exactly `depth` levels and at most MAX_TOKENS tokens, or None (rejected)."""
    expression = _grow_arithmetic(rnd, depth, p_operation)
    while expression[2] < depth:
        # The other operand is at most depth - 1 deep, so wrapping never overshoots `depth`.
        other = _grow_arithmetic(rnd, depth - 1, p_operation)
        operator = ARITHMETIC_OPERATORS[int(rnd() * 2)]
        if rnd() < 0.5:
            expression = _combine_arithmetic(expression, other, operator)
        else:
            expression = _combine_arithmetic(other, expression, operator)
        if expression[3] > MAX_TOKENS:
            return None
    return expression if expression[3] <= MAX_TOKENS else None


def _arithmetic_stream(rng: random.Random, depth: int, p_operation: float) -> Iterator[tuple[str, int]]:
    if depth == 1:  # all 200 single operations, shuffled
        everything = []
        for operator in ARITHMETIC_OPERATORS:
            for left in range(10):
                for right in range(10):
                    expression = _combine_arithmetic((str(left), left, 0, 1), (str(right), right, 0, 1), operator)
                    everything.append((expression[0], expression[1]))
        _shuffle(everything, rng)
        yield from everything
        return
    rnd = rng.random
    while True:
        expression = _sample_arithmetic(rnd, depth, p_operation)
        yield None if expression is None else (expression[0], expression[1])


def _arithmetic_space(depth: int) -> Optional[int]:
    """Distinct expressions of exactly `depth` levels (None: more than any split needs)."""
    if depth > 2:
        return None
    at_most = [10]
    for _ in range(depth):
        at_most.append(10 + len(ARITHMETIC_OPERATORS) * at_most[-1] ** 2)
    return at_most[depth] - at_most[depth - 1]


# ---------------------------------------------------------------------------------------------------------------
# ListOps with dependency depth
# ---------------------------------------------------------------------------------------------------------------


def _listops_result(operation: int, values: list[int]) -> tuple[int, tuple[int, ...]]:
    """Value of a ListOps operation and the indices of the arguments it depends on."""
    if operation == 0:  # MIN; list.index finds the leftmost of tied values
        value = min(values)
        return value, (values.index(value),)
    if operation == 1:  # MAX
        value = max(values)
        return value, (values.index(value),)
    if operation == 2:  # MED: stable sort, middle one(s)
        order = sorted(range(len(values)), key=values.__getitem__)
        middle = len(values) // 2
        if len(values) % 2:
            return values[order[middle]], (order[middle],)
        low, high = order[middle - 1], order[middle]
        return (values[low] + values[high]) // 2, (low, high)
    return sum(values) % 10, tuple(range(len(values)))  # SM


def _listops_operation(rnd: Callable[[], float], arguments: list[_Expression]) -> tuple[_Expression, tuple[int, ...]]:
    operation = int(rnd() * len(LISTOPS_OPERATIONS))
    values = [argument[1] for argument in arguments]
    value, used = _listops_result(operation, values)
    depth = 1 + max(arguments[index][2] for index in used)
    text = f"{LISTOPS_OPERATIONS[operation]} {' '.join(argument[0] for argument in arguments)} ]"
    return (text, value, depth, 2 + sum(argument[3] for argument in arguments)), used


def _grow_listops_argument(
    rnd: Callable[[], float], levels: int, p_sublist: float, budget: int
) -> Optional[_Expression]:
    """A digit, or with probability `p_sublist` a sub-list at most `levels` deep; None if over `budget` tokens."""
    if levels > 0 and rnd() < p_sublist:
        return _grow_listops_list(rnd, levels, p_sublist, budget)
    digit = int(rnd() * 10)
    return str(digit), digit, 0, 1


def _grow_listops_list(rnd: Callable[[], float], levels: int, p_sublist: float, budget: int) -> Optional[_Expression]:
    """A random operation with 2-5 grown arguments, at most `levels` deep; None as soon as it exceeds `budget`."""
    n_arguments = 2 + int(rnd() * 4)
    n_tokens = 2 + n_arguments
    if n_tokens > budget:
        return None
    arguments = []
    for _ in range(n_arguments):
        argument = _grow_listops_argument(rnd, levels - 1, p_sublist, budget - n_tokens + 1)
        if argument is None:
            return None
        n_tokens += argument[3] - 1
        arguments.append(argument)
    return _listops_operation(rnd, arguments)[0]


def _sample_listops(
    rnd: Callable[[], float], depth: int, max_levels: int, p_sublist: float, wrap_attempts: int = 20
) -> Optional[_Expression]:
    """A list of dependency depth exactly `depth` and at most MAX_TOKENS tokens, or None (rejected)."""
    expression = _grow_listops_list(rnd, max_levels, p_sublist, MAX_TOKENS)
    if expression is None or expression[2] > depth:
        return None
    while expression[2] < depth:
        if expression[3] + 3 * (depth - expression[2]) > MAX_TOKENS:  # each level needs at least 3 more tokens
            return None
        for _ in range(wrap_attempts):
            wrapped = _wrap_listops(rnd, expression, depth, max_levels, p_sublist)
            if wrapped is not None:
                expression = wrapped
                break
        else:
            return None
    return expression


def _wrap_listops(
    rnd: Callable[[], float], inner: _Expression, depth: int, max_levels: int, p_sublist: float
) -> Optional[_Expression]:
    """`inner` as one argument of a new random operation that uses it; None if the draw misses or is too long."""
    n_arguments = 2 + int(rnd() * 4)
    position = int(rnd() * n_arguments)
    n_tokens = inner[3] + 2 + n_arguments - 1
    arguments = []
    for index in range(n_arguments):
        if index == position:
            argument = inner
        else:
            argument = _grow_listops_argument(rnd, max_levels - 1, p_sublist, MAX_TOKENS - n_tokens + 1)
            if argument is None:
                return None
            n_tokens += argument[3] - 1
        arguments.append(argument)
    if n_tokens > MAX_TOKENS:
        return None
    wrapped, used = _listops_operation(rnd, arguments)
    if position not in used or wrapped[2] > depth:
        return None
    return wrapped


def _listops_stream(rng: random.Random, depth: int, max_levels: int, p_sublist: float) -> Iterator:
    rnd = rng.random
    while True:
        expression = _sample_listops(rnd, depth, max_levels, p_sublist)
        yield None if expression is None else (expression[0], expression[1])


# ---------------------------------------------------------------------------------------------------------------
# Split plans: which depths, how many samples each, which stream
# ---------------------------------------------------------------------------------------------------------------


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
}


def _capacity(task: str, depth: int) -> Optional[int]:
    """How many distinct samples a depth's stream can deliver without endless duplicate draws (None: plenty)."""
    if task == "ctl":
        space = _ctl_space(depth)
        return space if space <= 60_000 else space // 2
    if task == "arithmetic":
        space = _arithmetic_space(depth)
        return None if space is None else (space if depth == 1 else space // 2)
    return None


def _balanced_counts(total: int, capacities: dict[int, Optional[int]], argument: str) -> dict[int, int]:
    """Split `total` evenly over the depths; a depth with fewer samples than its share passes the rest on."""
    order = sorted(capacities, key=lambda depth: (math.inf if capacities[depth] is None else capacities[depth], depth))
    counts, remaining = {}, total
    for index, depth in enumerate(order):
        share = math.ceil(remaining / (len(order) - index))
        capacity = capacities[depth]
        counts[depth] = share if capacity is None else min(share, capacity)
        remaining -= counts[depth]
    if remaining > 0:
        available = total - remaining
        raise ValueError(f"{argument}={total} is more than the {available} distinct samples these depths have")
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
    train_counts = {**enumerated, **_balanced_counts(n_train - sum(enumerated.values()), train_capacity, "n_train")}

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
    rng = random.Random(_derive_seed(seed, task, family, depth))
    if task == "ctl":
        draws = _ctl_stream(rng, ctl_tables(seed), depth)
    elif task == "arithmetic":
        draws = _arithmetic_stream(rng, depth, p)
    else:
        draws = _listops_stream(rng, depth, max_depth, p)
    seen: set[str] = set()
    failed = 0
    for draw in draws:
        if draw is None or draw[0] in seen:
            failed += 1
            if failed > _MAX_FAILED_DRAWS:
                raise RuntimeError(f"{task}: no new sample of depth {depth} in {_MAX_FAILED_DRAWS} draws")
            continue
        failed = 0
        seen.add(draw[0])
        yield draw


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
    rows = []
    for depth, count in counts:
        if count == 0:
            continue
        stream = _depth_stream(task, seed, family, depth, p, max_depth)
        for _ in range(skip.get(depth, 0)):
            next(stream)
        for _ in range(count):
            text, label = next(stream)
            rows.append((text, label, depth))
    _shuffle(rows, random.Random(_derive_seed(seed, task, "shuffle", _SPLIT_CODES[split])))
    for text, label, depth in rows:
        if task == "ctl":
            text = _ctl_text_in_direction(text, direction)
        yield {"text": text, "label": label, "depth": depth}


def _features(task: str) -> datasets.Features:
    return datasets.Features(
        {
            "text": datasets.Value("string"),
            "label": datasets.ClassLabel(names=task_label_names(task)),
            "depth": datasets.Value("int32"),
        }
    )


def _check_seed(seed) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")


def _check_size(argument: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{argument} must be a positive int (or None for the paper's size), got {value!r}")


def _check_options(name: str, options: dict) -> dict:
    allowed = _OPTIONS[name]
    for option, value in options.items():
        if option not in allowed:
            choices = ", ".join(allowed) if allowed else "none"
            raise ValueError(f"unknown option {option!r} for task {name!r}; allowed options: {choices}")
        if value not in allowed[option]:
            raise ValueError(f"{option}={value!r} is not allowed for task {name!r}; choose one of {allowed[option]}")
    return {option: options.get(option, choices[0]) for option, choices in allowed.items()}


def split_description(name: str, split: str, seed: int, counts: dict[int, int], direction: Optional[str] = None) -> str:
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
    n_train: Optional[int] = None,
    n_eval: Optional[int] = None,
    *,
    cache_dir: Optional[str] = None,
    **options,
) -> datasets.DatasetDict:
    """Generate (or load from the `datasets` cache) one of the paper's tasks.

    Args:
        name (`str`): `"ctl"`, `"arithmetic"` or `"listops"`.
        seed (`int`, *optional*, defaults to 0): selects the data (and CTL's function tables); the same seed gives
            the same data in any process and on any machine.
        n_train (`int`, *optional*): size of `train` (defaults: CTL 53,700, arithmetic 100,000, ListOps 1,000,000).
        n_eval (`int`, *optional*): size of each evaluation split (default 1,000).
        cache_dir (`str`, *optional*): where `Dataset.from_generator` caches the splits (default: the `datasets`
            cache).
        **options: CTL takes `direction="forward"` (`101 d a b`) or `"backward"` (`b a d 101`).

    Returns:
        `datasets.DatasetDict` with splits `train`, `iid_test`, `ood_valid`, `ood_test` and columns `text` (tokens
        separated by single spaces), `label` (`ClassLabel`, names from `task_label_names`) and `depth`.
    """
    _check_task_name(name)
    _check_seed(seed)
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
