"""A newcomer's first commands on their own data: without a preset they train (the `own_data` and `own_data_finetune`
presets, named in the log), a command that would train no step is refused in one line, fine-tuning on other labels
gets a new head in train.py and in the plain-Trainer example, a CPU run prints no `pin_memory` warning and no progress
bar under `--disable_tqdm`, the card names the data by its files, and test-fixture presets are not offered to users.
Tiny models and tens of samples."""

import contextlib
import io
import json
import logging
import random
import sys
import types
import warnings
from pathlib import Path

import huggingface_hub
import pytest
import transformers
from scripts import load_script

import datasets
import ndr_training
from modeling_ndr import NDRConfig, NDRForSequenceClassification, build_tokenizer, training
from modeling_ndr.training import export


@pytest.fixture(scope="module")
def train():
    return load_script("training/train.py", "ndr_train_own_data_defaults")


def majority_rows(rng: random.Random, n: int, lengths: list[int]) -> list[dict]:
    rows = [[rng.choice("01") for _ in range(rng.choice(lengths))] for _ in range(n)]
    return [{"text": " ".join(bits), "label": max("01", key=bits.count), "depth": len(bits)} for bits in rows]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A folder named `data` (as the docs' commands have it) with a toy task: the majority bit of 1-7 bits."""
    folder = tmp_path_factory.mktemp("task") / "data"
    folder.mkdir()
    rng = random.Random(0)
    splits = {"train": (64, [1, 3, 5]), "iid_test": (16, [1, 3, 5]), "ood_valid": (16, [7]), "ood_test": (16, [7])}
    for split, (n, lengths) in splits.items():
        (folder / f"{split}.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in majority_rows(rng, n, lengths))
        )
    return folder


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny untrained NDR saved with its tokenizer, whose labels (`000`, `111`) are not the data's."""
    folder = tmp_path_factory.mktemp("checkpoint")
    tokenizer = build_tokenizer(texts=["0 1"])
    config = NDRConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=16, num_hidden_layers=2,
                       num_labels=2, id2label={0: "000", 1: "111"}, label2id={"000": 0, "111": 1})  # fmt: skip
    NDRForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


class Recorded:
    """What a run printed on stderr, warned and logged."""

    def __init__(self):
        self.stderr, self.warnings, self.log = io.StringIO(), [], io.StringIO()


@pytest.fixture(scope="module")
def fine_tune_run(train, data, checkpoint, tmp_path_factory):
    """The docs' fine-tune command as written (no --max_steps, no --do_train, no preset), with the implied preset's
    step budget cut to 3 steps of 16 samples: its output folder and what it printed, warned and logged. Progress bars
    are switched on first, so that only train.py's --disable_tqdm can switch them off."""
    short = tmp_path_factory.mktemp("preset") / "own_data_finetune_short.yaml"
    short.write_text(f"base: {ndr_training.flags.FINE_TUNING_PRESET}\nmax_steps: 3\nper_device_train_batch_size: 16\n")
    output_dir = tmp_path_factory.mktemp("fine_tune") / "ft"
    argv = ["--model_name_or_path", str(checkpoint), "--learning_rate", "3e-4",
            "--train_file", str(data / "train.jsonl"), "--eval_files", f"ood_test={data / 'ood_test.jsonl'}",
            "--depth_column", "depth",
            "--output_dir", str(output_dir), "--disable_tqdm", "true"]  # fmt: skip
    transformers.utils.logging.enable_progress_bar()
    huggingface_hub.utils.enable_progress_bars()
    datasets.enable_progress_bars()
    recorded = Recorded()
    handler, root = logging.StreamHandler(recorded.log), logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # under pytest, train.py's logging.basicConfig leaves the root logger as it is
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(ndr_training.flags, "FINE_TUNING_PRESET", str(short))
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(recorded.stderr):
            warnings.simplefilter("always")
            train.main(argv)
        recorded.warnings = [str(warning.message) for warning in caught]
    finally:
        monkeypatch.undo()
        root.removeHandler(handler)
        root.setLevel(level)
    return output_dir, recorded


