"""A release line's record and state, read and written by `release_line` and `release_cooldown`: the line's
`continuation.json` (the recipe, the warm start and one record per chunk), the samples and compute it has spent, the
release's selection metric, and the points of its curve, drawn by `plot_training_curve`. See `release_line` for what a
line is.
"""

import datetime
import os
import subprocess
import sys


# the training scripts' modules (train.py's `ndr_training`, `processes`), siblings of this folder's scripts: the first
# module of the release tooling that needs them puts their folder on sys.path (release_line, release_cooldown and
# make_model_repos import this one first)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "training"))

from modeling_ndr.training.errors import UsageError, first_line, read_json  # noqa: E402
from ndr_training.preemption import CLOCK_KEY, read_stopped  # noqa: E402
from ndr_training.records import evaluation_history  # noqa: E402


LAST_CHECKPOINT = "last-checkpoint"
# an unfinished cooldown branch (release_cooldown.py): its newest checkpoint and record, resumed by the next branch run
BRANCH_CHECKPOINT = "cooldown-checkpoint"
# the folders of a release that hold training state, kept whenever the release is replaced or re-rendered
STATE_FOLDERS = (LAST_CHECKPOINT, BRANCH_CHECKPOINT)
CONTINUATION_FILE = "continuation.json"
CURVE_FILE = "training_curve.png"
# preset values that change what is written or shown, or how the work is spread over a machine, not what is trained:
# a line resumes whatever they are (the global batch they make is compared instead: `total_batch`)
BOOKKEEPING = {
    "output_dir", "logging_steps", "report_to", "save_total_limit", "per_device_eval_batch_size", "disable_tqdm",
    "dataloader_num_workers", "torch_threads", "use_cpu", "precision", "logging_nan_inf_filter",
    "per_device_train_batch_size", "total_batch_size", "gradient_accumulation_steps",
}  # fmt: skip


def checkpoint_step(folder: str) -> int:
    """The global step of a checkpoint folder (its `trainer_state.json`)."""
    return int(read_json(os.path.join(folder, "trainer_state.json"))["global_step"])


def training_clock(trainer_state: dict) -> float:
    """Seconds of training of the line so far, as the time box records them in every checkpoint."""
    return float(((trainer_state.get("stateful_callbacks") or {}).get(CLOCK_KEY) or {}).get("seconds", 0.0))


def results_at(trainer_state: dict, step: int) -> dict:
    """The nested results (`eval_results.json`'s form) of the evaluation at `step`."""
    for evaluation in evaluation_history(trainer_state):
        if evaluation["step"] == step:
            return {split: values for split, values in evaluation.items() if split != "step"}
    raise ValueError(f"no evaluation at step {step} in the trainer state")


def total_batch(values: dict, processes: int) -> int:
    """Samples per optimizer step of a preset's values launched with `processes` processes."""
    if values.get("total_batch_size"):
        return int(values["total_batch_size"])
    per_device = int(values.get("per_device_train_batch_size", 8))
    return per_device * processes * int(values.get("gradient_accumulation_steps", 1))


def samples_seen(continuation: dict, step: int) -> int:
    """Training samples the line has seen at `step` of its Trainer state: the warm start's and every chunk's."""
    samples = (continuation.get("warm_start") or {}).get("samples", 0)
    for chunk in continuation.get("chunks", []):
        if chunk["start_step"] < step:
            samples += (min(chunk["end_step"], step) - chunk["start_step"]) * chunk["total_batch"]
    return samples


def warm_seconds(warm: dict) -> dict[str, float]:
    """The warm start's training seconds per device (older records hold one number for one device)."""
    seconds = warm.get("seconds") or {}
    return dict(seconds) if isinstance(seconds, dict) else {warm.get("device", "unrecorded"): seconds}


