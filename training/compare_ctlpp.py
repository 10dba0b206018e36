"""Runs on CTL++ over a grid: models (the NDR and the paper's baselines), the overlap of the 2-stage variant's groups,
and seeds, all on one budget; a table per split and per depth, mean and spread over seeds, and the overlap sweep as a
plot.

    python training/compare_ctlpp.py --task_variant parallel_branch --models ndr,rel_gate --seeds 42,1   # baselines
    python training/compare_ctlpp.py --task_variant parallel_branch_2stage --overlaps 0,4x2,4x6,16x2,16x6 \\
        --results_dir docs/results --minutes 120                                            # the overlap sweep
    make compare-ctlpp CTLPP_VARIANT=parallel_branch_2stage OVERLAPS=0,4x2,16x6 MINUTES=120

Each run is `train.py --preset ctlpp_cpu --task_variant V [--function_overlap K [--symbol_overlap S]] [--variant M]
--seed N --max_steps STEPS` (two CPU processes by default, as `make demo`) into `OUTPUT_DIR/M_V[_foK[_soS]]_seedN/`. An
overlap `K` makes K functions a group that both routes lead into (in the 2-stage variant: after `a1` and after `b1`),
on all 8 symbols (`Kx8` is `K`); `KxS` on S shared symbols each (the authors' sweep: K in 4, 8, 12, 16 and S in 2-6);
`0` none. The NDR's models (geometric attention) evaluate with the preset's evaluation steps; softmax-attention
baselines and ACT models with the steps they train with, as the official code evaluates them. Everything after `--`
goes to every run unchanged; `--label NAME` names the setting those flags make (`--label official_init --
--config_overrides init_style=official`), so that its runs (`..._seedN_NAME/`, `ndr [NAME]` in the tables, the plot and
the results JSON) stand beside the runs without them instead of replacing them.

A run finished with the same command is not trained again; one stopped by `--minutes` (the call's time box) or a signal
resumes from its checkpoint at the next call (the call stopped ends with exit 75 saying so; `compare_runs.train_once`):
a sweep longer than one sitting is run by calling the same command again. "The same command" is the same `train.py`
flags and processes: after editing the preset or a variant's file, remove the runs it changes (or give another
`--output_dir`), or they are reused. No CTL++ split selects a checkpoint: each run reports its last one, evaluated with
the steps its export runs.

Written into OUTPUT_DIR after every run: `comparison.md` (a row per run: each split's accuracy, the training minutes
as train.py counts them over all of a run's chunks; then mean +- std over seeds of each cell) and, where a model has
runs with an overlap group, `sweep.png` (a grid per model: shared functions across, shared symbols down, each cell
the mean accuracy on the split of never-seen orders, `test_group_alternate`, with its seeds and `iid_test`; the cells
not run blank). With `--results_dir DIR` also `DIR/compare_ctlpp_<variant>.json` (every run: its cell, steps,
command, seconds and per-split accuracy by depth; the runs recorded there before and not run by this call are kept)
and `DIR/compare_ctlpp_<variant>_sweep.png`, drawn from all of them.
"""

import argparse
import datetime
import functools
import json
import os
import re
import statistics
import sys
import time

from compare_runs import launch, train_once
from modeling_ndr import NDRConfig
from modeling_ndr.tables import markdown_table
from modeling_ndr.tasks import ctlpp_split_names
from modeling_ndr.tasks.ctlpp import CTLPP_SYMBOLS, CTLPP_VARIANTS, check_ctlpp_options
from modeling_ndr.training import UsageError, read_variant
from modeling_ndr.training.errors import read_json
from ndr_training import EXIT_STOPPED, config_values, flags_on_command_line, parse_arguments


RECORD = "compare_ctlpp_run.json"
CELL_KEYS = ("model", "task_variant", "function_overlap", "symbol_overlap", "seed", "label")
PRESET = "ctlpp_cpu"
TAG = "compare_ctlpp"


def parse_overlap(text: str) -> tuple[int, int | None]:
    """`K` or `KxS` (shared functions, shared symbols per function) -> `(K, S)`; S is None for all 8 (or K = 0)."""
    functions, x, symbols = text.strip().partition("x")
    try:
        cell = (int(functions), int(symbols) if x else None)
    except ValueError:
        raise UsageError(f"--overlaps: {text!r} is not K or KxS (shared functions x symbols), e.g. 4x2") from None
    if cell[0] == 0 and cell[1] is not None:
        raise UsageError(f"--overlaps: {text!r} shares symbols of no function; write 0")
    return (cell[0], None) if cell[1] == len(CTLPP_SYMBOLS) else cell  # (all 8 symbols: the default, `K`)


