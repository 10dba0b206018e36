"""The token tasks' formats: one output per input token, the Universal Transformer's copy, reverse and addition as an
encoder writes them, and addition as a carry task. Pure Python, no `datasets`: rows, their labels and the seeds of
their random streams. `token_generation.py` makes the `datasets.DatasetDict`s from them.

A row is a list of tokens and a list of labels of the same length, `None` where nothing is scored:

| task       | text                  | labels                        | `length`                           |
|------------|-----------------------|-------------------------------|------------------------------------|
| `copy`     | `3 1 4 = _ _ _`       | `None None None None 3 1 4`   | input symbols (3)                  |
| `reverse`  | `3 1 4 = _ _ _`       | `None None None None 4 1 3`   | input symbols (3)                  |
| `addition` | `5 7 + 6 8 = _ _ _`   | `None` x 6, then `1 2 5`      | digits of the longer operand (2)   |
| `carry`    | `00 56 78`            | `1 2 5`                       | digit positions, `00` excluded (2) |

- Symbols are the decimal digits (the UT paper's copy and reverse use a small alphabet; ours is `0`-`9`), and every
  label is a digit, so the four tasks share the label names `TOKEN_LABEL_NAMES` (`"0"`-`"9"`).
- `copy` / `reverse`: `length` digits, `=`, then one blank `_` per output symbol (the answer is read at the blanks).
- `addition`: the operands in decimal, most significant digit first (no leading zero, except the number 0), `+`,
  `=`, then `length + 1` blanks: the sum with leading zeros to one more digit than the longer operand.
- `carry`: two operands of `length` digits (leading zeros allowed), aligned digit by digit; each position is one
  token, the first operand's digit then the second's (`56` is 5 over 6), most significant first, after a leading
  `00` that holds the carry out. Each token's label is the digit of the sum at its position.
- A carry chain is a run of neighbouring positions that each pass a carry on to the next more significant one;
  `longest_carry_chain` counts the positions of the longest. A long-chain row is drawn so that its longest chain
  covers at least half of its positions (`999...9 + 000...1` has one chain through all of them); random operands
  almost never do (the longest chain of random digits grows like a logarithm of the length).
"""

import random

from ..position_coupling import BLANK, COUPLED_TASKS  # the blank and the tasks whose rows `coupled_positions` reads
from .common import DIGITS


TOKEN_TASK_NAMES = ("copy", "reverse", "addition", "carry")
TOKEN_LABEL_NAMES = DIGITS
EQUALS, PLUS = "=", "+"
# Bump it whenever a generator changes the rows it writes: it is part of every split's cache key.
TOKEN_GENERATOR_VERSION = 1

# Lengths of each task (see the table above for what a length counts): `train` has every length up to the first
# evaluation length; each evaluation split has one length. The carry task evaluates each length twice, on random
# operands (`test_<n>`) and on long carry chains (`long_chains_<n>`).
# The string tasks also have a validation split at their longest length (`valid_<n>`: rows of its own stream, none
# of them a row of `test_<n>` but by chance), for checkpoint selection at the length that matters, as the paper's
# tasks select on `ood_valid`. The carry task selects on `test_100` (a `valid_1000` would slow every evaluation).
TRAIN_MAX_LENGTH = {"copy": 40, "reverse": 40, "addition": 20, "carry": 40}
EVAL_LENGTHS = {
    "copy": (40, 100, 200, 400),
    "reverse": (40, 100, 200, 400),
    "addition": (20, 50, 100, 200),
    "carry": (40, 100, 400, 1000),
}
VALID_LENGTHS = {name: max(EVAL_LENGTHS[name]) for name in ("copy", "reverse", "addition")}
TOKEN_SPLIT_NAMES = {
    name: (
        "train",
        *(f"test_{length}" for length in lengths),
        *(f"long_chains_{length}" for length in lengths if name == "carry"),
        *((f"valid_{VALID_LENGTHS[name]}",) if name in VALID_LENGTHS else ()),
    )
    for name, lengths in EVAL_LENGTHS.items()
}
# The share of `train` rows of the carry task drawn with a long carry chain: random operands of at most 40 positions
# almost never carry through half of them, and without such rows a model never sees a carry travel far.
TRAIN_LONG_CHAIN_SHARE = 0.25

