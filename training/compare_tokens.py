"""Compare model variants on a token task (copy, reverse, addition, carry) with the same budget: each variant trained
by `train.py --task TASK --variant NAME` with the same flags, then a table of sequence and character accuracy per
evaluation split (length) and a plot of accuracy against length.

    python training/compare_tokens.py --task carry --variants ndr,transformer_act,transformer,rel \\
        --results_dir docs/results -- --n_train 100000 --max_steps 20000 --eval_steps 1000
    make compare-tokens TASK=carry MINUTES=60 TOKEN_ARGS="--max_steps 20000"

Everything after `--` goes to every variant's `train.py` unchanged (the budget: steps, batch, learning rate, size), so
the variants differ only in what `configuration/variants/NAME.yaml` sets. A variant already finished with the same
`train.py` flags and processes is not trained again (from any checkout: `compare_runs.train_once`); one stopped by
`--minutes` (its time box, `train.py --max_wall_minutes`) or a signal resumes from its checkpoint at the next call, and
the comparison ends with exit 75 saying so. Written into OUTPUT_DIR (default `outputs/compare_tokens_<task>`) after
every variant: `comparison.md`, `comparison.png`; with `--results_dir DIR` also `DIR/compare_tokens_<task>.json`
(`{variant: {split: {"accuracy", "character_accuracy", "length"}}}` with each variant's command and training seconds)
and `.png`.
"""

import argparse
import datetime
import json
import os
import shutil
import sys
import time

from compare_runs import launch, train_once
from modeling_ndr.tables import markdown_table
from modeling_ndr.tasks import TOKEN_SPLIT_NAMES, TOKEN_TASK_NAMES
from ndr_training import EXIT_STOPPED


HERE = os.path.dirname(os.path.abspath(__file__))
RECORD = "compare_tokens_run.json"
# the Universal Transformer's models (the UT with ACT, and a Transformer) beside the NDR and a relative-position
# Transformer: the comparison
DEFAULT_VARIANTS = "ndr,transformer_act,transformer,rel"


def split_length(split: str) -> int:
    """The length an evaluation split holds (`test_100`, `long_chains_100`: 100)."""
    return int(split.rsplit("_", 1)[1])


def variant_command(args, variant: str, extra: list[str]) -> tuple[list[str], dict]:
    """`train.py` for one variant (the task, the variant, its folder, the selection split, then the shared flags) in
    `args.nproc` processes, and its environment."""
    metric = args.metric_for_best_model or f"{selection_split(args.task)}_accuracy"
    flags = ["--task", args.task, "--variant", variant, "--output_dir", os.path.join(args.output_dir, variant),
             "--disable_tqdm", "true", "--metric_for_best_model", metric, *extra]  # fmt: skip
    return launch(flags, args.nproc)


def selection_split(task: str) -> str:
    """The split a comparison selects checkpoints on: the task's `valid_<n>` (the string tasks: other rows of the
    longest length), else its second-shortest test split (the carry task: `test_100`). Until 2026-11-28 the string
    tasks too selected on their second-shortest test split (the lab record's first tables)."""
    valid = [split for split in eval_splits(task) if split.startswith("valid_")]
    tests = sorted((split for split in eval_splits(task) if split.startswith("test_")), key=split_length)
    return valid[0] if valid else tests[1]


def eval_splits(task: str) -> list[str]:
    return [split for split in TOKEN_SPLIT_NAMES[task] if split != "train"]


def train_variant(args, variant: str, extra: list[str], deadline: float | None) -> dict | None:
    """Train `variant` unless it finished with this command (`compare_runs.train_once`); returns `{"results",
    "seconds", "command"}`, or None where it stopped with a checkpoint (exit 75 follows)."""
    command, env = variant_command(args, variant, extra)
    directory = os.path.join(args.output_dir, variant)
    return train_once(variant, directory, command, env, deadline, RECORD, "compare_tokens")


