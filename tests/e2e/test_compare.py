"""`training/compare.py` (`make compare`): every variant trained with its own recipe, the comparison written as a
table, a plot, learning curves of the variants that did not fit, and with `--results_dir` as data."""

import json
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from tiny import tiny_train_args


REPO = Path(__file__).resolve().parents[2]
# (compare.py passes --preset and --direction itself)
TINY = tiny_train_args(
    preset=None, direction=None, n_train=200, n_eval=16, hidden_size=16, intermediate_size=16, num_hidden_layers=2,
    max_steps=2, per_device_train_batch_size=8, per_device_eval_batch_size=None, eval_steps=2, save_steps=2,
    logging_steps=1, report_to="none", disable_tqdm=None, seed=None,
)  # fmt: skip


def load_compare():
    from scripts import load_script

    return load_script("training/compare.py")


def test_every_variant_end_to_end_writes_the_results_as_data(tmp_path):
    compare = load_compare()
    results, image = tmp_path / "results", tmp_path / "images" / "comparison.png"
    training_order = ",".join(reversed(compare.PAPER_VARIANTS))
    command = [sys.executable, str(REPO / "training" / "compare.py"), "--preset", "ctl_cpu", "--direction", "forward",
               "--variants", training_order, "--nproc", "1", "--output_dir", str(tmp_path / "runs"), "--results_dir",
               str(results), "--image", str(image), "--", *TINY, "--eval_num_hidden_layers", "3"]  # fmt: skip
    first = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]

    table = json.loads((results / "compare_ctl_forward.json").read_text())
    details = json.loads((results / "compare_ctl_forward_details.json").read_text())
    assert list(table) == list(compare.PAPER_VARIANTS), "every variant, in the paper's order"
    for variant, accuracy in table.items():
        assert list(accuracy) == [*compare.SPLITS, "ood_test_as_loaded", "deeper_as_loaded"], variant
        assert all(0 <= accuracy[split] <= 1 for split in compare.SPLITS), variant
        assert 0 <= accuracy["ood_test_as_loaded"] <= 1, f"{variant}: its export's ood_test"
        if variant.endswith("_act"):  # ACT chooses its own steps: the export is the model as trained
            assert accuracy["deeper_as_loaded"] is None and accuracy["ood_test_as_loaded"] == accuracy["ood_test"]
        elif details[variant]["as_loaded"]["adaptive_steps"]:  # a CTL export with adaptive steps: 11-12 functions
            assert 0 <= accuracy["deeper_as_loaded"] <= 1, variant
        else:  # fixed steps did better on ood_valid (2 training steps: chance either way), so the export keeps them
            assert accuracy["deeper_as_loaded"] is None, f"{variant}: measured only with adaptive steps"
    assert details["transformer"]["recipe"]["layers"] == 2, "flags after -- win over the variant's recipe"
    assert details["ndr_act"]["recipe"]["eval layers"] == 3, "the flag wins over the ACT variants' cap"
    assert details["transformer"]["recipe"]["heads"] == 4 and details["ndr"]["recipe"]["heads"] == 1, "own recipes"
    for variant in ("ndr_act", "transformer_act"):
        steps = details[variant]["mean_ponder_steps"]
        assert set(steps) == set(compare.SPLITS) and 1 <= steps["iid_test"]["mean_steps"] <= 3, "ACT: ponder steps"
        assert 1 <= steps["iid_test"]["readout_steps"] <= 3, "and those of the column the classifier reads"
        assert set(steps["ood_test"]["readout_steps_by_depth"]) == {"9", "10"}, "per depth"
    assert details["ndr"]["mean_ponder_steps"] is None
    curve = details["ndr"]["learning_curve"]
    assert curve["loss"] and curve["eval_step"] == [2] and all(curve[split][0] is not None for split in compare.SPLITS)
    for path in (results / "compare_ctl_forward.png", image, tmp_path / "runs" / "comparison.png"):
        assert path.stat().st_size > 1000, path
    # two steps fit nothing: every variant is below 0.95 on iid_test, so the curves are drawn and the table says so
    assert (results / "compare_ctl_forward_curves.png").stat().st_size > 1000
    assert "Below 0.95 on iid_test" in (tmp_path / "runs" / "comparison.md").read_text()

    again = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("not trained again") == len(compare.PAPER_VARIANTS), "finished runs are reused"
    assert json.loads((results / "compare_ctl_forward.json").read_text()) == table


