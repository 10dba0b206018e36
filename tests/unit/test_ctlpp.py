"""CTL++: every label re-derived from the tables the split's description prints, every split's compositions checked
against the variant's rules written here from the paper's description (not the generator's patterns), the gates of
the overlap group, determinism, and the options' errors."""

import itertools
import re

import pytest
from task_reference import ctlpp_description_facts, evaluate_ctlpp

from modeling_ndr import load_task, task_label_names, task_readout, task_tokenizer, task_vocabulary
from modeling_ndr.tasks import CTLPP_VARIANTS, ctlpp_split_names


N_TRAIN, N_EVAL = 6_000, 100
CASES = {
    "alternate": {"variant": "alternate"},
    "parallel_branch": {"variant": "parallel_branch"},
    "parallel_branch_overlap": {"variant": "parallel_branch", "function_overlap": 8, "symbol_overlap": 3},
    "parallel_branch_2stage_overlap": {
        "variant": "parallel_branch_2stage",
        "function_overlap": 8,
        "symbol_overlap": 3,
    },
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    cache_dir = str(tmp_path_factory.mktemp("datasets_cache"))
    return {
        case: load_task("ctlpp", seed=0, n_train=N_TRAIN, n_eval=N_EVAL, cache_dir=cache_dir, **options)
        for case, options in CASES.items()
    }


def rows_of(data, split, tables):
    """(groups, functions, entering symbols) of each row, from the text alone."""
    return [evaluate_ctlpp(text, tables) for text in data[split]["text"]]


def trained_pattern(variant: str, groups: list[str]) -> bool:
    """The orders of groups training shows (gates aside), as the paper describes each variant."""
    pairs = list(zip(groups, groups[1:]))
    if variant == "alternate":
        return all(first != second for first, second in pairs)
    if variant == "parallel_branch":
        if groups[0] == "o":
            return False
        for index, (first, second) in enumerate(pairs):
            if first == "o" and second != groups[index - 1]:  # after the overlap group: back to the group before it
                return False
            if first != "o" and second not in (first, "o"):
                return False
        return True
    stage_one, follows = {"a1", "b1"}, {"a1": {"a2", "o"}, "b1": {"b2", "o"}}
    if groups[0] not in stage_one or groups[-1] in stage_one:
        return False
    return all(second in follows[first] if first in stage_one else second in stage_one for first, second in pairs)


def trained_row(variant, functions, entering, group_of, gates) -> bool:
    """The row's order of groups is one training shows, and it enters every overlap function on a symbol that
    training carries from the group before it (`gates`, read from train's pairs)."""
    groups = [group_of[function] for function in functions]
    return trained_pattern(variant, groups) and all(
        entering[index] in gates.get((groups[index - 1], function), ())
        for index, function in enumerate(functions)
        if groups[index] == "o"
    )


def gate_symbols(data, tables, group_of) -> dict:
    """(source group, overlap function) -> the symbols on which training goes from the source into the function:
    read from train's depth-2 rows (train holds every one of them)."""
    gates = {}
    for _, depth, functions, entering in rows_of(data, "train", tables):
        for position in range(1, depth if depth == 2 else 1):
            if group_of[functions[position]] == "o":
                source = group_of[functions[position - 1]]
                gates.setdefault((source, functions[position]), set()).add(entering[position])
    return gates


@pytest.mark.parametrize("case", CASES)
def test_every_label_and_depth_is_rederived_from_the_printed_tables(generated, case):
    data = generated[case]
    for split, dataset in data.items():
        tables, _ = ctlpp_description_facts(dataset.info.description)
        assert len(tables) == 32 and all(sorted(table) == list(range(8)) for table in tables.values())
        for text, label, depth in zip(dataset["text"], dataset["label"], dataset["depth"]):
            expected_label, expected_depth, _, _ = evaluate_ctlpp(text, tables)
            assert (label, depth) == (expected_label, expected_depth), (split, text)
            assert 2 <= depth <= 6


@pytest.mark.parametrize("case", CASES)
def test_training_shows_only_its_pattern_and_the_systematic_splits_never_show_it(generated, case):
    data, variant = generated[case], CASES[case]["variant"]
    tables, group_of = ctlpp_description_facts(data["train"].info.description)
    gates = gate_symbols(data, tables, group_of)
    for split in ("train", "iid_test"):
        for _, _, functions, entering in rows_of(data, split, tables):
            assert trained_row(variant, functions, entering, group_of, gates), (split, functions)
    unseen = {"alternate": ["test_self_loop"], "parallel_branch": ["test_group_alternate"],
              "parallel_branch_2stage": ["test_group_alternate", "test_unseen_pairs"]}[variant]  # fmt: skip
    for split in unseen:
        if split not in data:
            continue
        for _, _, functions, entering in rows_of(data, split, tables):
            assert not trained_row(variant, functions, entering, group_of, gates), (split, functions)
    train = set(data["train"]["text"])
    for split in data:
        if split in ["iid_test", *unseen]:
            assert not train & set(data[split]["text"]), split


@pytest.mark.parametrize("case", CASES)
def test_train_holds_every_pair_its_pattern_allows(generated, case):
    """Counted by brute force over all 8 x 32 x 32 (symbol, function, function), without the generator's patterns."""
    data, variant = generated[case], CASES[case]["variant"]
    tables, group_of = ctlpp_description_facts(data["train"].info.description)
    gates = gate_symbols(data, tables, group_of)
    expected = 0
    for symbol, first, second in itertools.product(range(8), tables, tables):
        groups = [group_of[first], group_of[second]]
        if not trained_pattern(variant, groups):
            continue
        if groups[1] == "o" and tables[first][symbol] not in gates.get((groups[0], second), ()):
            continue
        expected += 1
    assert data["train"]["depth"].count(2) == expected


@pytest.mark.parametrize("case", ["parallel_branch_overlap", "parallel_branch_2stage_overlap"])
def test_the_overlap_group_is_reached_from_both_groups_on_symbol_overlap_shared_symbols(generated, case):
    data = generated[case]
    tables, group_of = ctlpp_description_facts(data["train"].info.description)
    gates = gate_symbols(data, tables, group_of)
    overlap = [function for function, group in group_of.items() if group == "o"]
    sources = sorted({source for source, _ in gates})
    assert len(overlap) == CASES[case]["function_overlap"] and len(sources) == 2
    for function in overlap:
        first, second = (gates[source, function] for source in sources)
        assert len(first & second) == CASES[case]["symbol_overlap"], function
        assert first | second == set(range(8)), function
    if "test_cross_unseen_symbols" in data:  # a1 or b1 into o on a symbol that route never carries in training
        for _, _, functions, entering in rows_of(data, "test_cross_unseen_symbols", tables):
            assert group_of[functions[1]] == "o"
            assert entering[1] not in gates[group_of[functions[0]], functions[1]]


def test_the_same_seed_gives_the_same_rows_and_another_seed_other_tables(tmp_path):
    first = load_task("ctlpp", seed=3, n_train=N_TRAIN, n_eval=N_EVAL, cache_dir=str(tmp_path / "a"))
    again = load_task("ctlpp", seed=3, n_train=N_TRAIN, n_eval=N_EVAL, cache_dir=str(tmp_path / "b"))
    other = load_task("ctlpp", seed=4, n_train=N_TRAIN, n_eval=N_EVAL, cache_dir=str(tmp_path / "b"))
    assert list(first) == list(again) == ctlpp_split_names("parallel_branch")
    for split in first:
        assert first[split]["text"] == again[split]["text"] and first[split]["label"] == again[split]["label"]
    assert (
        ctlpp_description_facts(first["train"].info.description)[0]
        != ctlpp_description_facts(other["train"].info.description)[0]
    )


def test_forward_writes_the_symbol_first(tmp_path):
    backward = load_task("ctlpp", n_train=N_TRAIN, n_eval=N_EVAL, cache_dir=str(tmp_path))
    forward = load_task("ctlpp", n_train=N_TRAIN, n_eval=N_EVAL, cache_dir=str(tmp_path), direction="forward")
    assert [" ".join(reversed(text.split(" "))) for text in backward["iid_test"]["text"]] == forward["iid_test"][
        "text"
    ]


def test_the_vocabulary_labels_and_readout():
    assert task_label_names("ctlpp") == [str(symbol) for symbol in range(8)]
    assert task_readout("ctlpp") == "first"
    assert len(task_vocabulary("ctlpp")) == 40
    tokenizer = task_tokenizer("ctlpp")
    assert tokenizer.convert_ids_to_tokens(tokenizer("C b 5")["input_ids"]) == ["[BOS]", "C", "b", "5", "[EOS]"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"variant": "zigzag"}, "variant='zigzag' is not a CTL++ variant"),
        ({"variant": "alternate", "function_overlap": 4}, "alternate has no overlap group"),
        ({"function_overlap": 17}, "function_overlap must be an int from 0 to 16"),
        ({"symbol_overlap": 0}, "symbol_overlap must be an int from 1 to 8"),
        ({"direction": "sideways"}, "direction='sideways' is not allowed"),
    ],
)
def test_bad_options_are_named(options, message, tmp_path):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_task("ctlpp", n_train=N_TRAIN, n_eval=N_EVAL, cache_dir=str(tmp_path), **options)


