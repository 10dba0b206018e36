"""Adaptive steps for an exported CTL model: the threshold chosen on `ood_valid` and `iid_check`, and fixed against
adaptive steps per split and depth, on the task's evaluation splits and on compositions deeper than any of them. A
module of the checkout's scripts: `train.py` and the release tooling hand `export_study` to `export_model`.

`export_study` runs `adaptive_study` for a model of the paper's CTL task (not with ACT halting): it evaluates the model
with adaptive steps at every threshold of `THRESHOLDS` on `ood_valid` (never on `ood_test`) and on `iid_check`, fresh
samples of the training distribution, picks one with `choose_threshold` (the best sum of the two accuracies: a
threshold's loss on the training distribution weighs as much as its gain on deeper inputs; chosen on `ood_valid` alone,
as-loaded `iid_test` fell below fixed steps' on some seeds), writes `adaptive_steps=True` with that threshold and the
cap into the exported `config.json`, and reports every split with both the fixed step count and the adaptive steps the
model now runs as loaded.

    from adaptive_study import choose_threshold
    choose_threshold({"0.15": {"accuracy": 1.0, "mean_steps": 13.5}, "0.2": {"accuracy": 1.0, "mean_steps": 12.4}})
    # 0.2
    choose_threshold({"0.15": {"accuracy": 1.0, "mean_steps": 13.5}, "0.2": {"accuracy": 1.0, "mean_steps": 12.4}},
                     iid_check={"0.15": 1.0, "0.2": 0.996})
    # 0.15
"""

import json
import os

import numpy as np

from modeling_ndr.tables import markdown_table
from modeling_ndr.tasks import SMALLEST_N_TRAIN, ctl_compositions, split_depths, task_label_names
from modeling_ndr.training.adaptive import comparison_table
from modeling_ndr.training.evaluation import predict


# The thresholds tried on ood_valid (relative state change per step; the config's default is 0.15).
THRESHOLDS = (0.05, 0.07, 0.1, 0.15, 0.2, 0.3)
# Compositions longer than any split (ood_test stops at 10 functions), drawn with the model's own function tables.
DEEPER_DEPTHS = (11, 12)
DEEPER_SPLIT = "deeper"
# ctl_compositions' default stream seed; the tests draw fresh samples with another one.
DEEPER_SAMPLE_SEED = 1
# Fresh compositions of iid_test's depths (the training distribution), drawn with the model's function tables and a
# stream seed of their own: a threshold's accuracy on them counts as much as on ood_valid (iid_test is never read).
IID_CHECK_SPLIT = "iid_check"
IID_CHECK_SAMPLE_SEED = 2
SELECTION_SPLIT = "ood_valid"
BATCH_SIZE = 1000  # texts per forward pass (a sample's result does not depend on its batch)
SELECTION_RULE = (
    "the threshold of the grid with the best sum of its ood_valid and iid_check accuracies (iid_check: fresh "
    "compositions of iid_test's depths, so that a loss on the training distribution weighs as much as a gain on "
    "deeper inputs); among equal sums the one with the fewest mean ood_valid steps (the larger threshold on a tie); "
    "at most 2 x num_hidden_layers steps; adaptive steps are turned on only if the fixed step count does no better on "
    "ood_valid and on the sum; iid_test and ood_test are never read"
)


def applies(config, run_config: dict) -> bool:
    """Whether the export chooses adaptive steps for this model: the paper's CTL task (generated, not own data) and
    no ACT halting (ACT decides its own steps; the two cannot be combined).

    Args:
        config: the model's `NDRConfig`.
        run_config: the run's record (`run_config.json`).

    Returns:
        True for a CTL model without ACT.
    """
    task = run_config.get("task") or {}
    own_data = task.get("dataset_name") or task.get("train_file")
    return (task.get("task") or "ctl") == "ctl" and not own_data and bool(task) and config.halting != "act"


