"""Releases that keep training: a release folder carries the state of its training line, and `continue_release`
resumes that line for a time box wherever compute is free (a CPU between other jobs, a GPU's short window), so separate
stretches of compute add up to one run.

A release folder (`hub_cards/models/ndr-<task>/`, the folder its Hub repository holds):

- `config.json`, `model.safetensors`, the tokenizer files, `README.md`, `eval_results.json`, `run_config.json`: the
  release, the checkpoint of the line with the best `ood_valid` so far (the paper's selection rule; the latest on
  ties). Its card carries the compute record (samples seen, optimizer steps, wall hours per device, chunks) and
  `training_curve.png`, `ood_valid` and `ood_test` against samples seen with the paper's budget marked.
- `last-checkpoint/`: the newest state of the line, in Trainer's `hub_strategy="checkpoint"` layout (weights,
  optimizer, scheduler, RNG states of every process, `trainer_state.json` with every evaluation so far), plus
  `continuation.json`: the recipe, the warm start and one record per chunk. Files over 16 MiB are stored in parts
  (`NAME.part-000`, ...), joined again when the line resumes.

One continuation (`continue_release`):

1. locks the release (`release_lock`): a second continuation of it, or a rebuild of the folder, is refused in one
   line; so is a continuation whose work folder a training still holds (one left running by a killed continuation);
2. checks `last-checkpoint/`: complete (copied aside and opened), and of the recipe asked for; otherwise one line
   naming the problem or the difference, and nothing changes;
3. adopts a chunk of this line and recipe left in the work folder by a continuation killed after its training;
4. runs the launch command for the time box (`--max_wall_minutes`): it resumes the checkpoint, evaluates at the
   recipe's evaluation steps, and stops with a checkpoint (exit 75), or finishes the line's horizon (`max_steps`);
5. if the line's best `ood_valid` (the latest on ties) is at least the release's and in this chunk, releases that
   checkpoint; otherwise the release stays as it was;
6. makes the newest checkpoint the new `last-checkpoint/`, always.

Every folder is replaced whole (`atomic.atomic_folder`): an interruption at any moment, `kill -9` included, leaves
the previous release loadable and the previous checkpoint resumable, and a chunk whose training had finished is
adopted by the next continuation (from the work folder), so no step is lost or counted twice.

The line is the release's, whatever the device: `make gpu-release` continues a line that a CPU started (faster, with
the same global batch), and a new line starts only when asked (`switch_recipe`) or when there is none.
"""

import contextlib
import datetime
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import zipfile
import zlib

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .atomic import atomic_folder, clean_leftovers
from .checkpoints import checkpoint_problem, latest_complete_checkpoint
from .errors import UsageError, first_line
from .locking import OutputDirLock, lock_output_dir
from .preemption import CLOCK_KEY, EXIT_STOPPED, STOP_SIGNALS, read_stopped
from .records import read_json


logger = logging.getLogger(__name__)

LAST_CHECKPOINT = "last-checkpoint"
CONTINUATION_FILE = "continuation.json"
CURVE_FILE = "training_curve.png"
# the largest file a release keeps whole (the machines that hand back a GPU run's files take at most 16 MiB each)
MAX_FILE_BYTES = 16 * 2**20
PART = ".part-"
# preset values that change what is written or shown, or how the work is spread over a machine, not what is trained:
# a line resumes whatever they are (the global batch they make is compared instead: `total_batch`)
BOOKKEEPING = {
    "output_dir", "logging_steps", "report_to", "save_total_limit", "per_device_eval_batch_size", "disable_tqdm",
    "dataloader_num_workers", "torch_threads", "use_cpu", "precision", "logging_nan_inf_filter",
    "per_device_train_batch_size", "total_batch_size", "gradient_accumulation_steps",
}  # fmt: skip


# ------------------------------------------------------------------------------------------ files over 16 MiB