def test_a_run_is_reused_with_its_recipe_resumed_when_unfinished_and_redone_when_the_recipe_changed(tmp_path):
    def compare(*extra):
        command = [sys.executable, str(REPO / "training" / "compare.py"), "--variants", "ndr", "--nproc", "1",
                   "--output_dir", str(tmp_path), "--", *TINY, *extra]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return done.stdout

    assert "training ndr" in compare()
    (tmp_path / "ndr" / "eval_results.json").unlink()  # as if it had been stopped before the end
    report = subprocess.run(
        [sys.executable, str(REPO / "training" / "compare.py"), "--variants", "ndr", "--nproc", "1", "--output_dir",
         str(tmp_path), "--report_only", "--", *TINY],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert report.returncode != 0 and "ndr: not finished with its recipe, left out" in report.stdout
    assert "no variant is finished yet" in report.stderr and "training ndr" not in report.stdout, "nothing trained"
    assert "resuming ndr" in compare() and (tmp_path / "ndr" / "eval_results.json").is_file()
    assert "not trained again" in compare()
    record_file = tmp_path / "ndr" / "compare_run.json"
    legacy = json.loads(record_file.read_text())
    del legacy["recipe"]["eval layers"]  # a record from before the column: read as None, the default it had then
    record_file.write_text(json.dumps(legacy))
    assert "not trained again" in compare()
    changed = compare("--learning_rate", "0.01")
    assert "moved to" in changed and "training ndr" in changed and (tmp_path / "ndr.previous").is_dir()
    record = json.loads((tmp_path / "ndr" / "compare_run.json").read_text())
    assert record["recipe"]["lr"] == 0.01 and record["seconds"] > 0


def test_a_comparison_recorded_in_results_dir_is_completed_by_training_only_what_it_lacks(tmp_path):
    results, runs = tmp_path / "results", tmp_path / "runs"

    def compare(variants, *extra):
        command = [sys.executable, str(REPO / "training" / "compare.py"), "--direction", "forward", "--variants",
                   variants, "--nproc", "1", "--output_dir", str(runs), "--results_dir", str(results), "--", *TINY,
                   *extra]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return done.stdout

    assert "training ndr" in compare("ndr")
    recorded = json.loads((results / "compare_ctl_forward.json").read_text())
    details = json.loads((results / "compare_ctl_forward_details.json").read_text())
    shutil.rmtree(runs)  # the runs are gone (another machine); the committed data stays
    completed = compare("ndr,transformer")
    assert "ndr: recorded in" in completed and "training ndr" not in completed, "taken from the record"
    assert "training transformer" in completed, "the variant the record lacks is trained"
    table = json.loads((results / "compare_ctl_forward.json").read_text())
    assert list(table) == ["transformer", "ndr"] and table["ndr"] == recorded["ndr"]
    now = json.loads((results / "compare_ctl_forward_details.json").read_text())
    assert now["ndr"] == details["ndr"], "per depth, recipe, time, curves: as recorded"
    alone = compare("transformer")  # a comparison of one variant adds to the record instead of shrinking it
    assert "training transformer" not in alone and "kept beside --variants, with their recipes: ndr" in alone
    assert json.loads((results / "compare_ctl_forward.json").read_text()) == table, "ndr kept, as recorded"
    shutil.rmtree(runs / "transformer")
    changed = compare("transformer", "--learning_rate", "0.01")
    assert "training transformer" in changed, "a record with another recipe is not used"


def test_the_outputs_keep_the_variants_not_named_and_name_those_they_cannot_keep(tmp_path, capsys):
    compare = load_compare()
    args = compare.argparse.Namespace(preset="ctl_cpu", direction="forward", nproc=2, task="ctl", retrain=True,
                                      report_only=False, output_dir=str(tmp_path / "runs"),
                                      results_dir=str(tmp_path / "results"))  # fmt: skip

    def recorded(variant, **changed):
        recipe = {**compare.as_recorded(compare.recipe(args, variant, [])), **changed}
        return {"by_depth": {split: {"1": 0.5} for split in compare.SPLITS}, "training_seconds": 60.0,
                "as_loaded": {"ood_test": None, "deeper": None}, "recipe": recipe, "mean_ponder_steps": None,
                "learning_curve": {}}  # fmt: skip

    accuracy = {**dict.fromkeys(compare.SPLITS, 0.5), "ood_test_as_loaded": None, "deeper_as_loaded": None}
    details = {"ndr": recorded("ndr"), "rel_gate": recorded("rel_gate"), "geom_att": recorded("geom_att", lr=0.5)}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "compare_ctl_forward.json").write_text(
        json.dumps(dict.fromkeys([*details, "gone"], accuracy))
    )
    (tmp_path / "results" / "compare_ctl_forward_details.json").write_text(json.dumps(details))
    (tmp_path / "runs" / "ndr").mkdir(parents=True)  # an unfinished run of ndr here: its record is kept all the same

    kept = compare.kept_runs(args, ["rel_gate"], [])
    shown = capsys.readouterr().out
    assert list(kept) == ["ndr"], "the named variant is trained, not kept; --retrain is about the named ones only"
    assert kept["ndr"]["results"]["iid_test"]["accuracy"] == 0.5 and kept["ndr"]["seconds"] == 60.0, "as recorded"
    assert "left out of the outputs: geom_att (recorded with another recipe); gone (" in shown, shown


