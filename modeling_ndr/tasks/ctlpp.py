"""CTL++ (Csordás, Irie & Schmidhuber, EMNLP 2022): known functions composed in patterns never seen in training.

CTL tests *productivity* (longer compositions of the kinds seen in training); CTL++ tests *systematicity*. Its 32
functions `a`-`z`, `A`-`F` (random permutations of the 8 symbols `0`-`7`, drawn from the seed) are split into groups,
and training shows only some orders of groups: which group may follow which. The test splits compose the same
functions, at the same lengths (2 to 6 functions), in orders training never shows. A sample is written backward by
default, as the paper's runs read it: `b C 5` = b(C(5)), the last function applied first; `direction="forward"` writes
`5 C b`. The label is the resulting symbol; `depth` is the number of functions.

The variants (`variant=`), as the authors' code names them:

- `alternate`: groups `a` and `b` (16 functions each); training alternates them (`a` then `b` then `a`...).
  `test_self_loop` never alternates (`a` after `a`, `b` after `b`).
- `parallel_branch`: training stays in one group (`a` after `a`, `b` after `b`); `test_group_alternate` alternates.
  With `function_overlap=k`, k functions form a group `o` that follows both `a` and `b` in training (and is followed
  by the group that came before it), each of them only on some symbols: `symbol_overlap` of the 8 symbols are
  shared by both routes into it, the others are split between `a` and `b` (default: all 8 shared).
- `parallel_branch_2stage`: groups `a1`, `a2`, `b1`, `b2` (and `o`); training runs `a1` then `a2`, `b1` then `b2`,
  and after `a2`, `b2` or `o` anything of stage 1 (`a1`, `b1`) may come. `test_group_alternate` crosses: `a1` then
  `b2`, `b1` then `a2`. With an overlap group, `test_cross_unseen_symbols` (`a1` or `b1` into `o` on the symbols that
  route never carries in training) and `test_unseen_pairs` (both, two functions) are the smallest unseen compositions.

Every variant also has `test_all` (any group after any, which includes training's patterns) and `test_all_pairs`
(every pair of functions the variant's groups allow, depth 2). `train` holds every depth-2 sample of its pattern
(the paper's runs add them: `train_on_pairs`), `iid_test` other samples of its pattern at depths 3-6.

How the rows are drawn: a split's pattern says which functions may come next (after the groups so far, and for the
overlap group on the symbol that flows into it); a depth with at most 60,000 distinct samples is enumerated and
shuffled, a larger one drawn step by step (each next function uniformly among those allowed; a draw that cannot end
is dropped). Every stream is seeded from `(seed, split family, depth)` as the other tasks' are.
"""

import random
import string
from collections import Counter
from dataclasses import dataclass
from itertools import product

from .common import check_seed, derive_seed, distinct_draws, shuffle


CTLPP_SYMBOLS = tuple(str(value) for value in range(8))
CTLPP_FUNCTIONS = tuple(string.ascii_lowercase + "ABCDEF")
CTLPP_VARIANTS = ("alternate", "parallel_branch", "parallel_branch_2stage")
CTLPP_DEPTHS = (2, 3, 4, 5, 6)
CTLPP_DIRECTIONS = ("backward", "forward")
ENUMERATE_UP_TO = 60_000  # a depth with at most this many samples is enumerated and shuffled, a larger one drawn
_MAX_FAILED_DRAWS = 1_000_000


@dataclass(frozen=True)
class Pattern:
    """Which function may come next. `edges`: `(context, target)`: after a sample whose last groups are `context`
    (`"IN"` stands before the first function) any function of group `target` may follow, or the sample may end
    (`target` `"OUT"`). `gates`: `(source, symbols, function)`: `function` may follow a function of group `source`
    when the symbol between them is one of `symbols`."""

    edges: tuple[tuple[tuple[str, ...], str], ...]
    gates: tuple[tuple[str, frozenset, int], ...] = ()


def _edges(*rules) -> tuple:
    """Rules as the authors write them: each a list of groups or sets of groups, the last one the target; a set
    stands for each of its members."""
    expanded = []
    for rule in rules:
        options = [sorted(part) if isinstance(part, set) else [part] for part in rule]
        expanded += [(tuple(choice[:-1]), choice[-1]) for choice in product(*options)]
    return tuple(expanded)