def cells(args) -> list[dict]:
    """Every run the grid asks for, in training order: seed by seed (a first seed of every cell comes before a
    second), within a seed model by model, overlap by overlap."""
    overlaps = unique(parse_overlap(item) for item in args.overlaps.split(",") if item.strip()) or [(0, None)]
    if args.task_variant == "alternate" and overlaps != [(0, None)]:
        raise UsageError("--overlaps: alternate has no overlap group (the parallel_branch variants have)")
    for functions, symbols in overlaps:
        try:
            check_ctlpp_options(args.task_variant, functions, symbols)
        except ValueError as error:
            raise UsageError(f"--overlaps: {error}") from None
    models = unique(model.strip() for model in args.models.split(",") if model.strip())
    if not models:
        raise UsageError("--models: name at least one variant (e.g. ndr)")
    for model in models:
        try:
            read_variant(model, "ctlpp", PRESET)
        except UsageError as error:  # (it names the variants there are)
            raise UsageError(f"--models: {str(error).removeprefix('--variant ')}") from None
    try:
        seeds = unique(int(seed) for seed in args.seeds.split(",") if seed.strip())
    except ValueError:
        raise UsageError(f"--seeds: {args.seeds!r} is not a comma-separated list of integers") from None
    if not seeds:
        raise UsageError("--seeds: give at least one training seed (e.g. 42)")
    label = args.label
    if label is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.]*", label):
        raise UsageError(f"--label: {label!r} is not a name of letters, digits, '_' and '.' (e.g. official_init)")
    return [{"model": model, "task_variant": args.task_variant, "function_overlap": functions,
             "symbol_overlap": symbols, "seed": seed, "label": label}
            for seed in seeds for model in models for functions, symbols in overlaps]  # fmt: skip


def unique(items) -> list:
    """`items` in order, each once (a cell named twice is one run)."""
    return list(dict.fromkeys(items))


def run_name(cell: dict) -> str:
    """The run's folder name (a cell of the grid, or a row of the results' JSON, which holds the cell's fields), a
    labelled setting's ending in `_LABEL`."""
    name = f"{cell['model']}_{cell['task_variant']}"
    if cell["task_variant"] != "alternate":
        name += f"_fo{cell['function_overlap']}"
        if cell["symbol_overlap"] is not None:
            name += f"_so{cell['symbol_overlap']}"
    return f"{name}_seed{cell['seed']}" + (f"_{cell['label']}" if cell.get("label") else "")


def model_label(cell: dict) -> str:
    """The model as the tables and the plot name it: `ndr`, or `ndr [official_init]` for a labelled setting."""
    return cell["model"] + (f" [{cell['label']}]" if cell.get("label") else "")


def train_flags(args, cell: dict, extra: list[str]) -> list[str]:
    """The `train.py` flags of one run, the shared flags after `--` last (they win). A softmax-attention baseline or
    an ACT model also gets `--eval_num_hidden_layers` = the steps it trains with, as `train.py` resolves them
    (preset, variant recipe, flags), unless the shared flags set it."""
    flags = ["--preset", PRESET, "--task_variant", cell["task_variant"]]
    if cell["task_variant"] != "alternate":
        flags += ["--function_overlap", str(cell["function_overlap"])]
        if cell["symbol_overlap"] is not None:
            flags += ["--symbol_overlap", str(cell["symbol_overlap"])]
    if cell["model"] != "ndr":
        flags += ["--variant", cell["model"]]
    tail = ["--seed", str(cell["seed"]), "--max_steps", str(args.max_steps),
            "--output_dir", os.path.join(args.output_dir, run_name(cell)), "--disable_tqdm", "true"]  # fmt: skip
    config = resolved_config(flags + tail + extra)
    if (config.attention_type == "softmax" or config.halting == "act") and "eval_num_hidden_layers" not in (
        flags_on_command_line(extra)
    ):
        flags += ["--eval_num_hidden_layers", str(config.num_hidden_layers)]
    return flags + tail + extra


def resolved_config(flags: list[str]):
    """The `NDRConfig` a `train.py` command line trains (preset < variant recipe < flags, as `train.py` builds it)."""
    _, model_args, run_args, _, _ = parse_arguments(flags)
    variant = read_variant(run_args.variant, "ctlpp", run_args.preset)
    return NDRConfig(**config_values(model_args, variant, flags_on_command_line(flags)))


@functools.cache  # (a world is built to name the splits; the plot asks once per run)
def headline_split(task_variant: str) -> str:
    """The split of never-seen orders a variant is reported by (the first after iid_test, as train.py's headline)."""
    return ctlpp_split_names(task_variant)[2]


def overlap_label(cell: dict) -> str:
    if cell["task_variant"] == "alternate":
        return ""
    functions, symbols = cell["function_overlap"], cell["symbol_overlap"]
    return str(functions) if symbols is None else f"{functions}x{symbols}"


