"""Train model variants on one task preset, each with its own recipe, and compare them per split and per depth.

    python training/compare.py --preset ctl_cpu --direction forward --results_dir docs/results   # make compare
    python training/compare.py --preset ctl_cpu --variants transformer,ndr --output_dir outputs/cmp -- --max_steps 500

Each variant (`configuration/variants/NAME.yaml`) is trained by `training/train.py --preset P --variant NAME` (two
CPU processes by default, as `make demo`) into `OUTPUT_DIR/NAME/`, with the variant's own recipe for the task and the
preset (its `tasks:` and `presets:` sections: layers, heads, width, learning rate, weight decay, dropouts, batch and
steps; precedence in `modeling_ndr.training.presets`; the paper's baselines also start as the official code starts
them, `init_style: official`), in the precision the preset asks for (`ctl_cpu`: `auto`, bf16 on a CPU with native
bf16). The ACT variants evaluate with at most the steps they train with, as the official code does;
`--act_eval_steps 28` gives them twice as many. A variant trained before with the same recipe is not trained
again, one interrupted is resumed from its last checkpoint, and one trained with another recipe is moved aside and
trained afresh (`--retrain` forces that; `train_variant`). With `--results_dir`, a variant recorded there with its
current recipe and not run in OUTPUT_DIR is taken from the record (`recorded_run`): a committed comparison is
completed by training only the variants it lacks. Flags after `--` go to every `train.py` run and win over the
recipes.

Written into OUTPUT_DIR, and rewritten after every variant (so a long comparison shows what it has so far):

- `comparison.md`: accuracy per variant and split (with the step count it trained with, the paper's protocol, and
  as its export loads: adaptive steps where they are at least as accurate on ood_valid), per depth, each variant's
  recipe and training time, and for ACT models the mean ponder steps per depth;
- `comparison.png`: accuracy against depth, one line per variant, the training depths shaded;
- `curves.png`: the learning curves (training loss, iid_test and ood_test accuracy per evaluation) of the variants
  that did not fit the training distribution (iid_test below `FIT`), if any;
- with `--results_dir DIR` also `DIR/compare_<task>[_<direction>].json` (`{variant: {split: accuracy}}`, plus
  `ood_test_as_loaded` and `deeper_as_loaded`, 11 and 12 functions, None where not measured), `.png`,
  `_details.json` (per depth, recipe, time, ponder steps, learning curves) and `_curves.png`; with `--image PATH` the
  plot is copied there too (the README's and model cards' figure).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import modeling_ndr
from modeling_ndr.training import UsageError, config_values, flags_on_command_line, parse_arguments, read_variant
from modeling_ndr.training.comparison import (  # noqa: F401  (PAPER_VARIANTS, FIT: this script's public names too)
    FIT,
    PAPER_VARIANTS,
    RECIPE_COLUMNS,
    RECORDED_BEFORE,
    SPLITS,
    results_name,
    write_outputs,
)


HERE = os.path.dirname(os.path.abspath(__file__))


def train_flags(args, variant: str, output_dir: str) -> list[str]:
    """The `train.py` flags of one variant's run (before the extra flags)."""
    flags = ["--preset", args.preset, "--variant", variant, "--output_dir", output_dir, "--disable_tqdm", "true"]
    if args.direction:
        flags += ["--direction", args.direction]
    if args.nproc > 1:
        flags += ["--use_cpu", "--ddp_find_unused_parameters", "false"]
    if getattr(args, "act_eval_steps", None) and read_variant(variant, None, args.preset).get("halting") == "act":
        flags += ["--eval_num_hidden_layers", str(args.act_eval_steps)]
    return flags


def train_command(args, variant: str, output_dir: str, extra: list[str]) -> tuple[list[str], dict]:
    """The command that trains one variant, and its environment (gloo data parallelism on the CPU, see README)."""
    flags = train_flags(args, variant, output_dir)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if args.nproc == 1:
        return [sys.executable, os.path.join(HERE, "train.py"), *flags, *extra], env
    env["ACCELERATE_USE_CPU"] = "true"
    launcher = [os.path.join(os.path.dirname(sys.executable), "accelerate"), "launch", "--multi_gpu",
                "--num_processes", str(args.nproc), "--num_machines", "1", "--mixed_precision", "no",
                "--dynamo_backend", "no"]  # fmt: skip
    return [*launcher, os.path.join(HERE, "train.py"), *flags, *extra], env