@dataclass(frozen=True)
class CtlppWorld:
    """Everything a CTL++ split is drawn from: the function tables, the groups, and each split's pattern and depths."""

    seed: int
    variant: str
    function_overlap: int
    symbol_overlap: int
    tables: tuple[tuple[int, ...], ...]
    groups: dict
    gates: tuple
    splits: dict  # split -> (Pattern, depths)

    def __post_init__(self):  # each function's group, looked up at every step of every draw
        lookup = {function: name for name, members in self.groups.items() for function in members}
        object.__setattr__(self, "_group_of", lookup)

    def group_of(self, function: int) -> str:
        return self._group_of[function]

    def options(self, pattern: Pattern, history: tuple[str, ...], symbol: int) -> tuple[list[int], bool]:
        """The functions that may come next after the groups `history` (from "IN") with `symbol` flowing, and
        whether the sample may end here."""
        functions, can_end = set(), False
        for context, target in pattern.edges:
            if history[-len(context) :] == context:
                if target == "OUT":
                    can_end = True
                else:
                    functions.update(self.groups[target])
        for source, symbols, function in pattern.gates:
            if history[-1] == source and symbol in symbols:
                functions.add(function)
        return sorted(functions), can_end

    def count(self, pattern: Pattern, depth: int) -> int:
        """How many distinct samples of `depth` functions `pattern` allows (dynamic programming over the last groups
        and the symbol)."""
        keep = max(len(context) for context, _ in pattern.edges)
        states = Counter({(("IN",), symbol): 1 for symbol in range(len(CTLPP_SYMBOLS))})
        for _ in range(depth):
            following = Counter()
            for (history, symbol), ways in states.items():
                for function in self.options(pattern, history, symbol)[0]:
                    state = ((history + (self.group_of(function),))[-keep:], self.tables[function][symbol])
                    following[state] += ways
            states = following
        return sum(ways for (history, symbol), ways in states.items() if self.options(pattern, history, symbol)[1])

    def apply(self, symbol: int, functions) -> int:
        for function in functions:
            symbol = self.tables[function][symbol]
        return symbol


