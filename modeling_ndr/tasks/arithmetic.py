"""Simple arithmetic modulo 10: `+` and `*` on digits, fully bracketed, e.g. `( ( 4 * 7 ) + 2 )` -> 0.

For a target depth `D`, an expression is grown with each operand becoming a sub-operation with probability `p` (at
most `D` levels); while it is shallower than `D` it is wrapped as one operand of a new operation whose other operand
is grown the same way (at most `D - 1` levels), as the paper's release does. Expressions over MAX_TOKENS are rejected.
"""

import random
from collections.abc import Iterator

from .common import MAX_TOKENS, Expression, RandomFloat, shuffle


ARITHMETIC_OPERATORS = ("+", "*")


def _combine_arithmetic(left: Expression, right: Expression, operator: str) -> Expression:
    value = (left[1] + right[1]) % 10 if operator == "+" else (left[1] * right[1]) % 10
    return f"( {left[0]} {operator} {right[0]} )", value, max(left[2], right[2]) + 1, left[3] + right[3] + 3


def _grow_arithmetic(rnd: RandomFloat, levels: int, p_operation: float) -> Expression:
    """A digit, or with probability `p_operation` an operation on two grown operands (at most `levels` deep)."""
    if levels == 0 or rnd() >= p_operation:
        digit = int(rnd() * 10)
        return str(digit), digit, 0, 1
    left = _grow_arithmetic(rnd, levels - 1, p_operation)
    right = _grow_arithmetic(rnd, levels - 1, p_operation)
    return _combine_arithmetic(left, right, ARITHMETIC_OPERATORS[int(rnd() * 2)])


def _sample_arithmetic(rnd: RandomFloat, depth: int, p_operation: float) -> Expression | None:
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


def arithmetic_stream(rng: random.Random, depth: int, p_operation: float) -> Iterator[tuple[str, int]]:
    if depth == 1:  # all 200 single operations, shuffled
        everything = []
        for operator in ARITHMETIC_OPERATORS:
            for left in range(10):
                for right in range(10):
                    expression = _combine_arithmetic((str(left), left, 0, 1), (str(right), right, 0, 1), operator)
                    everything.append((expression[0], expression[1]))
        shuffle(everything, rng)
        yield from everything
        return
    rnd = rng.random
    while True:
        expression = _sample_arithmetic(rnd, depth, p_operation)
        yield None if expression is None else (expression[0], expression[1])


def arithmetic_space(depth: int) -> int | None:
    """Distinct expressions of exactly `depth` levels (None: more than any split needs)."""
    if depth > 2:
        return None
    at_most = [10]
    for _ in range(depth):
        at_most.append(10 + len(ARITHMETIC_OPERATORS) * at_most[-1] ** 2)
    return at_most[depth] - at_most[depth - 1]


# ---------------------------------------------------------------------------------------------------------------
# ListOps with dependency depth