def split_large_files(folder: str, max_bytes: int = MAX_FILE_BYTES) -> list[str]:
    """Store every file of `folder` larger than `max_bytes` as parts `NAME.part-000`, `NAME.part-001`, ... of at most
    `max_bytes` each (the file itself is removed).

    Args:
        folder: a checkpoint folder.
        max_bytes: the largest part.

    Returns:
        The names of the files that were split.
    """
    split = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not os.path.isfile(path) or os.path.getsize(path) <= max_bytes:
            continue
        with open(path, "rb") as source:
            index = 0
            while block := source.read(max_bytes):
                with open(f"{path}{PART}{index:03d}", "wb") as part:
                    part.write(block)
                index += 1
        os.remove(path)
        split.append(name)
    return split


def join_split_files(folder: str) -> list[str]:
    """Join the parts that `split_large_files` wrote back into their files (the parts are removed).

    Args:
        folder: a checkpoint folder.

    Returns:
        The names of the files that were joined.
    """
    parts: dict[str, list[str]] = {}
    for name in os.listdir(folder):
        if match := re.fullmatch(rf"(.+){re.escape(PART)}(\d{{3}})", name):
            parts.setdefault(match[1], []).append(name)
    for name, pieces in parts.items():  # a lost part: nothing is joined
        if missing := [f"{name}{PART}{i:03d}" for i in range(len(pieces)) if f"{name}{PART}{i:03d}" not in pieces]:
            raise ValueError(f"{missing[0]} is missing (a part of a file kept in parts)")
    for name, pieces in parts.items():
        with open(os.path.join(folder, name), "wb") as target:
            for piece in sorted(pieces):
                with open(os.path.join(folder, piece), "rb") as source:
                    shutil.copyfileobj(source, target)
        for piece in pieces:
            os.remove(os.path.join(folder, piece))
    return sorted(parts)


# ---------------------------------------------------------------------------------------- reading a line's state


def checkpoint_step(folder: str) -> int:
    """The global step of a checkpoint folder (its `trainer_state.json`)."""
    return int(read_json(os.path.join(folder, "trainer_state.json"))["global_step"])


def training_clock(trainer_state: dict) -> float:
    """Seconds of training of the line so far, as the time box records them in every checkpoint."""
    return float(((trainer_state.get("stateful_callbacks") or {}).get(CLOCK_KEY) or {}).get("seconds", 0.0))


def evaluation_history(trainer_state: dict) -> list[dict]:
    """Every evaluation of a line: `[{"step": s, "<split>": {"accuracy": a, "by_depth": {d: a}}, ...}]` by step.

    Trainer logs each evaluation split in an entry of its own (`eval_<split>_accuracy`, `..._accuracy_depth_<d>`);
    the entries of one step are merged.

    Args:
        trainer_state: the content of a checkpoint's `trainer_state.json`.
    """
    by_step: dict[int, dict] = {}
    for entry in trainer_state.get("log_history", []):
        for key, value in entry.items():
            if match := re.fullmatch(r"eval_(\w+?)_accuracy(?:_depth_(\d+))?", key):
                split = by_step.setdefault(entry["step"], {}).setdefault(match[1], {"accuracy": None, "by_depth": {}})
                if match[2] is None:
                    split["accuracy"] = value
                else:
                    split["by_depth"][match[2]] = value
    return [{"step": step, **splits} for step, splits in sorted(by_step.items())]


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
        "seconds": {device: round(s, 1) for device, s in seconds.items()},
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


# ---------------------------------------------------------------------------------------------- one continuation


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
        "start_seconds": round(start_seconds, 1),
        "seconds": round(training_clock(state) - start_seconds, 1),
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