def _groups(variant: str, function_overlap: int) -> dict:
    """Functions 0..31 into the variant's groups: the overlap group `o` first, the rest split evenly in name order."""
    names = {
        "alternate": ["a", "b"],
        "parallel_branch": ["a", "b"],
        "parallel_branch_2stage": ["a1", "a2", "b1", "b2"],
    }
    names = names[variant]
    rest = list(range(function_overlap, len(CTLPP_FUNCTIONS)))
    size = -(-len(rest) // len(names))
    groups = {name: tuple(rest[index * size : (index + 1) * size]) for index, name in enumerate(names)}
    if variant != "alternate":
        groups["o"] = tuple(range(function_overlap))
    return groups


def _gates(sources: list[str], overlap_group: tuple[int, ...], symbol_overlap: int, rng: random.Random) -> tuple:
    """For each function of the overlap group: `symbol_overlap` symbols let every source group into it, the other
    symbols are split between the source groups (each reaches it on its share only). The shared symbols move along a
    random order of the symbols, reshuffled once a pass has covered them all."""
    n_symbols = len(CTLPP_SYMBOLS)
    order = list(range(n_symbols))
    passes = -(-n_symbols // symbol_overlap)
    gates = []
    for index, function in enumerate(overlap_group):
        shared = {order[i % n_symbols] for i in range(index * symbol_overlap, (index + 1) * symbol_overlap)}
        others = [symbol for symbol in range(n_symbols) if symbol not in shared]
        size = -(-len(others) // len(sources)) if others else 0
        for position, source in enumerate(sources):
            own = others[position * size : (position + 1) * size]
            gates.append((source, frozenset(shared | set(own)), function))
        if index % passes == passes - 1:
            order = list(range(n_symbols))
            shuffle(order, rng)
    return tuple(gates)


def _inverted(gates: tuple) -> tuple:
    everything = frozenset(range(len(CTLPP_SYMBOLS)))
    return tuple((source, everything - symbols, function) for source, symbols, function in gates)


def ctlpp_tables(seed: int = 0) -> tuple[tuple[int, ...], ...]:
    """The 32 functions of CTL++ for `seed`: distinct random permutations of the 8 symbols, none the identity."""
    check_seed(seed)
    rng = random.Random(derive_seed(seed, "ctlpp", "ctl_tables", 0))
    tables: list[tuple[int, ...]] = []
    identity = tuple(range(len(CTLPP_SYMBOLS)))
    while len(tables) < len(CTLPP_FUNCTIONS):
        table = list(identity)
        shuffle(table, rng)
        if tuple(table) != identity and tuple(table) not in tables:
            tables.append(tuple(table))
    return tuple(tables)


def check_ctlpp_options(variant: str, function_overlap: int, symbol_overlap: int | None) -> int:
    """The options' one-line errors; returns `symbol_overlap` with its default (all 8 symbols)."""
    if variant not in CTLPP_VARIANTS:
        raise ValueError(f"variant={variant!r} is not a CTL++ variant; choose one of {', '.join(CTLPP_VARIANTS)}")
    if isinstance(function_overlap, bool) or not isinstance(function_overlap, int) or not 0 <= function_overlap <= 16:
        raise ValueError(f"function_overlap must be an int from 0 to 16 (functions shared by the groups), got "
                         f"{function_overlap!r}")  # fmt: skip
    if variant == "alternate" and function_overlap:
        raise ValueError("function_overlap is for the parallel_branch variants; alternate has no overlap group")
    symbol_overlap = len(CTLPP_SYMBOLS) if symbol_overlap is None else symbol_overlap
    if isinstance(symbol_overlap, bool) or not isinstance(symbol_overlap, int) or not 1 <= symbol_overlap <= 8:
        raise ValueError(f"symbol_overlap must be an int from 1 to 8 (symbols on which both groups reach an overlap "
                         f"function), got {symbol_overlap!r}")  # fmt: skip
    return symbol_overlap


def ctlpp_world(
    seed: int = 0, variant: str = "parallel_branch", function_overlap: int = 0, symbol_overlap: int | None = None
) -> CtlppWorld:
    """The tables, groups and split patterns of one CTL++ task (see the module's text)."""
    check_seed(seed)
    symbol_overlap = check_ctlpp_options(variant, function_overlap, symbol_overlap)
    groups = _groups(variant, function_overlap)
    rng = random.Random(derive_seed(seed, "ctlpp", "ctlpp_overlap", function_overlap * 10 + symbol_overlap))
    depths, pairs = CTLPP_DEPTHS, (2,)
    if variant == "alternate":
        gates = ()
        train = Pattern(_edges(["IN", {"a", "b"}], ["a", "b"], ["b", "a"], [{"a", "b"}, "OUT"]))
        splits = {
            "test_self_loop": (
                Pattern(_edges(["IN", {"a", "b"}], ["a", "a"], ["b", "b"], [{"a", "b"}, "OUT"])),
                depths,
            ),
            "test_all": (Pattern(_edges([{"IN", "a", "b"}, {"a", "b", "OUT"}])), depths),
            "test_all_pairs": (Pattern(_edges([{"IN", "a", "b"}, {"a", "b", "OUT"}])), pairs),
        }
    elif variant == "parallel_branch":
        gates = _gates(["a", "b"], groups["o"], symbol_overlap, rng)
        train = Pattern(
            _edges(["IN", {"a", "b"}], ["a", "a"], ["b", "b"], ["a", "o", "a"], ["b", "o", "b"],
                   [{"a", "b", "o"}, "OUT"]),
            gates,
        )  # fmt: skip
        every = Pattern(_edges([{"IN", "a", "b", "o"}, {"a", "b", "o", "OUT"}]))
        splits = {
            "test_group_alternate": (
                Pattern(_edges(["IN", {"a", "b"}], ["a", "b"], ["b", "a"], [{"a", "b"}, "OUT"])),
                depths,
            ),
            "test_self_loop": (
                Pattern(_edges(["IN", {"a", "b", "o"}], ["a", "a"], ["b", "b"], ["o", "o"], [{"a", "b", "o"}, "OUT"])),
                depths,
            ),
            "test_all": (every, depths),
            "test_all_overlap": (
                Pattern(_edges(["IN", {"a", "b"}], [{"a", "b"}, "o"], ["o", {"a", "b", "OUT"}])),
                depths,
            ),  # fmt: skip
            "test_all_pairs": (every, pairs),
        }
    else:
        gates = _gates(["a1", "b1"], groups["o"], symbol_overlap, rng)
        stage_two = {"a2", "b2", "o"}
        train = Pattern(_edges(["IN", {"a1", "b1"}], ["a1", "a2"], ["b1", "b2"], [stage_two, {"a1", "b1", "OUT"}]),
                        gates)  # fmt: skip
        stages = {"a1", "b1", "a2", "b2", "o"}
        splits = {
            "test_group_alternate": (
                Pattern(_edges(["IN", {"a1", "b1"}], ["a1", "b2"], ["b1", "a2"], [{"a2", "b2"}, {"a1", "b1", "OUT"}])),
                depths,
            ),
            "test_self_loop": (
                Pattern(_edges(["IN", stages], *([group, group] for group in sorted(stages)), [stages, "OUT"])),
                depths,
            ),
            "test_all": (Pattern(_edges([stages | {"IN"}, stages | {"OUT"}])), depths),
            "test_all_overlap": (
                Pattern(_edges(["IN", {"a1", "b1"}], [{"a1", "b1"}, "o"], ["o", {"a1", "b1", "OUT"}])),
                depths,
            ),
            "test_cross_unseen_symbols": (
                Pattern(_edges(["IN", {"a1", "b1"}], ["o", "OUT"]), _inverted(gates)),
                pairs,
            ),
            "test_unseen_pairs": (
                Pattern(
                    _edges(["IN", {"a1", "b1"}], ["a1", "b2"], ["b1", "a2"], [stage_two, "OUT"]), _inverted(gates)
                ),
                pairs,
            ),
            "test_all_pairs": (
                Pattern(_edges(["IN", {"a1", "b1"}], [{"a1", "b1"}, stage_two], [stage_two, "OUT"])),
                pairs,
            ),  # fmt: skip
        }
    splits = {"train": (train, depths), "iid_test": (train, depths[1:]), **splits}
    world = CtlppWorld(seed, variant, function_overlap, symbol_overlap, ctlpp_tables(seed), groups, gates, splits)
    # a split these options leave empty is not made (the overlap splits without an overlap group; the unseen symbols
    # when every symbol is shared); which are empty depends on the options, not on the seed
    empty = [name for name, (pattern, depths) in splits.items() if not any(world.count(pattern, d) for d in depths)]
    for name in empty:
        del splits[name]
    return world


def ctlpp_split_names(
    variant: str = "parallel_branch", function_overlap: int = 0, symbol_overlap: int | None = None
) -> list[str]:
    """The splits `load_task("ctlpp", variant=..., function_overlap=..., symbol_overlap=...)` makes, `train`
    first."""
    return list(ctlpp_world(0, variant, function_overlap, symbol_overlap).splits)


def ctlpp_samples(world: CtlppWorld, pattern: Pattern, depth: int) -> list[tuple[int, tuple[int, ...]]]:
    """Every (symbol, functions) sample of `depth` functions that `pattern` allows, in a fixed order."""
    partial = [(symbol, (), ("IN",), symbol) for symbol in range(len(CTLPP_SYMBOLS))]
    for _ in range(depth):
        partial = [
            (start, functions + (function,), history + (world.group_of(function),), world.tables[function][symbol])
            for start, functions, history, symbol in partial
            for function in world.options(pattern, history, symbol)[0]
        ]
    return [(start, functions) for start, functions, history, symbol in partial
            if world.options(pattern, history, symbol)[1]]  # fmt: skip


def _draw(world: CtlppWorld, pattern: Pattern, depth: int, rng: random.Random) -> tuple[int, tuple[int, ...]] | None:
    start = symbol = int(rng.random() * len(CTLPP_SYMBOLS))
    history, functions = ("IN",), ()
    for _ in range(depth):
        allowed = world.options(pattern, history, symbol)[0]
        if not allowed:
            return None
        function = allowed[int(rng.random() * len(allowed))]
        functions += (function,)
        history += (world.group_of(function),)
        symbol = world.tables[function][symbol]
    return (start, functions) if world.options(pattern, history, symbol)[1] else None


def ctlpp_stream(world: CtlppWorld, pattern: Pattern, depth: int, rng: random.Random):
    """Distinct (symbol, functions) samples of one depth in random order."""
    if world.count(pattern, depth) <= ENUMERATE_UP_TO:
        everything = ctlpp_samples(world, pattern, depth)
        shuffle(everything, rng)
        yield from everything
        return
    draws = (_draw(world, pattern, depth, rng) for _ in iter(int, 1))  # endless
    what = f"ctlpp: no new sample of depth {depth}"
    yield from distinct_draws(draws, lambda sample: sample, what, _MAX_FAILED_DRAWS)


def ctlpp_text(symbol: int, functions, direction: str = "backward") -> str:
    """`5 C b` forward (the symbol, then the functions in order of application), `b C 5` backward."""
    words = [CTLPP_SYMBOLS[symbol], *(CTLPP_FUNCTIONS[function] for function in functions)]
    return " ".join(words if direction == "forward" else reversed(words))


__all__ = [
    "CTLPP_SYMBOLS",
    "CTLPP_FUNCTIONS",
    "CTLPP_VARIANTS",
    "CTLPP_DEPTHS",
    "CTLPP_DIRECTIONS",
    "CtlppWorld",
    "Pattern",
    "ctlpp_tables",
    "ctlpp_world",
    "ctlpp_split_names",
    "ctlpp_stream",
    "ctlpp_samples",
    "ctlpp_text",
]