def test_a_run_stopped_with_a_checkpoint_ends_the_comparison_as_a_stop_to_resume_not_a_failure(
    tmp_path, monkeypatch, capsys
):
    compare = load_compare()
    runs, outcome = tmp_path / "runs", {}

    def run_process(command, **kwargs):  # the launcher, without training
        if outcome.get("stop"):
            (runs / "ndr" / "stopped.json").write_text(json.dumps({"step": 3, "reason": "SIGUSR1"}))
        return types.SimpleNamespace(returncode=outcome["exit"])

    monkeypatch.setattr(sys.modules["compare_runs"], "run_process", run_process)
    argv = ["--variants", "ndr", "--nproc", "1", "--output_dir", str(runs), "--", *TINY]
    outcome.update(exit=1, stop=True)  # accelerate exits 1 when its processes exit 75
    with pytest.raises(SystemExit) as stopped:
        compare.main(argv)
    assert stopped.value.code == 75, stopped.value.code
    assert "ndr: stopped at step 3 (SIGUSR1) with a checkpoint" in capsys.readouterr().out
    outcome.update(exit=1, stop=False)  # the next call resumes it and fails: the earlier stop's marker is no stop
    with pytest.raises(SystemExit) as failed:
        compare.main(argv)
    assert "ndr failed (exit 1)" in str(failed.value.code) and "resuming ndr" in capsys.readouterr().out


def test_each_variant_gets_its_own_recipe_for_ctl_cpu():
    compare = load_compare()
    args = compare.argparse.Namespace(preset="ctl_cpu", direction="forward", nproc=2, output_dir="outputs/x")
    ndr, transformer, gated = (compare.recipe(args, name, []) for name in ("ndr", "transformer", "absrel_gate"))
    assert (ndr["layers"], ndr["heads"], ndr["lr"], ndr["d"]) == (14, 1, 1e-3, 64), "the NDR: ctl_cpu_long's"
    assert (transformer["layers"], transformer["heads"], transformer["d"]) == (11, 4, 128), "the paper's shape"
    assert transformer["ponder"] is None and gated["layers"] == 14
    act = compare.recipe(args, "ndr_act", [])
    assert act["ponder"] > 0 and act["ponder_warmup"][0] is not None, "ACT: the ponder weight is warmed up"
    assert act["eval layers"] is None and ndr["eval layers"] is None, "ACT's cap at evaluation: the training steps"
    assert compare.recipe(args, "transformer", ["--learning_rate", "0.5"])["lr"] == 0.5, "flags win"


