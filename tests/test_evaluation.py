"""The one evaluation path (`modeling_ndr.training.evaluation.predict`) and the one table writer
(`modeling_ndr.tables.markdown_table`) that every script which predicts or prints a table goes through."""

from modeling_ndr.tables import markdown_table


def test_a_table_has_a_header_a_rule_and_one_line_per_row():
    table = markdown_table([["ood_test", "0.983"], ["deeper", 1]], ["split", "accuracy"])
    assert table == "| split | accuracy |\n|---|---|\n| ood_test | 0.983 |\n| deeper | 1 |", table


def test_mapping_rows_give_their_columns_in_order_of_first_appearance_and_empty_missing_cells():
    table = markdown_table([{"a": 1, "b": "x"}, {"a": 2, "c": None}])
    assert table.splitlines() == ["| a | b | c |", "|---|---|---|", "| 1 | x |  |", "| 2 |  | None |"], (
        "a cell a row lacks is empty; a None the row holds is written as it is (the caller formats values)"
    )
