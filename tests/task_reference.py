"""Reference evaluators for the three tasks, written from the paper's task definitions, independent of the generators.

Each `evaluate_*` parses one line of text and returns `(label, depth)`. They share no code with
`modeling_ndr.tasks` (CTL only borrows the function tables, which are data, via `ctl_tables`), so a test that
re-computes every generated label and depth with them checks the generator against a second implementation.
"""

from collections.abc import Sequence


def evaluate_ctl(text: str, tables: dict[str, Sequence[int]]) -> tuple[int, int]:
    """`101 d a b` (forward) or `b a d 101` (backward): b(a(d(101))); depth = number of functions."""
    tokens = text.split(" ")
    is_symbol = [len(token) == 3 and set(token) <= {"0", "1"} for token in tokens]
    if is_symbol[0] and not any(is_symbol[1:]):
        symbol, functions_in_order = tokens[0], tokens[1:]
    elif is_symbol[-1] and not any(is_symbol[:-1]):
        symbol, functions_in_order = tokens[-1], tokens[-2::-1]
    else:
        raise ValueError(f"not a CTL sample: {text!r}")
    value = int(symbol, 2)
    for function in functions_in_order:
        value = tables[function][value]
    return value, len(functions_in_order)


class _Tokens:
    def __init__(self, text: str):
        self.tokens = text.split(" ")
        self.position = 0

    def next(self) -> str:
        if self.position >= len(self.tokens):
            raise ValueError("unexpected end of input")
        token = self.tokens[self.position]
        self.position += 1
        return token

    def peek(self) -> str:
        return self.tokens[self.position] if self.position < len(self.tokens) else ""

    def expect_end(self) -> None:
        if self.position != len(self.tokens):
            raise ValueError(f"trailing tokens: {self.tokens[self.position :]}")


def evaluate_arithmetic(text: str) -> tuple[int, int]:
    """Fully bracketed `( a op b )` mod 10; depth = levels of nested operations, a digit being 0."""
    tokens = _Tokens(text)

    def expression() -> tuple[int, int]:
        token = tokens.next()
        if token.isdigit() and len(token) == 1:
            return int(token), 0
        if token != "(":
            raise ValueError(f"expected a digit or '(', got {token!r}")
        left_value, left_depth = expression()
        operator = tokens.next()
        right_value, right_depth = expression()
        if tokens.next() != ")":
            raise ValueError("expected ')'")
        if operator == "+":
            value = left_value + right_value
        elif operator == "*":
            value = left_value * right_value
        else:
            raise ValueError(f"unknown operator {operator!r}")
        return value % 10, 1 + max(left_depth, right_depth)

    result = expression()
    tokens.expect_end()
    return result


def evaluate_listops(text: str, argument_counts: list | None = None) -> tuple[int, int]:
    """ListOps value and dependency depth (only the arguments an operation uses count; a digit is 0).

    MIN / MAX use the first argument holding the extreme value; MED sorts stably and uses the middle argument (odd
    count) or the two middle ones (even count, value = floor of their mean); SM uses all (sum mod 10).
    If `argument_counts` is a list, the number of arguments of every operation is appended to it.
    """
    tokens = _Tokens(text)

    def node() -> tuple[int, int]:
        token = tokens.next()
        if token.isdigit() and len(token) == 1:
            return int(token), 0
        if token not in ("[MIN", "[MAX", "[MED", "[SM"):
            raise ValueError(f"unexpected token {token!r}")
        arguments = []
        while tokens.peek() != "]":
            arguments.append(node())
        tokens.next()
        if argument_counts is not None:
            argument_counts.append(len(arguments))
        values = [value for value, _ in arguments]
        if token == "[SM":
            return sum(values) % 10, 1 + max(depth for _, depth in arguments)
        if token in ("[MIN", "[MAX"):
            best = 0
            for index in range(1, len(values)):
                better = values[index] < values[best] if token == "[MIN" else values[index] > values[best]
                if better:
                    best = index
            return values[best], 1 + arguments[best][1]
        ranked = sorted(range(len(values)), key=lambda index: values[index])  # Python's sort is stable
        half = len(ranked) // 2
        middle = [ranked[half]] if len(ranked) % 2 == 1 else [ranked[half - 1], ranked[half]]
        value = sum(values[index] for index in middle) // len(middle)
        return value, 1 + max(arguments[index][1] for index in middle)

    result = node()
    tokens.expect_end()
    return result


def ctlpp_description_facts(description: str) -> tuple[dict[str, list[int]], dict[str, str]]:
    """A CTL++ split's function tables and each function's group, read from the split's description (the data as
    written, not the generator's objects): `({"a": [f(0), ..., f(7)], ...}, {"a": "a1", ...})`."""
    groups_text = description.split("Groups: ")[1].split(". Function tables")[0]
    tables_text = description.split("Function tables (f(0) ... f(7)): ")[1].rstrip(".")
    group_of = {}
    for part in groups_text.split("; "):
        group, members = part.split(": ")
        group_of.update(dict.fromkeys(members.split(" "), group))
    tables = {}
    for part in tables_text.split("; "):
        function, values = part.split(": ")
        tables[function] = [int(value) for value in values.split(" ")]
    return tables, group_of


def evaluate_ctlpp(text: str, tables: dict[str, Sequence[int]]) -> tuple[int, int, list[str], list[int]]:
    """`b C 5` (backward) or `5 C b` (forward): b(C(5)). Returns the label, the depth (number of functions), the
    functions in order of application and the symbol entering each of them."""
    tokens = text.split(" ")
    if tokens[-1].isdigit() and not any(token.isdigit() for token in tokens[:-1]):
        symbol, functions = int(tokens[-1]), tokens[-2::-1]
    elif tokens[0].isdigit() and not any(token.isdigit() for token in tokens[1:]):
        symbol, functions = int(tokens[0]), tokens[1:]
    else:
        raise ValueError(f"not a CTL++ sample: {text!r}")
    entering = []
    for function in functions:
        entering.append(symbol)
        symbol = tables[function][symbol]
    return symbol, len(functions), functions, entering