def recipe(args, variant: str, extra: list[str]) -> dict:
    """The hyperparameters a variant's run trains with, resolved as `train.py` resolves them (preset, variant recipe,
    flags): `{column: value}` for the `RECIPE_COLUMNS` (the batch is the global one, over `args.nproc` processes;
    `ponder` and `ponder cost` are None without ACT), plus `ponder_warmup`: `(--ponder_warmup_loss,
    --ponder_warmup_steps)` with ACT."""
    argv = train_flags(args, variant, os.path.join(args.output_dir, variant)) + list(extra)
    data_args, model_args, run_args, training_args, _ = parse_arguments(argv)
    given = flags_on_command_line(argv)
    task = None if data_args.own_data else (data_args.task or "ctl")
    config = modeling_ndr.NDRConfig(
        **config_values(model_args, read_variant(run_args.variant, task, run_args.preset), given)
    )
    per_process = training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps
    total_batch = per_process * args.nproc
    if run_args.total_batch_size and "per_device_train_batch_size" not in given:
        total_batch = run_args.total_batch_size
    act = config.halting == "act"
    found = {}
    for column, name in RECIPE_COLUMNS:
        if name == "total_batch":
            found[column] = total_batch
        elif name == "precision":  # what --precision (the presets: auto) stands for on this machine
            found[column] = "bf16" if training_args.bf16 else "fp16" if training_args.fp16 else "fp32"
        elif hasattr(config, name):
            found[column] = getattr(config, name)
        else:
            found[column] = getattr(training_args, name)
    found["gate drop"] = config.gate_dropout if config.copy_gate else None
    found["ponder"] = config.act_ponder_weight if act else None
    found["ponder cost"] = config.act_ponder_cost if act else None
    found["ponder_warmup"] = [run_args.ponder_warmup_loss, run_args.ponder_warmup_steps] if act else None
    # the data the run evaluates on, for measuring ACT's ponder steps on the same samples
    found["data"] = {"task": task, "direction": data_args.direction, "task_seed": data_args.task_seed,
                     "n_eval": data_args.n_eval}  # fmt: skip
    return found


def same_recipe(recorded: dict | None, wanted: dict) -> bool:
    """Whether a recorded recipe is `wanted` (both as JSON holds them). A record written before a recipe column
    existed is read with that column at the value it had then: `RECORDED_BEFORE`'s, else None."""
    if recorded is None:
        return False
    before = {**dict.fromkeys(wanted), **{k: v for k, v in RECORDED_BEFORE.items() if k in wanted}}
    if "ponder cost" in wanted and recorded.get("ponder") is not None:
        before["ponder cost"] = "ndr"  # the only ponder cost there was
    return {**before, **recorded} == wanted


def train_variant(args, variant: str, extra: list[str], found: dict, finished_only: bool = False) -> dict | None:
    """Train one variant (`found`: its `recipe`) unless it is done; returns its eval results, training time, recipe,
    learning curve and, for ACT models, its ponder steps (None with `--report_only` or `finished_only` where the
    variant is not done).

    `OUTPUT_DIR/NAME/compare_run.json` records the recipe a run was started with. A finished run with the current
    recipe is reused; an unfinished one with it is resumed from its last checkpoint (`--resume_from_checkpoint
    auto`); a run with another recipe (or from before recipes were recorded), or any run with `--retrain`, is moved to
    `NAME.previous` and the variant trained afresh."""
    output_dir = os.path.join(args.output_dir, variant)
    results_file, record_file = (os.path.join(output_dir, name) for name in ("eval_results.json", "compare_run.json"))
    wanted = json.loads(json.dumps(found))  # as the record holds it (tuples become lists)
    record = {}
    if os.path.isfile(record_file):
        with open(record_file) as f:
            record = json.load(f)
    same = same_recipe(record.get("recipe"), wanted) and not args.retrain
    if same and os.path.isfile(results_file):
        print(f"[compare] {variant}: results exist, not trained again (--retrain to force)", flush=True)
    elif args.report_only or finished_only:
        return None
    else:
        resume = same and os.path.isdir(output_dir)
        if os.path.isdir(output_dir) and not resume:
            previous = output_dir + ".previous"
            shutil.rmtree(previous, ignore_errors=True)
            os.rename(output_dir, previous)
            print(f"[compare] {variant}: an earlier run with another recipe moved to {previous}", flush=True)
        command, env = train_command(args, variant, output_dir, extra + ["--resume_from_checkpoint", "auto"] * resume)
        os.makedirs(output_dir, exist_ok=True)
        seconds = record.get("seconds_before", 0.0) if resume else 0.0

        def write_record(spent: float, **more):
            with open(record_file, "w") as f:
                json.dump({"recipe": wanted, "command": command, "seconds_before": spent, **more}, f, indent=2)

        write_record(seconds)
        print(f"[compare] {'resuming' if resume else 'training'} {variant}: {' '.join(command)}", flush=True)
        start = time.time()
        with open(os.path.join(output_dir, "train.log"), "a" if resume else "w") as log:
            process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
            while True:  # the time spent is recorded every minute, so an interrupted run resumes with it
                try:
                    returncode = process.wait(timeout=60)
                    break
                except subprocess.TimeoutExpired:
                    write_record(seconds + time.time() - start)
        seconds += time.time() - start
        write_record(seconds, seconds=seconds)
        record = {"seconds": seconds}
        if returncode != 0:
            raise SystemExit(f"[compare] {variant} failed (exit {returncode}); see {output_dir}/train.log")
        print(f"[compare] {variant} done in {seconds / 60:.1f} min", flush=True)
    with open(results_file) as f:
        results = json.load(f)
    return {
        "results": results,
        "as_loaded": as_loaded(output_dir),
        "seconds": record.get("seconds"),
        "recipe": found,
        "curve": learning_curve(output_dir),
        "mean_steps": ponder_steps(output_dir, found["data"]),
    }


