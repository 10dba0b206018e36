"""Markdown tables: the one writer behind every table the project prints or writes (training summaries, model and
dataset cards, comparisons, benchmarks, the docs site, the routing explorer).

    from modeling_ndr.tables import markdown_table

    print(markdown_table([{"split": "ood_test", "accuracy": "0.983"}]))
    # | split | accuracy |
    # |---|---|
    # | ood_test | 0.983 |

It needs nothing beyond the standard library, so the routing explorer and the docs' hooks use it without the training
dependencies.
"""

from collections.abc import Iterable, Mapping, Sequence


def markdown_table(rows: Iterable[Mapping | Sequence], columns: Sequence | None = None) -> str:
    """A Markdown table: the header, the `|---|` rule and one line per row (no newline at the end). Cells are written
    with `str()`, so the caller formats numbers.

    Args:
        rows: the body, each row either a sequence of cells in column order or a mapping from column to cell (a
            column the mapping lacks gives an empty cell).
        columns: the header; for mapping rows it defaults to their keys in order of first appearance.

    Returns:
        The table's text.
    """
    rows = list(rows)
    if columns is None:
        columns = list(dict.fromkeys(column for row in rows for column in row))
    lines = ["| " + " | ".join(map(str, columns)) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [row.get(column, "") for column in columns] if isinstance(row, Mapping) else row
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


__all__ = ["markdown_table", "per_token_results"]


def per_token_results(eval_results: Mapping) -> bool:
    """Whether `eval_results.json`'s splits are a token classifier's (one label per token: accuracy per length,
    `by_length`) rather than one label per text (accuracy per depth)."""
    return any("by_length" in values for values in eval_results.values())