# ---------------------------------------------------------------------------------- training without a preset


def test_own_data_without_a_preset_trains_with_the_own_data_preset(data, tmp_path):
    argv = ["--train_file", str(data / "train.jsonl"), "--output_dir", str(tmp_path)]
    _, model_args, run_args, training_args, preset = ndr_training.parse_arguments(argv)
    assert run_args.preset == "own_data" and preset == training.read_preset("own_data"), "the implied preset"
    assert training_args.max_steps == preset["max_steps"] > 0, "a step budget: the run trains"
    assert (model_args.hidden_size, training_args.learning_rate) == (preset["hidden_size"], preset["learning_rate"]), (
        "the preset's NDR and learning rate, not transformers' defaults (lr 5e-5)"
    )


def test_fine_tuning_without_a_preset_keeps_the_checkpoint_s_shapes_and_learns_more_gently(data, checkpoint, tmp_path):
    argv = ["--model_name_or_path", str(checkpoint), "--train_file", str(data / "train.jsonl")]
    _, model_args, run_args, training_args, preset = ndr_training.parse_arguments(
        argv + ["--output_dir", str(tmp_path)]
    )
    assert run_args.preset == "own_data_finetune" and training_args.max_steps == preset["max_steps"] > 0
    assert training_args.learning_rate < training.read_preset("own_data")["learning_rate"], "gentler than scratch"
    assert model_args.hidden_size is None and model_args.num_hidden_layers is None, "the shapes are the checkpoint's"
    explicit = ndr_training.parse_arguments(argv + ["--preset", "ctl_cpu", "--output_dir", str(tmp_path)])
    assert explicit[2].preset == "ctl_cpu", "a preset on the command line wins"


def test_the_documented_fine_tune_command_trains_and_says_with_which_preset(fine_tune_run):
    output_dir, recorded = fine_tune_run
    run_config = json.loads((output_dir / "run_config.json").read_text())
    assert run_config["training"]["steps"] == 3, "it trained the preset's steps, not zero"
    assert "no --preset: fine-tuning trains with the preset" in recorded.log.getvalue()
    assert "the classification head is new" in recorded.log.getvalue(), "other labels: a new head, in the log"


def test_a_new_model_on_a_task_without_preset_or_steps_is_refused_before_anything_is_written(train, tmp_path):
    with pytest.raises(training.UsageError, match=r"trains no step: .*--preset ctl_cpu .*--max_steps N"):
        train.main(["--task", "ctl", "--output_dir", str(tmp_path / "run")])
    assert not (tmp_path / "run" / "run_config.json").exists(), "refused before the run's record"


def test_zero_epochs_are_refused(train, data, tmp_path):
    argv = ["--train_file", str(data / "train.jsonl"), "--max_steps", "-1", "--num_train_epochs", "0"]
    with pytest.raises(training.UsageError, match=r"trains no step \(--max_steps -1, --num_train_epochs 0\)"):
        train.main(argv + ["--output_dir", str(tmp_path / "run")])


# ------------------------------------------------------------------------------------------- a quiet CPU run


def test_a_cpu_run_gives_no_pin_memory_warning(fine_tune_run):
    _, recorded = fine_tune_run
    assert not [message for message in recorded.warnings if "pin_memory" in message], recorded.warnings


def test_disable_tqdm_silences_every_progress_bar(fine_tune_run):
    _, recorded = fine_tune_run
    stderr = recorded.stderr.getvalue()
    assert "it/s]" not in stderr and "%|" not in stderr, f"a progress bar: {stderr[-500:]}"


# ---------------------------------------------------------------------------------------------- the card


