"""One variant's run in a comparison (`compare.py`): the `train.py` command that trains it and its environment, the
recipe it trains with (resolved as `train.py` resolves it), how it is run and stopped, and what it gives: its
results as its export loads, its learning curve, and ACT's ponder steps.
"""

import json
import os
import shutil
import sys
import time

import modeling_ndr
from compare_report import FIT, RECIPE_COLUMNS, RECORDED_BEFORE, SPLITS, results_name
from modeling_ndr.tasks import SMALLEST_N_TRAIN
from modeling_ndr.training import read_variant
from modeling_ndr.training.errors import read_json
from ndr_training import (
    EXIT_STOPPED,
    config_values,
    flags_on_command_line,
    latest_complete_checkpoint,
    parse_arguments,
)
from ndr_training.preemption import STOPPED_FILE, read_stopped
from ndr_training.records import evaluation_history, training_losses
from processes import run_process


HERE = os.path.dirname(os.path.abspath(__file__))


def train_flags(args, variant: str, output_dir: str) -> list[str]:
    """The `train.py` flags of one variant's run (before the extra flags)."""
    flags = ["--preset", args.preset, "--variant", variant, "--output_dir", output_dir, "--disable_tqdm", "true"]
    if args.direction:
        flags += ["--direction", args.direction]
    if getattr(args, "act_eval_steps", None) and read_variant(variant, None, args.preset).get("halting") == "act":
        flags += ["--eval_num_hidden_layers", str(args.act_eval_steps)]
    return flags


def train_command(args, variant: str, output_dir: str, extra: list[str]) -> tuple[list[str], dict]:
    """The command that trains one variant, and its environment (gloo data parallelism on the CPU, see README)."""
    return launch(train_flags(args, variant, output_dir) + extra, args.nproc)


def launch(flags: list[str], nproc: int) -> tuple[list[str], dict]:
    """`train.py` with `flags` in `nproc` processes, and its environment: one process is `python train.py`, more are
    `accelerate launch` with gloo data parallelism on the CPU (one thread each, see README)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if nproc == 1:
        return [sys.executable, os.path.join(HERE, "train.py"), *flags], env
    env["ACCELERATE_USE_CPU"] = "true"
    launcher = [os.path.join(os.path.dirname(sys.executable), "accelerate"), "launch", "--multi_gpu",
                "--num_processes", str(nproc), "--num_machines", "1", "--mixed_precision", "no",
                "--dynamo_backend", "no"]  # fmt: skip
    script = [os.path.join(HERE, "train.py"), "--use_cpu", "--ddp_find_unused_parameters", "false"]
    return [*launcher, *script, *flags], env


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


def as_recorded(found: dict) -> dict:
    """A `recipe` as the details record it: as JSON holds it, without the run's data."""
    return {k: v for k, v in json.loads(json.dumps(found)).items() if k != "data"}


def results_base(args) -> str:
    """`--results_dir`'s path of the comparison's data without the suffix (`.json`, `_details.json`)."""
    return os.path.join(args.results_dir, results_name(args.task, args.direction))


def run_until_stopped(command: list[str], env: dict, directory: str, append: bool, every_minute) -> tuple[int, str]:
    """Run a `train.py` run writing into `directory` (its output added to, or written into, `directory/train.log`;
    `every_minute(seconds)` called once a minute while it runs); returns its exit
    status and, where it stopped with a checkpoint, "at step S (reason)", else "". A launcher (accelerate) exits 1 when
    its processes exit 75, so `stopped.json` tells a stop from a failure; an earlier stop's marker is removed first, so
    that a failure of this run is not taken for a stop. A SIGTERM or SIGUSR1 to this process is passed on to the run,
    which stops with a checkpoint: a comparison stopped from outside leaves no training behind."""
    marker = os.path.join(directory, STOPPED_FILE)
    if os.path.isfile(marker):
        os.remove(marker)
    log = os.path.join(directory, "train.log")
    returncode = run_process(
        command, log_path=log, append=append, every_minute=every_minute, env=env, forward_signals=True
    ).returncode
    stopped = read_stopped(directory) if returncode != 0 else None
    if returncode != EXIT_STOPPED and not stopped:
        return returncode, ""
    stopped = stopped or {}
    return returncode, f"at step {stopped.get('step')} ({stopped.get('reason', 'exit 75')})"


def script_flags(command: list[str]) -> list[str]:
    """What makes a `train.py` command the same run: the number of processes it launches (`--num_processes` of the
    launcher; 1 without one: the global batch depends on it) and the flags it gives `train.py` (what follows the
    script), not the launcher's or interpreter's path or the checkout's, nor `--output_dir` (the run folder the command
    is checked for: an absolute and a relative path name the same folder). A command without `train.py` is all of
    it."""
    scripts = [index for index, part in enumerate(command) if os.path.basename(part) == "train.py"]
    if not scripts:
        return command
    launcher = command[: scripts[0]]
    processes = launcher[launcher.index("--num_processes") + 1] if "--num_processes" in launcher[:-1] else "1"
    flags = command[scripts[0] + 1 :]
    named = [flag for index, flag in enumerate(flags) if flags[index - 1 : index] != ["--output_dir"]]
    return [f"processes={processes}", *(flag for flag in named if flag.split("=")[0] != "--output_dir")]


