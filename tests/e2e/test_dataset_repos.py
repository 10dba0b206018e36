"""The dataset repositories in hub_cards/datasets/: each loads with `datasets.load_dataset` from its card alone (no
loading script), offline, with the configs, splits and features the card declares and the rows `load_task`
generates; the generator writes the same bytes twice.

conftest.py points HF_HOME at a private temporary folder and sets HF_HUB_OFFLINE=1 (the Hub is unreachable here
anyway); the tests build the caches themselves with tests/hub_cache.py.
"""

import functools
import os
import shutil
import subprocess

import pytest
from datasets.info import DatasetInfosDict
from hub_cache import cache_as_if_loaded_online, install_in_hub_cache
from huggingface_hub import DatasetCard, snapshot_download
from scripts import load_script

import datasets
from modeling_ndr import load_task
from modeling_ndr.tasks import SPLIT_NAMES


REPOSITORY_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
make_dataset_repos = load_script("hub_cards/make_dataset_repos.py", "make_dataset_repos")

CONFIGS = make_dataset_repos.CONFIGS
NOT_COMMITTED = make_dataset_repos.NOT_COMMITTED
EVALUATION_SPLITS = make_dataset_repos.EVALUATION_SPLITS
TASK_CONFIGS = [(task, config) for task, configs in CONFIGS.items() for config in configs]
# (task, config) pairs whose every split is committed: these load by hub id like the Hub repository.
COMPLETE_TASK_CONFIGS = [(task, config) for task, config in TASK_CONFIGS if not NOT_COMMITTED.get(task)]


def repo_id(task: str) -> str:
    return f"org/{make_dataset_repos.repo_name(task)}"


def repo_folder(task: str) -> str:
    return os.path.join(make_dataset_repos.DEFAULT_OUT, make_dataset_repos.repo_name(task))


def committed_splits(task: str, config: str) -> list[str]:
    not_committed = NOT_COMMITTED.get(task, ())
    return [split for split in SPLIT_NAMES if make_dataset_repos.data_file(config, split) not in not_committed]


@functools.cache
def expected(task: str, config: str) -> datasets.DatasetDict:
    """What `load_task` generates for a repo's config, at the paper's sizes. Only ListOps' train split (not
    committed) is generated small: the evaluation splits do not depend on `n_train` (train takes the samples after
    iid_test's), and generating 1M rows would take minutes."""
    n_train = 5 if "data/train.parquet" in NOT_COMMITTED.get(task, ()) else None
    return load_task(task, seed=0, n_train=n_train, **CONFIGS[task][config])


@pytest.fixture(scope="module")
def snapshots() -> dict[str, str]:
    """Each committed repo folder, as a checkout has it, installed in the offline hub cache: task -> snapshot."""
    hf_home = os.environ["HF_HOME"]
    return {
        task: install_in_hub_cache(
            repo_folder(task), repo_id(task), hf_home, repo_type="dataset", exclude=NOT_COMMITTED.get(task, ())
        )
        for task in CONFIGS
    }


def load_committed(snapshot: str, task: str, config: str) -> datasets.DatasetDict:
    """The card's documented way to load a folder: by path, or with explicit data files where a file is missing."""
    if NOT_COMMITTED.get(task):
        data_files = {split: make_dataset_repos.data_file(config, split) for split in committed_splits(task, config)}
        return datasets.load_dataset(snapshot, data_files=data_files)
    return datasets.load_dataset(snapshot, config)


def assert_same_rows(loaded: datasets.Dataset, generated: datasets.Dataset, what: str) -> None:
    assert loaded.features == generated.features, f"{what}: features {loaded.features} != {generated.features}"
    assert len(loaded) == len(generated), f"{what}: {len(loaded)} rows, load_task gives {len(generated)}"
    assert loaded.to_dict() == generated.to_dict(), f"{what}: rows differ from load_task's (regenerate the repo)"


@pytest.mark.parametrize("task", CONFIGS)
def test_card_declares_every_config_split_file_and_feature(task):
    card = DatasetCard.load(os.path.join(repo_folder(task), "README.md")).data
    declared = {entry["config_name"]: entry["data_files"] for entry in card.configs}
    assert list(declared) == list(CONFIGS[task]), f"{task}: the card's configs are {list(declared)}"
    infos = DatasetInfosDict.from_dataset_card_data(card)
    for config, data_files in declared.items():
        wanted = [{"split": split, "path": make_dataset_repos.data_file(config, split)} for split in SPLIT_NAMES]
        assert data_files == wanted, f"{task}/{config}: load_dataset reads the splits from {data_files}"
        assert infos[config].features == expected(task, config)["iid_test"].features, (
            f"{task}/{config}: the card's features must make `label` a ClassLabel with the task's names"
        )
        for split in committed_splits(task, config):
            path = os.path.join(repo_folder(task), make_dataset_repos.data_file(config, split))
            assert os.path.isfile(path), f"{path} is declared by the card and must be committed"


@pytest.mark.parametrize("task,config", TASK_CONFIGS)
def test_committed_files_hold_the_rows_of_load_task(snapshots, task, config):
    loaded = load_committed(snapshots[task], task, config)
    assert list(loaded) == committed_splits(task, config), f"{task}/{config}: splits {list(loaded)}"
    for split in loaded:
        assert_same_rows(loaded[split], expected(task, config)[split], f"{task}/{config}/{split}")