_TASK_CODES = {"copy": 1, "reverse": 2, "addition": 3, "carry": 4}
# `shuffle` seeds the stream that shuffles `train`
_FAMILY_CODES = {"train": 1, "test": 2, "long_chains": 3, "shuffle": 4, "valid": 5}


def check_token_task_name(name: str) -> None:
    if name not in TOKEN_TASK_NAMES:
        raise ValueError(f"unknown token task name {name!r}; choose one of {', '.join(TOKEN_TASK_NAMES)}")


def token_task_seed(seed: int, task: str, family: str, length: int) -> int:
    """The integer seed of one random stream: `seed`, a task code and a split-family code (each below 1000) and the
    length (below 1,000,000), mixed positionally (injective). `common.derive_seed` leaves only three digits for the
    index, too few for lengths of 1000."""
    if not 0 <= length < 1_000_000:
        raise ValueError(f"length must be in [0, 1,000,000), got {length}")
    return ((seed * 1000 + _TASK_CODES[task]) * 1000 + _FAMILY_CODES[family]) * 1_000_000 + length


def split_family_and_length(split: str) -> tuple[str, int | None]:
    """`"test_400"` -> `("test", 400)`, `"long_chains_40"` -> `("long_chains", 40)`, `"valid_400"` -> `("valid", 400)`,
    `"train"` -> `("train", None)`."""
    if split == "train":
        return "train", None
    family, _, length = split.rpartition("_")
    return family, int(length)


def token_split_lengths(name: str) -> dict[str, tuple[int, ...]]:
    """The lengths of each split of a token task: `{"train": (1, ..., 40), "test_40": (40,), ...}`."""
    check_token_task_name(name)
    lengths = {}
    for split in TOKEN_SPLIT_NAMES[name]:
        family, length = split_family_and_length(split)
        lengths[split] = tuple(range(1, TRAIN_MAX_LENGTH[name] + 1)) if family == "train" else (length,)
    return lengths


def token_task_max_tokens(name: str) -> int:
    """The number of tokens of the longest row of any split (without [BOS] and [EOS])."""
    check_token_task_name(name)
    length = max(EVAL_LENGTHS[name])
    if name in ("copy", "reverse"):
        return 2 * length + 1
    if name == "addition":
        return length + 1 + length + 1 + (length + 1)
    return length + 1


# ---------------------------------------------------------------------------------------------------------------
# Rows: (tokens, labels), labels None where nothing is scored
# ---------------------------------------------------------------------------------------------------------------


def _digit(rng: random.Random) -> int:
    # rng.random() only: Python keeps its stream stable across versions (as common.shuffle)
    return int(rng.random() * 10)


def _digits(rng: random.Random, count: int) -> list[str]:
    return [DIGITS[_digit(rng)] for _ in range(count)]


def string_row(task: str, symbols: list[str]) -> tuple[list[str], list[str | None]]:
    """`copy` / `reverse`: the symbols, `=`, one blank per symbol; the answer at the blanks."""
    answer = symbols if task == "copy" else symbols[::-1]
    return [*symbols, EQUALS, *[BLANK] * len(symbols)], [None] * (len(symbols) + 1) + list(answer)


def addition_row(first: str, second: str) -> tuple[list[str], list[str | None]]:
    """`5 7 + 6 8 = _ _ _` with the sum, zero-padded to one digit more than the longer operand, at the blanks."""
    width = max(len(first), len(second)) + 1
    answer = str(int(first) + int(second)).zfill(width)
    tokens = [*first, PLUS, *second, EQUALS, *[BLANK] * width]
    return tokens, [None] * (len(tokens) - width) + list(answer)