def splits_of(runs: list[dict]) -> list[str]:
    """The evaluation splits of the runs, in the task's order (the overlap splits where a run has them)."""
    seen = {split for run in runs for split in run["results"]}
    task_variant = runs[0]["cell"]["task_variant"]
    order = ctlpp_split_names(task_variant, 0 if task_variant == "alternate" else 4, 2)[1:]  # all it can make
    return [split for split in order if split in seen]


def tables(runs: list[dict]) -> str:
    """A row per run, then one per cell with mean +- std over its seeds (std: sample, where two seeds or more)."""
    splits = splits_of(runs)
    rows = [[model_label(run["cell"]), overlap_label(run["cell"]), run["cell"]["seed"],
             *(f"{run['results'][split]['accuracy']:.3f}" if split in run["results"] else "" for split in splits),
             f"{(run['seconds'] or 0) / 60:.1f}"] for run in runs]  # fmt: skip
    text = markdown_table(rows, ["model", "overlap", "seed", *splits, "minutes"])
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((model_label(run["cell"]), overlap_label(run["cell"])), []).append(run)
    summary = []
    for (model, overlap), members in groups.items():
        row = [model, overlap, len(members)]
        for split in splits:
            values = [run["results"][split]["accuracy"] for run in members if split in run["results"]]
            spread = f" +- {statistics.stdev(values):.3f}" if len(values) > 1 else ""
            row.append(f"{statistics.mean(values):.3f}{spread}" if values else "")
        summary.append(row)
    return text + "\n\nMean over seeds (+- their standard deviation):\n\n" + markdown_table(
        summary, ["model", "overlap", "seeds", *splits]
    )  # fmt: skip


def cell_means(values: list[tuple[float, float]]) -> tuple[float, float]:
    """The mean never-seen and `iid_test` accuracy over a cell's runs."""
    return statistics.mean(a for a, _ in values), statistics.mean(i for _, i in values)


def plot_sweep(runs: list[dict], path: str) -> bool:
    """The overlap sweep as a grid per model, as the authors draw it: shared functions across, shared symbols per
    function down (8: all), each cell the headline split's accuracy (the mean over its seeds; below it the number of
    seeds, n, and iid_test's mean), the cells not run left blank; the runs without an overlap group in the title. False
    (nothing drawn) where no model has a run with an overlap group."""
    cells: dict[str, dict[tuple, list[tuple[float, float]]]] = {}
    for run in runs:
        cell = run["cell"]
        split = headline_split(cell["task_variant"])
        if split in run["results"]:
            key = (cell["function_overlap"], cell["symbol_overlap"] or 8)
            cells.setdefault(model_label(cell), {}).setdefault(key, []).append(
                (run["results"][split]["accuracy"], run["results"]["iid_test"]["accuracy"])
            )
    models = [model for model, found in cells.items() if any(functions for functions, _ in found)]
    if not models:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    functions = sorted({k for model in models for k, _ in cells[model] if k} | {4, 8, 12, 16})
    symbols = sorted({s for model in models for k, s in cells[model] if k} | {2, 4, 6, 8})
    figure, axes = plt.subplots(1, len(models), figsize=(max(6.4, 4.2 * len(models) + 1.2), 4.4),
                                layout="constrained", squeeze=False)  # fmt: skip
    task_variant = runs[0]["cell"]["task_variant"]
    for axis, model in zip(axes[0], models):
        grid = [[float("nan")] * len(functions) for _ in symbols]
        for (k, s), values in cells[model].items():
            if k:
                mean, iid = cell_means(values)
                grid[symbols.index(s)][functions.index(k)] = mean
                text = f"{mean:.2f}\nn={len(values)}, iid {iid:.2f}"
                axis.text(functions.index(k), symbols.index(s), text, ha="center", va="center", fontsize=6.5,
                          color="white" if mean < 0.6 else "black")  # fmt: skip
        image = axis.imshow(grid, vmin=0, vmax=1, cmap="viridis", origin="lower", aspect="auto")
        axis.set_xticks(range(len(functions)), functions)
        axis.set_yticks(range(len(symbols)), [f"{s} (all)" if s == 8 else s for s in symbols])
        axis.set_xlabel("functions shared by the groups")
        axis.set_ylabel("symbols shared per function")
        title = model
        if none := cells[model].get((0, 8)):
            mean, iid = cell_means(none)
            title += f"; no overlap: {mean:.2f} (n={len(none)}, iid {iid:.2f})"
        axis.set_title(title, fontsize=9)
    figure.colorbar(image, ax=list(axes[0]), shrink=0.8, label=f"{headline_split(task_variant)} accuracy")
    figure.suptitle(f"CTL++ {task_variant}: never-seen orders by overlap (chance 0.125)", fontsize=10)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def write_outputs(args, runs: list[dict], extra: list[str]) -> None:
    text = "\n".join([
        f"# CTL++ {args.task_variant}: {len(runs)} runs", "",
        f"Written {datetime.date.today().isoformat()}; each run `train.py --preset {PRESET} --task_variant "
        f"{args.task_variant} ... --max_steps {args.max_steps} {' '.join(extra)}`, its last checkpoint as its export "
        "loads it.", "", tables(runs), "",
    ])  # fmt: skip
    with open(os.path.join(args.output_dir, "comparison.md"), "w") as f:
        f.write(text)
    draw(runs, os.path.join(args.output_dir, "sweep.png"))
    if args.results_dir:
        os.makedirs(args.results_dir, exist_ok=True)
        base = os.path.join(args.results_dir, f"compare_ctlpp_{args.task_variant}")
        # the runs recorded there before and not run by this call are kept (a call with a smaller grid, or one
        # stopped by its time box, adds to the record instead of replacing it); a run of this call replaces its own
        rows = {run_name(row): row for row in read_json(base + ".json") or []}
        for run in runs:
            seconds = round(run["seconds"] or 0, 1)
            cell = {key: value for key, value in run["cell"].items() if key != "label" or value is not None}
            rows[run_name(run["cell"])] = {**cell, "steps": run["steps"], "seconds": seconds,
                                           "command": run["command"], "results": run["results"]}  # fmt: skip
        with open(base + ".json", "w") as f:
            json.dump(list(rows.values()), f, indent=2)
            f.write("\n")
        recorded = [{"cell": {key: row.get(key) for key in CELL_KEYS}, "results": row["results"]}
                    for row in rows.values()]  # fmt: skip
        draw(recorded, base + "_sweep.png")


