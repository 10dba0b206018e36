"""ListOps with dependency depth: `[MIN`, `[MAX`, `[MED`, `[SM` with 2-5 arguments, each a digit or a sub-list.

MIN/MAX break ties toward the leftmost argument, MED is the middle value of a stable sort (floor of the mean of the two
middle values for an even count), SM is the sum mod 10. Dependency depth keeps only the arguments an operation uses
(MIN/MAX the selected one, MED the middle one(s), SM all) and counts nested levels (a digit is 0). For a target depth
`D`, a random list is grown; while its dependency depth is below `D` it is inserted at a random position of a new
random operation, retried (at most 20 times) until the new operation uses it without overshooting `D`.
"""

import random
from collections.abc import Iterator

from .common import MAX_TOKENS, Expression, RandomFloat


LISTOPS_OPERATIONS = ("[MIN", "[MAX", "[MED", "[SM")


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


def _listops_operation(rnd: RandomFloat, arguments: list[Expression]) -> tuple[Expression, tuple[int, ...]]:
    operation = int(rnd() * len(LISTOPS_OPERATIONS))
    values = [argument[1] for argument in arguments]
    value, used = _listops_result(operation, values)
    depth = 1 + max(arguments[index][2] for index in used)
    text = f"{LISTOPS_OPERATIONS[operation]} {' '.join(argument[0] for argument in arguments)} ]"
    return (text, value, depth, 2 + sum(argument[3] for argument in arguments)), used


def _grow_listops_argument(rnd: RandomFloat, levels: int, p_sublist: float, budget: int) -> Expression | None:
    """A digit, or with probability `p_sublist` a sub-list at most `levels` deep; None if over `budget` tokens."""
    if levels > 0 and rnd() < p_sublist:
        return _grow_listops_list(rnd, levels, p_sublist, budget)
    digit = int(rnd() * 10)
    return str(digit), digit, 0, 1


def _grow_listops_list(rnd: RandomFloat, levels: int, p_sublist: float, budget: int) -> Expression | None:
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
    rnd: RandomFloat, depth: int, max_levels: int, p_sublist: float, wrap_attempts: int = 20
) -> Expression | None:
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
    rnd: RandomFloat, inner: Expression, depth: int, max_levels: int, p_sublist: float
) -> Expression | None:
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


def listops_stream(rng: random.Random, depth: int, max_levels: int, p_sublist: float) -> Iterator:
    rnd = rng.random
    while True:
        expression = _sample_listops(rnd, depth, max_levels, p_sublist)
        yield None if expression is None else (expression[0], expression[1])