def carry_row(first: str, second: str) -> tuple[list[str], list[str]]:
    """Two operands of equal length -> `00` and one token per position (`first[i] second[i]`); every token is
    labelled with the sum's digit at its position (the `00` with the carry out)."""
    if len(first) != len(second):
        raise ValueError(f"carry operands must have equal lengths, got {len(first)} and {len(second)}")
    answer = str(int(first) + int(second)).zfill(len(first) + 1)
    return ["00", *(a + b for a, b in zip(first, second))], list(answer)


def coupled_positions(task: str, words: list[str]) -> list[int]:
    """Position ids for a row's words that give the words which belong together one position ("position coupling",
    Cho et al., 2024): the position a model with `position_encoding="absolute"` reads instead of each word's index.

    - `copy`: the i-th symbol and the i-th blank both get `i` (1, 2, ...); `=` gets `n + 1`.
    - `reverse`: the i-th symbol gets `i`, the blank that answers it (the (n + 1 - i)-th) gets `i` too; `=`: `n + 1`.
    - `addition`: every digit gets its place value plus one (the units 1, the tens 2, ...), in both operands and in
      the answer's blanks (`5 7 + 6 8 = _ _ _` -> `2 1 4 2 1 4 3 2 1`); `+` and `=` get one past the highest place.

    A model that reads these sees the same relation between a blank and the symbol it answers at every length: the
    relation is "same position", not "n + 1 words to the left". With `[BOS]` before the words (position 0) and
    `[EOS]` after them (one past the highest), see `encode_token_task` in the checkout's
    `training/ndr_training/token_labels.py`.

    Raises:
        ValueError: a task other than copy, reverse and addition, or words that are not one of its rows.
    """
    if task not in COUPLED_TASKS:
        raise ValueError(f"position coupling is defined for {', '.join(COUPLED_TASKS)}, not {task!r}")
    if task in ("copy", "reverse"):
        n = (len(words) - 1) // 2
        symbols, blanks = words[:n], words[n + 1 :]
        if len(words) != 2 * n + 1 or words[n] != EQUALS or set(blanks) - {BLANK} or {EQUALS, BLANK} & set(symbols):
            raise ValueError(f"not a {task} row (symbols, `=`, one blank per symbol): {' '.join(words[:60])!r}")
        answers = range(1, n + 1) if task == "copy" else range(n, 0, -1)
        return [*range(1, n + 1), n + 1, *answers]
    if words.count(PLUS) != 1 or words.count(EQUALS) != 1 or words.index(PLUS) > words.index(EQUALS):
        raise ValueError(f"not an addition row (digits, `+`, digits, `=`, blanks): {' '.join(words[:60])!r}")
    plus, equals = words.index(PLUS), words.index(EQUALS)
    first, second, answer = plus, equals - plus - 1, len(words) - equals - 1
    operands, blanks = words[:plus] + words[plus + 1 : equals], words[equals + 1 :]
    if not first or not second or not all(word in DIGITS for word in operands) or set(blanks) != {BLANK}:
        raise ValueError(f"not an addition row (digits, `+`, digits, `=`, blanks): {' '.join(words[:60])!r}")
    top = max(first, second, answer) + 1
    return [*range(first, 0, -1), top, *range(second, 0, -1), top, *range(answer, 0, -1)]


def longest_carry_chain(first: str, second: str) -> int:
    """The most neighbouring positions of `first + second` (equal lengths) that each pass a carry on."""
    carry, run, longest = 0, 0, 0
    for a, b in zip(reversed(first), reversed(second)):
        carry = (int(a) + int(b) + carry) // 10
        run = run + 1 if carry else 0
        longest = max(longest, run)
    return longest


def _operand(rng: random.Random, count: int) -> str:
    """A `count`-digit number without a leading zero (one digit: 0-9)."""
    if count == 1:
        return DIGITS[_digit(rng)]
    return DIGITS[1 + int(rng.random() * 9)] + "".join(_digits(rng, count - 1))