def train_once(
    name: str, directory: str, command: list[str], env: dict, deadline: float | None, record_name: str, tag: str
) -> dict | None:
    """Run `command` (a `train.py` run writing into `directory`) unless it finished with this command before: a run
    of another command there is moved to `directory.previous`, an unfinished one of this command resumes from its last
    checkpoint, and `deadline` (a `time.monotonic()` value) becomes its `--max_wall_minutes`. `directory/record_name`
    records the command, the training seconds and whether it finished. Returns `{"results", "seconds", "command"}`, or
    None where the run stopped with a checkpoint (the caller exits 75; the same command resumes it); a failure raises
    SystemExit naming its log. "The same command" is the same `train.py` flags and number of processes
    (`script_flags`): a run started from another checkout or interpreter is resumed. `name` and `tag` are what the
    progress lines say."""
    record = read_json(os.path.join(directory, record_name)) or {}
    # the same run: the same train.py flags and processes (the interpreter's and the checkout's paths may differ)
    same = bool(record.get("command")) and script_flags(record["command"]) == script_flags(command[1:])
    results = read_json(os.path.join(directory, "eval_results.json"))
    if same and results and record.get("finished"):
        print(f"[{tag}] {name}: finished with this command, not trained again", flush=True)
        return {"results": results, "seconds": record.get("seconds"), "command": command[1:]}
    if os.path.isdir(directory) and not same:
        shutil.rmtree(directory + ".previous", ignore_errors=True)
        os.rename(directory, directory + ".previous")
        print(f"[{tag}] {name}: a run of another command moved to {directory}.previous", flush=True)
    resume = ["--resume_from_checkpoint", "auto"] if same else []
    # (at least 0.6 s: a deadline already passed still trains to the first step and saves it)
    minutes = None if deadline is None else max(0.01, (deadline - time.monotonic()) / 60)
    limit = [] if minutes is None else ["--max_wall_minutes", f"{minutes:.2f}"]
    os.makedirs(directory, exist_ok=True)
    seconds = record.get("seconds", 0.0) if same else 0.0

    def write_record(spent: float, finished: bool = False) -> None:
        with open(os.path.join(directory, record_name), "w") as f:
            json.dump({"command": command[1:], "seconds": round(spent, 1), "finished": finished}, f, indent=2)

    write_record(seconds)
    print(f"[{tag}] {'resuming' if same else 'training'} {name}: {' '.join(command)}", flush=True)
    started = time.time()
    status, where = run_until_stopped(command + resume + limit, env, directory, same,
                                      lambda spent: write_record(seconds + spent))  # fmt: skip
    seconds += time.time() - started
    if where:
        write_record(seconds)
        print(f"[{tag}] {name}: stopped {where}; the same command resumes it", flush=True)
        return None
    if status != 0:
        raise SystemExit(f"[{tag}] {name} failed (exit {status}); see {directory}/train.log")
    write_record(seconds, finished=True)
    return {"results": read_json(os.path.join(directory, "eval_results.json")), "seconds": seconds,
            "command": command[1:]}  # fmt: skip


def as_loaded(output_dir: str) -> dict:
    """What the variant's export gives as loaded with `from_pretrained` (`export/eval_results.json`): `{"ood_test":
    accuracy, "deeper": accuracy on 11 and 12 functions or None, "adaptive_steps": bool}`. A CTL export runs adaptive
    steps where they do at least as well as the fixed steps on ood_valid (`adaptive_study.py`)."""
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
    state = read_json(os.path.join(output_dir, "trainer_state.json"))
    return {} if state is None else curve_of(state)