def test_the_baselines_start_and_drop_out_as_the_official_code_s_and_the_ndr_as_released():
    compare = load_compare()
    args = compare.argparse.Namespace(preset="ctl_cpu", direction="forward", nproc=2, output_dir="outputs/x")
    recipes = {variant: compare.recipe(args, variant, []) for variant in compare.PAPER_VARIANTS}
    for variant in ("transformer", "rel", "rel_gate", "absrel_gate", "geom_att", "transformer_act"):
        assert recipes[variant]["init"] == "official", (
            f"{variant}: the paper's baselines as the official code starts them"
        )
    for variant in ("ndr", "ndr_metric", "ndr_act"):
        assert recipes[variant]["init"] == "ndr", f"{variant}: the release's init (and committed results) stay"
    assert recipes["rel"]["emb. init"] == recipes["geom_att"]["emb. init"] == "kaiming", "their sweeps' embedding_init"
    assert recipes["transformer"]["emb. init"] == "normal", "the official create_model gives universal no einit"
    assert recipes["transformer"]["emb. drop"] == recipes["transformer_act"]["emb. drop"] == 0.1, "PositionalEncoding"
    assert recipes["transformer"]["att. drop"] == 0 and recipes["rel"]["emb. drop"] == 0
    transformer_act = recipes["transformer_act"]
    assert (transformer_act["ponder cost"], transformer_act["ponder"]) == ("official", 0.03), "act_universal's loss"
    assert transformer_act["eval layers"] is None, "evaluated with the 14 steps it trains with, as the official code"
    assert recipes["transformer"]["precision"] in ("fp32", "bf16"), "ctl_cpu's precision: auto, as this CPU has it"


def test_act_eval_steps_raises_the_ACT_variants_cap_only():
    compare = load_compare()
    args = compare.argparse.Namespace(preset="ctl_cpu", direction="forward", nproc=2, output_dir="outputs/x",
                                      act_eval_steps=28)  # fmt: skip
    assert compare.recipe(args, "ndr_act", [])["eval layers"] == 28
    assert compare.recipe(args, "transformer_act", [])["eval layers"] == 28
    assert compare.recipe(args, "ndr", [])["eval layers"] is None, "not the variants without ACT"
    assert compare.recipe(args, "ndr_act", ["--eval_num_hidden_layers", "20"])["eval layers"] == 20, "flags win"


def test_a_record_from_before_a_recipe_column_existed_is_read_with_the_value_it_had_then():
    compare = load_compare()
    args = compare.argparse.Namespace(preset="ctl_cpu", direction="forward", nproc=2, output_dir="outputs/x")

    def recorded_before_the_columns(recipe):
        record = json.loads(json.dumps(recipe))
        for column in ("init", "emb. init", "emb. drop", "ponder cost", "precision", "seed"):
            del record[column]
        return record

    ndr = {**json.loads(json.dumps(compare.recipe(args, "ndr", []))), "precision": "fp32"}  # a CPU without bf16
    assert compare.same_recipe(recorded_before_the_columns(ndr), ndr), "the release's init, no embedding dropout"
    assert not compare.same_recipe(recorded_before_the_columns(ndr), {**ndr, "precision": "bf16"}), "bf16: again"
    assert ndr["seed"] == 42 and not compare.same_recipe(recorded_before_the_columns(ndr), {**ndr, "seed": 1})
    for variant in ("transformer", "transformer_act"):
        wanted = json.loads(json.dumps(compare.recipe(args, variant, [])))
        assert not compare.same_recipe(recorded_before_the_columns(wanted), wanted), f"{variant}: trained again"
    act = {**json.loads(json.dumps(compare.recipe(args, "ndr_act", []))), "precision": "fp32"}
    assert compare.same_recipe(recorded_before_the_columns(act), act), "ACT's ponder cost was the NDR's then"
    assert not compare.same_recipe(recorded_before_the_columns(act), {**act, "ponder cost": "official"})