def recorded_run(args, variant: str, found: dict) -> dict | None:
    """A variant's run as `--results_dir` records it (`compare_<task>[_<direction>].json` and `_details.json`), when
    the record has the variant's current recipe (`found`) and `OUTPUT_DIR/NAME/` holds no run of it: a comparison
    committed there is completed, here or on another machine, by training only the variants it lacks. None otherwise
    (and always with `--retrain`)."""
    if not args.results_dir or args.retrain or os.path.isdir(os.path.join(args.output_dir, variant)):
        return None
    base = os.path.join(args.results_dir, results_name(args.task, args.direction))
    try:
        with open(base + ".json") as f:
            table = json.load(f)[variant]
        with open(base + "_details.json") as f:
            details = json.load(f)[variant]
    except (OSError, KeyError, ValueError):
        return None
    # the details leave the run's data out of the recipe
    if not same_recipe(details.get("recipe"), {k: v for k, v in json.loads(json.dumps(found)).items() if k != "data"}):
        return None
    print(f"[compare] {variant}: recorded in {base}.json with this recipe, not trained again", flush=True)
    return {
        "results": {s: {"accuracy": table[s], "by_depth": details["by_depth"][s]} for s in SPLITS},
        "as_loaded": details["as_loaded"],
        "seconds": details["training_seconds"],
        "recipe": found,
        "curve": details["learning_curve"],
        "mean_steps": details["mean_ponder_steps"],
    }


def as_loaded(output_dir: str) -> dict:
    """What the variant's export gives as loaded with `from_pretrained` (`export/eval_results.json`): `{"ood_test":
    accuracy, "deeper": accuracy on 11 and 12 functions or None, "adaptive_steps": bool}`. A CTL export runs adaptive
    steps where they do at least as well as the fixed steps on ood_valid (`modeling_ndr.training.adaptive`)."""
    path = os.path.join(output_dir, "export", "eval_results.json")
    if not os.path.isfile(path):
        return {"ood_test": None, "deeper": None, "adaptive_steps": False}
    with open(path) as f:
        results = json.load(f)
    with open(os.path.join(output_dir, "export", "config.json")) as f:
        adaptive = bool(json.load(f).get("adaptive_steps"))
    deeper = results.get("deeper", {}).get("accuracy")
    return {"ood_test": results["ood_test"]["accuracy"], "deeper": deeper, "adaptive_steps": adaptive}


def learning_curve(output_dir: str) -> dict:
    """From the run's `trainer_state.json`: `{"step": [...], "loss": [...]}` of the logged training losses and
    `{"eval_step": [...], split: [...]}` of the evaluations (empty if the file is missing)."""
    path = os.path.join(output_dir, "trainer_state.json")
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        history = json.load(f).get("log_history", [])
    curve = {"step": [], "loss": [], "eval_step": [], **{split: [] for split in SPLITS}}
    evaluations = {}  # step -> {split: accuracy}: Trainer logs each evaluation split as an entry of its own
    for entry in history:
        if "loss" in entry:
            curve["step"].append(entry["step"])
            curve["loss"].append(entry["loss"])
        for split in SPLITS:
            if f"eval_{split}_accuracy" in entry:
                evaluations.setdefault(entry["step"], {})[split] = entry[f"eval_{split}_accuracy"]
    for step in sorted(evaluations):
        curve["eval_step"].append(step)
        for split in SPLITS:
            curve[split].append(evaluations[step].get(split))
    return curve


# the evaluation splits do not depend on n_train: the smallest train set keeps the generation quick (CTL and
# arithmetic put all of depth 1 into train), as evaluate_model.py does
SMALLEST_TRAIN = {"ctl": 72, "arithmetic": 200, "listops": 1}


