"""The task datasets: labels and depths re-computed independently, split depths and balance, no leaks into train,
CTL's tables and directions, determinism across processes, and argument checking.

Small sizes keep the file fast; every split gets its own temporary `datasets` cache.
"""

import collections
import hashlib
import json
import os
import subprocess
import sys

import pytest
from task_reference import evaluate_arithmetic, evaluate_ctl, evaluate_listops

import datasets
from modeling_ndr import TASK_NAMES, ctl_tables, load_task, task_label_names, task_readout, task_vocabulary


N_TRAIN, N_EVAL = 1_500, 120
REPOSITORY_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (task, options): the four datasets of the paper.
VARIANTS = {
    "ctl-forward": ("ctl", {"direction": "forward"}),
    "ctl-backward": ("ctl", {"direction": "backward"}),
    "arithmetic": ("arithmetic", {}),
    "listops": ("listops", {}),
}
DEPTHS = {  # split -> depths the paper's splits use
    "ctl": {"train": range(1, 6), "iid_test": range(2, 6), "ood_valid": range(6, 9), "ood_test": range(9, 11)},
    "arithmetic": {"train": range(1, 6), "iid_test": range(2, 6), "ood_valid": [6], "ood_test": [7, 8]},
    "listops": {"train": range(1, 6), "iid_test": range(1, 6), "ood_valid": [6], "ood_test": [7, 8]},
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Each variant generated once at a small size, seed 0."""
    cache_dir = str(tmp_path_factory.mktemp("datasets_cache"))
    return {
        variant: load_task(task, seed=0, n_train=N_TRAIN, n_eval=N_EVAL, cache_dir=cache_dir, **options)
        for variant, (task, options) in VARIANTS.items()
    }


def reference_label_and_depth(task: str, text: str, seed: int = 0) -> tuple[int, int]:
    if task == "ctl":
        return evaluate_ctl(text, ctl_tables(seed))
    if task == "arithmetic":
        return evaluate_arithmetic(text)
    return evaluate_listops(text)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_label_and_depth_matches_the_independent_evaluator(generated, variant):
    task = VARIANTS[variant][0]
    for split, dataset in generated[variant].items():
        for row in dataset:
            label, depth = reference_label_and_depth(task, row["text"])
            assert (row["label"], row["depth"]) == (label, depth), (
                f"{variant}/{split}: {row['text']!r} is stored as label {row['label']}, depth {row['depth']} "
                f"but evaluates to label {label}, depth {depth}"
            )


@pytest.mark.parametrize("variant", VARIANTS)
def test_splits_have_the_requested_sizes_and_columns(generated, variant):
    dataset = generated[variant]
    assert list(dataset) == ["train", "iid_test", "ood_valid", "ood_test"], "the paper's four splits, in order"
    expected = {"train": N_TRAIN, "iid_test": N_EVAL, "ood_valid": N_EVAL, "ood_test": N_EVAL}
    assert {split: len(rows) for split, rows in dataset.items()} == expected, "n_train / n_eval set the split sizes"
    for split, rows in dataset.items():
        assert set(rows.column_names) == {"text", "label", "depth"}, f"{split}: columns are text, label, depth"


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_split_covers_exactly_its_depth_range(generated, variant):
    task = VARIANTS[variant][0]
    for split, dataset in generated[variant].items():
        assert set(dataset["depth"]) == set(DEPTHS[task][split]), (
            f"{variant}/{split}: depths {sorted(set(dataset['depth']))}, spec asks for {list(DEPTHS[task][split])}"
        )


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_split_is_balanced_per_depth(generated, variant):
    task = VARIANTS[variant][0]
    for split, dataset in generated[variant].items():
        counts = collections.Counter(dataset["depth"])
        # Depth 1 of CTL (72 samples) and arithmetic (200) is enumerated whole into train; the rest is balanced.
        enumerated = {"ctl": 72, "arithmetic": 200}.get(task) if split == "train" else None
        if enumerated:
            assert counts.pop(1) == enumerated, f"{variant}/train holds every one of the {enumerated} depth-1 samples"
        assert max(counts.values()) - min(counts.values()) <= 1, f"{variant}/{split}: unbalanced depths {counts}"


def test_ctl_at_full_size_keeps_all_short_compositions_and_balances_the_rest(tmp_path):
    dataset = load_task("ctl", seed=0, cache_dir=str(tmp_path))
    train = collections.Counter(dataset["train"]["depth"])
    iid = collections.Counter(dataset["iid_test"]["depth"])
    assert len(dataset["train"]) == 53_700 and len(dataset["iid_test"]) == 1_000, "the paper's ≈53.7K train, 1K test"
    assert train[1] == 72, "every function on every symbol, once"
    assert iid[2] == 648 // 4, "iid_test holds out at most a quarter of the 648 length-2 compositions"
    for depth in (2, 3):
        assert train[depth] + iid[depth] == 8 * 9**depth, f"length {depth}: all distinct samples are used"
    assert train[4] == train[5], f"lengths 4 and 5 share the rest equally: {train}"
    assert max(iid[3], iid[4], iid[5]) - min(iid[3], iid[4], iid[5]) <= 1, f"iid_test balanced: {iid}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_evaluation_text_appears_in_train(generated, variant):
    train = set(generated[variant]["train"]["text"])
    assert len(train) == len(generated[variant]["train"]), f"{variant}: train texts are distinct"
    for split in ("iid_test", "ood_valid", "ood_test"):
        texts = generated[variant][split]["text"]
        assert len(set(texts)) == len(texts), f"{variant}/{split}: texts are distinct"
        leaked = train.intersection(texts)
        assert not leaked, f"{variant}/{split} leaks into train: {sorted(leaked)[:3]}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_texts_are_single_space_separated_tokens_of_the_task_vocabulary(generated, variant):
    task = VARIANTS[variant][0]
    vocabulary = set(task_vocabulary(task))
    for split, dataset in generated[variant].items():
        for text in dataset["text"]:
            tokens = text.split(" ")
            assert all(tokens) and text == text.strip(), f"{variant}/{split}: {text!r} is not single-space separated"
            assert set(tokens) <= vocabulary, f"{variant}/{split}: {set(tokens) - vocabulary} not in task_vocabulary"


@pytest.mark.parametrize("task", ["arithmetic", "listops"])
def test_texts_have_at_most_50_tokens(generated, task):
    for split, dataset in generated[task].items():
        longest = max(len(text.split(" ")) for text in dataset["text"])
        assert longest <= 50, f"{task}/{split}: a text of {longest} tokens; the generators cap texts at 50"


def test_listops_operations_take_two_to_five_arguments(generated):
    for split, dataset in generated["listops"].items():
        counts: list[int] = []
        for text in dataset["text"]:
            evaluate_listops(text, argument_counts=counts)
        assert set(counts) <= {2, 3, 4, 5}, f"listops/{split}: operations with {set(counts) - {2, 3, 4, 5}} arguments"
        assert set(counts) == {2, 3, 4, 5}, f"listops/{split}: every argument count 2-5 occurs"


def test_labels_are_class_labels_named_by_task_label_names(generated):
    for variant, (task, _) in VARIANTS.items():
        feature = generated[variant]["train"].features["label"]
        assert feature.names == task_label_names(task), f"{variant}: label names come from task_label_names"
        assert set(generated[variant]["train"]["label"]) == set(range(len(feature.names))), (
            f"{variant}: every class occurs in train"
        )
    assert task_label_names("ctl") == [f"{value:03b}" for value in range(8)], "CTL labels are the 3-bit symbols"


def test_task_facts_for_the_training_script():
    assert TASK_NAMES == ("ctl", "arithmetic", "listops", "ctlpp")
    assert [task_readout(task) for task in TASK_NAMES] == ["last", "last", "first", "first"], (
        "spec §2: ListOps reads [BOS]; CTL++'s runs read the first column of the backward text"
    )
    assert task_label_names("listops") == [str(digit) for digit in range(10)]


def test_ctl_tables_are_bijections_on_the_eight_symbols():
    tables = ctl_tables(0)
    assert list(tables) == list("abcdefghi"), "nine functions named a..i"
    for function, table in tables.items():
        assert sorted(table) == list(range(8)), f"function {function} is not a permutation of 0..7: {table}"
    assert len({tuple(table) for table in tables.values()}) == 9, "the nine functions differ"


def test_ctl_tables_depend_on_the_seed_and_only_on_it():
    assert ctl_tables(0) == ctl_tables(0), "the same seed gives the same tables"
    assert ctl_tables(0) != ctl_tables(1), "another seed gives other tables"


def test_ctl_train_holds_every_function_on_every_symbol(generated):
    train = generated["ctl-forward"]["train"]
    single = {text for text, depth in zip(train["text"], train["depth"]) if depth == 1}
    expected = {f"{symbol:03b} {function}" for symbol in range(8) for function in "abcdefghi"}
    assert single == expected, f"missing (function, symbol) pairs: {sorted(expected - single)[:5]}"


def test_ctl_backward_holds_the_forward_samples_reversed(generated):
    for split in ("train", "iid_test", "ood_valid", "ood_test"):
        forward = generated["ctl-forward"][split]
        backward = generated["ctl-backward"][split]
        reversed_forward = [" ".join(reversed(text.split(" "))) for text in forward["text"]]
        assert reversed_forward == backward["text"], f"{split}: backward rows are the forward rows reversed"
        assert forward["label"] == backward["label"] and forward["depth"] == backward["depth"], (
            f"{split}: reversing the text keeps label and depth"
        )


def test_ctl_description_lists_the_function_tables(generated):
    description = generated["ctl-forward"]["train"].info.description
    for function, table in ctl_tables(0).items():
        assert f"{function}: {' '.join(f'{value:03b}' for value in table)}" in description, (
            f"the description shows function {function}'s table so users can read it"
        )


def dataset_digest(dataset_dict) -> str:
    digest = hashlib.sha256()
    for split, dataset in dataset_dict.items():
        for row in dataset:
            digest.update(json.dumps([split, row["text"], row["label"], row["depth"]]).encode())
    return digest.hexdigest()


DIGEST_SCRIPT = """
import json, tempfile
from test_tasks import VARIANTS, dataset_digest
from modeling_ndr import load_task
with tempfile.TemporaryDirectory() as cache_dir:
    print(json.dumps({{variant: dataset_digest(load_task(task, seed={seed}, n_train=300, n_eval=40,
                                                      cache_dir=cache_dir, **options))
                      for variant, (task, options) in VARIANTS.items()}}))
"""


def digests_in_new_process(seed: int, python_hash_seed: str) -> dict:
    script = DIGEST_SCRIPT.format(seed=seed)
    tests_dir = os.path.dirname(os.path.abspath(__file__))  # the script imports this file
    helpers = os.path.dirname(tests_dir)  # and the helpers it imports (tests/)
    environment = {
        **os.environ,
        "PYTHONHASHSEED": python_hash_seed,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [REPOSITORY_ROOT, tests_dir, helpers, os.environ.get("PYTHONPATH")])
        ),
    }
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment, cwd=REPOSITORY_ROOT
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_same_seed_gives_identical_data_in_separate_processes():
    first = digests_in_new_process(seed=0, python_hash_seed="1")
    second = digests_in_new_process(seed=0, python_hash_seed="2")
    assert first == second, "the same seed must give the same data in any process (no hash(), no global RNG)"


def test_different_seed_gives_different_data(tmp_path):
    for variant, (task, options) in VARIANTS.items():
        seed_0 = load_task(task, seed=0, n_train=300, n_eval=40, cache_dir=str(tmp_path), **options)
        seed_1 = load_task(task, seed=1, n_train=300, n_eval=40, cache_dir=str(tmp_path), **options)
        for split in seed_0:
            assert seed_0[split]["text"] != seed_1[split]["text"], f"{variant}/{split}: seeds 0 and 1 gave equal texts"


def test_loading_again_gives_the_same_data_from_the_cache(tmp_path):
    first = load_task("listops", seed=3, n_train=200, n_eval=20, cache_dir=str(tmp_path))
    second = load_task("listops", seed=3, n_train=200, n_eval=20, cache_dir=str(tmp_path))
    assert dataset_digest(first) == dataset_digest(second), "a cached reload returns the generated data"
    assert second["train"].cache_files, "splits are written to the datasets cache (Dataset.from_generator)"


@pytest.mark.parametrize(
    "call, message",
    [
        (dict(name="sorting"), "name"),
        (dict(name="ctl", direction="sideways"), "direction"),
        (dict(name="arithmetic", direction="forward"), "direction"),
        (dict(name="listops", depth=3), "depth"),
        (dict(name="ctl", n_train=0), "n_train"),
        (dict(name="listops", n_eval=-5), "n_eval"),
        (dict(name="arithmetic", n_train=2.5), "n_train"),
        (dict(name="ctl", n_train=50), "n_train"),
        (dict(name="listops", seed=-1), "seed"),
    ],
)
def test_bad_arguments_raise_value_error_naming_the_argument(call, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        load_task(cache_dir=str(tmp_path), **call)


def test_default_sizes_are_the_papers(monkeypatch):
    """Read the per-depth counts load_task hands to Dataset.from_generator, without generating 1M samples."""
    requested = {}

    def record_request(generator, gen_kwargs, **kwargs):
        requested[gen_kwargs["split"]] = dict(gen_kwargs["counts"])
        return datasets.Dataset.from_dict({"text": [], "label": [], "depth": []})

    monkeypatch.setattr(datasets.Dataset, "from_generator", record_request)
    paper_train_sizes = {"ctl": 53_700, "arithmetic": 100_000, "listops": 1_000_000}
    for task, train_size in paper_train_sizes.items():
        load_task(task)
        sizes = {split: sum(counts.values()) for split, counts in requested.items()}
        assert sizes == {"train": train_size, "iid_test": 1_000, "ood_valid": 1_000, "ood_test": 1_000}, (
            f"{task}: the paper's split sizes by default"
        )
    assert requested["train"] == dict.fromkeys(range(1, 6), 200_000), "ListOps train: 200K per depth 1-5"


def test_a_large_split_drawn_in_parallel_processes_is_the_split_drawn_in_one(monkeypatch):
    """Large splits draw their depths in parallel processes (ListOps' 1M rows took 100 s of one core): each depth's
    stream is independent, so the rows and their order are the same as one process draws."""
    from modeling_ndr.tasks import generation

    drawn_apart, draw = [], generation._draw_in_subprocess
    monkeypatch.setattr(generation, "_draw_in_subprocess", lambda job: drawn_apart.append(job[3]) or draw(job))
    monkeypatch.setattr(generation, "PARALLEL_MIN_ROWS", 1)
    plan = generation._split_plans("listops", 3_000, 100)["train"]
    kwargs = dict(task="listops", seed=3, split="train", **plan, direction="", max_tokens=0, generator_version=0)
    monkeypatch.setenv("NDR_DATA_PROCESSES", "1")
    alone = list(generation._generate_split(**kwargs))
    assert drawn_apart == [] and len(alone) == 3_000
    monkeypatch.setenv("NDR_DATA_PROCESSES", "2")
    assert list(generation._generate_split(**kwargs)) == alone, "the same rows in the same order"
    assert sorted(drawn_apart) == [1, 2, 3, 4, 5], "each depth drawn in a process of its own"
    monkeypatch.setenv("NDR_DATA_PROCESSES", "0")
    with pytest.raises(ValueError, match="NDR_DATA_PROCESSES='0'"):
        list(generation._generate_split(**kwargs))


def test_a_depth_that_fails_in_its_process_names_the_depth_and_the_error():
    from modeling_ndr.tasks import generation

    with pytest.raises(RuntimeError, match=r"depth 2 of listops in a subprocess failed .*TypeError"):
        generation._draw_in_subprocess(("listops", 0, "in_distribution", 2, 0.25, 5, 0, "not a count"))