def test_a_bad_variant_is_one_line_before_anything_trains(tmp_path):
    command = [sys.executable, str(REPO / "training" / "compare.py"), "--variants", "transformer,nope",
               "--output_dir", str(tmp_path)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode != 0 and "--variant 'nope' not found" in result.stderr
    assert not any(tmp_path.iterdir()), "nothing was trained"


@pytest.mark.parametrize("fits", [True, False])
def test_curves_only_for_variants_that_did_not_fit(tmp_path, fits):
    from compare_report import write_curves

    curve = {"step": [1, 2], "loss": [2.0, 1.0], "eval_step": [2], "iid_test": [0.5], "ood_valid": [0.4],
             "ood_test": [0.3]}  # fmt: skip
    run = {"results": {"iid_test": {"accuracy": 0.99 if fits else 0.5}}, "curve": curve}
    path = tmp_path / "curves.png"
    path.write_bytes(b"stale")
    assert write_curves(str(path), {"transformer": run}, "t") is (not fits)
    assert path.exists() is (not fits), "a stale figure does not outlive the variants it showed"


def test_the_paper_s_numbers_stand_beside_ours_for_the_paper_s_variants_only(tmp_path):
    from compare_report import PAPER_CTL, write_paper_comparison

    table = {"transformer": {"iid_test": 0.5, "ood_valid": 0.2, "ood_test": 0.1}, "ndr_act": {"iid_test": 1.0,
             "ood_valid": 1.0, "ood_test": 0.9}}  # fmt: skip
    for direction in ("forward", "backward"):
        data = tmp_path / f"compare_ctl_{direction}.json"
        data.write_text(json.dumps(table))
        beside_file, figure = write_paper_comparison(str(data))
        beside = json.loads(Path(beside_file).read_text())
        iid, longer = PAPER_CTL[direction]["transformer"]
        assert beside["transformer"] == {"iid_test": 0.5, "iid_test (paper)": iid, "ood_valid": 0.2, "ood_test": 0.1,
                                         "ood_test (paper)": longer}, direction  # fmt: skip
        assert beside["ndr_act"]["ood_test (paper)"] is None, "not one of the paper's variants"
        assert Path(figure).stat().st_size > 1000 and json.loads(data.read_text()) == table, "the data is read only"
    assert PAPER_CTL["forward"]["transformer"] != PAPER_CTL["backward"]["transformer"], "each direction its own"


def test_the_committed_comparison_beside_the_paper_is_what_its_data_gives(tmp_path):
    from compare_report import write_paper_comparison

    results = REPO / "docs" / "results"
    shutil.copyfile(results / "compare_ctl_forward.json", tmp_path / "compare_ctl_forward.json")
    beside_file, _ = write_paper_comparison(str(tmp_path / "compare_ctl_forward.json"))
    committed = json.loads((results / "compare_ctl_forward_paper.json").read_text())
    assert json.loads(Path(beside_file).read_text()) == committed, "redraw: python training/compare_report.py"
    page = (REPO / "docs" / "results" / "ctl-comparison.md").read_text()
    assert "<!-- table: compare_ctl_forward_paper.json -->" in page and "compare_ctl_forward_paper.png" in page


# ---- past the recipe's steps (--budget_steps): a run that did not fit, continued
# transformer's recipe cut to 4 steps of 32 (200 samples: an epoch is 7 steps, so continuations cross into the next),
# evaluated and saved every 2 steps
BUDGET_TINY = [*TINY, "--per_device_train_batch_size", "32", "--max_steps", "4"]


def compare_main(compare, output_dir, *flags, extra=BUDGET_TINY):
    compare.main(["--variants", "transformer", "--direction", "forward", "--nproc", "1", "--output_dir",
                  str(output_dir), *flags, "--", *extra])  # fmt: skip


def file_digests(folder: Path) -> dict:
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*")
            if p.is_file()}  # fmt: skip


@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory):
    """transformer's (tiny) recipe run, finished at step 4 (below 0.95 on iid_test), and the same run trained for 10
    steps at once (the continuation's reference)."""
    compare, root = load_compare(), tmp_path_factory.mktemp("budget")
    compare_main(compare, root / "runs")
    compare_main(compare, root / "straight", extra=[*BUDGET_TINY, "--max_steps", "10"])
    return root