def ponder_steps(output_dir: str, data: dict) -> dict | None:
    """For a model with ACT halting, the steps it ran on the run's evaluation data (`data`: task, direction,
    task_seed, n_eval): `{split: {"mean_steps": m, "mean_steps_by_depth": {depth: m}, "readout_steps": m,
    "readout_steps_by_depth": {depth: m}}}`, the mean halting step of the real columns and of the column the
    classifier reads. Measured once and kept in `OUTPUT_DIR/NAME/ponder_steps.json`; None for other models."""
    with open(os.path.join(output_dir, "config.json")) as f:
        if json.load(f).get("halting") != "act" or not data["task"]:
            return None
    path = os.path.join(output_dir, "ponder_steps.json")
    if os.path.isfile(path):
        with open(path) as f:
            return json.load(f)
    import numpy as np
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from modeling_ndr.training.evaluation import predict

    model = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    options = {"direction": data["direction"]} if data["direction"] else {}
    splits = modeling_ndr.load_task(data["task"], seed=data["task_seed"], n_train=SMALLEST_TRAIN[data["task"]],
                                    n_eval=data["n_eval"], **options)  # fmt: skip
    measured = {}
    for split in SPLITS:
        predicted, depths = predict(model, tokenizer, splits[split]["text"], 250), np.asarray(splits[split]["depth"])
        values = {}
        for name, per_sample in (("mean_steps", predicted.steps), ("readout_steps", predicted.readout_steps)):
            values[name] = float(per_sample.mean())
            values[f"{name}_by_depth"] = {str(d): float(per_sample[depths == d].mean()) for d in sorted(set(depths))}
        measured[split] = values
    with open(path, "w") as f:
        json.dump(measured, f, indent=2)
    return measured


def main(argv: list[str] | None = None):
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="ctl_cpu")
    parser.add_argument("--direction", default=None, help="CTL: forward or backward")
    parser.add_argument(
        "--variants", default=",".join(PAPER_VARIANTS), help="comma-separated, in training order (tables: the paper's)"
    )
    parser.add_argument("--output_dir", default=None, help="default: outputs/compare_<preset>[_<direction>]")
    parser.add_argument("--nproc", type=int, default=2, help="training processes per run (gloo on the CPU)")
    parser.add_argument("--retrain", action="store_true", help="train again even where results exist")
    parser.add_argument(
        "--report_only", action="store_true", help="train nothing: write the outputs from the variants finished so far"
    )
    parser.add_argument("--results_dir", help="also write compare_<task>[_<direction>].json/.png/... here")
    parser.add_argument(
        "--act_eval_steps",
        type=int,
        help="ACT variants: the most steps at evaluation (default: their recipe's, the steps they train with, as the "
        "official code evaluates; 28 = twice that on CTL, where the read-out column's halting is not cut off)",
    )
    parser.add_argument("--image", help="also copy the accuracy-per-depth plot to this path")
    args = parser.parse_args(argv)
    args.output_dir = args.output_dir or os.path.join(
        "outputs", f"compare_{args.preset}" + (f"_{args.direction}" if args.direction else "")
    )
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    try:  # every variant's recipe resolves before anything is trained (a bad variant or flag: one line, exit 2)
        data_args = parse_arguments(train_flags(args, variants[0], args.output_dir) + extra)[0]
        recipes = {variant: recipe(args, variant, extra) for variant in variants}
    except UsageError as error:
        raise SystemExit(f"compare.py: error: {error}") from None
    args.task = task = data_args.task or "ctl"
    # first the variants finished here or recorded in --results_dir with their recipe, so that the outputs written
    # while the others train keep them
    runs = {}
    for v in variants:
        if run := recorded_run(args, v, recipes[v]) or train_variant(args, v, extra, recipes[v], finished_only=True):
            runs[v] = run
    text = write_outputs(args, runs, extra, task) if runs else ""
    for variant in variants:
        if variant in runs:
            continue
        if (run := train_variant(args, variant, extra, recipes[variant])) is None:
            print(f"[compare] {variant}: not finished with its recipe, left out (--report_only)", flush=True)
            continue
        runs[variant] = run
        text = write_outputs(args, runs, extra, task)
    if not runs:
        raise SystemExit("[compare] no variant is finished yet: nothing to write")
    print("\n" + text)
    written = f", and {results_name(task, args.direction)}.* in {args.results_dir}" if args.results_dir else ""
    print(f"[compare] wrote {args.output_dir}/comparison.md and comparison.png{written}")


if __name__ == "__main__":
    main()
