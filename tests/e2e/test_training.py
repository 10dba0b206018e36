"""End-to-end tests of training/train.py and `python -m modeling_ndr.training export` on a tiny model and data."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hub_cache import install_in_hub_cache
from huggingface_hub import ModelCard
from scripts import load_script
from tiny import tiny_train_args
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer, pipeline

import modeling_ndr
import ndr_training
from modeling_ndr import NDRConfig, NDRForSequenceClassification, NDRModel, training
from modeling_ndr.training import export


REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "training" / "train.py"
TINY = tiny_train_args()


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """One short in-process run: 24 steps, evaluation and saving every 8."""
    output_dir = tmp_path_factory.mktemp("run") / "ctl"
    train = load_script("training/train.py")
    argv = TINY + [
        "--max_steps",
        "24",
        "--eval_steps",
        "8",
        "--save_steps",
        "8",
        "--logging_steps",
        "4",
        "--save_total_limit",
        "5",
        "--report_to",
        "tensorboard",
        "--output_dir",
        str(output_dir),
    ]
    results = train.main(argv)
    return output_dir, results


def test_run_writes_safetensors_checkpoints(trained_run):
    output_dir, _ = trained_run
    checkpoints = sorted(output_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert [p.name for p in checkpoints] == ["checkpoint-8", "checkpoint-16", "checkpoint-24"]
    for checkpoint in checkpoints:
        assert (checkpoint / "model.safetensors").is_file(), f"{checkpoint.name} must hold safetensors weights"
    assert list((output_dir / "runs").rglob("events.out.tfevents.*")), "TensorBoard event files are written"
    run_config = json.loads((output_dir / "run_config.json").read_text())
    assert run_config["seed"] == 1 and run_config["task"]["task_seed"] == 0, "both seeds are recorded"


def test_eval_results_cover_every_split_by_depth(trained_run):
    output_dir, results = trained_run
    saved = json.loads((output_dir / "eval_results.json").read_text())
    assert saved == results
    expected_depths = {"ood_valid": {"6", "7", "8"}, "ood_test": {"9", "10"}}
    for split in ("iid_test", "ood_valid", "ood_test"):
        assert 0.0 <= saved[split]["accuracy"] <= 1.0
        assert saved[split]["by_depth"], f"{split} has per-depth accuracies"
        if split in expected_depths:
            assert set(saved[split]["by_depth"]) == expected_depths[split]


def test_best_checkpoint_is_selected_on_ood_valid_latest_on_ties(trained_run):
    output_dir, results = trained_run
    state = json.loads((output_dir / "checkpoint-24" / "trainer_state.json").read_text())
    evaluations = [
        (e["step"], e["eval_ood_valid_accuracy"]) for e in state["log_history"] if "eval_ood_valid_accuracy" in e
    ]
    best = max(accuracy for _, accuracy in evaluations)
    latest_best_step = max(step for step, accuracy in evaluations if accuracy == best)
    assert state["best_global_step"] == latest_best_step, f"evaluations {evaluations}"
    assert results["ood_valid"]["accuracy"] == pytest.approx(best), "the final report is of the selected checkpoint"


def test_export_loads_from_the_offline_hub_cache_and_with_a_pipeline(trained_run, hf_home, tmp_path, monkeypatch):
    output_dir, results = trained_run
    export = output_dir / "export"
    files = {p.name for p in export.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "modeling_ndr.py", "README.md"} <= files
    config = json.loads((export / "config.json").read_text())
    assert config["id2label"]["0"] == "000" and "AutoModel" in config["auto_map"]

    install_in_hub_cache(str(export), "org/ndr-ctl-test", hf_home)
    monkeypatch.chdir(tmp_path)
    assert isinstance(AutoModel.from_pretrained("org/ndr-ctl-test"), NDRModel)
    model = AutoModelForSequenceClassification.from_pretrained("org/ndr-ctl-test").eval()
    assert isinstance(model, NDRForSequenceClassification)
    tokenizer = AutoTokenizer.from_pretrained("org/ndr-ctl-test")
    text = json.loads((export / "run_config.json").read_text())["example"]["text"]
    with torch.no_grad():
        logits = model(**tokenizer([text], return_tensors="pt")).logits

    classify = pipeline("text-classification", model=str(export))
    prediction = classify(text)[0]
    assert prediction["label"] == model.config.id2label[logits.argmax(-1).item()]
    assert re.fullmatch(r"[01]{3}", prediction["label"]), "labels read as CTL symbols"


def test_export_loads_with_remote_code_without_the_package(trained_run, tmp_path):
    output_dir, _ = trained_run
    script = textwrap.dedent(
        """
        import sys
        sys.modules["modeling_ndr"] = None  # the package is not importable here
        from transformers import pipeline
        classify = pipeline("text-classification", model=sys.argv[1], trust_remote_code=True)
        print(classify("a b 101")[0]["label"])
        """
    )
    (tmp_path / "load.py").write_text(script)
    result = subprocess.run(
        [sys.executable, "load.py", str(output_dir / "export")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.fullmatch(r"[01]{3}", result.stdout.strip().splitlines()[-1])


def test_model_card_parses_and_model_index_round_trips(trained_run):
    output_dir, results = trained_run
    card = ModelCard.load(output_dir / "export" / "README.md")
    assert card.data.library_name == "transformers" and card.data.license == "mit"
    # a CTL export runs adaptive steps as loaded: the card reports what the export measured, and the export's
    # fixed-steps numbers are the Trainer's
    exported = json.loads((output_dir / "export" / "eval_results.json").read_text())
    for split, values in results.items():
        assert exported[split]["fixed_steps"]["by_depth"] == pytest.approx(values["by_depth"]), split
    reported = {r.dataset_split: r.metric_value for r in card.data.eval_results if r.metric_config is None}
    assert reported == pytest.approx({split: values["accuracy"] for split, values in exported.items()})
    by_depth = {
        (r.dataset_split, r.metric_config): r.metric_value
        for r in card.data.eval_results
        if (r.metric_config or "").startswith("depth=")
    }
    expected = {(split, f"depth={d}"): a for split, values in exported.items() for d, a in values["by_depth"].items()}
    assert by_depth == pytest.approx(expected), "the model-index also holds the accuracy per depth"
    assert "| ood_test |" in card.text and "trust_remote_code=True" in card.text


def test_the_run_record_and_the_card_name_the_package_version_and_the_commit(trained_run):
    output_dir, _ = trained_run
    record = json.loads((output_dir / "run_config.json").read_text())
    assert record["ndr_version"] == modeling_ndr.__version__
    assert re.fullmatch(r"[0-9a-f]{40}(\+changes)?", record["commit"] or ""), "train.py runs from this checkout"
    text = ModelCard.load(output_dir / "export" / "README.md").text
    assert f"Trained with ndr {modeling_ndr.__version__} at commit `{record['commit']}`" in text


def test_source_commit_is_the_checkout_s_and_says_when_files_changed(tmp_path):
    from ndr_training.records import source_commit

    assert source_commit(str(tmp_path / "script.py")) is None, "not in a git checkout"
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "script.py").write_text("print(1)\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run([*git, "add", "script.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert source_commit(str(tmp_path / "script.py")) == head
    (tmp_path / "script.py").write_text("print(2)\n")
    assert source_commit(str(tmp_path / "script.py")) == head + "+changes"


def test_model_card_sets_the_result_against_the_papers(trained_run):
    output_dir, results = trained_run
    text = ModelCard.load(output_dir / "export" / "README.md").text
    assert "The paper reports **1.00** `ood_test` accuracy" in text and "`ctl_paper`" in text
    short = results["ood_test"]["accuracy"] < 0.95
    assert ("not a reproduction of the paper's number" in text) == short, "a short model says so, a good one not"

    evaluated = {"ood_test": {"accuracy": 0.5, "by_depth": {}}}
    arithmetic = {"task": {"task": "arithmetic"}}
    assert export.paper_reference(arithmetic, evaluated) == {
        "accuracy": "0.98 ± 0.01", "preset": "arithmetic_paper", "ours": 0.5, "short": True
    }  # fmt: skip
    assert not export.paper_reference(arithmetic, {"ood_test": {"accuracy": 0.96, "by_depth": {}}})["short"]
    assert export.paper_reference({**arithmetic, "variant": "transformer"}, evaluated) is None, "baselines: no claim"
    assert export.paper_reference({"task": {"train_file": "my.jsonl"}}, evaluated) is None, "own data: no claim"
    assert export.paper_reference(arithmetic, {"iid_test": {"accuracy": 1.0, "by_depth": {}}}) is None


def test_standalone_export_command(trained_run, tmp_path):
    output_dir, _ = trained_run
    result = subprocess.run(
        [sys.executable, "-m", "modeling_ndr.training", "export", str(output_dir / "checkpoint-8"),
         str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "out" / "model.safetensors").is_file() and (tmp_path / "out" / "README.md").is_file()


def run_train_subprocess(args: list[str], launcher: list[str] | None = None, timeout=600):
    command = (launcher or [sys.executable]) + [str(TRAIN)] + args
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


def logged_losses(output: str) -> list[float]:
    return [float(x) for x in re.findall(r"\{'loss': '([0-9.e+-]+)'", output)]


def test_resume_continues_the_global_step(tmp_path):
    output_dir = str(tmp_path / "resume")
    common = TINY + ["--eval_steps", "5", "--save_steps", "5", "--logging_steps", "5", "--output_dir", output_dir]
    first = run_train_subprocess(common + ["--max_steps", "10"])
    assert first.returncode == 0, first.stderr[-3000:]
    assert os.path.isdir(os.path.join(output_dir, "checkpoint-10"))
    second = run_train_subprocess(common + ["--max_steps", "15", "--resume_from_checkpoint", "auto"])
    assert second.returncode == 0, second.stderr[-3000:]
    assert len(logged_losses(first.stdout + first.stderr)) == 2
    assert len(logged_losses(second.stdout + second.stderr)) == 1, "steps 11-15 only: resumed, not restarted"
    state = json.loads(Path(output_dir, "checkpoint-15", "trainer_state.json").read_text())
    assert state["global_step"] == 15


def test_two_process_cpu_run_logs_the_same_loss_scale(tmp_path):
    args = TINY + [
        "--max_steps",
        "4",
        "--eval_steps",
        "4",
        "--save_steps",
        "4",
        "--logging_steps",
        "1",
        "--per_device_train_batch_size",
        "16",
        "--use_cpu",
        "--ddp_find_unused_parameters",
        "false",
    ]
    single = run_train_subprocess(
        args + ["--output_dir", str(tmp_path / "one"), "--per_device_train_batch_size", "32"]
    )
    assert single.returncode == 0, single.stderr[-3000:]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517"]
    double = run_train_subprocess(args + ["--output_dir", str(tmp_path / "two")], launcher=torchrun)
    assert double.returncode == 0, double.stderr[-3000:]
    assert "processes: 2, total train batch size: 32" in double.stdout + double.stderr, (
        "two processes of 16 samples each must train one model together"
    )
    one, two = logged_losses(single.stdout + single.stderr), logged_losses(double.stdout + double.stderr)
    assert one and two, "both runs log a training loss"
    # 8 classes at init: ~ln 8 = 2.08; a loss summed over processes would read ~4.2
    assert abs(two[0] - one[0]) < 0.5, f"1 process logged {one[0]}, 2 processes logged {two[0]}"
    assert json.loads((tmp_path / "two" / "eval_results.json").read_text())["ood_test"]["accuracy"] >= 0


def test_other_processes_leave_only_after_the_main_process_has_exported(tmp_path):
    # The main process's export is slowed down; every process notes when it leaves. A process that left while the
    # main one still exported could abort in the process group's teardown and have the launcher kill the main
    # process before the export is written (seen 2026-11-26 in make compare: a finished run without its export).
    marks = tmp_path / "marks"
    marks.mkdir()
    wrapper = tmp_path / "slow_export_train.py"
    wrapper.write_text(textwrap.dedent(f"""
        import atexit, os, runpy, sys, time
        import modeling_ndr.training as training
        rank = os.environ.get("RANK", "0")
        atexit.register(lambda: open({str(marks)!r} + f"/left-{{rank}}", "w").write(repr(time.time())))
        export_model = training.export_model
        def slow_export(*args, **kwargs):
            time.sleep(5)
            export_model(*args, **kwargs)
            open({str(marks)!r} + "/exported", "w").write(repr(time.time()))
        training.export_model = slow_export
        import gc, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        destroy = dist.destroy_process_group
        def counting_destroy(*args, **kwargs):  # how many DDP-wrapped models still exist when the group goes
            alive = sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects())
            open({str(marks)!r} + f"/ddp-alive-{{rank}}", "w").write(str(alive))
            return destroy(*args, **kwargs)
        dist.destroy_process_group = counting_destroy
        sys.argv[0] = {str(TRAIN)!r}
        sys.path.insert(0, {str(TRAIN.parent)!r})  # as `python training/train.py` puts its folder first
        runpy.run_path({str(TRAIN)!r}, run_name="__main__")
    """))  # fmt: skip
    args = TINY + ["--max_steps", "2", "--eval_steps", "2", "--save_steps", "2", "--per_device_train_batch_size", "8",
                   "--use_cpu", "--ddp_find_unused_parameters", "false",
                   "--output_dir", str(tmp_path / "run")]  # fmt: skip
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29519"]
    command = torchrun + [str(wrapper)] + args
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    exported = float((marks / "exported").read_text())
    left = float((marks / "left-1").read_text())
    assert left >= exported, f"process 1 left {exported - left:.1f} s before the main process's export was written"
    assert (tmp_path / "run" / "export" / "model.safetensors").is_file()
    # DDP's Reducer must be freed while the process group still exists: freed after it, it dropped the last reference
    # to the gloo group with the GIL held, and the group's destructor could wait forever on a worker thread that
    # needed the GIL (rank 1 hung there in a CI run, 2026-12-07)
    for rank in (0, 1):
        assert (marks / f"ddp-alive-{rank}").read_text() == "0", f"process {rank} destroyed the group with DDP alive"


def test_preset_values_are_defaults_and_flags_override_them(tmp_path, native_bf16):
    task_args, model_args, _, training_args, preset = ndr_training.parse_arguments(
        ["--preset", "ctl_cpu", "--learning_rate", "0.5", "--output_dir", str(tmp_path)]
    )
    assert training_args.learning_rate == 0.5, "a command-line flag overrides the preset"
    assert model_args.hidden_size == preset["hidden_size"] and task_args.task == "ctl", "preset values are used"
    assert training_args.metric_for_best_model == "ood_valid_accuracy"
    paper = ndr_training.parse_arguments(["--preset", "listops_paper"])[3]
    assert paper.learning_rate == 2e-4 and paper.lr_scheduler_type == "constant" and paper.warmup_steps == 0


@pytest.mark.parametrize("preset", sorted(path.stem for path in (REPO / "configuration").glob("*.yaml")))
def test_every_preset_parses(preset, tmp_path, native_bf16):
    """On a CPU with native bf16 and on one without, GPU presets included (they train on the CPU without a GPU)."""
    task_args, _, _, training_args, values = ndr_training.parse_arguments(
        ["--preset", preset, "--output_dir", str(tmp_path)]
    )
    assert task_args.task == values.get("task") and training_args.max_steps == values["max_steps"]  # own_data: None
    if values.get("precision") == "auto" and not torch.cuda.is_available():
        assert training_args.bf16 == native_bf16, "auto: bf16 where the CPU has it natively"


def test_a_preset_can_start_from_another(tmp_path):
    child = tmp_path / "child.yaml"
    child.write_text("base: ctl_cpu\nlearning_rate: 0.5\n")
    values = training.read_preset(str(child))
    assert values == {**training.read_preset("ctl_cpu"), "learning_rate": 0.5}, "the base's values, overridden"
    (tmp_path / "a.yaml").write_text(f"base: {tmp_path / 'b.yaml'}\n")
    (tmp_path / "b.yaml").write_text(f"base: {tmp_path / 'a.yaml'}\n")
    with pytest.raises(ValueError, match="loops back"):
        training.read_preset(str(tmp_path / "a.yaml"))


def test_backward_demo_in_budget_reads_bos():
    """`make demo-backward-bos` trains backward CTL with the classifier on [BOS] (make demo passes --direction), and
    evaluates with more steps than it trains with (the ood_test depths need them)."""
    task_args, model_args, *_ = ndr_training.parse_arguments(["--preset", "ctl_backward_bos_cpu"])
    assert (task_args.direction, model_args.readout) == ("backward", "first")
    assert model_args.eval_num_hidden_layers > model_args.num_hidden_layers == 14
    dry_run = subprocess.run(["make", "-n", "demo-backward-bos"], cwd=REPO, capture_output=True, text=True)
    assert dry_run.returncode == 0, dry_run.stderr
    assert re.search(r"--preset ctl_backward_bos_cpu --direction backward ", dry_run.stdout), dry_run.stdout


def test_make_help_lists_every_target_with_a_description():
    listed = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    described = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    phony = re.search(r"^\.PHONY:((?:.*\\\n)*.*)$", (REPO / "Makefile").read_text(), re.M).group(1)
    targets = set(phony.replace("\\\n", " ").split())
    assert targets <= described, f"targets without a `## ` description: {sorted(targets - described)}"


def test_help_lists_every_flag_and_exits_0(capsys):
    # argparse %-formats every help text: a bare % in one (e.g. "9% of") crashed --help itself
    with pytest.raises(SystemExit) as done:
        ndr_training.parse_arguments(["--help"])
    shown = capsys.readouterr().out
    assert done.value.code == 0, "--help succeeds"
    assert all(flag in shown for flag in ("--balance_operators", "--stop_at_accuracy", "--max_wall_minutes")), shown


def test_bad_presets_are_refused_with_their_names(tmp_path):
    with pytest.raises(ValueError, match="no_such_preset"):
        ndr_training.parse_arguments(["--preset", "no_such_preset"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: ctl\nhiden_size: 3\n")
    with pytest.raises(ValueError, match="hiden_size"):
        ndr_training.parse_arguments(["--preset", str(bad)])


def test_balanced_sampler_draws_depths_uniformly():
    from transformers import TrainingArguments

    from datasets import Dataset

    depths = [1] * 10 + [2] * 90 + [5] * 900
    dataset = Dataset.from_dict({"depth": depths, "input_ids": [[2, 3]] * len(depths)})
    model = NDRForSequenceClassification(
        NDRConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_labels=2)
    )
    trainer = ndr_training.NDRTrainer(
        model=model,
        args=TrainingArguments(output_dir="unused", report_to="none", seed=3),
        train_dataset=dataset,
        balance_depths=True,
    )
    drawn = torch.tensor([depths[i] for i in trainer._get_train_sampler(dataset)])
    shares = [(drawn == d).float().mean().item() for d in (1, 2, 5)]
    assert all(abs(share - 1 / 3) < 0.07 for share in shares), f"depth shares {shares} should all be about 1/3"


def test_balanced_sampler_groups_batches_by_length():
    """balance_depths with group_by_length: depths still drawn uniformly, and each batch holds similar lengths."""
    from transformers import TrainingArguments

    from datasets import Dataset

    generator = torch.Generator().manual_seed(0)
    depths = [1] * 50 + [2] * 450 + [3] * 1500
    lengths = torch.randint(3, 50, (len(depths),), generator=generator).tolist()
    dataset = Dataset.from_dict({"depth": depths, "input_ids": [[2] * n for n in lengths]})
    model = NDRForSequenceClassification(
        NDRConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_labels=2)
    )

    def batches(strategy):
        args = TrainingArguments(
            output_dir="unused", report_to="none", seed=3, per_device_train_batch_size=16,
            train_sampling_strategy=strategy,
        )  # fmt: skip
        trainer = ndr_training.NDRTrainer(model=model, args=args, train_dataset=dataset, balance_depths=True)
        order = list(trainer._get_train_sampler(dataset))
        assert len(order) == len(depths)
        return [order[i : i + 16] for i in range(0, len(order), 16)]

    grouped = batches("group_by_length")
    drawn = torch.tensor([depths[i] for batch in grouped for i in batch])
    shares = [(drawn == d).float().mean().item() for d in (1, 2, 3)]
    assert all(abs(share - 1 / 3) < 0.07 for share in shares), f"depth shares {shares} should all be about 1/3"

    def padding(batches):  # padded positions per batch, summed: what grouping saves
        return sum(len(batch) * max(lengths[i] for i in batch) - sum(lengths[i] for i in batch) for batch in batches)

    assert padding(grouped) < 0.2 * padding(batches("random")), "length-grouped batches should need little padding"


@pytest.mark.parametrize("preset", ["arithmetic_cpu", "listops_cpu", "arithmetic_paper", "listops_paper"])
def test_every_task_preset_trains_evaluates_and_exports(preset, tmp_path):
    train = load_script("training/train.py")
    argv = [
        "--preset",
        preset,
        "--n_train",
        "300",
        "--n_eval",
        "20",
        "--hidden_size",
        "16",
        "--intermediate_size",
        "16",
        "--num_attention_heads",
        "2",
        "--num_hidden_layers",
        "2",
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "8",
        "--eval_steps",
        "2",
        "--save_steps",
        "2",
        "--use_cpu",
        "true",
        "--disable_tqdm",
        "true",
        "--report_to",
        "none",
        "--output_dir",
        str(tmp_path / preset),
    ]
    results = train.main(argv)
    assert set(results) == {"iid_test", "ood_valid", "ood_test"}
    config = json.loads((tmp_path / preset / "export" / "config.json").read_text())
    task = preset.split("_")[0]
    assert config["readout"] == ("first" if task == "listops" else "last")
    assert config["id2label"]["9"] == "9"
    if task == "listops":
        assert config["eval_num_hidden_layers"] == 24, "ListOps evaluates with more steps than it trains with"


def test_card_command_shows_paths_inside_the_checkout_relative():
    """`make release` passes absolute output directories; the card shows the command a user types in their own clone
    (paths outside the checkout are kept as they are)."""
    repo = export.REPO_ROOT
    run_config = {
        "command": [
            os.path.join(repo, "training", "train.py"),
            "--output_dir",
            os.path.join(repo, "outputs", "x"),
            "--train_file",
            "/elsewhere/train.jsonl",
        ],
        "processes": 1,
    }
    assert export.training_command(run_config) == (
        "python training/train.py --output_dir outputs/x --train_file /elsewhere/train.jsonl"
    )


def test_the_headline_is_the_exported_model_as_loaded_with_the_fixed_steps_beside(tmp_path):
    train = load_script("training/train.py", "ndr_train_headline")
    results = {"ood_valid": {"accuracy": 1.0, "by_depth": {}}, "ood_test": {"accuracy": 0.9, "by_depth": {}}}
    exported = {"ood_test": {"accuracy": 0.95, "mean_steps": 15.1, "fixed_steps": {"accuracy": 0.91, "num_steps": 14}}}
    (tmp_path / "eval_results.json").write_text(json.dumps(exported))
    line = train.headline(str(tmp_path), results, 14, "fp32")
    assert line.startswith("ood_test accuracy of the exported model as loaded: 0.9500 (adaptive steps, 15.1 on av")
    assert "with the 14 fixed steps of training: 0.9100 (float32), 0.9000 as Trainer evaluated" in line, line
    (tmp_path / "eval_results.json").write_text(json.dumps(results))  # an export that kept the fixed steps
    assert train.headline(str(tmp_path), results, 14, "fp32") == (
        "ood_test accuracy of the exported model as loaded: 0.9000 as Trainer evaluated the selected checkpoint "
        "(14 steps, fp32)"
    )


def test_attn_implementation_chooses_what_computes_the_attention_and_is_not_saved(tmp_path, monkeypatch):
    """`--attn_implementation ndr_torch`: every geometric attention the run trains with takes the PyTorch path (the
    default would take the CPU kernel), and nothing of it reaches the saved config. (The export loads the model
    anew, as a user does, with transformers' default.)"""
    from modeling_ndr import geometric_ndr

    asked = set()
    chosen = geometric_ndr.uses_cpu_kernel

    def recording(tensor, kernel="auto"):
        if torch.is_grad_enabled():  # a training step (evaluations run without gradients)
            asked.add(kernel)
        return chosen(tensor, kernel)

    monkeypatch.setattr(geometric_ndr, "uses_cpu_kernel", recording)
    train = load_script("training/train.py", "ndr_train_attn_implementation")
    run = tmp_path / "run"
    train.main(TINY + ["--max_steps", "2", "--attn_implementation", "ndr_torch", "--output_dir", str(run)])
    assert asked == {"torch"}, f"the kernels the training steps asked for: {asked}"
    for folder in (run, run / "export"):
        config = json.loads((folder / "config.json").read_text())
        assert not [key for key in config if "attn" in key or "kernel" in key], config