def test_the_card_names_the_data_by_its_files_not_their_folder(fine_tune_run):
    output_dir, _ = fine_tune_run
    card = (output_dir / "export" / "README.md").read_text()
    assert "own data (train.jsonl, ood_test.jsonl)" in card, "the files' names"
    assert "(data)" not in card and "ndr-data" not in card, "not the folder they sit in"


def test_the_model_name_comes_from_the_training_file_less_its_split_word():
    def name(**task):
        return export.default_model_name({"task": task})

    assert name(train_file="/home/me/data/majority_train.jsonl") == "ndr-majority"
    assert name(train_file="/home/me/data/train.jsonl") == "ndr-own-data", "nothing left: no folder name either"
    assert name(dataset_name="me/parity-bits") == "ndr-parity-bits"


# ------------------------------------------------------------------------------------------------ presets


def test_the_preset_typo_error_lists_presets_for_users_only():
    with pytest.raises(training.UsageError) as refused:
        training.read_preset("ctl_cpux")
    listed = str(refused.value)
    assert "'ctl_cpu'" in listed and "'own_data'" in listed, listed
    assert "tiny_gpu_release_test" not in listed, "a test fixture (internal: true) is not offered"
    assert "internal" not in training.read_preset("tiny_gpu_release_test"), "it still loads by name, mark removed"


# ------------------------------------------------------------------------------- the plain-Trainer example


def run_example(monkeypatch, *argv: str):
    monkeypatch.setattr(sys, "argv", ["finetune_with_trainer.py", *argv])
    return load_script("training/examples/finetune_with_trainer.py", "ndr_finetune_with_trainer")


def test_the_trainer_example_takes_named_arguments(monkeypatch, capsys):
    with pytest.raises(SystemExit) as exited:
        run_example(monkeypatch, "--help")
    assert exited.value.code == 0
    usage = capsys.readouterr().out
    assert all(flag in usage for flag in ("--model", "--data_dir", "--output_dir", "--max_steps")), usage


def test_the_trainer_example_gives_other_labels_a_new_head(monkeypatch, data, checkpoint, tmp_path, caplog, capsys):
    with caplog.at_level(logging.WARNING, logger="modeling_ndr.training"):
        example = run_example(monkeypatch, "--model", str(checkpoint), "--data_dir", str(data),
                              "--output_dir", str(tmp_path / "out"), "--max_steps", "2")  # fmt: skip
    assert example.model.config.id2label == {0: "0", 1: "1"}, "the data's labels, not the checkpoint's 000/111"
    assert "the classification head is new" in caplog.text, caplog.text
    printed = capsys.readouterr().out
    assert all(f"\n{split} " in "\n" + printed for split in ("iid_test", "ood_valid", "ood_test")), printed


def test_data_with_deeper_splits_and_no_selection_is_told_how_to_select_on_one(train):
    """The paper selects the checkpoint on a held-out split deeper than training and reports a deeper one; ndr cannot
    tell which of your splits is held out, so a run that selects on nothing says how, naming the shallowest deeper
    split (and warns where there is only one)."""
    from datasets import Dataset, DatasetDict

    def split(depths):
        return Dataset.from_dict({"text": ["a"] * len(depths), "label": [0] * len(depths), "depth": depths})

    args = types.SimpleNamespace(load_best_model_at_end=False, save_steps=200)
    data = DatasetDict(train=split([1, 2, 3]), iid=split([2, 3]), deep=split([4, 5]), deeper=split([6, 7]))
    note = train.selection_note(data, args)
    assert "--metric_for_best_model deep_accuracy" in note and "--load_best_model_at_end" in note, note
    assert "add one" not in note
    one = DatasetDict(train=split([1, 2]), deep=split([3]))
    assert "with one deeper split only" in train.selection_note(one, args)
    assert train.selection_note(DatasetDict(train=split([1, 2]), iid=split([2])), args) is None, "none deeper"
    selected = types.SimpleNamespace(load_best_model_at_end=True, save_steps=200)
    assert train.selection_note(data, selected) is None, "selection asked for: nothing to say"
