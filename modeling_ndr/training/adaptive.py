"""Adaptive steps on an exported model's card: the fixed step count against adaptive steps, per split and depth,
where the export chose adaptive steps (the checkout's `training/adaptive_study.py` chooses them for CTL models, as
`train.py` exports them: `export_model(..., study=export_study)`).
"""

from ..tables import markdown_table


def comparison_table(eval_results: dict) -> str | None:
    """Markdown table, per split and depth, of the fixed step count's accuracy against adaptive steps' accuracy and
    mean steps (printed by `train.py`, shown on the model card); None when the results hold no fixed-steps entries.

    Args:
        eval_results: `{split: {"accuracy", "by_depth", "mean_steps_by_depth", "fixed_steps": {...}}}`.

    Returns:
        The table, or None.
    """
    splits = {split: values for split, values in eval_results.items() if values.get("fixed_steps")}
    if not splits:
        return None
    fixed_steps = sorted({values["fixed_steps"]["num_steps"] for values in splits.values()})
    fixed_name = f"fixed {fixed_steps[0]} steps" if len(fixed_steps) == 1 else "fixed steps"
    rows = []
    for split, values in splits.items():
        for depth in sorted(values["by_depth"], key=int):
            fixed, accuracy = values["fixed_steps"]["by_depth"][depth], values["by_depth"][depth]
            steps = values.get("mean_steps_by_depth", {}).get(depth)
            rows.append([split, depth, f"{fixed:.3f}", f"{accuracy:.3f}", "" if steps is None else f"{steps:.1f}"])
    return markdown_table(rows, ["split", "depth", fixed_name, "adaptive", "adaptive: mean steps"])


def card_values(config, run_config: dict, eval_results: dict) -> dict | None:
    """What the model card says about adaptive steps: None unless the model runs them as loaded and the export chose
    them (`run_config["adaptive_steps"]`, written by `export_model`).

    Args:
        config: the exported model's config.
        run_config: the run's record, with the selection under `adaptive_steps`.
        eval_results: the exported results (as loaded, with `fixed_steps`).

    Returns:
        `{"threshold", "max_steps", "fixed_steps", "rule", "iid_check", "grid", "table", "deeper", "evaluate_args"}` or
        None.
    """
    selection = run_config.get("adaptive_steps")
    if not config.adaptive_steps or not isinstance(selection, dict) or comparison_table(eval_results) is None:
        return None
    task = run_config.get("task") or {}
    deeper = selection["deeper"]
    arguments = ["--task ctl", f"--direction {task.get('direction') or 'forward'}"]
    if task.get("task_seed"):
        arguments.append(f"--task_seed {task['task_seed']}")
    if deeper["n_per_depth"] != 1000:
        arguments.append(f"--n_eval {deeper['n_per_depth']}")
    arguments.append("--depths " + " ".join(str(depth) for depth in deeper["depths"]))
    grid = sorted(selection["grid"].items(), key=lambda item: float(item[0]))
    return {
        "threshold": config.adaptive_threshold,
        "max_steps": config.max_adaptive_steps or 2 * config.num_hidden_layers,
        "fixed_steps": config.eval_num_hidden_layers or config.num_hidden_layers,
        "rule": selection["rule"],
        "selection_samples": selection["n_samples"],
        "iid_check": selection.get("iid_check"),
        "grid": ", ".join(f"{t}: {r['accuracy']:.3f} / {r['mean_steps']:.1f}" for t, r in grid),
        "table": comparison_table(eval_results),
        "deeper": deeper,
        "evaluate_args": " ".join(arguments),
    }
