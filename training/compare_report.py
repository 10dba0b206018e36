"""The report of a comparison of model variants (`training/compare.py`, `make compare`): tables, plots and data.

`write_outputs(args, runs, extra, task)` writes, for the variants finished so far, `comparison.md` (accuracy per
variant and split, with the step count each trained with and as its export loads; per depth; recipes; ACT's ponder
steps; the paper's numbers beside ours), `comparison.png` (accuracy per depth), `curves.png` (learning curves of the
variants below `FIT` on iid_test) and, with `args.results_dir`, the same as data (`compare_<task>[_<direction>].json`,
`_details.json`) and the paper's comparison redrawn from it (`_paper.json`, `_paper.png`: `write_paper_comparison`,
which `python training/compare_report.py FILE` runs on committed data).
A run is the dict `training/compare.py` builds per variant: `{"results": {split: {"accuracy", "by_depth"}},
"as_loaded": {...}, "seconds": s, "recipe": {column: value}, "curve": {...}, "mean_steps": {...} or None}`, and
`"budget": {...}` where the run was continued past its recipe's steps (`compare.py --budget_steps`; `budget_state`
there): a table of it in `comparison.md`, its curve in `curves.png`, the entry in `_details.json`.
"""

import datetime
import json
import os
import platform
import shutil
import sys

import modeling_ndr
from modeling_ndr.tables import markdown_table
from modeling_ndr.tasks import split_depths


# the paper's variants in the order of its Table 1, then the metric-tensor NDR and the two ACT models
PAPER_VARIANTS = (
    "transformer", "rel", "rel_gate", "absrel_gate", "geom_att", "ndr", "ndr_metric", "ndr_act", "transformer_act",
)  # fmt: skip
SPLITS = ("iid_test", "ood_valid", "ood_test")
FIT = 0.95  # iid_test accuracy from which a variant counts as fitting the training distribution
# what the recipe table shows: (column, NDRConfig field or TrainingArguments attribute; precision: bf16, fp16 or fp32)
RECIPE_COLUMNS = (
    ("steps", "max_steps"), ("batch", "total_batch"), ("lr", "learning_rate"), ("wd", "weight_decay"),
    ("layers", "num_hidden_layers"), ("eval layers", "eval_num_hidden_layers"), ("heads", "num_attention_heads"),
    ("d", "hidden_size"), ("d_ff", "intermediate_size"), ("dropout", "hidden_dropout_prob"),
    ("att. drop", "attention_dropout"), ("emb. drop", "embedding_dropout"), ("gate drop", "gate_dropout"),
    ("init", "init_style"), ("emb. init", "embedding_init"), ("ponder", "act_ponder_weight"),
    ("ponder cost", "act_ponder_cost"), ("precision", "precision"), ("seed", "seed"),
)  # fmt: skip
# The paper's CTL results (Csordas et al. 2022, Table 1: mean of 5 seeds, its GPU recipe) per direction: (iid, the
# "longer" test split of depths 9-10, which is our ood_test). Its ACT models are in its appendix, and ndr_metric and
# ndr_act are not the paper's, so those have none.
PAPER_CTL = {
    "forward": {"transformer": (1.00, 0.13), "rel": (1.00, 0.23), "rel_gate": (1.00, 0.99),
                "absrel_gate": (1.00, 0.98), "geom_att": (0.96, 0.16), "ndr": (1.00, 1.00)},
    "backward": {"transformer": (0.82, 0.12), "rel": (1.00, 0.13), "rel_gate": (1.00, 0.19),
                 "absrel_gate": (1.00, 0.98), "geom_att": (0.93, 0.15), "ndr": (1.00, 1.00)},
}  # fmt: skip
# The value each column had in the runs recorded before it existed (a record without it is read with this value;
# columns not named here were None then). "ponder cost" was "ndr" for the ACT variants (those with a ponder weight).
RECORDED_BEFORE = {"emb. drop": 0.0, "init": "ndr", "emb. init": "normal", "precision": "fp32", "seed": 42}


def recipe_cell(value) -> str:
    """A recipe value as the table shows it: a float with `:g`, an integer (a seed, steps) or a name as it is,
    nothing for None."""
    return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def minutes(seconds: float | None) -> str:
    """`"12.3 min"`, or `"–"` for an unknown time."""
    return "–" if seconds is None else f"{seconds / 60:.1f} min"