def table(task: str, runs: dict) -> str:
    """Markdown: a row per variant, for each evaluation split its sequence accuracy (character accuracy)."""
    splits = sorted(eval_splits(task), key=lambda split: (split.startswith("long"), split_length(split)))
    rows = []
    for variant, run in runs.items():
        cells = []
        for split in splits:
            values = run["results"].get(split)
            cells.append(f"{values['accuracy']:.3f} ({values['character_accuracy']:.3f})" if values else "")
        rows.append([variant, *cells, f"{(run['seconds'] or 0) / 60:.0f}"])
    return markdown_table(rows, ["variant", *splits, "minutes"])


def plot(task: str, runs: dict, path: str) -> None:
    """Accuracy against evaluation length, a color per variant: sequence accuracy solid, character accuracy dashed
    (the carry task's long carry chains: dotted sequence accuracy)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
    for index, (variant, run) in enumerate(runs.items()):
        lines = (("test_", "accuracy", "-", variant), ("test_", "character_accuracy", "--", None),
                 ("long_chains_", "accuracy", ":", None))  # fmt: skip
        for prefix, key, style, label in lines:
            points = sorted((split_length(s), v[key]) for s, v in run["results"].items() if s.startswith(prefix))
            if points:
                lengths, values = zip(*points)
                axes.plot(lengths, values, style, marker="o", color=f"C{index}", label=label, linewidth=1.3)
    axes.set_xscale("log")
    axes.set_ylim(0, 1.02)
    axes.set_xlabel("evaluation length")
    axes.set_ylabel("accuracy (solid: sequence, dashed: character)")
    axes.set_title(f"{task}: trained on short inputs, evaluated longer", fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_outputs(args, runs: dict, extra: list[str]) -> None:
    text = "\n".join([
        f"# Variants on the {args.task} token task", "",
        f"Measured {datetime.date.today().isoformat()}; every variant with `train.py --task {args.task} "
        f"--variant NAME {' '.join(extra)}`. Each cell: sequence accuracy (character accuracy).", "",
        table(args.task, runs), "",
    ])  # fmt: skip
    with open(os.path.join(args.output_dir, "comparison.md"), "w") as f:
        f.write(text)
    plot(args.task, runs, os.path.join(args.output_dir, "comparison.png"))
    if args.results_dir:
        os.makedirs(args.results_dir, exist_ok=True)
        base = os.path.join(args.results_dir, f"compare_tokens_{args.task}")
        data = {variant: {"seconds": run["seconds"], "command": run["command"], **{
            split: {"accuracy": v["accuracy"], "character_accuracy": v["character_accuracy"],
                    "length": split_length(split)} for split, v in run["results"].items()}}
                for variant, run in runs.items()}  # fmt: skip
        with open(base + ".json", "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        shutil.copyfile(os.path.join(args.output_dir, "comparison.png"), base + ".png")


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, choices=TOKEN_TASK_NAMES)
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help="comma-separated, in training order")
    parser.add_argument("--output_dir", help="default: outputs/compare_tokens_<task>")
    parser.add_argument("--results_dir", help="also write compare_tokens_<task>.json/.png here")
    parser.add_argument("--nproc", type=int, default=2, help="training processes per run (gloo on the CPU)")
    parser.add_argument("--metric_for_best_model",
                        help="default: the accuracy of valid_<n> where the task has one, else of its second-shortest "
                             "test split")  # fmt: skip
    parser.add_argument("--minutes", type=float, help="the time box of this call (the running variant stops with a "
                        "checkpoint; the next call resumes it)")  # fmt: skip
    args = parser.parse_args(argv)
    args.output_dir = args.output_dir or os.path.join("outputs", f"compare_tokens_{args.task}")
    deadline = None if args.minutes is None else time.monotonic() + 60 * args.minutes
    runs = {}
    for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
        run = train_variant(args, variant, extra, deadline)
        if run is None:
            if runs:
                write_outputs(args, runs, extra)
            raise SystemExit(EXIT_STOPPED)
        runs[variant] = run
        write_outputs(args, runs, extra)
    print("\n" + table(args.task, runs))
    print(f"[compare_tokens] wrote {args.output_dir}/comparison.md and comparison.png"
          + (f", and compare_tokens_{args.task}.* in {args.results_dir}" if args.results_dir else ""))  # fmt: skip
    return runs


if __name__ == "__main__":
    main()