def recipe_copy(recipe_run, tmp_path) -> Path:
    shutil.copytree(recipe_run / "runs", tmp_path / "runs")
    return tmp_path / "runs"


def load_weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def assert_same_weights(a: Path, b: Path, what: str):
    import torch

    first, second = load_weights(a), load_weights(b)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first), what


@pytest.fixture(scope="module")
def continued(recipe_run, tmp_path_factory):
    """The recipe run continued to 10 steps with --results_dir: (runs, results, recipe run's files before)."""
    compare, root = load_compare(), tmp_path_factory.mktemp("continued")
    runs = recipe_copy(recipe_run, root)
    before = file_digests(runs / "transformer")
    compare_main(compare, runs, "--budget_steps", "10", "--results_dir", str(root / "results"))
    return runs, root / "results", before


def test_budget_steps_continues_the_recipe_run_as_one_longer_run_and_leaves_it_untouched(recipe_run, continued):
    runs, results, before = continued
    assert file_digests(runs / "transformer") == before, "the recipe run and its results stay as they were"
    record = json.loads((runs / "transformer.budget" / "budget_run.json").read_text())
    assert str(runs / "transformer" / "checkpoint-4") in record["command"], "resumed from the recipe's last step"
    same = "4 steps, then 6 more at a constant rate = 10 steps at once (data order, RNG states, optimizer)"
    assert_same_weights(
        runs / "transformer.budget" / "checkpoint-10" / "model.safetensors",
        recipe_run / "straight" / "transformer" / "checkpoint-10" / "model.safetensors",
        same,
    )
    budget = json.loads((results / "compare_ctl_forward_details.json").read_text())["transformer"]["budget"]
    straight = json.loads((recipe_run / "straight" / "transformer" / "trainer_state.json").read_text())
    reference = {
        e["step"]: e["eval_iid_test_accuracy"] for e in straight["log_history"] if "eval_iid_test_accuracy" in e
    }
    assert budget["curve"]["eval_step"] == [6, 8, 10], "the continuation's evaluations, past the recipe's 4 steps"
    assert budget["curve"]["iid_test"] == [reference[s] for s in (6, 8, 10)], "as the 10-step run evaluated them"
    assert budget["curve"]["eval_samples"] == [192, 256, 320] and budget["curve"]["step"][0] == 5
    assert (budget["recipe_steps"], budget["steps"], budget["samples"], budget["fits_at_step"]) == (4, 10, 320, None)
    assert budget["training_seconds"] > budget["recipe_seconds"] > 0
    assert "| transformer | 4 | 10 | not yet at step 10 (320 samples" in (runs / "comparison.md").read_text()


def test_budget_steps_stops_at_the_first_evaluation_that_fits(recipe_run, tmp_path, monkeypatch):
    compare, runs = load_compare(), recipe_copy(recipe_run, tmp_path)
    results_file = runs / "transformer" / "eval_results.json"
    results = json.loads(results_file.read_text())
    results["iid_test"]["accuracy"] = 0.0  # a recipe run that did not fit a threshold of 0.01
    results_file.write_text(json.dumps(results))
    for module in (compare, sys.modules["compare_runs"], sys.modules["compare_report"]):
        monkeypatch.setattr(module, "FIT", 0.01)  # any evaluation with one right answer fits
    compare_main(compare, runs, "--budget_steps", "10", "--results_dir", str(tmp_path / "results"))
    budget = json.loads((tmp_path / "results" / "compare_ctl_forward_details.json").read_text())["transformer"][
        "budget"
    ]
    fits = budget["fits_at_step"]
    assert fits is not None and budget["steps"] == fits < 10, f"training ended at the evaluation that fits ({fits})"
    assert all(a < 0.01 for s, a in zip(budget["curve"]["eval_step"], budget["curve"]["iid_test"]) if s < fits)
    assert (runs / "transformer.budget" / "eval_results.json").is_file(), "then finished as a run does"
    assert f"fits at step {fits} ({fits * 32} samples" in (runs / "comparison.md").read_text()