def compute_record(continuation: dict, step: int, clock: float | None = None) -> dict:
    """What the line spent up to `step` (for the card): samples seen, optimizer steps, seconds of training per device
    (the time box's clock: setup and evaluation after the last save excluded), chunks.

    Args:
        continuation: a line's `continuation.json`.
        step: the step of the released checkpoint (the chunks after it are not counted).
        clock: the line's training clock at `step` (its checkpoint's), for the chunk that `step` falls in; without
            it that chunk's time is shared out by steps.

    Returns:
        `{"samples", "steps", "chunks", "seconds": {device: s}, "warm_start": {...} or None}`; the warm start's steps,
        samples, seconds and chunks are included.
    """
    warm = continuation.get("warm_start") or {}
    seconds = warm_seconds(warm)
    chunks = [chunk for chunk in continuation.get("chunks", []) if chunk["start_step"] < step]
    for chunk in chunks:
        if chunk["end_step"] <= step:
            spent = chunk["seconds"]
        elif clock is not None and "start_seconds" in chunk:
            spent = clock - chunk["start_seconds"]
        else:
            spent = chunk["seconds"] * (step - chunk["start_step"]) / max(1, chunk["end_step"] - chunk["start_step"])
        seconds[chunk["device"]] = seconds.get(chunk["device"], 0.0) + spent
    return {
        "samples": samples_seen(continuation, step),
        "steps": step + warm.get("steps", 0),
        "chunks": len(chunks) + warm.get("chunks", 1 if warm.get("steps") else 0),
        "seconds": {device: round(s, 3) for device, s in seconds.items()},  # ms: a test chunk of 2 steps is > 0
        "warm_start": warm or None,
    }


def recipe_difference(line: dict, asked: dict) -> str | None:
    """How the recipe asked for differs from the line's, in words (None: the same, bookkeeping fields aside).

    Args:
        line: the `recipe` of a line's `continuation.json`.
        asked: the recipe of this continuation (`{"preset", "values", "total_batch"}`).
    """
    if line.get("preset") != asked.get("preset"):
        return f"preset {line.get('preset')!r}, not {asked.get('preset')!r}"
    old, new = line.get("values", {}), asked.get("values", {})
    for name in sorted((set(old) | set(new)) - BOOKKEEPING):
        if old.get(name) != new.get(name):
            return (
                f"{name}={old.get(name)!r} in the line's recipe, {new.get(name)!r} in preset {asked['preset']!r} now"
            )
    if line.get("total_batch") != asked.get("total_batch"):  # (the "resume" command is words for the card)
        return f"a total batch of {line.get('total_batch')}, not {asked.get('total_batch')} (another process count?)"
    return None


def chunk_record(
    work_dir: str, checkpoint: str, start_step: int, start_seconds: float, total_batch: int, commit: str | None
) -> dict:
    """The record of the chunk that trained from `start_step` to `checkpoint` with the code of `commit`, read from
    what train.py wrote."""
    run_config = read_json(os.path.join(work_dir, "run_config.json")) or {}
    state = read_json(os.path.join(checkpoint, "trainer_state.json"))
    stopped = read_stopped(work_dir) or {}
    return {
        "start_step": start_step,
        "end_step": state["global_step"],
        "total_batch": total_batch,
        "start_seconds": round(start_seconds, 3),
        # to the millisecond: a short chunk (the tests' 2 steps) rounded to 0.0 s would read as "no chunk"
        "seconds": round(training_clock(state) - start_seconds, 3),
        "device": run_config.get("machine", "unrecorded"),
        "precision": run_config.get("precision"),
        "processes": run_config.get("processes"),
        "finished": stopped.get("time") or datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "stop": stopped.get("reason") or ("horizon" if state["global_step"] >= state.get("max_steps", 0) else None),
        "commit": commit,
    }