def write_last_checkpoint(release_dir: str, checkpoint: str, continuation: dict) -> str:
    """Make `checkpoint` (a complete Trainer checkpoint) the release's `last-checkpoint/`, with `continuation`."""
    target = os.path.join(release_dir, LAST_CHECKPOINT)
    with atomic_folder(target) as staging:
        # the modeling code that save_pretrained adds is left out (copies would drift from the package's)
        shutil.copytree(checkpoint, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.py"))
        with open(os.path.join(staging, CONTINUATION_FILE), "w") as f:
            json.dump(continuation, f, indent=2)
        split_large_files(staging)
    return target


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
    """The line's evaluations against samples seen: `[{"samples", "step", "<split>": accuracy}]` (the warm start's
    own evaluation first, if it recorded one)."""
    points = []
    warm = continuation.get("warm_start") or {}
    if warm.get("results"):
        points.append({"samples": warm["samples"], "step": 0, **warm["results"]})
    for evaluation in evaluation_history(trainer_state):
        point = {"samples": samples_seen(continuation, evaluation["step"]), "step": evaluation["step"]}
        point.update({split: values["accuracy"] for split, values in evaluation.items() if split != "step"})
        points.append(point)
    return points


def write_release(
    release_dir: str,
    checkpoint: str,
    trainer_state: dict,
    continuation: dict,
    run_config: dict,
    publish,
    paper: dict | None = None,
) -> str:
    """Release `checkpoint`: its hub-ready files with the compute record on the card, the curve, and the line's
    `last-checkpoint/` carried over; the folder is replaced whole.

    Args:
        release_dir: the release folder.
        checkpoint: the checkpoint to release (the line's best on the selection metric).
        trainer_state: the line's newest `trainer_state.json` (every evaluation, for the curve).
        continuation: the line's `continuation.json`.
        run_config: the run record of the chunk (`run_config.json` of the work folder).
        publish: `publish(checkpoint, staging, eval_results, run_config)` writes the released files (weights,
            config, tokenizer, card, results, record) of `checkpoint` into the folder `staging`: the caller decides
            the hub id of the card and the size budget (`export.export_model` does the work).
        paper: `{"samples": s, "ood_test": a}`, the paper's budget and result, marked on the curve.

    Returns:
        `release_dir`.
    """
    from ..plotting import plot_training_curve

    step = checkpoint_step(checkpoint)
    clock = training_clock(read_json(os.path.join(checkpoint, "trainer_state.json")))
    record = compute_record(continuation, step, clock)
    run_config = {
        **run_config,
        # this line's own training up to the released step; the compute record below adds what came before it
        "training": {
            "seconds": round(clock, 1),
            "steps": step,
            "finished": datetime.datetime.now().astimezone().isoformat(timespec="minutes"),
        },
        "continuation": {
            **record,
            "line_id": continuation.get("line_id"),
            "line_step": step,
            "recipe": continuation["recipe"]["preset"],
            "resume": continuation["recipe"].get("resume"),
            "curve": CURVE_FILE,
            "paper_samples": (paper or {}).get("samples"),
        },
    }
    with tempfile.TemporaryDirectory() as scratch, atomic_folder(release_dir) as staging:
        model_dir = os.path.join(scratch, "model")  # the checkpoint without its optimizer states
        os.makedirs(model_dir)
        for name in os.listdir(checkpoint):
            if name.endswith((".json", ".safetensors")):
                shutil.copy2(os.path.join(checkpoint, name), model_dir)
        publish(model_dir, staging, results_at(trainer_state, step), run_config)
        plot_training_curve(curve_points(continuation, trainer_state), os.path.join(staging, CURVE_FILE),
                            released_step=step, paper=paper, title=os.path.basename(release_dir))  # fmt: skip
        last = os.path.join(release_dir, LAST_CHECKPOINT)
        if os.path.isdir(last):
            shutil.copytree(last, os.path.join(staging, LAST_CHECKPOINT))
    return release_dir


def continue_release(
    release_dir: str,
    work_dir: str,
    command: list[str],
    minutes: float | None,
    recipe: dict,
    publish,
    warm_start: bool = True,
    switch_recipe: bool = False,
    paper: dict | None = None,
    chunk_steps: int | None = None,
    **run_kwargs,
) -> dict:
    """Resume a release's training line for `minutes`, then keep its newest state and, if it improved, release it.

    Args:
        release_dir: the release folder (`last-checkpoint/` inside it holds the line; none: a new line starts).
        work_dir: train.py's `--output_dir` for the chunk (the command must name the same folder).
        command: the train.py launch (`--preset` and `--output_dir` included); `--max_wall_minutes` and either
            `--resume_from_checkpoint` or (a new line from the release's weights) `--model_name_or_path` are added.
        minutes: the time box of the chunk (train.py stops with a checkpoint at the first step after it; None: none).
        recipe: `{"preset": name, "values": the preset's values, "total_batch": samples per optimizer step,
            "resume": the command that continues the line, for the card}`.
        publish: `publish(checkpoint, staging, eval_results, run_config)` writes a release (`write_release`).
        warm_start: a new line starts from the release's weights (False: from a new model).
        switch_recipe: a line of another recipe is replaced by a new line of this one (otherwise refused).
        paper: see `write_release`.
        chunk_steps: stop the chunk after this many optimizer steps instead (`--max_chunk_steps`; with `minutes`
            too, whichever comes first); `minutes=None` and `chunk_steps=None` train to the line's horizon.
        **run_kwargs: for `subprocess.run` (`env`, `cwd`).

    Returns:
        A summary: `{"step", "samples", "released": bool, "metric", "release_value", "line_best", "finished"}`.
    """
    limits = (["--max_wall_minutes", f"{minutes:g}"] if minutes else []) + (
        ["--max_chunk_steps", str(chunk_steps)] if chunk_steps else []
    )
    with release_lock(release_dir):
        return _continue(release_dir, work_dir, command + limits, recipe, publish, warm_start, switch_recipe, paper,
                         run_kwargs)  # fmt: skip


@contextlib.contextmanager
def release_lock(release_dir: str):
    """Hold the lock of a release folder: one continuation (or rebuild) of it at a time, in one line otherwise.

    The lock sits beside the folder (`.NAME.lock/`; the folder itself is replaced whole), so every writer of the
    release meets there, whichever work folder or device it uses."""
    name = os.path.basename(os.path.abspath(release_dir))
    lock = OutputDirLock(os.path.join(os.path.dirname(os.path.abspath(release_dir)), f".{name}.lock"), name)
    try:
        lock.acquire()
    except UsageError as error:
        holder = str(error).split("is in use by ", 1)[-1]
        raise UsageError(f"{name} is already being continued or rebuilt ({holder})") from None
    try:
        yield
    finally:
        lock.release()


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


def staged_checkpoint(last: str, work_dir: str) -> str:
    """A whole, checked copy of `last-checkpoint/` beside the work folder (its parts joined); a one-line
    `UsageError` (and no copy) if it is not a complete Trainer checkpoint."""
    parent = os.path.dirname(os.path.abspath(work_dir))
    os.makedirs(parent, exist_ok=True)
    staged = tempfile.mkdtemp(prefix=".line-", dir=parent)
    try:
        shutil.copytree(last, staged, dirs_exist_ok=True)
        join_split_files(staged)
        chunks = (read_json(os.path.join(staged, CONTINUATION_FILE)) or {}).get("chunks") or [{}]
        os.remove(os.path.join(staged, CONTINUATION_FILE))
        problem = checkpoint_problem(staged) or _archive_problem(staged, chunks[-1].get("processes"))
        if problem is None:
            checkpoint_step(staged)  # global_step is there
    except (OSError, ValueError, KeyError, TypeError) as error:
        problem = first_line(error)
    if problem:
        shutil.rmtree(staged, ignore_errors=True)
        raise UsageError(f"{last}: {problem}; the release and its last-checkpoint/ were left as they are")
    return staged


def _archive_problem(folder: str, processes: int | None) -> str | None:
    """What keeps the `torch.save` archives of a checkpoint (optimizer, scheduler, RNG states) from loading, read whole
    (`checkpoint_problem` reads only their directories, which a file cut or changed inside keeps), and a missing RNG
    state of the `processes` that saved it (Trainer would resume without it, silently not exactly); None if none."""
    rng = ["rng_state.pth"] if processes == 1 else [f"rng_state_{i}.pth" for i in range(processes or 0)]
    for name in rng:
        if not os.path.isfile(os.path.join(folder, name)):
            return f"{name} is missing"
    for name in sorted(os.listdir(folder)):
        if name.endswith((".pt", ".pth")):
            try:
                with zipfile.ZipFile(os.path.join(folder, name)) as archive:
                    damaged = archive.testzip()  # every member read, its CRC checked
            except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as error:
                return f"{name} cannot be read ({first_line(error)})"
            if damaged:
                return f"{name} cannot be read (its {damaged} is damaged)"
    return None


def _check_work_dir_free(work_dir: str) -> None:
    """Refuse in one line if a training holds the work folder (one a killed continuation left running)."""
    try:
        with lock_output_dir(work_dir, flag="the work folder"):
            pass
    except UsageError as error:
        raise UsageError(f"{error}; nothing was changed") from None


def _continue(release_dir, work_dir, command, recipe, publish, warm_start, switch_recipe, paper, run_kwargs):
    name = os.path.basename(os.path.abspath(release_dir))
    last = os.path.join(release_dir, LAST_CHECKPOINT)
    for folder in (release_dir, last):  # finish or undo a replacement that a kill cut in two
        clean_leftovers(folder)
    _check_work_dir_free(work_dir)
    continuation = read_line(release_dir)
    if continuation and (difference := recipe_difference(continuation["recipe"], recipe)):
        if not switch_recipe:
            raise UsageError(f"{name}: its last-checkpoint/ belongs to another recipe ({difference}); nothing was "
                             "changed (--switch_recipe starts a new line of this recipe)")  # fmt: skip
        logger.warning("%s: a new line of %s replaces the line of %s (%s)", name, recipe["preset"],
                       continuation["recipe"]["preset"], difference)  # fmt: skip
        continuation = None
    if continuation and continuation.get("finished"):
        raise UsageError(f"{name}: its line reached its horizon (max_steps); nothing was changed (a new line: a "
                         "preset with a later horizon and --switch_recipe)")  # fmt: skip
    staged = staged_checkpoint(last, work_dir) if continuation else None
    try:
        line_step = checkpoint_step(staged) if staged else 0
        # a chunk of this line and recipe that trained after the last promotion (its continuation was killed)
        pending = _pending(work_dir)
        newest = latest_complete_checkpoint(work_dir)
        if pending and newest and _adoptable(pending, continuation, recipe, line_step, checkpoint_step(newest)):
            logger.warning("%s: adopting %s, trained by a continuation that was interrupted", name, newest)
            if continuation and continuation.get("branches"):  # recorded after the chunk started (a cooldown)
                pending["branches"] = continuation["branches"]
            continuation, released = _promote(release_dir, work_dir, newest, pending, publish, paper)
            if continuation.get("finished"):  # the adopted chunk reached the horizon: no step past it
                return _summary(release_dir, newest, continuation, released, recipe)
            shutil.rmtree(staged, ignore_errors=True)
            staged = staged_checkpoint(last, work_dir)
            line_step = checkpoint_step(staged)

        # the chunk starts from last-checkpoint/ (or the release's weights, or nothing), in a clean work folder
        clear_work_dir(work_dir)
        start = []
        if staged:
            resume, staged = resume_in(work_dir, staged), None
            start = ["--resume_from_checkpoint", resume]
            start_seconds = training_clock(read_json(os.path.join(resume, "trainer_state.json")))
        else:
            continuation = new_line(release_dir, recipe, warm_start)
            start_seconds = 0.0
            if warm_start:
                start = ["--model_name_or_path", os.path.relpath(release_dir, run_kwargs.get("cwd") or os.getcwd())]
    finally:
        if staged:
            shutil.rmtree(staged, ignore_errors=True)
    pending = {**continuation, "pending": {"start_step": line_step, "start_seconds": start_seconds,
                                           "commit": _git_commit()}}  # fmt: skip
    with open(os.path.join(work_dir, CONTINUATION_FILE), "w") as f:
        json.dump(pending, f, indent=2)

    chunk_command = command + start
    logger.info("%s: training from step %d: %s", name, line_step, " ".join(chunk_command))
    newest = trained_checkpoint(f"{name}: the chunk", work_dir, run_chunk(chunk_command, **run_kwargs), line_step)
    continuation, released = _promote(release_dir, work_dir, newest, pending, publish, paper)
    return _summary(release_dir, newest, continuation, released, recipe)


def _summary(release_dir: str, newest: str, continuation: dict, released: bool, recipe: dict) -> dict:
    """What `continue_release` returns after the chunk that ended at `newest` was promoted."""
    state = read_json(os.path.join(newest, "trainer_state.json"))
    metric = recipe["values"].get("metric_for_best_model", "ood_valid_accuracy")
    return {
        "step": state["global_step"],
        "samples": samples_seen(continuation, state["global_step"]),
        "released": released,
        "metric": metric,
        "release_value": release_metric(release_dir, metric),
        "line_best": state.get("best_metric"),
        "finished": continuation.get("finished", False),
    }


def clear_work_dir(work_dir: str) -> None:
    """Empty a work folder of what a chunk before left there (checkpoints, export, stop record, pending record); the
    run's logs and records stay. The folder is made if there is none."""
    for entry in os.listdir(work_dir) if os.path.isdir(work_dir) else ():
        if entry.startswith(PREFIX_CHECKPOINT_DIR) or entry in ("export", "stopped.json", CONTINUATION_FILE):
            path = os.path.join(work_dir, entry)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
    os.makedirs(work_dir, exist_ok=True)


def resume_in(work_dir: str, staged: str) -> str:
    """Move a staged copy of `last-checkpoint/` (`staged_checkpoint`) into the work folder as the checkpoint the
    chunk resumes (`checkpoint-<its step>`); returns its path."""
    resume = os.path.join(work_dir, f"{PREFIX_CHECKPOINT_DIR}-{checkpoint_step(staged)}")
    os.rename(staged, resume)
    return resume


def trained_checkpoint(what: str, work_dir: str, status: int, start_step: int) -> str:
    """The newest checkpoint a chunk (or branch) that started at `start_step` left in `work_dir`; a `RuntimeError` if
    the run failed (`status` neither 0 nor 75, and no stop record) or saved no checkpoint past its start."""
    newest = latest_complete_checkpoint(work_dir)
    if status not in (0, EXIT_STOPPED) and read_stopped(work_dir) is None:
        raise RuntimeError(f"{what} failed (exit status {status}); the release and its last-checkpoint/ are "
                           "unchanged")  # fmt: skip
    if newest is None or checkpoint_step(newest) <= start_step:
        raise RuntimeError(f"{what} saved no checkpoint past step {start_step} (a time box shorter than a step?); "
                           "the release and its last-checkpoint/ are unchanged")  # fmt: skip
    return newest


def run_chunk(command: list[str], **run_kwargs) -> int:
    """Run a chunk's training and return its exit status, passing SIGTERM and SIGUSR1 on to it and waiting for it.

    A continuation stopped from outside (a session's time limit, a scheduler's preemption signal) would otherwise die
    at once and leave the chunk it trained unpromoted: train.py stops with a checkpoint when signalled (exit 75), and
    the continuation then releases and keeps it as after a time box. Signals sent to the whole process group reach
    the training twice, which stops it once."""
    process = subprocess.Popen(command, **run_kwargs)

    def forward(signum, frame):
        if process.poll() is None:
            process.send_signal(signum)

    previous = {}
    for name in STOP_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:
            try:
                previous[number] = signal.signal(number, forward)
            except ValueError:  # not the main thread: the signals keep their handlers
                break
    try:
        return process.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _pending(work_dir: str) -> dict | None:
    """The record a continuation leaves in its work folder while it trains (None if there is none, or unreadable)."""
    try:
        pending = read_json(os.path.join(work_dir, CONTINUATION_FILE))
    except (OSError, ValueError):
        return None
    return pending if isinstance(pending, dict) and "pending" in pending and "recipe" in pending else None


def _adoptable(pending: dict, continuation: dict | None, recipe: dict, line_step: int, newest_step: int) -> bool:
    """Whether a chunk left in the work folder continues the release's line as it is now, with the recipe asked for:
    the same line (or, for a new line, none yet), the same recipe, starting where the line stands, and past it."""
    same_line = pending.get("line_id") == continuation.get("line_id") if continuation else not pending.get("chunks")
    return (
        same_line
        and recipe_difference(pending["recipe"], recipe) is None
        and pending["pending"].get("start_step") == line_step
        and newest_step > line_step
    )


def new_line(release_dir: str, recipe: dict, warm_start: bool) -> dict:
    """The `continuation.json` of a new line: its recipe and, from the release's weights, what they had cost (the
    whole compute record of a release that a line made, else its one run)."""
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
        warm = {
            "from": os.path.basename(os.path.abspath(release_dir)),
            **spent,
            "results": {split: values.get("fixed_steps", values)["accuracy"] for split, values in results.items()},
        }
    line_id = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return {"line_id": line_id, "recipe": recipe, "warm_start": warm, "chunks": []}


def _promote(release_dir, work_dir, newest, pending, publish, paper) -> tuple[dict, bool]:
    """After a chunk: if the line's best (the latest on ties) is in this chunk and at least the release's, it is
    released; then the chunk's newest checkpoint becomes `last-checkpoint/`. Returns the line's new
    `continuation.json` and whether this chunk released."""
    start = pending.pop("pending")
    record = chunk_record(work_dir, newest, start["start_step"], start["start_seconds"],
                          pending["recipe"]["total_batch"], start.get("commit"))  # fmt: skip
    continuation = {**pending, "chunks": [*pending["chunks"], record]}
    state = read_json(os.path.join(newest, "trainer_state.json"))
    if state["global_step"] >= state.get("max_steps", float("inf")):
        continuation["finished"] = True
    metric = pending["recipe"]["values"].get("metric_for_best_model", "ood_valid_accuracy")
    best, best_dir = state.get("best_metric"), state.get("best_model_checkpoint")
    current = release_metric(release_dir, metric)
    # Trainer's best of the whole line; its folder is here only if this chunk saved it
    best_dir = best_dir and os.path.join(work_dir, os.path.basename(best_dir))
    in_chunk = bool(best_dir and os.path.isdir(best_dir) and checkpoint_step(best_dir) > start["start_step"])
    released = in_chunk and best is not None and (current is None or best >= current)
    record["released_step"] = checkpoint_step(best_dir) if released else None
    # the release first: were the process killed before last-checkpoint/ is written, the next continuation adopts
    # this chunk again from the work folder (where the released checkpoint still is), and releases it again
    if released:
        run_config = read_json(os.path.join(work_dir, "run_config.json")) or {}
        write_release(release_dir, best_dir, state, continuation, run_config, publish, paper)
        logger.warning("%s: released step %s (%s %.4f, was %s)", os.path.basename(release_dir),
                       record["released_step"], metric, best, current)  # fmt: skip
    else:
        logger.warning("%s: the release stays (%s %s; the line's best: %s)", os.path.basename(release_dir), metric,
                       current, best)  # fmt: skip
    write_last_checkpoint(release_dir, newest, continuation)
    os.remove(os.path.join(work_dir, CONTINUATION_FILE))  # promoted: nothing left to adopt
    return continuation, released