@pytest.mark.parametrize("task,config", COMPLETE_TASK_CONFIGS)
def test_hub_id_loads_offline_once_it_was_loaded(snapshots, tmp_path, monkeypatch, task, config):
    cache_as_if_loaded_online(snapshots[task], repo_id(task), config)
    monkeypatch.chdir(tmp_path)  # no ./org/<name> here: the id must come from the cache
    loaded = datasets.load_dataset(repo_id(task), config)
    assert list(loaded) == list(SPLIT_NAMES), f"load_dataset({repo_id(task)!r}, {config!r}) gave {list(loaded)}"
    for split in SPLIT_NAMES:
        assert_same_rows(loaded[split], expected(task, config)[split], f"{repo_id(task)}/{config}/{split}")


def test_hub_id_is_not_looked_up_in_the_hub_cache_offline(hf_home, tmp_path, monkeypatch):
    """The cards say so (datasets 5.2 raises before it looks at `$HF_HOME/hub`); if this starts to pass, the cards'
    offline paragraph can be simplified."""
    install_in_hub_cache(repo_folder("arithmetic"), "org/ndr-arithmetic-hub-cache-only", hf_home, "dataset")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConnectionError):
        datasets.load_dataset("org/ndr-arithmetic-hub-cache-only")
    # what the cards tell users to do instead
    loaded = datasets.load_dataset(snapshot_download("org/ndr-arithmetic-hub-cache-only", repo_type="dataset"))
    assert list(loaded) == list(SPLIT_NAMES), "a snapshot of the repo loads by path, offline, with every split"


def test_listops_checkout_without_its_train_file_names_the_missing_file(snapshots):
    """The ListOps card tells a checkout's users what `load_dataset` does until the command has written the file:
    datasets resolves every declared file first, so `split=` does not avoid the error."""
    missing = NOT_COMMITTED["listops"][0]
    for split in (None, "iid_test"):
        with pytest.raises(FileNotFoundError, match=missing):
            datasets.load_dataset(snapshots["listops"], split=split)


def test_generated_repo_with_a_train_file_loads_every_split_by_hub_id(hf_home, tmp_path, monkeypatch):
    sizes = {"n_train": 300, "n_eval": 40}
    folder = make_dataset_repos.write_repo("listops", str(tmp_path / "repos"), cache_dir=str(tmp_path), **sizes)
    snapshot = install_in_hub_cache(folder, "org/ndr-listops-small", hf_home, repo_type="dataset")
    cache_as_if_loaded_online(snapshot, "org/ndr-listops-small", "default")
    monkeypatch.chdir(tmp_path)
    loaded = datasets.load_dataset("org/ndr-listops-small")
    generated = load_task("listops", seed=0, cache_dir=str(tmp_path), **sizes)
    assert list(loaded) == list(SPLIT_NAMES), f"the generated repo loads with splits {list(loaded)}"
    for split in SPLIT_NAMES:
        assert_same_rows(loaded[split], generated[split], f"generated listops/{split}")


def test_generator_writes_the_same_bytes_twice(tmp_path):
    """Rerunning the command must not churn git: every file (cards included) is byte-identical."""
    folders = [
        make_dataset_repos.write_repo(
            "ctl", str(tmp_path / run), n_train=200, n_eval=30, cache_dir=str(tmp_path / run)
        )
        for run in ("first", "second")
    ]
    files = sorted(
        os.path.relpath(os.path.join(root, name), folders[0])
        for root, _, names in os.walk(folders[0])
        for name in names
    )
    assert "README.md" in files and "data/backward/train.parquet" in files, f"the repo holds {files}"
    for path in files:
        with open(os.path.join(folders[0], path), "rb") as first, open(os.path.join(folders[1], path), "rb") as second:
            assert first.read() == second.read(), f"{path} differs between two runs of the generator"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_files_not_committed_are_git_ignored():
    for task, paths in NOT_COMMITTED.items():
        for path in paths:
            relative = os.path.relpath(os.path.join(repo_folder(task), path), REPOSITORY_ROOT)
            result = subprocess.run(["git", "check-ignore", "-q", relative], cwd=REPOSITORY_ROOT)
            if result.returncode == 128:
                pytest.skip("not a git checkout")
            assert result.returncode == 0, f"{relative} is generated ({result.returncode}); .gitignore must name it"


@pytest.mark.parametrize("task", [task for task in CONFIGS if not NOT_COMMITTED.get(task)])
def test_the_committed_card_is_what_the_generator_writes_from_the_committed_files(task, tmp_path):
    """The card (rendered from hub_cards/dataset_card_template.md) must not drift from the generator: rendered again
    from the committed data files, it is the committed card byte for byte."""
    variants, sizes = {}, {}
    for config in CONFIGS[task]:
        variants[config] = datasets.load_dataset(repo_folder(task), config)
        for split in SPLIT_NAMES:
            path = make_dataset_repos.data_file(config, split)
            sizes[path] = os.path.getsize(os.path.join(repo_folder(task), path))
    written = make_dataset_repos.write_card(task, 0, variants, sizes, str(tmp_path), "org")
    with (
        open(written, encoding="utf-8") as new,
        open(os.path.join(repo_folder(task), "README.md"), encoding="utf-8") as old,
    ):
        assert new.read() == old.read(), f"{task}: the generator writes another card; run make datasets"
