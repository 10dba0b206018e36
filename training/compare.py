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
current recipe and not run in OUTPUT_DIR is taken from the record (`finished_run`): a committed comparison is
completed by training only the variants it lacks. `--variants` says what to train: the outputs also keep the
paper's variants and those `--results_dir` records, where they are finished or recorded with their current recipe
(`kept_runs`; a recorded one that cannot be kept is named). Flags after `--` go to
every `train.py` run and win over the recipes.

`--budget_steps N` trains no recipe run: it measures the budget a variant below `FIT` on iid_test needs
(`make compare-budget`). Each of `--budget_variants` (default: every one below `FIT`) has its finished run continued
past its recipe's steps in `OUTPUT_DIR/NAME.budget/` (`continue_variant`; `OUTPUT_DIR/NAME/` is only read): from that
run's last checkpoint with `--max_steps N`, which at a constant learning rate is the same run as one of N steps (a
learning rate that is not constant is refused), until N steps, the first evaluation with iid_test >= `FIT`
(`train.py --stop_at_accuracy`), or the end of `--budget_minutes` (a checkpoint and exit 75: the next call goes on
from it). The details get a `budget` entry per continued variant (`budget_state`), which later comparisons keep.

Written into OUTPUT_DIR, and rewritten after every variant (so a long comparison shows what it has so far):

- `comparison.md`: accuracy per variant and split (with the step count it trained with, the paper's protocol, and
  as its export loads: adaptive steps where they are at least as accurate on ood_valid), per depth, each variant's
  recipe and training time, and for ACT models the mean ponder steps per depth;
- `comparison.png`: accuracy against depth, one line per variant, the training depths shaded;
- `curves.png`: the learning curves (training loss, iid_test and ood_test accuracy per evaluation) of the variants
  that did not fit the training distribution (iid_test below `FIT`), if any, with their continuations past the
  recipe's steps (`--budget_steps`);
- with `--results_dir DIR` also `DIR/compare_<task>[_<direction>].json` (`{variant: {split: accuracy}}`, plus
  `ood_test_as_loaded` and `deeper_as_loaded`, 11 and 12 functions, None where not measured), `.png`,
  `_details.json` (per depth, recipe, time, ponder steps, learning curves) and `_curves.png`; with `--image PATH` the
  plot is copied there too (the README's and model cards' figure).
"""

import argparse
import json
import os
import shutil
import sys
import time

from compare_report import FIT, PAPER_VARIANTS, SPLITS, write_outputs  # noqa: F401  (FIT, PAPER_VARIANTS: public)
from compare_runs import (
    BUDGET,
    BUDGET_RECORD,
    as_loaded,
    as_recorded,
    budget_problem,
    budget_state,
    continues,
    learning_curve,
    ponder_steps,
    recipe,
    results_base,
    run_until_stopped,
    same_recipe,
    train_command,
    train_flags,
    with_budget,
    written_to_results,
)
from modeling_ndr.training import UsageError
from modeling_ndr.training.errors import read_json
from ndr_training import EXIT_STOPPED, latest_complete_checkpoint, parse_arguments


def train_variant(args, variant: str, extra: list[str], found: dict, finished_only: bool = False) -> dict | None:
    """Train one variant (`found`: its `recipe`) unless it is done; returns its eval results, training time, recipe,
    learning curve and, for ACT models, its ponder steps (None with `--report_only` or `finished_only` where the
    variant is not done).

    `OUTPUT_DIR/NAME/compare_run.json` records the recipe a run was started with. A finished run with the current
    recipe is reused; an unfinished one with it is resumed from its last checkpoint (`--resume_from_checkpoint
    auto`); a run with another recipe (or from before recipes were recorded), or any run with `--retrain`, is moved to
    `NAME.previous` and the variant trained afresh. A run that stops with a checkpoint (a signal or
    `--max_wall_minutes`: exit 75, or a launcher's exit 1 beside its `stopped.json`) ends the comparison with exit 75,
    saying where it stopped; the next call resumes it."""
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
        returncode, where = run_until_stopped(command, env, output_dir, resume, lambda t: write_record(seconds + t))
        seconds += time.time() - start
        write_record(seconds, seconds=seconds)
        record = {"seconds": seconds}
        if where:
            print(f"[compare] {variant}: stopped {where} with a checkpoint after {seconds / 60:.1f} min; the same "
                  "command resumes it", flush=True)  # fmt: skip
            raise SystemExit(EXIT_STOPPED)
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


def kept_runs(args, named: list[str], extra: list[str]) -> dict:
    """The runs of the variants not in `--variants` that the comparison already holds with their current recipe: the
    paper's variants and any other `--results_dir` records, finished in OUTPUT_DIR or recorded in `--results_dir` (the
    record also where OUTPUT_DIR holds an unfinished or older run of the variant: nothing trains it here), so that a
    comparison of some variants adds to its outputs instead of rewriting them with those variants only. Nothing is
    trained for them, `--retrain` (which is about the named variants) leaves them as they are, and a recorded variant
    that cannot be kept (its recipe file gone or unreadable, or its recipe changed) is named in one line."""
    recorded = list(read_json(results_base(args) + ".json") or {}) if args.results_dir else []
    keep_args = argparse.Namespace(**{**vars(args), "retrain": False})
    runs, dropped = {}, []
    for variant in dict.fromkeys(v for v in [*PAPER_VARIANTS, *recorded] if v not in named):
        try:
            found = recipe(args, variant, extra)
        except (UsageError, ValueError) as error:  # e.g. a recorded variant whose recipe file is gone
            if variant in recorded:
                dropped.append(f"{variant} ({error})")
            continue
        if run := finished_run(keep_args, variant, found, extra, trains_here=False):
            runs[variant] = with_budget(args, variant, run)
        elif variant in recorded:
            dropped.append(f"{variant} (recorded with another recipe)")
    if runs:
        print(f"[compare] kept beside --variants, with their recipes: {', '.join(runs)}", flush=True)
    if dropped:
        print(f"[compare] left out of the outputs: {'; '.join(dropped)}", flush=True)
    return runs


def finished_run(args, variant: str, found: dict, extra: list[str], trains_here: bool = True) -> dict | None:
    """A finished run of `variant` with its current recipe (`found`): the one in `OUTPUT_DIR/NAME/`, else the one
    `--results_dir` records (`recorded_run`), so that a committed comparison is completed, here or on another machine,
    by training only the variants it lacks. For a variant that `trains_here`, the record only where `OUTPUT_DIR/NAME/`
    holds no run of it (an unfinished or older run there is resumed or redone instead). None otherwise."""
    if run := train_variant(args, variant, extra, found, finished_only=True):
        return run
    if trains_here and os.path.isdir(os.path.join(args.output_dir, variant)):
        return None
    return recorded_run(args, variant, found)


def recorded_run(args, variant: str, found: dict) -> dict | None:
    """A variant's run as `--results_dir` records it (`compare_<task>[_<direction>].json` and `_details.json`), when
    the record has the variant's current recipe (`found`). None otherwise (and always with `--retrain`)."""
    if not args.results_dir or args.retrain:
        return None
    base = results_base(args)
    try:
        with open(base + ".json") as f:
            table = json.load(f)[variant]
        with open(base + "_details.json") as f:
            details = json.load(f)[variant]
    except (OSError, KeyError, ValueError):
        return None
    if not same_recipe(details.get("recipe"), as_recorded(found)):
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


