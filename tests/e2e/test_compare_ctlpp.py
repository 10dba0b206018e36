"""`training/compare_ctlpp.py` (`make compare-ctlpp`): a grid of CTL++ runs (models x overlaps x seeds) on one budget,
the table with the seeds' mean and spread, the overlap sweep's plot, finished runs reused."""

import json
import subprocess
from pathlib import Path

import pytest
from scripts import load_script


SMALL = ["--n_train", "1500", "--n_eval", "20", "--hidden_size", "16", "--intermediate_size", "16",
         "--num_attention_heads", "2", "--num_hidden_layers", "2", "--eval_num_hidden_layers", "3",
         "--per_device_train_batch_size", "8", "--eval_steps", "2", "--save_steps", "2", "--use_cpu", "true",
         "--report_to", "none", "--task_seed", "5"]  # fmt: skip
REPO = Path(__file__).resolve().parents[2]


def script():
    return load_script("training/compare_ctlpp.py", "ndr_compare_ctlpp")


def test_the_overlap_sweep_trains_each_cell_once_and_plots_the_never_seen_orders_against_the_overlap(tmp_path, capsys):
    runs_dir, results_dir = tmp_path / "runs", tmp_path / "results"
    argv = ["--task_variant", "parallel_branch_2stage", "--overlaps", "0,4x2", "--seeds", "3", "--nproc", "1",
            "--max_steps", "2", "--output_dir", str(runs_dir), "--results_dir", str(results_dir),
            "--", *SMALL]  # fmt: skip
    runs = script().main(argv)
    assert [(run["cell"]["function_overlap"], run["cell"]["symbol_overlap"]) for run in runs] == [(0, None), (4, 2)]
    names = sorted(path.name for path in runs_dir.iterdir() if path.is_dir())
    assert names == ["ndr_parallel_branch_2stage_fo0_seed3", "ndr_parallel_branch_2stage_fo4_so2_seed3"]
    second = runs[1]["command"]
    assert second[second.index("--symbol_overlap") + 1] == "2" and second[-len(SMALL) :] == SMALL
    assert "--symbol_overlap" not in runs[0]["command"] and "--variant" not in runs[0]["command"]
    data = json.loads((results_dir / "compare_ctlpp_parallel_branch_2stage.json").read_text())
    assert [row["function_overlap"] for row in data] == [0, 4] and data[0]["seed"] == 3
    assert {"2", "6"} <= set(data[0]["results"]["test_group_alternate"]["by_depth"]) <= {"2", "3", "4", "5", "6"}
    assert "test_cross_unseen_symbols" in data[1]["results"] and "test_cross_unseen_symbols" not in data[0]["results"]
    assert (results_dir / "compare_ctlpp_parallel_branch_2stage_sweep.png").stat().st_size > 0
    table = (runs_dir / "comparison.md").read_text()
    assert "| ndr | 4x2 | 3 |" in table and "Mean over seeds" in table
    capsys.readouterr()
    script().main(argv)
    assert capsys.readouterr().out.count("not trained again") == 2, "finished runs are reused"


def test_softmax_baselines_and_act_evaluate_with_the_steps_they_train_with(tmp_path):
    compare = script()
    args = compare.argparse.Namespace(max_steps=100, output_dir=str(tmp_path))
    cell = {"model": "rel_gate", "task_variant": "parallel_branch", "function_overlap": 0, "symbol_overlap": None,
            "seed": 1}  # fmt: skip

    def eval_steps(flags: list[str]) -> str | None:
        """The `--eval_num_hidden_layers` train.py reads (its last), None without one."""
        given = [flags[i + 1] for i, flag in enumerate(flags) if flag == "--eval_num_hidden_layers"]
        return given[-1] if given else None

    flags = compare.train_flags(args, cell, [])
    assert flags[flags.index("--variant") + 1] == "rel_gate"
    assert eval_steps(flags) == "8", "the preset's training steps"
    assert eval_steps(compare.train_flags(args, cell, ["--num_hidden_layers", "12"])) == "12", "the steps it trains"
    assert eval_steps(compare.train_flags(args, cell, ["--eval_num_hidden_layers", "9"])) == "9", "the user's flag"
    assert eval_steps(compare.train_flags(args, {**cell, "model": "ndr_act"}, [])) == "8", "ACT halts within them"
    flags = compare.train_flags(args, {**cell, "model": "ndr_metric"}, [])
    assert eval_steps(flags) is None, "geometric attention evaluates with the preset's 10 steps"
    assert compare.headline_split("alternate") == "test_self_loop"
    assert compare.headline_split("parallel_branch_2stage") == "test_group_alternate"


