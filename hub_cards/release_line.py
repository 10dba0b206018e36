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
  (`file_parts`), joined again when the line resumes.

One continuation (`continue_release`):

1. locks the release (`release_lock`): a second continuation of it, or a rebuild of the folder, is refused in one
   line; so is a continuation whose work folder a training still holds (one left running by a killed continuation);
2. checks `last-checkpoint/`: complete (copied aside and opened), and of the recipe asked for; otherwise one line
   naming the problem or the difference, and nothing changes;
3. adopts a chunk of this line and recipe left in the work folder by a continuation killed after its training;
4. runs the launch command for the time box (`--max_wall_minutes`): it resumes the checkpoint, evaluates at the
   recipe's evaluation steps, and stops with a checkpoint (exit 75), or finishes the line's horizon (`max_steps`);
5. if the line's best `ood_valid` (the latest on ties) is at least the release's and in this chunk, and the release
   check agrees (`release_check`: at least as accurate as the release on 10,000 fresh samples of the split), releases
   that checkpoint; otherwise the release stays as it was. Where earlier checkpoints of the chunk tied that best
   (kept by `train.py --keep_tied_best`, which the line's command passes), each is checked, and the one the check
   scores highest is released (`tied_candidates`, `chosen_candidate`; the chunk's record lists them);
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
import shutil
import tempfile
import zipfile
import zlib

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from file_parts import join_split_files, split_large_files
from line_records import (
    CONTINUATION_FILE,
    CURVE_FILE,
    LAST_CHECKPOINT,
    STATE_FOLDERS,
    _git_commit,
    checkpoint_step,
    chunk_record,
    compute_record,
    curve_points,
    metric_split,
    new_line,
    plot_training_curve,
    read_line,
    recipe_difference,
    release_metric,
    results_at,
    samples_seen,
    training_clock,
)
from modeling_ndr.training.atomic import atomic_folder, clean_leftovers
from modeling_ndr.training.errors import UsageError, first_line, read_json
from ndr_training.checkpoints import checkpoint_problem, latest_complete_checkpoint
from ndr_training.locking import OutputDirLock, lock_output_dir
from ndr_training.preemption import EXIT_STOPPED, read_stopped
from ndr_training.trainer import TIED_BEST_FOLDER
from processes import (
    run_process,  # the child-process runner, a module of the training scripts (line_records: sys.path)
)
from release_check import release_decision


logger = logging.getLogger(__name__)


def write_last_checkpoint(release_dir: str, checkpoint: str, continuation: dict, folder: str = LAST_CHECKPOINT) -> str:
    """Make `checkpoint` (a complete Trainer checkpoint) the release's `last-checkpoint/` (or another state `folder`
    of it: `cooldown-checkpoint/`), with `continuation` as its `continuation.json`."""
    target = os.path.join(release_dir, folder)
    with atomic_folder(target) as staging:
        # the modeling code that save_pretrained adds is left out (copies would drift from the package's)
        shutil.copytree(checkpoint, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.py"))
        with open(os.path.join(staging, CONTINUATION_FILE), "w") as f:
            json.dump(continuation, f, indent=2)
        split_large_files(staging)
    return target


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
    `last-checkpoint/` (and an unfinished cooldown branch's `cooldown-checkpoint/`) carried over; the folder is
    replaced whole.

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
            # the release check that let this checkpoint replace the release before it (release_check.py)
            "release_check": next(
                (
                    chunk["release_check"]
                    for chunk in continuation.get("chunks", [])
                    if chunk.get("released_step") == step and chunk.get("release_check")
                ),
                None,
            ),
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
        for folder in STATE_FOLDERS:
            if os.path.isdir(os.path.join(release_dir, folder)):
                shutil.copytree(os.path.join(release_dir, folder), os.path.join(staging, folder))
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
    check=None,
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
        check: the release check (`release_check.release_checker`): a checkpoint that wins on the selection split
            replaces the release only if it is at least as accurate on a larger fresh sample too (None: no check).
        **run_kwargs: for `processes.run_process` (`env`, `cwd`).

    Returns:
        A summary: `{"step", "samples", "released": bool, "metric", "release_value", "line_best", "finished",
        "release_check"}` (the check's record, None where none ran).
    """
    limits = (["--max_wall_minutes", f"{minutes:g}"] if minutes else []) + (
        ["--max_chunk_steps", str(chunk_steps)] if chunk_steps else []
    )
    with release_lock(release_dir):
        return _continue(release_dir, work_dir, command + limits, recipe, publish, warm_start, switch_recipe, paper,
                         check, run_kwargs)  # fmt: skip


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


def _continue(release_dir, work_dir, command, recipe, publish, warm_start, switch_recipe, paper, check, run_kwargs):
    name = os.path.basename(os.path.abspath(release_dir))
    last = os.path.join(release_dir, LAST_CHECKPOINT)
    for folder in (release_dir, last):  # finish or undo a replacement that a kill cut in two
        clean_leftovers(folder)
    _check_work_dir_free(work_dir)
    continuation = old_line = read_line(release_dir)  # old_line: the release's line, whatever replaces it
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
            continuation, released = _promote(release_dir, work_dir, newest, pending, publish, paper, check)
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
            continuation = new_line(release_dir, recipe, warm_start, old_line)
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
    # SIGTERM/SIGUSR1 sent to this process (a session's limit, a scheduler) reach the training, which stops with a
    # checkpoint (exit 75) that is then promoted as after a time box; a signal to the whole group stops it once
    status = run_process(chunk_command, forward_signals=True, **run_kwargs).returncode
    newest = trained_checkpoint(f"{name}: the chunk", work_dir, status, line_step)
    continuation, released = _promote(release_dir, work_dir, newest, pending, publish, paper, check)
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
        "release_check": continuation["chunks"][-1].get("release_check"),
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


def _released_already(release_dir: str, line_id: str | None, step: int) -> dict | None:
    """The release's compute record if the release is step `step` of line `line_id` already (a chunk killed after it
    released, adopted now: the release check is not run against the candidate itself); None otherwise."""
    run_config = read_json(os.path.join(release_dir, "run_config.json")) or {}
    record = run_config.get("continuation") or {}
    same = record.get("line_id") == line_id and record.get("line_step") == step and "cooldown" not in run_config
    return record if same else None


def tied_candidates(work_dir: str, best_dir: str, start_step: int) -> list[str]:
    """The line's best checkpoint and the earlier checkpoints of this chunk that tied its selection metric (kept by
    `train.py --keep_tied_best` in the work folder's `tied-best/`), the latest first."""
    kept = os.path.join(work_dir, TIED_BEST_FOLDER)
    tied = [os.path.join(kept, name) for name in os.listdir(kept)] if os.path.isdir(kept) else []
    tied = [folder for folder in tied if start_step < checkpoint_step(folder) < checkpoint_step(best_dir)]
    return [best_dir, *sorted(tied, key=checkpoint_step, reverse=True)]


def chosen_candidate(decisions: list[tuple[str, bool, dict | None]]) -> tuple[str, bool, dict | None]:
    """Among tied candidates (`(folder, passed, check record)`, the latest first), the one to release: of those the
    release check let in, the most accurate on its fresh samples (the latest on equal scores); the latest candidate
    (and its record) where none passed or no check ran."""
    passed = [decision for decision in decisions if decision[1]]
    if not passed:
        return decisions[0]
    return max(passed, key=lambda decision: (decision[2] or {}).get("candidate", 0.0))


def _promote(release_dir, work_dir, newest, pending, publish, paper, check=None) -> tuple[dict, bool]:
    """After a chunk: if the line's best (the latest on ties) is in this chunk and at least the release's, and the
    release check (`check`) agrees, it is released; then the chunk's newest checkpoint becomes `last-checkpoint/`.
    Returns the line's new `continuation.json` and whether this chunk released."""
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
    if in_chunk and (already := _released_already(release_dir, pending.get("line_id"), checkpoint_step(best_dir))):
        released, checked = True, already.get("release_check")  # adopted after a kill: released again, as checked
    elif in_chunk:
        tied = tied_candidates(work_dir, best_dir, start["start_step"])
        decisions = [(folder, *release_decision(best, current, folder, release_dir, pending["recipe"]["values"],
                                                metric_split(metric), check)) for folder in tied]  # fmt: skip
        best_dir, released, checked = chosen_candidate(decisions)
        if len(decisions) > 1 and any(check_record for _, _, check_record in decisions):
            record["tied_candidates"] = [{"step": checkpoint_step(folder), **(check_record or {})}
                                         for folder, _, check_record in decisions]  # fmt: skip
    else:
        released, checked = False, None
    record["released_step"] = checkpoint_step(best_dir) if released else None
    if checked:
        record["release_check"] = {"step": checkpoint_step(best_dir), **checked}
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