def test_split_names_follow_the_variant():
    assert set(CTLPP_VARIANTS) == {"alternate", "parallel_branch", "parallel_branch_2stage"}
    assert "test_all_overlap" not in ctlpp_split_names("parallel_branch", 0)
    assert ctlpp_split_names("parallel_branch_2stage", 4, 3)[-3:] == [
        "test_cross_unseen_symbols", "test_unseen_pairs", "test_all_pairs"
    ]  # fmt: skip
    # every symbol shared: no symbol is unseen on either route; no overlap group: the crossed pairs are still unseen
    assert "test_cross_unseen_symbols" not in ctlpp_split_names("parallel_branch_2stage", 4)
    assert "test_unseen_pairs" in ctlpp_split_names("parallel_branch_2stage", 0)


@pytest.mark.parametrize(("overlap", "symbols"), [(8, None), (0, None), (16, 1)])
def test_every_option_the_checks_accept_makes_its_splits(overlap, symbols, tmp_path):
    data = load_task("ctlpp", n_train=N_TRAIN, n_eval=N_EVAL, cache_dir=str(tmp_path),
                     variant="parallel_branch_2stage", function_overlap=overlap, symbol_overlap=symbols)  # fmt: skip
    assert list(data) == ctlpp_split_names("parallel_branch_2stage", overlap, symbols)
    assert all(len(split) for split in data.values())