def test_a_run_started_from_another_checkout_is_the_same_run_and_one_of_other_processes_is_not():
    compare_runs = load_script("training/compare_runs.py", "ndr_compare_runs")
    here = ["/a/bin/accelerate", "launch", "--num_processes", "2", "/work/a/training/train.py", "--seed", "1"]
    there = ["/b/bin/accelerate", "launch", "--num_processes", "2", "/tmp/b/training/train.py", "--seed", "1"]
    assert compare_runs.script_flags(here) == compare_runs.script_flags(there) == ["processes=2", "--seed", "1"]
    alone = ["/usr/bin/python3", "/tmp/b/training/train.py", "--seed", "1"]
    assert compare_runs.script_flags(alone) != compare_runs.script_flags(here), "another global batch: another run"
    assert compare_runs.script_flags(["python", "other.py", "--seed", "1"]) == ["python", "other.py", "--seed", "1"]
    # the run folder named from another working directory (a worktree's call with an absolute path): the same run
    relative = ["accelerate", "launch", "--num_processes", "2", "train.py", "--output_dir", "outputs/r", "--seed", "1"]
    absolute = [*relative[:5], "--output_dir=/work/main/outputs/r", "--seed", "1"]
    assert compare_runs.script_flags(relative) == compare_runs.script_flags(absolute) == ["processes=2", "--seed", "1"]


def test_a_cell_named_twice_or_with_all_8_symbols_spelled_out_is_one_run():
    args = script().argparse.Namespace(task_variant="parallel_branch_2stage", models="ndr,ndr", overlaps="4,4x8,0,0",
                                       seeds="42,42", label=None)  # fmt: skip
    grid = script().cells(args)
    assert [(c["function_overlap"], c["symbol_overlap"], c["seed"]) for c in grid] == [(4, None, 42), (0, None, 42)]


def test_the_results_keep_the_runs_an_earlier_call_recorded_and_drop_a_figure_with_nothing_to_draw(tmp_path):
    compare = script()
    runs_dir, results = tmp_path / "runs", tmp_path / "results"
    runs_dir.mkdir()

    def run(functions, symbols, accuracy):
        cell = {"model": "ndr", "task_variant": "parallel_branch_2stage", "function_overlap": functions,
                "symbol_overlap": symbols, "seed": 42}  # fmt: skip
        scores = {"iid_test": {"accuracy": 1.0}, "test_group_alternate": {"accuracy": accuracy}}
        return {"cell": cell, "results": scores, "seconds": 60.0, "steps": 100, "command": ["launch", "train.py"]}

    args = compare.argparse.Namespace(task_variant="parallel_branch_2stage", output_dir=str(runs_dir),
                                      results_dir=str(results), max_steps=100)  # fmt: skip
    compare.write_outputs(args, [run(0, None, 0.1), run(4, 2, 0.3)], [])
    assert (runs_dir / "sweep.png").is_file()
    compare.write_outputs(args, [run(0, None, 0.2)], [])  # a later call with a smaller grid
    rows = json.loads((results / "compare_ctlpp_parallel_branch_2stage.json").read_text())
    assert [(row["function_overlap"], row["results"]["test_group_alternate"]["accuracy"]) for row in rows] == [
        (0, 0.2),
        (4, 0.3),
    ], "the run of this call replaces its own row; the earlier call's other run is kept"
    assert (results / "compare_ctlpp_parallel_branch_2stage_sweep.png").is_file(), "drawn from all recorded runs"
    assert not (runs_dir / "sweep.png").exists(), "this call's runs have no overlap group: its old figure is gone"