def draw(runs: list[dict], path: str) -> None:
    """`plot_sweep` into `path`, or no file there where it draws nothing (an earlier call's figure is removed)."""
    if not plot_sweep(runs, path) and os.path.isfile(path):
        os.remove(path)


def main(argv: list[str] | None = None) -> list[dict]:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task_variant", default="parallel_branch", choices=CTLPP_VARIANTS)
    parser.add_argument("--models", default="ndr", help="comma-separated variants (configuration/variants/)")
    parser.add_argument("--overlaps", default="0", help="comma-separated K or KxS (shared functions x symbols)")
    parser.add_argument("--seeds", default="42", help="comma-separated training seeds (the task seed stays 0)")
    parser.add_argument("--max_steps", type=int, default=10000,
                        help="every run's budget in optimizer steps (of 64 samples per process)")  # fmt: skip
    parser.add_argument("--output_dir", default=os.path.join("outputs", "compare_ctlpp"))
    parser.add_argument("--results_dir", help="also write compare_ctlpp_<variant>.json (and _sweep.png) here")
    parser.add_argument("--label", help="names the setting the flags after -- make (e.g. official_init): its runs "
                        "are `..._seedN_LABEL` and `model [LABEL]` in the tables, the plot and the results, beside "
                        "the runs without those flags")  # fmt: skip
    parser.add_argument("--nproc", type=int, default=2, help="training processes per run (gloo on the CPU)")
    parser.add_argument("--minutes", type=float, help="the time box of this call (the running run stops with a "
                        "checkpoint; the next call resumes it)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        if args.label is not None and not extra:
            raise UsageError(f"--label {args.label}: names the setting of the flags after --, and none are given")
        grid = cells(args)
    except UsageError as error:
        raise SystemExit(f"compare_ctlpp.py: {error}") from None
    deadline = None if args.minutes is None else time.monotonic() + 60 * args.minutes
    runs = []
    for cell in grid:
        command, env = launch(train_flags(args, cell, extra), args.nproc)
        run = train_once(run_name(cell), os.path.join(args.output_dir, run_name(cell)), command, env, deadline,
                         RECORD, TAG)  # fmt: skip
        if run is None:
            if runs:
                write_outputs(args, runs, extra)
            raise SystemExit(EXIT_STOPPED)
        # the steps it trained and its own training seconds over all its chunks (train.py's record), where it has them
        training = (read_json(os.path.join(args.output_dir, run_name(cell), "run_config.json")) or {}).get("training")
        training = training or {}
        runs.append({"cell": cell, **run, "seconds": training.get("seconds") or run["seconds"],
                     "steps": training.get("steps", args.max_steps)})  # fmt: skip
        write_outputs(args, runs, extra)
    print("\n" + tables(runs))
    print(f"[{TAG}] wrote {args.output_dir}/comparison.md" + (f" and compare_ctlpp_{args.task_variant}.* in "
          f"{args.results_dir}" if args.results_dir else ""))  # fmt: skip
    return runs


if __name__ == "__main__":
    main()