def _digit_pair(rng: random.Random, accept) -> tuple[str, str]:
    while True:
        a, b = _digit(rng), _digit(rng)
        if accept(a + b):
            return DIGITS[a], DIGITS[b]


def long_chain_operands(rng: random.Random, length: int) -> tuple[str, str]:
    """Operands of `length` digits whose longest carry chain covers at least half of the positions.

    A chain of `c` positions (`c` uniform in [ceil(length / 2), length]) starts at a random position whose digits sum
    to 10 or more (it makes a carry), goes on through `c - 1` positions whose digits sum to 9 (each passes the carry
    on) and stops at a position whose digits sum to at most 8 (unless the chain reaches the most significant one);
    the other positions are random digits.
    """
    chain = (length + 1) // 2 + int(rng.random() * (length - (length + 1) // 2 + 1))
    start = int(rng.random() * (length - chain + 1))  # counted from the least significant position
    pairs = []
    for position in range(length):
        if position == start:
            pairs.append(_digit_pair(rng, lambda total: total >= 10))
        elif start < position < start + chain:
            a = _digit(rng)
            pairs.append((DIGITS[a], DIGITS[9 - a]))
        elif position == start + chain:
            pairs.append(_digit_pair(rng, lambda total: total <= 8))
        else:
            pairs.append((DIGITS[_digit(rng)], DIGITS[_digit(rng)]))
    pairs.reverse()  # most significant first
    return "".join(a for a, _ in pairs), "".join(b for _, b in pairs)


def draw_row(task: str, rng: random.Random, family: str, length: int) -> tuple[list[str], list[str | None]]:
    """One random row of a task at one length. `family` is `"train"`, `"test"`, `"valid"` (drawn as `"test"`) or
    `"long_chains"` (the carry task's long carry chains; in `train` a carry row has one with probability
    `TRAIN_LONG_CHAIN_SHARE`)."""
    if task in ("copy", "reverse"):
        return string_row(task, _digits(rng, length))
    if task == "addition":
        # evaluation: both operands have `length` digits; train: one of them, the other 1 to `length` digits
        other = length if family in ("test", "valid") else 1 + int(rng.random() * length)
        first, second = _operand(rng, length), _operand(rng, other)
        return addition_row(*((first, second) if rng.random() < 0.5 else (second, first)))
    long_chain = family == "long_chains" or (family == "train" and rng.random() < TRAIN_LONG_CHAIN_SHARE)
    if long_chain:
        return carry_row(*long_chain_operands(rng, length))
    return carry_row("".join(_digits(rng, length)), "".join(_digits(rng, length)))


def distinct_rows(task: str, length: int) -> int | None:
    """How many distinct `train` rows a length's stream can deliver without endless duplicate draws: all of a small
    space, half of a larger one (None: more than any split needs)."""
    if task in ("copy", "reverse"):
        space = 10**length
    elif task == "addition":
        # ordered operand pairs whose longer operand has `length` digits; n(d) numbers have d digits, and all
        # numbers below `length` digits are 10 ** (length - 1)
        count = 10 if length == 1 else 9 * 10 ** (length - 1)
        space = count * count + 2 * count * (10 ** (length - 1) if length > 1 else 0)
    else:
        space = 100**length
    if space > 10**9:
        return None
    return space if space <= 60_000 else space // 2


__all__ = [
    "TOKEN_TASK_NAMES",
    "TOKEN_SPLIT_NAMES",
    "TOKEN_LABEL_NAMES",
    "TOKEN_GENERATOR_VERSION",
    "TRAIN_MAX_LENGTH",
    "EVAL_LENGTHS",
    "VALID_LENGTHS",
    "TRAIN_LONG_CHAIN_SHARE",
    "token_split_lengths",
    "token_task_max_tokens",
    "string_row",
    "addition_row",
    "carry_row",
    "longest_carry_chain",
    "long_chain_operands",
    "COUPLED_TASKS",
    "coupled_positions",
]