# ---- past the recipe's steps (--budget_steps): a variant that did not fit, its very run continued


def continue_variant(args, variant: str, extra: list[str], run: dict, deadline: float | None) -> None:
    """Continue `variant`'s finished run (`run`) in `OUTPUT_DIR/NAME.budget/` up to `--budget_steps`: from the
    run's last checkpoint the first time, from the continuation's own afterwards, with `--max_steps` raised (at a
    constant learning rate the same run as one with that many steps). It ends at `--budget_steps`, at the first
    evaluation with iid_test >= FIT (`--stop_at_accuracy`), or at `deadline` (`time.monotonic()`; train.py's
    `--max_wall_minutes`: a checkpoint and exit 75, which the next call resumes). The run in `OUTPUT_DIR/NAME/` is
    only read."""
    run_dir, directory = os.path.join(args.output_dir, variant), os.path.join(args.output_dir, variant + BUDGET)
    record_file = os.path.join(directory, BUDGET_RECORD)
    record = read_json(record_file)
    if os.path.isdir(directory) and not (record and continues(record, run)):
        shutil.rmtree(directory + ".previous", ignore_errors=True)
        os.rename(directory, directory + ".previous")
        print(f"[compare] {variant}: a continuation of another run moved to {directory}.previous", flush=True)
        record = None
    budget = budget_state(args, variant, run)
    if budget and budget["fits_at_step"] is not None:
        print(f"[compare] {variant}: fits at step {budget['fits_at_step']} already; nothing to continue", flush=True)
        return
    start_from = latest_complete_checkpoint(directory) or latest_complete_checkpoint(run_dir)
    step = (read_json(os.path.join(start_from, "trainer_state.json")) or {}).get("global_step", 0)
    if step >= args.budget_steps:
        print(f"[compare] {variant}: at step {step} already (--budget_steps {args.budget_steps})", flush=True)
        return
    minutes = None if deadline is None else (deadline - time.monotonic()) / 60
    if minutes is not None and minutes <= 0:
        print(f"[compare] {variant}: no time left of --budget_minutes; not continued", flush=True)
        return
    flags = ["--max_steps", str(args.budget_steps), "--resume_from_checkpoint", start_from,
             "--stop_at_accuracy", f"iid_test={FIT}"]  # fmt: skip
    flags += [] if minutes is None else ["--max_wall_minutes", f"{minutes:g}"]
    command, env = train_command(args, variant, directory, extra + flags)
    os.makedirs(directory, exist_ok=True)
    seconds = record["seconds"] if record else 0.0

    def write_record(spent: float):
        with open(record_file, "w") as f:
            json.dump({"recipe": json.loads(json.dumps(run["recipe"])), "recipe_seconds": run["seconds"],
                       "recipe_steps": run["recipe"]["steps"], "target_steps": args.budget_steps, "command": command,
                       "seconds": spent}, f, indent=2)  # fmt: skip

    write_record(seconds)
    print(f"[compare] continuing {variant} from step {step}: {' '.join(command)}", flush=True)
    start = time.time()
    returncode, where = run_until_stopped(command, env, directory, True, lambda spent: write_record(seconds + spent))
    write_record(seconds + time.time() - start)
    if where:
        print(f"[compare] {variant}: stopped {where}; the same command goes on from there", flush=True)
    elif returncode != 0:
        log = os.path.join(directory, "train.log")
        raise SystemExit(f"[compare] {variant}'s continuation failed (exit {returncode}); see {log}")