def by_depth(run: dict) -> dict[int, float]:
    """`{depth: accuracy}` over every split of a run."""
    return {int(d): a for split in run["results"].values() for d, a in split["by_depth"].items()}


def write_markdown(path: str, runs: dict, args, extra: list[str], task: str) -> str:
    """Write `comparison.md` (the tables described in this module's docstring) and return its text. `args` needs
    `preset`, `direction` and `nproc`; `extra` are the flags every run got."""
    depths = sorted({d for run in runs.values() for d in by_depth(run)})
    lines = [f"# Variants on `{args.preset}`" + (f" ({args.direction})" if args.direction else ""), ""]
    lines += [f"Command: `python training/compare.py {' '.join(sys.argv[1:])}`", ""]
    extras = "; extra flags: " + " ".join(extra) if extra else ""
    lines += [f"Measured {datetime.date.today().isoformat()} on {platform.node() or 'this machine'}, "
              f"{os.cpu_count()} CPU cores, {args.nproc} training process(es); each variant with its own recipe "
              f"(configuration/variants/NAME.yaml){extras}.", ""]  # fmt: skip
    rows = []
    for variant, run in runs.items():
        cells = [f"{run['results'][split]['accuracy']:.3f}" for split in SPLITS]
        loaded = run["as_loaded"]
        cells += ["–" if loaded[key] is None else f"{loaded[key]:.3f}" for key in ("ood_test", "deeper")]
        rows.append([variant, *cells, minutes(run["seconds"])])
    columns = ["variant", *SPLITS, "ood_test as loaded", "11-12 functions as loaded", "training time"]
    lines.append(markdown_table(rows, columns))
    lines += [
        "",
        "Accuracy per depth (training depths: " + ", ".join(map(str, split_depths(task)["train"])) + "):",
        "",
    ]
    rows = []
    for variant, run in runs.items():
        accuracy = by_depth(run)
        rows.append([variant, *(f"{accuracy[d]:.3f}" if d in accuracy else "" for d in depths)])
    lines.append(markdown_table(rows, ["variant", *(f"depth {d}" for d in depths)]))
    lines += [
        "",
        "The splits with the fixed step count the variant trained with (the paper's protocol); as loaded: the "
        "export, which runs adaptive steps where they are at least as accurate on ood_valid ("
        + (", ".join(v for v, run in runs.items() if run["as_loaded"]["adaptive_steps"]) or "none")
        + ").",
        "",
    ]
    lines += ["Recipes (batch: the global batch; ponder: ACT's final ponder weight):", ""]
    rows = []
    for variant, run in runs.items():
        cells = [recipe_cell(run["recipe"].get(column, RECORDED_BEFORE.get(column))) for column, _ in RECIPE_COLUMNS]
        rows.append([variant, *cells])
    lines.append(markdown_table(rows, ["variant", *(column for column, _ in RECIPE_COLUMNS)]))
    act = {variant: run["mean_steps"] for variant, run in runs.items() if run.get("mean_steps")}
    for key, what in (("readout_steps", "of the column the classifier reads"), ("mean_steps", "of the real columns")):
        if not act:
            break
        lines += ["", f"ACT: mean halting step {what}, per depth (at most the variant's layers):"]
        rows = []
        for variant, steps in act.items():
            for split, values in steps.items():
                per_depth = {int(d): m for d, m in values.get(f"{key}_by_depth", {}).items()}
                cells = [f"{per_depth[d]:.2f}" if d in per_depth else "" for d in depths]
                rows.append([variant, split, f"{values[key]:.2f}", *cells])
        lines += ["", markdown_table(rows, ["variant", "split", "mean", *(f"depth {d}" for d in depths)])]
    table = {v: {split: run["results"][split]["accuracy"] for split in SPLITS} for v, run in runs.items()}
    beside = beside_the_paper(table, task, args.direction)
    if any(values[f"{split} (paper)"] is not None for values in beside.values() for split in ("iid_test", "ood_test")):
        lines += ["", "Beside the paper's numbers (its Table 1: iid, and the longer compositions as ood_test; – where "
                  "it has none):", ""]  # fmt: skip
        columns = list(next(iter(beside.values())))
        rows = [[variant, *("–" if values[c] is None else f"{values[c]:.3f}" for c in columns)]
                for variant, values in beside.items()]  # fmt: skip
        lines.append(markdown_table(rows, ["variant", *columns]))
    unfit = [variant for variant, run in runs.items() if run["results"]["iid_test"]["accuracy"] < FIT]
    if unfit:
        lines += ["", f"Below {FIT} on iid_test (learning curves in curves.png): " + ", ".join(unfit) + "."]
    budgets = {variant: run["budget"] for variant, run in runs.items() if run.get("budget")}
    if budgets:
        lines += ["", "Past the recipe's steps (`compare.py --budget_steps`: the same run continued at its constant "
                  "learning rate; time: the recipe run's and the continuation's; in curves.png):", ""]  # fmt: skip
        rows = []
        for variant, budget in budgets.items():
            last = [budget["curve"][split][-1] if budget["curve"]["eval_step"] else None for split in SPLITS]
            rows.append([variant, f"{budget['recipe_steps']:,}", f"{budget['steps']:,}", budget_cell(budget),
                         *("–" if accuracy is None else f"{accuracy:.3f}" for accuracy in last)])  # fmt: skip
        columns = ["variant", "recipe steps", "steps so far", f"iid_test >= {FIT}",
                   *(f"{split} (last evaluation)" for split in SPLITS)]  # fmt: skip
        lines.append(markdown_table(rows, columns))
    text = "\n".join(lines) + "\n"
    with open(path, "w") as f:
        f.write(text)
    return text