def test_a_labelled_setting_s_runs_stand_beside_the_plain_runs_of_the_same_cells(tmp_path):
    compare = script()
    runs_dir, results = tmp_path / "runs", tmp_path / "results"
    runs_dir.mkdir()
    args = compare.argparse.Namespace(task_variant="parallel_branch", output_dir=str(runs_dir),
                                      results_dir=str(results), max_steps=100)  # fmt: skip
    plain = {"model": "ndr", "task_variant": "parallel_branch", "function_overlap": 0, "symbol_overlap": None,
             "seed": 42, "label": None}  # fmt: skip
    official = {**plain, "label": "official_init"}
    flags = compare.train_flags(args, official, ["--config_overrides", "init_style=official"])
    assert flags[flags.index("--output_dir") + 1].endswith("ndr_parallel_branch_fo0_seed42_official_init")

    def run(cell, accuracy):
        scores = {"iid_test": {"accuracy": 1.0}, "test_group_alternate": {"accuracy": accuracy}}
        return {"cell": cell, "results": scores, "seconds": 60.0, "steps": 100, "command": ["launch", "train.py"]}

    compare.write_outputs(args, [run(plain, 0.8)], [])
    compare.write_outputs(args, [run(official, 0.9)], ["--config_overrides", "init_style=official"])
    rows = json.loads((results / "compare_ctlpp_parallel_branch.json").read_text())
    assert [(row.get("label"), row["results"]["test_group_alternate"]["accuracy"]) for row in rows] == [
        (None, 0.8),
        ("official_init", 0.9),
    ], "the labelled run is a row of its own; the plain run's row keeps no label field"
    assert "label" not in rows[0]
    assert "| ndr [official_init] | 0 | 42 |" in (runs_dir / "comparison.md").read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--overlaps", "4x"], "--overlaps: '4x' is not K or KxS"),
        (["--overlaps", "0x3"], "'0x3' shares symbols of no function"),
        (["--task_variant", "alternate", "--overlaps", "4"], "alternate has no overlap group"),
        (["--task_variant", "parallel_branch_2stage", "--overlaps", "20"], "function_overlap must be an int from 0"),
        (["--models", "ndr,nope"], "--models: 'nope' not found; available variants"),
        (["--models", ","], "--models: name at least one variant"),
        (["--seeds", "4a"], "--seeds: '4a' is not a comma-separated list of integers"),
        (["--label", "official_init"], "names the setting of the flags after --, and none are given"),
        (["--label", "my init", "--", "--seed", "1"], "--label: 'my init' is not a name of letters"),
    ],
)
def test_a_bad_grid_is_refused_before_anything_trains(tmp_path, argv, message):
    with pytest.raises(SystemExit) as refused:
        script().main([*argv, "--output_dir", str(tmp_path / "runs")])
    assert message in str(refused.value.code)
    assert not (tmp_path / "runs").exists()


def test_make_compare_ctlpp_passes_the_grid():
    given = ["CTLPP_VARIANT=parallel_branch_2stage", "OVERLAPS=0,4x2", "SEEDS=42,1", "MINUTES=30",
             "CTLPP_LABEL=official_init", "CTLPP_ARGS=--config_overrides init_style=official"]  # fmt: skip
    dry_run = subprocess.run(["make", "-n", "compare-ctlpp", *given], cwd=REPO, capture_output=True, text=True)
    assert dry_run.returncode == 0, dry_run.stderr
    command = " ".join(dry_run.stdout.replace("\\\n", " ").split())  # (the recipe's lines joined)
    for part in ("--task_variant parallel_branch_2stage", "--overlaps 0,4x2", "--seeds 42,1", "--minutes 30",
                 "--results_dir docs/results", "--label official_init",
                 "--label official_init -- --config_overrides init_style=official"):  # fmt: skip
        assert part in command, command