# the evaluation splits do not depend on n_train: the smallest train set keeps the generation quick (CTL and
# arithmetic put all of depth 1 into train), as evaluate_model.py does


def continue_budgets(args, variants: list[str], runs: dict, extra: list[str], deadline: float | None) -> None:
    """`--budget_steps`: every problem with the variants to continue first (one line, exit 2, nothing trained), then
    each continued in turn (`continue_variant`) and the outputs written after each, with the runs finished so far."""
    named = [v.strip() for v in (args.budget_variants or "").split(",") if v.strip()]
    below = [v for v in variants if v in runs and runs[v]["results"]["iid_test"]["accuracy"] < FIT]
    for variant in named:
        if variant not in variants:
            raise SystemExit(f"compare.py: error: --budget_variants: {variant} is not one of --variants")
        if variant in runs and variant not in below:
            print(f"[compare] {variant} fits with its recipe (iid_test >= {FIT}): nothing to continue", flush=True)
    chosen = [v for v in named if v in below or v not in runs] if named else below
    for variant in chosen:
        if problem := budget_problem(args, variant, extra, runs.get(variant)):
            raise SystemExit(f"compare.py: error: --budget_steps: {problem}")
    if not chosen:
        print(f"[compare] no variant below {FIT} on iid_test to continue", flush=True)
    for variant in chosen:
        continue_variant(args, variant, extra, runs[variant], deadline)
        runs[variant] = with_budget(args, variant, runs[variant])
        write_outputs(args, runs, extra, args.task)
    if chosen:
        print(f"[compare] wrote {args.output_dir}/comparison.md and curves.png{written_to_results(args)}")


def main(argv: list[str] | None = None):
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="ctl_cpu")
    parser.add_argument("--direction", default=None, help="CTL: forward or backward")
    parser.add_argument(
        "--variants",
        default=",".join(PAPER_VARIANTS),
        help="comma-separated, in training order (tables: the paper's); the outputs also keep the other variants "
        "finished or recorded with their current recipe",
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
    parser.add_argument(
        "--budget_steps",
        type=int,
        help="train no recipe run: continue the finished runs of --budget_variants that did not fit (iid_test below "
        "FIT) past their recipe's steps, up to this many steps, in OUTPUT_DIR/NAME.budget/ (their learning rate "
        "must be constant); each stops at the first evaluation that fits; a later call goes on where one stopped",
    )
    parser.add_argument(
        "--budget_variants", help="with --budget_steps: comma-separated (default: those of --variants below FIT)"
    )
    parser.add_argument(
        "--budget_minutes",
        type=float,
        help="with --budget_steps: the time box of this call; the continuation running when it runs out stops with "
        "a checkpoint (train.py --max_wall_minutes), and the next call resumes it",
    )
    args = parser.parse_args(argv)
    deadline = None if args.budget_minutes is None else time.monotonic() + 60 * args.budget_minutes
    if (args.budget_variants or args.budget_minutes is not None) and not args.budget_steps:
        parser.error("--budget_variants and --budget_minutes go with --budget_steps")
    if args.budget_steps and (args.retrain or args.report_only):
        parser.error("--budget_steps trains no recipe run: it goes with neither --retrain nor --report_only")
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
        if run := finished_run(args, v, recipes[v], extra):
            runs[v] = with_budget(args, v, run)
    runs.update(kept_runs(args, variants, extra))
    if args.budget_steps:
        continue_budgets(args, variants, runs, extra, deadline)
        return
    text = write_outputs(args, runs, extra, task) if runs else ""
    for variant in variants:
        if variant in runs:
            continue
        if (run := train_variant(args, variant, extra, recipes[variant])) is None:
            print(f"[compare] {variant}: not finished with its recipe, left out (--report_only)", flush=True)
            continue
        runs[variant] = with_budget(args, variant, run)
        text = write_outputs(args, runs, extra, task)
    if not runs:
        raise SystemExit("[compare] no variant is finished yet: nothing to write")
    print("\n" + text)
    print(f"[compare] wrote {args.output_dir}/comparison.md and comparison.png{written_to_results(args)}")


if __name__ == "__main__":
    main()