def budget_cell(budget: dict) -> str:
    """A continuation past the recipe's steps in a phrase: "fits at step S (X samples, Y min)" (the first evaluation
    with iid_test >= FIT; the run ended there), else "not yet at step S (X samples, Y min)"."""
    if budget["fits_at_step"] is not None:
        step = budget["fits_at_step"]
        return f"fits at step {step:,} ({step * budget['batch']:,} samples, {minutes(budget['training_seconds'])})"
    return (
        f"not yet at step {budget['steps']:,} ({budget['samples']:,} samples, {minutes(budget['training_seconds'])})"
    )


def beside_the_paper(table: dict, task: str, direction: str | None) -> dict:
    """The comparison's accuracies with the paper's beside them.

    Args:
        table: `{variant: {split: accuracy}}`, as `compare_<task>[_<direction>].json` holds it.
        task: the comparison's task; the paper's numbers are CTL's (`PAPER_CTL`).
        direction: CTL's direction (None: forward, CTL's default).

    Returns:
        `{variant: {"iid_test": ours, "iid_test (paper)": ..., "ood_valid": ours, "ood_test": ours,
        "ood_test (paper)": ...}}`, the paper's None where it has no number (it reports no ood_valid).
    """
    paper = PAPER_CTL.get(direction or "forward", {}) if task == "ctl" else {}
    rows = {}
    for variant, accuracy in table.items():
        iid, longer = paper.get(variant, (None, None))
        rows[variant] = {"iid_test": accuracy["iid_test"], "iid_test (paper)": iid, "ood_valid": accuracy["ood_valid"],
                         "ood_test": accuracy["ood_test"], "ood_test (paper)": longer}  # fmt: skip
    return rows