def choose_threshold(grid: dict, iid_check: dict | None = None) -> float:
    """The selection rule (`SELECTION_RULE`) on a recorded grid.

    Args:
        grid: `{threshold: {"accuracy": a, "mean_steps": s}}` on `ood_valid`; thresholds may be strings (as read from
            JSON) or numbers.
        iid_check (*optional*): `{threshold: accuracy}` on `iid_check`, the training distribution's fresh rows, added
            to each threshold's `ood_valid` accuracy. Without it (exports made before 2026-12-06 recorded none),
            `ood_valid` alone.

    Returns:
        The chosen threshold, a float.
    """
    if not grid:
        raise ValueError("choose_threshold needs at least one threshold")
    values = {float(threshold): result for threshold, result in grid.items()}
    checked = {float(threshold): accuracy for threshold, accuracy in (iid_check or {}).items()}
    score = {threshold: result["accuracy"] + checked.get(threshold, 0.0) for threshold, result in values.items()}
    best = max(score.values())
    tied = [threshold for threshold in values if score[threshold] == best]
    return min(tied, key=lambda threshold: (values[threshold]["mean_steps"], -threshold))


def recorded_choice(selection: dict) -> float:
    """`choose_threshold` on a selection record (`run_config.json`'s `adaptive_steps`), with its iid check where it
    has one."""
    return choose_threshold(selection["grid"], (selection.get(IID_CHECK_SPLIT) or {}).get("grid"))


def fixed_steps_win(selection: dict) -> str | None:
    """Why the fixed step count beats the chosen threshold (the selection's record), or None where it does not: more
    accurate on `ood_valid`, or on the sum of `ood_valid` and `iid_check`."""
    chosen = recorded_choice(selection)
    adaptive = selection["grid"][next(t for t in selection["grid"] if float(t) == chosen)]["accuracy"]
    if adaptive < selection["fixed_accuracy"]:
        return (f"on {SELECTION_SPLIT} they score {selection['fixed_accuracy']:.4f}, the best adaptive threshold "
                f"{adaptive:.4f}")  # fmt: skip
    check = selection.get(IID_CHECK_SPLIT)
    if check:
        checked = check["grid"][next(t for t in check["grid"] if float(t) == chosen)]
        if adaptive + checked < selection["fixed_accuracy"] + check["fixed_accuracy"]:
            return (f"on {SELECTION_SPLIT} and {IID_CHECK_SPLIT} (fresh samples of iid_test's depths) they score "
                    f"{selection['fixed_accuracy']:.4f} + {check['fixed_accuracy']:.4f}, the chosen threshold "
                    f"{adaptive:.4f} + {checked:.4f}")  # fmt: skip
    return None