def _git_commit() -> str | None:
    """The checkout's commit (`+changes` if tracked files differ from it), None outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                text=True, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+changes" if status.stdout.strip() else "") or None


def metric_split(metric: str) -> str:
    """The split a selection metric is measured on (`ood_valid_accuracy` or `eval_ood_valid_accuracy`: `ood_valid`)."""
    return metric.removeprefix("eval_").removesuffix("_accuracy")


def release_metric(release_dir: str, metric: str) -> float | None:
    """The release's value of `metric` (`<split>_accuracy`, from its `eval_results.json`, with the fixed steps of
    training where the export chose adaptive steps), None if there is none."""
    results = read_json(os.path.join(release_dir, "eval_results.json")) or {}
    values = results.get(metric_split(metric)) or {}
    # a CTL export runs adaptive steps as loaded; the line's evaluations are the fixed steps of training
    return values.get("fixed_steps", values).get("accuracy")


def curve_points(continuation: dict, trainer_state: dict) -> list[dict]:
    """The line's evaluations against samples seen: `[{"samples", "step", "line", "<split>": accuracy}]`, `line`
    the line's id. First the curve its warm start carried (the lines before it, up to the released weights it started
    from; `step` None there), then the warm start's own evaluation, if it recorded one."""
    warm = continuation.get("warm_start") or {}
    line_id = continuation.get("line_id")
    points = [{**point, "step": None} for point in warm.get("curve", [])]
    if warm.get("results"):
        points.append({"samples": warm["samples"], "step": 0, "line": line_id, **warm["results"]})
    for evaluation in evaluation_history(trainer_state):
        step = evaluation["step"]
        point = {"samples": samples_seen(continuation, step), "step": step, "line": line_id}
        point.update({split: values["accuracy"] for split, values in evaluation.items() if split != "step"})
        points.append(point)
    return points


def earlier_curve(line: dict | None, trainer_state: dict | None, run_config: dict) -> list[dict]:
    """The curve behind a release that a line made, for a new line that starts from its weights: `curve_points` of
    that line (with what it carried from before it) up to the released step, or to the start of the cooldown branch
    that made the release (the branch's own evaluations are not in the line's state). [] if `line` (the release's
    `last-checkpoint/` record) is not the line that made the release.

    Args:
        line: the `continuation.json` in the release's `last-checkpoint/` (None: there is none).
        trainer_state: the `trainer_state.json` there.
        run_config: the release's `run_config.json`.
    """
    made = run_config.get("continuation") or {}
    if not line or not trainer_state or not made.get("line_id") or line.get("line_id") != made["line_id"]:
        return []
    end = (run_config.get("cooldown") or {}).get("start_step", made.get("line_step", 0))
    return [point for point in curve_points(line, trainer_state) if point["step"] is None or point["step"] <= end]


def read_line(release_dir: str) -> dict | None:
    """The `continuation.json` of a release's line (None: the release has no `last-checkpoint/`); a one-line
    `UsageError` if `last-checkpoint/` is there without a readable one."""
    last = os.path.join(release_dir, LAST_CHECKPOINT)
    if not os.path.isdir(last):
        return None
    try:
        line = read_json(os.path.join(last, CONTINUATION_FILE))
    except (OSError, ValueError) as error:
        raise UsageError(
            f"{last}: {CONTINUATION_FILE} cannot be read ({first_line(error)}); nothing was changed"
        ) from None
    if not isinstance(line, dict) or "recipe" not in line:
        raise UsageError(f"{last}: {CONTINUATION_FILE} is missing or not a line's record; nothing was changed")
    return line


def new_line(release_dir: str, recipe: dict, warm_start: bool, old_line: dict | None = None) -> dict:
    """The `continuation.json` of a new line: its recipe and, from the release's weights, what they had cost (the
    whole compute record of a release that a line made, else its one run) and the curve that led to them
    (`earlier_curve` of `old_line`, the release's line as `read_line` gave it; None: it has none)."""
    warm = None
    if warm_start:
        if not os.path.isfile(os.path.join(release_dir, "model.safetensors")):
            raise UsageError(f"{release_dir}: no released weights to start from (pass --from_scratch)")
        run_config = read_json(os.path.join(release_dir, "run_config.json")) or {}
        results = read_json(os.path.join(release_dir, "eval_results.json")) or {}
        training = run_config.get("training") or {}
        if previous := run_config.get("continuation"):
            spent = {key: previous[key] for key in ("steps", "samples", "seconds", "chunks")}
        else:
            steps = training.get("steps", 0)
            batch = total_batch(run_config.get("preset_values") or {}, run_config.get("processes") or 1)
            device = run_config.get("machine", "unrecorded")
            spent = {"steps": steps, "samples": steps * batch, "seconds": {device: training.get("seconds", 0.0)},
                     "chunks": training.get("chunks", 1)}  # fmt: skip
        state = old_line and read_json(os.path.join(release_dir, LAST_CHECKPOINT, "trainer_state.json"))
        warm = {
            "from": os.path.basename(os.path.abspath(release_dir)),
            **spent,
            "results": {split: values.get("fixed_steps", values)["accuracy"] for split, values in results.items()},
            # the learning curve so far, so that the card's curve still starts at 0 samples
            "curve": earlier_curve(old_line, state, run_config),
        }
    line_id = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return {"line_id": line_id, "recipe": recipe, "warm_start": warm, "chunks": []}


