"""`training/compare_tokens.py` (`make compare-tokens`): every variant trained on a token task with the same flags,
the table and plot of accuracy per length, a finished variant reused, a time-boxed call resumed by the next."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripts import load_script
from tiny import tiny_train_args


TINY = tiny_train_args(
    preset=None, direction=None, n_train=200, n_eval=4, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
    per_device_train_batch_size=8, per_device_eval_batch_size=None, max_steps=4, eval_steps=4, save_steps=2,
    report_to="none", disable_tqdm=None, seed=None,
)  # fmt: skip
REPO = Path(__file__).resolve().parents[2]


def compare(argv: list[str]):
    return load_script("training/compare_tokens.py", "ndr_compare_tokens").main(argv)


def test_every_variant_is_trained_with_the_same_flags_and_reported_per_length(tmp_path, capsys):
    runs_dir, results_dir = tmp_path / "runs", tmp_path / "results"
    argv = ["--task", "carry", "--variants", "ndr,transformer", "--output_dir", str(runs_dir), "--results_dir",
            str(results_dir), "--", *TINY]  # fmt: skip
    runs = compare(argv)
    assert list(runs) == ["ndr", "transformer"]
    for variant, run in runs.items():
        assert run["command"][run["command"].index("--variant") + 1] == variant
        assert run["command"][-len(TINY) :] == TINY, "the same budget for every variant"
        assert run["command"][:3] == ["launch", "--multi_gpu", "--num_processes"], "two gloo processes by default"
        metric = run["command"][run["command"].index("--metric_for_best_model") + 1]
        assert metric == "test_100_accuracy", "checkpoints selected on the second-shortest test split, not long chains"
    data = json.loads((results_dir / "compare_tokens_carry.json").read_text())
    assert data["ndr"]["test_1000"]["length"] == 1000 and 0 <= data["ndr"]["long_chains_400"]["accuracy"] <= 1
    assert (results_dir / "compare_tokens_carry.png").stat().st_size > 0
    assert "| ndr |" in (runs_dir / "comparison.md").read_text()
    capsys.readouterr()
    compare(argv)
    assert capsys.readouterr().out.count("not trained again") == 2, "finished variants are reused"


def test_a_time_boxed_comparison_stops_with_75_and_the_next_call_resumes_it(tmp_path):
    argv = ["--task", "copy", "--variants", "ndr", "--nproc", "1", "--output_dir", str(tmp_path), "--", *TINY,
            "--max_steps", "300"]  # fmt: skip
    with pytest.raises(SystemExit) as stopped:
        compare(["--minutes", "0.01", *argv])  # (0.6 s: less than train.py's set-up, so it stops at the first step)
    assert stopped.value.code == 75, "stopped with a checkpoint, to be resumed"
    runs = compare(argv)
    assert runs["ndr"]["results"]["test_40"]["accuracy"] >= 0, "resumed and finished"
    record = json.loads((tmp_path / "ndr" / "compare_tokens_run.json").read_text())
    assert record["finished"] and "--max_wall_minutes" not in record["command"], "the command is the same as before"


@pytest.mark.parametrize(
    "given, task, preset",
    [
        ([], "carry", "carry_cpu"),
        (["TASK=copy"], "copy", "strings_cpu"),
        (["TASK=addition"], "addition", "strings_cpu"),
    ],
)
def test_make_compare_tokens_trains_carry_unless_told_and_with_the_task_s_cpu_budget(given, task, preset):
    """The Makefile's TASK defaults to listops (for the release lines); compare-tokens takes carry unless told, with
    the carry preset for carry and the string tasks' preset for the Universal Transformer's tasks."""
    dry_run = subprocess.run(["make", "-n", "compare-tokens", *given], cwd=REPO, capture_output=True, text=True)
    assert dry_run.returncode == 0, dry_run.stderr
    assert f"--task {task} " in dry_run.stdout and f"-- --preset {preset}" in dry_run.stdout, dry_run.stdout


def test_a_comparison_stopped_by_sigterm_stops_its_training_with_a_checkpoint(tmp_path):
    """`kill COMPARISON` (a time box from outside, a scheduler's preemption) reaches the variant's train.py: it saves
    and exits, the comparison exits 75, and nothing goes on training behind it."""
    argv = ["--task", "copy", "--variants", "ndr", "--nproc", "1", "--output_dir", str(tmp_path), "--", *TINY,
            "--max_steps", "100000", "--save_steps", "100000", "--logging_steps", "1"]  # fmt: skip
    process = subprocess.Popen([sys.executable, str(REPO / "training" / "compare_tokens.py"), *argv], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    log = tmp_path / "ndr" / "train.log"
    deadline = time.monotonic() + 120
    try:
        while not (log.is_file() and "'loss'" in log.read_text()):  # training has started
            assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
            time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=120)[0]
        assert process.returncode == 75, output
        assert "stopped at step" in output, output
        assert list((tmp_path / "ndr").glob("checkpoint-*")), "the run saved where it stopped"
        left = subprocess.run(["pgrep", "-f", str(tmp_path / "ndr")], capture_output=True, text=True).stdout
        assert left == "", f"a train.py of the comparison still runs: {left}"
    finally:  # nothing of this test goes on training, whatever failed
        process.kill()
        subprocess.run(["pkill", "-KILL", "-f", str(tmp_path / "ndr")])


@pytest.mark.parametrize(
    "task, split", [("carry", "test_100"), ("copy", "valid_400"), ("reverse", "valid_400"), ("addition", "valid_200")]
)
def test_a_comparison_selects_on_the_task_s_validation_split_where_it_has_one(task, split):
    """The string tasks select at their longest length on rows of their own (`valid_<n>`), not on a test split; the
    carry task, which has none, on its second-shortest test split (random operands, not long chains)."""
    assert load_script("training/compare_tokens.py", "ndr_compare_tokens").selection_split(task) == split