def write_paper_figure(path: str, beside: dict, title: str):
    """The paper's comparison redrawn from the data: per variant, our accuracy on each split (solid bars) and the
    paper's on iid and the longer compositions (hatched, beside ours), chance dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = [("iid_test", "C0", ""), ("iid_test (paper)", "C0", "//"), ("ood_valid", "C1", ""),
            ("ood_test", "C2", ""), ("ood_test (paper)", "C2", "//")]  # fmt: skip
    width = 0.8 / len(bars)
    figure, axis = plt.subplots(figsize=(max(6.0, 1.1 * len(beside)), 4.0), constrained_layout=True)
    for index, (column, color, hatch) in enumerate(bars):
        points = [(i, values[column]) for i, values in enumerate(beside.values()) if values[column] is not None]
        if points:
            positions, heights = zip(*points)
            axis.bar([p + (index - (len(bars) - 1) / 2) * width for p in positions], heights, width, color=color,
                     alpha=0.45 if hatch else 1.0, hatch=hatch, edgecolor=color, label=column)  # fmt: skip
    axis.axhline(1 / 8, color="0.5", linestyle=":", linewidth=1, label="chance (CTL: 0.125)")
    axis.set_xticks(range(len(beside)), list(beside), rotation=20)
    axis.set_ylabel("accuracy")
    axis.set_ylim(0, 1.05)
    axis.set_title(title)
    axis.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_paper_comparison(results_file: str) -> tuple[str, str]:
    """From a comparison's data (`compare_<task>[_<direction>].json`), write `..._paper.json` (`beside_the_paper`)
    and `..._paper.png` (`write_paper_figure`) next to it; returns their paths. `make compare` calls it with the
    data it writes; `python training/compare_report.py FILE` redraws them from committed data."""
    base = results_file[: -len(".json")]
    task, _, direction = os.path.basename(base)[len("compare_") :].partition("_")
    with open(results_file) as f:
        beside = beside_the_paper(json.load(f), task, direction or None)
    with open(base + "_paper.json", "w") as f:
        json.dump(beside, f, indent=2)
        f.write("\n")
    title = f"{task}" + (f" {direction}" if direction else "") + ": ours beside the paper's (Table 1)"
    write_paper_figure(base + "_paper.png", beside, title)
    return base + "_paper.json", base + "_paper.png"


def write_plot(path: str, runs: dict, task: str, title: str):
    """Accuracy against depth, one line per variant, the training depths shaded and chance dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7.5, 4.2), constrained_layout=True)
    train_depths = split_depths(task)["train"]
    axis.axvspan(min(train_depths) - 0.5, max(train_depths) + 0.5, color="0.9", label="training depths")
    chance = 1 / len(modeling_ndr.task_label_names(task))
    axis.axhline(chance, color="0.5", linestyle=":", linewidth=1, label=f"chance ({chance:.3f})")
    for variant, run in runs.items():
        accuracy = by_depth(run)
        depths = sorted(accuracy)
        axis.plot(depths, [accuracy[d] for d in depths], marker="o", linewidth=2 if "ndr" in variant else 1.2,
                  label=variant)  # fmt: skip
    axis.set_xlabel("depth (number of composed functions / nesting levels)")
    axis.set_ylabel("accuracy")
    axis.set_ylim(0, 1.02)
    axis.set_title(title)
    axis.legend(fontsize=8, loc="center left", ncol=2)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_curves(path: str, runs: dict, title: str) -> bool:
    """Learning curves of the variants below `FIT` on iid_test: training loss, and iid_test / ood_test accuracy at
    each evaluation; where a run was continued past its recipe's steps (its `budget`), the continuation in lighter
    lines with crosses, the recipe's last step dashed and the evaluation that fits starred. Returns whether there was
    any (no file otherwise; a stale one is removed)."""
    unfit = {v: run for v, run in runs.items() if run["results"]["iid_test"]["accuracy"] < FIT and run["curve"]}
    if not unfit:
        if os.path.isfile(path):
            os.remove(path)
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for variant, run in unfit.items():
        curve, budget = run["curve"], run.get("budget")
        (line,) = loss_axis.plot(curve["step"], curve["loss"], linewidth=1, label=variant)
        color = line.get_color()
        for split, style in (("iid_test", "-"), ("ood_test", ":")):
            points = [(s, a) for s, a in zip(curve["eval_step"], curve[split]) if a is not None]
            if points:
                accuracy_axis.plot(*zip(*points), style, marker=".", color=color, label=f"{variant} {split}")
        if not budget:
            continue
        more = budget["curve"]  # drawn on from the recipe's last point, so the lines join
        loss_axis.plot(curve["step"][-1:] + more["step"], curve["loss"][-1:] + more["loss"], linewidth=1,
                       color=color, alpha=0.5, label=f"{variant}, continued")  # fmt: skip
        for split, style in (("iid_test", "-"), ("ood_test", ":")):
            steps, accuracies = curve["eval_step"][-1:] + more["eval_step"], curve[split][-1:] + more[split]
            points = [(s, a) for s, a in zip(steps, accuracies) if a is not None]
            if points:
                accuracy_axis.plot(*zip(*points), style, marker="x", color=color, alpha=0.5,
                                   label=f"{variant} {split}, continued")  # fmt: skip
        for axis in (loss_axis, accuracy_axis):
            axis.axvline(budget["recipe_steps"], color=color, linestyle="--", linewidth=0.8)
        if budget["fits_at_step"] is not None:
            index = more["eval_step"].index(budget["fits_at_step"])
            accuracy_axis.plot([budget["fits_at_step"]], [more["iid_test"][index]], "*", markersize=12, color=color,
                               label=f"{variant} fits (iid_test >= {FIT})")  # fmt: skip
    loss_axis.set_xlabel("step")
    loss_axis.set_ylabel("training loss")
    loss_axis.legend(fontsize=8)
    accuracy_axis.set_xlabel("step")
    accuracy_axis.set_ylabel("accuracy")
    accuracy_axis.set_ylim(0, 1.02)
    accuracy_axis.legend(fontsize=7)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def results_name(task: str, direction: str | None) -> str:
    """`compare_<task>[_<direction>]`: the file name of the results in `--results_dir`."""
    return f"compare_{task}" + (f"_{direction}" if direction else "")