def test_a_continuation_stopped_by_its_time_box_is_resumed_by_the_next_call(recipe_run, tmp_path, capsys):
    compare, runs = load_compare(), recipe_copy(recipe_run, tmp_path)
    # --max_chunk_steps stops it as the time box does (a checkpoint, exit 75), at a step we know
    compare_main(compare, runs, "--budget_steps", "10", "--budget_minutes", "30", extra=[*BUDGET_TINY,
                 "--max_chunk_steps", "3"])  # fmt: skip
    assert "transformer: stopped at step 7 (max_chunk_steps)" in capsys.readouterr().out, "exit 75 is no failure"
    record = json.loads((runs / "transformer.budget" / "budget_run.json").read_text())
    minutes = float(record["command"][record["command"].index("--max_wall_minutes") + 1])
    assert 0 < minutes <= 30, "the call's time box goes to train.py"
    compare_main(compare, runs, "--budget_steps", "10")
    assert "continuing transformer from step 7" in capsys.readouterr().out, "from the continuation's own checkpoint"
    assert_same_weights(runs / "transformer.budget" / "checkpoint-10" / "model.safetensors",
                        recipe_run / "straight" / "transformer" / "checkpoint-10" / "model.safetensors",
                        "two calls = one run")  # fmt: skip


@pytest.mark.parametrize("decays", ["flag", "logged"])
def test_a_learning_rate_that_is_not_constant_is_refused_in_one_line(recipe_run, tmp_path, decays):
    compare, runs = load_compare(), recipe_copy(recipe_run, tmp_path)
    extra = [*BUDGET_TINY, "--lr_scheduler_type", "linear"] if decays == "flag" else BUDGET_TINY
    if decays == "logged":  # a run trained with a decaying rate (the flags that would continue it say constant)
        state_file = runs / "transformer" / "trainer_state.json"
        state = json.loads(state_file.read_text())
        for entry in state["log_history"]:
            if "learning_rate" in entry:
                entry["learning_rate"] *= 1 - entry["step"] / 4
        state_file.write_text(json.dumps(state))
    with pytest.raises(SystemExit) as refused:
        compare_main(compare, runs, "--budget_steps", "10", extra=extra)
    message = str(refused.value)
    assert message.startswith("compare.py: error: --budget_steps: transformer") and "\n" not in message
    assert ("lr_scheduler_type linear" if decays == "flag" else "learning rates from 0 to") in message
    assert not (runs / "transformer.budget").exists(), "nothing trained"


def test_the_budget_entry_survives_a_report_of_other_variants(continued, tmp_path):
    compare = load_compare()
    shutil.copytree(continued[0], tmp_path / "runs")
    shutil.copytree(continued[1], tmp_path / "results")
    details_file = tmp_path / "results" / "compare_ctl_forward_details.json"
    budget = json.loads(details_file.read_text())["transformer"]["budget"]
    shutil.rmtree(tmp_path / "runs")  # the committed record alone (another machine): ndr is trained beside it
    compare.main(["--variants", "transformer,ndr", "--direction", "forward", "--nproc", "1", "--output_dir",
                  str(tmp_path / "runs"), "--results_dir", str(tmp_path / "results"), "--", *BUDGET_TINY])  # fmt: skip
    details = json.loads(details_file.read_text())
    assert "budget" not in details["ndr"], "only a continued run has one"
    assert details["transformer"]["budget"] == budget, "the record's continuation is kept"
    assert "not yet at step 10" in (tmp_path / "runs" / "comparison.md").read_text()


def test_stop_at_accuracy_is_one_line_before_anything_trains():
    from modeling_ndr.training import UsageError
    from ndr_training.stopping import parse_stop_at_accuracy

    assert parse_stop_at_accuracy("iid_test=0.95", ["iid_test", "ood_test"]) == ("iid_test", 0.95)
    for bad, why in (("iid_test", "SPLIT=ACCURACY"), ("iid_test=1.5", "in [0, 1]"), ("train=0.5", "not on 'train'")):
        with pytest.raises(UsageError, match=re.escape(why)):
            parse_stop_at_accuracy(bad, ["iid_test", "ood_test"])