def plot_training_curve(
    points: list[dict], path=None, released_step: int | None = None, paper: dict | None = None, title: str = ""
):
    """A release line's learning curve: accuracy on each evaluation split against the training samples seen, with
    the released checkpoint and the paper's budget and result marked (`release_line.write_release` puts it on the
    card as `training_curve.png`).

    Args:
        points: `[{"samples": n, "step": s, "<split>": accuracy, ...}]` in order (`line_records.curve_points`); a
            point's optional `line` (the line's id) marks where a new line starts from an earlier line's release.
        path (*optional*): save the figure there.
        released_step (*optional*): the step of the released checkpoint (a marker on each curve).
        paper (*optional*): `{"samples": n, "ood_test": a}`: the paper's training budget (a vertical line) and its
            `ood_test` accuracy (a horizontal line).
        title (*optional*): what the curve is of (e.g. the release's name).

    Returns:
        `matplotlib.figure.Figure`.
    """
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4), layout="constrained")
    splits = [s for s in ("iid_test", "ood_valid", "ood_test") if any(s in p for p in points)]
    styles = {"iid_test": ("tab:gray", ":"), "ood_valid": ("tab:blue", "-"), "ood_test": ("tab:orange", "-")}
    for split in splits:
        xs = [p["samples"] / 1e6 for p in points if p.get(split) is not None]
        ys = [p[split] for p in points if p.get(split) is not None]
        color, style = styles.get(split, (None, "-"))
        axes.plot(xs, ys, style, color=color, label=split, linewidth=1.5)
        released = [p for p in points if p["step"] == released_step and p.get(split) is not None][-1:]
        if released:
            axes.plot([released[0]["samples"] / 1e6], [released[0][split]], "o", color=color)
    # where a line started from the weights another line released (its recipe changed): `points` name their line
    starts = [p["samples"] / 1e6 for before, p in zip(points, points[1:]) if p.get("line") != before.get("line")]
    for i, start in enumerate(starts):
        axes.axvline(start, color="tab:purple", linestyle="-.", linewidth=1,
                     label="a new line from the release" if i == 0 else None)  # fmt: skip
    if paper:
        axes.axvline(paper["samples"] / 1e6, color="tab:green", linestyle="--", linewidth=1)
        axes.axhline(paper["ood_test"], color="tab:green", linestyle=":", linewidth=1)
        axes.annotate(f"the paper: {paper['ood_test']:.2f} ood_test after {paper['samples'] / 1e6:.0f}M samples",
                      (paper["samples"] / 1e6, paper["ood_test"]), textcoords="offset points", xytext=(-6, -14),
                      ha="right", fontsize=8, color="tab:green")  # fmt: skip
    axes.set_xlabel("training samples seen (millions)")
    axes.set_ylabel("accuracy")
    axes.set_ylim(0, 1.02)
    axes.set_xlim(left=0)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    title = (f"{title}: " if title else "") + "learning curve"
    axes.set_title(title + (" (o: the released checkpoint)" if released_step is not None else ""), fontsize=10)
    if path is not None:
        figure.savefig(path, dpi=110)
        plt.close(figure)
    return figure