def table_order(runs: dict) -> dict:
    """The runs in the paper's order (`PAPER_VARIANTS`), others after them in the order they were trained."""
    rank = {variant: index for index, variant in enumerate(PAPER_VARIANTS)}
    return {v: runs[v] for v in sorted(runs, key=lambda v: (rank.get(v, len(rank)), list(runs).index(v)))}


def write_outputs(args, runs: dict, extra: list[str], task: str) -> str:
    """Write every output of the comparison for the variants trained so far (in `table_order`); returns the
    markdown."""
    runs = table_order(runs)
    os.makedirs(args.output_dir, exist_ok=True)
    title = f"{args.preset}" + (f" {args.direction}" if args.direction else "") + ": accuracy per depth"
    text = write_markdown(os.path.join(args.output_dir, "comparison.md"), runs, args, extra, task)
    write_plot(os.path.join(args.output_dir, "comparison.png"), runs, task, title)
    has_curves = write_curves(
        os.path.join(args.output_dir, "curves.png"), runs, f"{args.preset}: below {FIT} on iid_test"
    )
    if args.image:
        os.makedirs(os.path.dirname(os.path.abspath(args.image)), exist_ok=True)
        shutil.copyfile(os.path.join(args.output_dir, "comparison.png"), args.image)
    if args.results_dir:
        os.makedirs(args.results_dir, exist_ok=True)
        base = os.path.join(args.results_dir, results_name(task, args.direction))
        table = {
            v: {
                **{split: run["results"][split]["accuracy"] for split in SPLITS},
                "ood_test_as_loaded": run["as_loaded"]["ood_test"],
                "deeper_as_loaded": run["as_loaded"]["deeper"],
            }
            for v, run in runs.items()
        }
        details = {
            variant: {
                "by_depth": {split: run["results"][split]["by_depth"] for split in SPLITS},
                "as_loaded": run["as_loaded"],
                "training_seconds": run["seconds"],
                "recipe": {k: v for k, v in run["recipe"].items() if k != "data"},
                "mean_ponder_steps": run["mean_steps"],
                "learning_curve": run["curve"],
                **({"budget": run["budget"]} if run.get("budget") else {}),
            }
            for variant, run in runs.items()
        }
        details["_command"] = f"python training/compare.py {' '.join(sys.argv[1:])}"
        for path, data in ((base + ".json", table), (base + "_details.json", details)):
            with open(path, "w") as f:
                json.dump(data, f, indent=2)
                f.write("\n")
        shutil.copyfile(os.path.join(args.output_dir, "comparison.png"), base + ".png")
        curves = base + "_curves.png"
        if has_curves:
            shutil.copyfile(os.path.join(args.output_dir, "curves.png"), curves)
        elif os.path.isfile(curves):
            os.remove(curves)
        write_paper_comparison(base + ".json")
    return text


if __name__ == "__main__":
    for results_file in sys.argv[1:]:
        print(*write_paper_comparison(results_file), sep="\n")