def curve_of(trainer_state: dict, after_step: int = 0) -> dict:
    """`learning_curve`'s dict from a trainer state (`records.evaluation_history`), with what was logged after
    `after_step` only."""
    losses = [(step, loss) for step, loss in training_losses(trainer_state) if step > after_step]
    evaluations = [e for e in evaluation_history(trainer_state) if e["step"] > after_step]
    return {
        "step": [step for step, _ in losses],
        "loss": [loss for _, loss in losses],
        "eval_step": [e["step"] for e in evaluations],
        **{split: [(e.get(split) or {}).get("accuracy") for e in evaluations] for split in SPLITS},
    }


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
    splits = modeling_ndr.load_task(data["task"], seed=data["task_seed"], n_train=SMALLEST_N_TRAIN[data["task"]],
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


def written_to_results(args) -> str:
    """The end of the closing line: what went into `--results_dir`, if given."""
    return f", and {results_name(args.task, args.direction)}.* in {args.results_dir}" if args.results_dir else ""


# ---- past the recipe's steps (--budget_steps): a variant that did not fit, its very run continued

BUDGET = ".budget"  # OUTPUT_DIR/NAME.budget/: NAME's run continued past its recipe's steps
BUDGET_RECORD = "budget_run.json"


def newest_trainer_state(output_dir: str) -> dict | None:
    """The trainer state of `output_dir` with the highest step: its `trainer_state.json` (a finished run) or a
    checkpoint's (a run stopped by its time box, or one going on past where it finished before)."""
    paths = [os.path.join(output_dir, "trainer_state.json")]
    if os.path.isdir(output_dir):
        paths += [os.path.join(output_dir, name, "trainer_state.json") for name in os.listdir(output_dir)]
    states = [state for state in map(read_json, paths) if state and "global_step" in state]
    return max(states, key=lambda state: state["global_step"], default=None)


def budget_problem(args, variant: str, extra: list[str], run: dict | None) -> str | None:
    """Why `variant`'s run cannot be continued to `--budget_steps`, or None: it must be a finished run of its recipe
    in `OUTPUT_DIR/NAME/` (its checkpoints are not in a record), with a learning rate that stays constant (then
    going on from its last checkpoint is the same run as one with more steps; a decaying schedule would be another
    run), and `--budget_steps` must lie past its recipe's steps."""
    output_dir = os.path.join(args.output_dir, variant)
    if run is None or not os.path.isfile(os.path.join(output_dir, "eval_results.json")):
        return f"{variant} has no finished run of its recipe in {output_dir} to continue (make compare trains it)"
    if args.budget_steps <= run["recipe"]["steps"]:
        return f"--budget_steps {args.budget_steps} is not past {variant}'s recipe ({run['recipe']['steps']} steps)"
    scheduler = parse_arguments(train_flags(args, variant, output_dir) + extra)[3].lr_scheduler_type
    scheduler = getattr(scheduler, "value", scheduler)
    rates = {entry["learning_rate"] for entry in (newest_trainer_state(output_dir) or {}).get("log_history", [])
             if "learning_rate" in entry}  # fmt: skip
    if scheduler != "constant":
        return (f"{variant} trains with lr_scheduler_type {scheduler}: continuing a learning rate that is not "
                "constant is not the same run as a longer one")  # fmt: skip
    if len(rates) > 1:
        return (f"{variant}'s run logged learning rates from {min(rates):g} to {max(rates):g}: continuing a learning "
                "rate that is not constant is not the same run as a longer one")  # fmt: skip
    if latest_complete_checkpoint(output_dir) is None:
        return f"{variant}: no complete checkpoint in {output_dir} to continue from"
    return None


def budget_state(args, variant: str, run: dict) -> dict | None:
    """The `budget` entry of `variant` from `OUTPUT_DIR/NAME.budget/`, where its run (`run`, the recipe's) was
    continued (None where it was not, or where the continuation is of another run):

    `{"recipe_steps", "target_steps": --budget_steps of the last call, "steps": trained so far, "batch", "samples",
    "recipe_seconds", "training_seconds": the recipe run's and the continuation's, "fits_at_step": the first
    evaluation past the recipe's steps with iid_test >= FIT or None, "curve": the continuation's learning curve (as
    `learning_curve`, evaluations past the recipe's steps, with "eval_samples")}`."""
    directory = os.path.join(args.output_dir, variant + BUDGET)
    record = read_json(os.path.join(directory, BUDGET_RECORD))
    state = newest_trainer_state(directory)
    if not record or state is None or not continues(record, run):
        return None
    recipe_steps, batch = record["recipe_steps"], run["recipe"]["batch"]
    # the continuation's history holds the recipe run's too (from its checkpoint): only what came after
    curve = curve_of(state, after_step=recipe_steps)
    curve["eval_samples"] = [step * batch for step in curve["eval_step"]]
    fits = next((s for s, a in zip(curve["eval_step"], curve["iid_test"]) if a is not None and a >= FIT), None)
    return {
        "recipe_steps": recipe_steps,
        "target_steps": record["target_steps"],
        "steps": state["global_step"],
        "batch": batch,
        "samples": state["global_step"] * batch,
        "recipe_seconds": run["seconds"],
        "training_seconds": (run["seconds"] or 0.0) + record["seconds"],
        "fits_at_step": fits,
        "curve": curve,
    }


def continues(record: dict, run: dict) -> bool:
    """Whether a continuation's record (`BUDGET_RECORD`) continues `run`: the same recipe, and the same run of it
    (its training time tells a run trained again with `--retrain` from the one continued)."""
    recorded = as_recorded(record.get("recipe") or {})
    return record.get("recipe_seconds") == run["seconds"] and same_recipe(recorded, as_recorded(run["recipe"]))


def with_budget(args, variant: str, run: dict) -> dict:
    """`run` with its `budget` entry, where its run was continued past its recipe's steps: from
    `OUTPUT_DIR/NAME.budget/`, else as `--results_dir` records it for this run (so a report of other variants keeps
    it)."""
    budget = budget_state(args, variant, run)
    if budget is None and args.results_dir:
        recorded = (read_json(results_base(args) + "_details.json") or {}).get(variant) or {}
        if recorded.get("budget") and continues({**recorded["budget"], "recipe": recorded.get("recipe")}, run):
            budget = recorded["budget"]
    return {**run, "budget": budget} if budget else run