def evaluation_rows(task: dict, n_eval: int | None = None) -> dict[str, list[dict]]:
    """The rows the study evaluates: `iid_test`, `ood_valid`, `ood_test` of the run's task (its `task_seed`,
    `direction` and `n_eval`), `deeper`, `n_eval` compositions of each of `DEEPER_DEPTHS` functions drawn with the
    same function tables (`ctl_compositions(DEEPER_DEPTHS, n, seed=task_seed, direction=...)`), and `iid_check`,
    `n_eval` fresh compositions of `iid_test`'s depths (the selection's guard for the training distribution).

    Args:
        task: the `task` entry of `run_config.json`.
        n_eval: samples per split and per deeper depth (default: the run's `n_eval`, else 1000).

    Returns:
        `{split: [{"text", "label", "depth"}, ...]}`, labels as class indices of `task_label_names("ctl")`.
    """
    import datasets  # imported when a study runs
    from modeling_ndr import load_task

    seed, direction = task.get("task_seed") or 0, task.get("direction") or "forward"
    n_eval = n_eval or task.get("n_eval") or 1000
    quiet = datasets.is_progress_bar_enabled()  # the study runs after train.py's results: no stray progress bars
    if quiet:
        datasets.disable_progress_bars()
    try:
        data = load_task("ctl", seed=seed, n_train=SMALLEST_N_TRAIN["ctl"], n_eval=n_eval, direction=direction)
    finally:
        if quiet:
            datasets.enable_progress_bars()
    rows = {split: data[split].to_list() for split in ("iid_test", "ood_valid", "ood_test")}
    rows[DEEPER_SPLIT] = ctl_compositions(DEEPER_DEPTHS, n_eval, seed=seed, direction=direction,
                                          sample_seed=DEEPER_SAMPLE_SEED)  # fmt: skip
    iid_depths = split_depths("ctl")["iid_test"]
    rows[IID_CHECK_SPLIT] = ctl_compositions(iid_depths, max(1, n_eval // len(iid_depths)), seed=seed,
                                             direction=direction, sample_seed=IID_CHECK_SAMPLE_SEED)  # fmt: skip
    return rows


def scores(predictions: np.ndarray, labels: np.ndarray, depths: np.ndarray, steps: np.ndarray) -> dict:
    """`{"accuracy", "by_depth", "mean_steps", "mean_steps_by_depth"}` (depth keys are strings, as in JSON)."""
    correct = predictions == labels
    levels = sorted(set(depths.tolist()))
    return {
        "accuracy": float(correct.mean()),
        "by_depth": {str(d): float(correct[depths == d].mean()) for d in levels},
        "mean_steps": float(steps.mean()),
        "mean_steps_by_depth": {str(d): float(steps[depths == d].mean()) for d in levels},
    }


def adaptive_study(model, tokenizer, task: dict, n_eval: int | None = None, thresholds=THRESHOLDS) -> dict:
    """Choose the adaptive threshold on `ood_valid`, set it in `model.config` (with `adaptive_steps=True` and the cap
    `max_adaptive_steps = 2 x num_hidden_layers` unless the config has one), and evaluate every split both ways. If
    the chosen threshold is less accurate on `ood_valid` than the fixed step count, the config is left as it was.

    Args:
        model: an `NDRForSequenceClassification` of the CTL task (it is put in eval mode; its config is changed).
        tokenizer: its tokenizer.
        task: the `task` entry of `run_config.json` (task seed, direction, n_eval).
        n_eval: samples per split (default: the run's, else 1000).
        thresholds: the grid.

    Returns:
        `{"results": {split: {"accuracy", "by_depth", "mean_steps", "mean_steps_by_depth", "fixed_steps": {"num_steps",
        "accuracy", "by_depth"}}}, "selection": {...}}`: the results as the model now loads (adaptive), the fixed
        ones inside each split, and the selection's record (rule, grid on ood_valid, the fixed steps' ood_valid
        accuracy, chosen threshold, cap, data). When fixed steps are kept: `results` is None and the selection's
        `adaptive_threshold` and `max_adaptive_steps` are None.
    """
    model.eval()
    config = model.config
    label_ids = [config.label2id[name] for name in task_label_names("ctl")]
    rows = evaluation_rows(task, n_eval)

    def arrays(split):
        texts = [row["text"] for row in rows[split]]
        labels = np.array([label_ids[row["label"]] for row in rows[split]])
        return texts, labels, np.array([row["depth"] for row in rows[split]])

    before = {name: getattr(config, name) for name in ("adaptive_steps", "adaptive_threshold", "max_adaptive_steps")}
    config.max_adaptive_steps = config.max_adaptive_steps or 2 * config.num_hidden_layers
    grid, iid_grid = {}, {}
    selection_texts, selection_labels, _ = arrays(SELECTION_SPLIT)
    check_texts, check_labels, _ = arrays(IID_CHECK_SPLIT)

    def accuracy(texts, labels, **options):
        predictions = predict(model, tokenizer, texts, BATCH_SIZE, **options)
        return float((predictions.label_ids == labels).mean()), predictions

    for threshold in thresholds:
        correct, adaptive = accuracy(
            selection_texts, selection_labels, adaptive_steps=True, adaptive_threshold=threshold
        )
        grid[str(threshold)] = {"accuracy": correct, "mean_steps": float(adaptive.steps.mean())}
        iid_grid[str(threshold)] = accuracy(
            check_texts, check_labels, adaptive_steps=True, adaptive_threshold=threshold
        )[0]
    fixed_accuracy = accuracy(selection_texts, selection_labels, adaptive_steps=False)[0]
    iid_fixed = accuracy(check_texts, check_labels, adaptive_steps=False)[0]
    chosen = choose_threshold(grid, iid_grid)
    iid_depths = split_depths("ctl")["iid_test"]
    selection = {
        "rule": SELECTION_RULE,
        "split": SELECTION_SPLIT,
        "n_samples": len(rows[SELECTION_SPLIT]),
        "max_adaptive_steps": config.max_adaptive_steps,
        "grid": grid,
        "fixed_accuracy": fixed_accuracy,
        IID_CHECK_SPLIT: {
            "depths": list(iid_depths),
            "n_samples": len(rows[IID_CHECK_SPLIT]),
            "sample_seed": IID_CHECK_SAMPLE_SEED,
            "grid": iid_grid,
            "fixed_accuracy": iid_fixed,
        },
        "adaptive_threshold": chosen,
    }
    if fixed_steps_win(selection):
        # fixed steps do better on ood_valid (e.g. a baseline whose columns never settle), or on ood_valid and the
        # training distribution's fresh samples together: the config stays as it was
        for name, value in before.items():
            setattr(config, name, value)
        return {"results": None, "selection": {**selection, "max_adaptive_steps": None, "adaptive_threshold": None}}
    config.adaptive_steps, config.adaptive_threshold = True, chosen

    results = {}
    for split in (split for split in rows if split != IID_CHECK_SPLIT):
        texts, labels, depths = arrays(split)
        adaptive = predict(model, tokenizer, texts, BATCH_SIZE, adaptive_steps=True)
        fixed = predict(model, tokenizer, texts, BATCH_SIZE, adaptive_steps=False)
        fixed_scores = scores(fixed.label_ids, labels, depths, fixed.steps)
        fixed_scores = {
            "num_steps": int(fixed.steps[0]),
            **{key: fixed_scores[key] for key in ("accuracy", "by_depth")},
        }
        results[split] = {**scores(adaptive.label_ids, labels, depths, adaptive.steps), "fixed_steps": fixed_scores}
    selection = {
        **selection,
        "deeper": {
            "split": DEEPER_SPLIT,
            "depths": list(DEEPER_DEPTHS),
            "n_per_depth": len(rows[DEEPER_SPLIT]) // len(DEEPER_DEPTHS),
            "sample_seed": DEEPER_SAMPLE_SEED,
        },
    }
    return {"results": results, "selection": selection}


def export_study(model, tokenizer, run_config: dict) -> dict | None:
    """`export_model`'s `study`: for a CTL model (`applies`), `adaptive_study` on the run's task; None otherwise.

    Every number is measured again on the exported model, fixed and adaptive, so that re-exporting an export gives
    the same folder."""
    if not applies(model.config, run_config):
        return None
    return adaptive_study(model, tokenizer, run_config["task"])


def export_summary(export_dir: str) -> str | None:
    """What `train.py` prints after the export: the chosen threshold and, per split and per depth, the fixed step
    count against adaptive steps; one line if the selection kept fixed steps; None if no selection was made.

    Args:
        export_dir: the folder `export_model` wrote.

    Returns:
        Markdown text, or None.
    """
    try:
        with open(os.path.join(export_dir, "eval_results.json")) as f:
            results = json.load(f)
        with open(os.path.join(export_dir, "run_config.json")) as f:
            selection = json.load(f).get("adaptive_steps")
    except FileNotFoundError:
        return None
    if isinstance(selection, dict) and selection.get("adaptive_threshold") is None and "fixed_accuracy" in selection:
        return f"The export keeps fixed steps: {fixed_steps_win(selection)}."
    table = comparison_table(results)
    if table is None or not isinstance(selection, dict):
        return None
    fixed_steps = next(values["fixed_steps"]["num_steps"] for values in results.values() if values.get("fixed_steps"))
    per_split = [
        [split, f"{values['fixed_steps']['accuracy']:.4f}", f"{values['accuracy']:.4f}", f"{values['mean_steps']:.1f}"]
        for split, values in results.items()
        if values.get("fixed_steps")
    ]
    guard = f" and {IID_CHECK_SPLIT}, the sum of the two" if IID_CHECK_SPLIT in selection else ""
    summary = (
        f"The export runs adaptive steps as loaded: threshold {selection['adaptive_threshold']} (chosen on "
        f"{selection['split']}{guard}), at most {selection['max_adaptive_steps']} steps. "
        "Its accuracy as loaded is the `adaptive` column, evaluated in float32 (the `fixed` column can differ from "
        "the training-time evaluation above in its last digits where that ran under bf16 autocast)."
    )
    columns = ["split", f"fixed {fixed_steps} steps", "adaptive", "adaptive: mean steps"]
    return "\n\n".join([summary, markdown_table(per_split, columns), table])
