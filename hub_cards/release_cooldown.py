"""Cooldown branches of a release line (warmup-stable-decay): the line trains at its constant learning rate, and a
branch takes the line where it stands, lets the learning rate decay linearly to zero over a few thousand steps, and
releases the branch's best checkpoint if its `ood_valid` is at least the release's (and the release check agrees:
`release_check`). The line itself is left as it is: the next continuation resumes `last-checkpoint/` at the constant
rate, and a later branch starts from further on.

At a constant rate the evaluations of a line swing from one to the next (ndr-arithmetic's `ood_valid` moved between
0.89 and 0.96, its `ood_test` between 0.68 and 0.86, over steps 14,500-20,000 of its line); a decay at the end
settles the weights (on CTL, 5,000 steps of decay lifted the NDR's `ood_test` from 0.930 to 0.983). A branch costs
the steps it trains and gives a release without ending the line, so compute given to the line later is not spent
undoing a decay.

The branch resumes the line's checkpoint with Trainer's `warmup_stable_decay` schedule over the line's steps plus the
branch's (`num_decay_steps`), so its learning rates, and its weights, are those of one uninterrupted run with that
schedule (tested). Its record (steps, seconds, device, what it released) is added to the line's `continuation.json`
under `branches`; its steps are counted in the compute record of a release it makes, not in the line's.

A branch cut by its time box before its last step releases what it evaluated and keeps its newest checkpoint in the
release's `cooldown-checkpoint/` (beside `last-checkpoint/`, committed with it), whose `continuation.json` holds the
branch (its start, decay steps and shape) and the records of its segments. `resume_branch=True` trains it on from
there with the same schedule and horizon, so a decay longer than one sitting is still one run (tested); the branch's
last segment removes the folder, and a new branch replaces an unfinished one (with a warning).
"""

import json
import logging
import os
import shutil

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from line_records import (
    BRANCH_CHECKPOINT,
    CONTINUATION_FILE,
    LAST_CHECKPOINT,
    _git_commit,
    checkpoint_step,
    chunk_record,
    metric_split,
    read_line,
    release_metric,
    training_clock,
)
from modeling_ndr.training.atomic import clean_leftovers, temporary_sibling
from modeling_ndr.training.errors import UsageError, first_line, read_json
from ndr_training.records import evaluation_history
from release_check import release_decision
from release_line import (
    _check_work_dir_free,
    clear_work_dir,
    release_lock,
    resume_in,
    run_process,
    staged_checkpoint,
    trained_checkpoint,
    write_last_checkpoint,
    write_release,
)


logger = logging.getLogger(__name__)

# schedules whose rate is constant after their warm-up: a branch of such a line is one run of warmup_stable_decay
CONSTANT_SCHEDULES = ("constant", "constant_with_warmup")
DECAY_TYPES = ("linear", "cosine", "1-sqrt")


def cooldown_arguments(values: dict, start_step: int, steps: int, decay_type: str = "linear") -> list[str]:
    """The train.py arguments that turn a resumed line into its cooldown branch: `steps` more steps at a rate that
    decays from the line's to zero, as `warmup_stable_decay` over `start_step + steps` steps would give them.

    Args:
        values: the line's preset values (its `lr_scheduler_type` and `warmup_steps`).
        start_step: the line's step the branch starts from.
        steps: the branch's steps (the decay).
        decay_type: the decay's shape (`warmup_stable_decay`'s `decay_type`).
    """
    schedule = values.get("lr_scheduler_type", "linear")
    if schedule not in CONSTANT_SCHEDULES:
        raise UsageError(f"a cooldown branch needs a line at a constant learning rate; this line's lr_scheduler_type "
                         f"is {schedule!r}, which decays already")  # fmt: skip
    if decay_type not in DECAY_TYPES:
        raise UsageError(f"--decay_type {decay_type!r}: choose one of {', '.join(DECAY_TYPES)}")
    # Trainer's "constant" ignores warmup_steps; "constant_with_warmup" warms up, and so does the branch's schedule
    warmup = int(values.get("warmup_steps") or 0) if schedule == "constant_with_warmup" else 0
    kwargs = {"num_decay_steps": steps, "decay_type": decay_type}
    return ["--lr_scheduler_type", "warmup_stable_decay", "--lr_scheduler_kwargs", json.dumps(kwargs),
            "--warmup_steps", str(warmup), "--max_steps", str(start_step + steps)]  # fmt: skip


def cooldown_release(
    release_dir: str,
    work_dir: str,
    command: list[str],
    steps: int | None,
    publish,
    paper: dict | None = None,
    decay_type: str | None = None,
    minutes: float | None = None,
    chunk_steps: int | None = None,
    resume_branch: bool = False,
    check=None,
    **run_kwargs,
) -> dict:
    """Train a cooldown branch of the release's line and release its best checkpoint if it is at least as good.

    Args:
        release_dir: the release folder; its `last-checkpoint/` is the line the branch starts from (and stays as it
            is, apart from the branch's record in its `continuation.json`).
        work_dir: train.py's `--output_dir` for the branch (the command must name it; not the line's work folder).
        command: the line's train.py launch (`--preset`, `--output_dir`, the total batch); the branch's schedule,
            horizon and `--resume_from_checkpoint` are added.
        steps: the branch's steps (Trainer evaluates the last one whether or not it is an evaluation step); with
            `resume_branch`, None (or the unfinished branch's own).
        publish: as `release_line.write_release`.
        paper: as `release_line.write_release`.
        decay_type: the decay's shape (None: linear, or the unfinished branch's own).
        minutes: a time box (`--max_wall_minutes`); a branch cut by it releases what it evaluated and keeps its newest
            checkpoint in `cooldown-checkpoint/`, for `resume_branch`.
        chunk_steps: stop after this many of the branch's steps instead (`--max_chunk_steps`), as `minutes` does.
        resume_branch: train on the release's unfinished branch (`cooldown-checkpoint/`) instead of starting one.
        check: the release check (`release_check.release_checker`; None: none), as `release_line.continue_release`'s.
        **run_kwargs: for `processes.run_process` (`env`, `cwd`).

    Returns:
        `{"start_step", "step", "end_step", "finished", "released", "metric", "branch_best", "release_value",
        "release_check"}`:
        `start_step` is the line's step the branch started from, `step` where this run stopped, `end_step` the
        branch's last.
    """
    with release_lock(release_dir):
        return _cooldown(release_dir, work_dir, command, steps, publish, paper, decay_type, minutes, chunk_steps,
                         resume_branch, check, run_kwargs)  # fmt: skip


def read_branch(release_dir: str) -> dict | None:
    """The record of the release's unfinished cooldown branch (`cooldown-checkpoint/continuation.json`: `branch`
    with its `start_step`, `decay_steps` and `decay_type`, and `chunks`, one per segment), None if there is none; a
    one-line `UsageError` if the folder is there without a readable record."""
    folder = os.path.join(release_dir, BRANCH_CHECKPOINT)
    if not os.path.isdir(folder):
        return None
    try:
        record = read_json(os.path.join(folder, CONTINUATION_FILE))
        branch = record["branch"]
        int(branch["start_step"]), int(branch["decay_steps"]), str(branch["decay_type"]), list(record["chunks"])
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise UsageError(f"{folder}: {CONTINUATION_FILE} is not an unfinished branch's record ({first_line(error)}); "
                         "nothing was changed") from None  # fmt: skip
    return record


def _cooldown(release_dir, work_dir, command, steps, publish, paper, decay_type, minutes, chunk_steps, resume_branch,
              check, run_kwargs) -> dict:  # fmt: skip
    name = os.path.basename(os.path.abspath(release_dir))
    last = os.path.join(release_dir, LAST_CHECKPOINT)
    pending_dir = os.path.join(release_dir, BRANCH_CHECKPOINT)
    for folder in (release_dir, last, pending_dir):  # finish or undo a replacement that a kill cut in two
        clean_leftovers(folder)
    line = read_line(release_dir)
    if line is None:
        raise UsageError(f"{name}: no line to branch from (no {LAST_CHECKPOINT}/); make release-continue starts one")
    pending = read_branch(release_dir)
    if resume_branch:
        if pending is None:
            raise UsageError(f"{name}: no unfinished cooldown branch to resume (no {BRANCH_CHECKPOINT}/); "
                             "make release-cooldown starts one")  # fmt: skip
        branch = pending["branch"]
        if pending.get("line_id") != line.get("line_id"):  # --switch_recipe started another line since the cut
            raise UsageError(f"{name}: the unfinished branch (from step {branch['start_step']}) is of line "
                             f"{pending.get('line_id')}, the release's line is now {line.get('line_id')}; "
                             "make release-cooldown starts a branch of it")  # fmt: skip
        for flag, asked, own in (("--steps", steps, branch["decay_steps"]), ("--decay_type", decay_type,
                                                                             branch["decay_type"])):  # fmt: skip
            if asked is not None and asked != own:
                raise UsageError(f"{flag} {asked}: the unfinished branch of {name} (from step {branch['start_step']}) "
                                 f"has {own}; resume it without {flag}, or start a new branch")  # fmt: skip
        branch_start, steps, decay_type = branch["start_step"], branch["decay_steps"], branch["decay_type"]
        source, segments = pending_dir, pending["chunks"]
    else:
        if steps is None or steps <= 0:
            raise UsageError(f"--steps {steps}: a cooldown branch trains at least one step")
        branch_start, decay_type = None, decay_type or "linear"  # the branch starts where the line stands
        source, segments = last, []
    _check_work_dir_free(work_dir)
    values = line["recipe"]["values"]
    staged = staged_checkpoint(source, work_dir)
    try:
        start = checkpoint_step(staged)
        branch_start = start if branch_start is None else branch_start
        arguments = cooldown_arguments(values, branch_start, steps, decay_type)
        clear_work_dir(work_dir)  # a branch (or segment) before this one
        resume, staged = resume_in(work_dir, staged), None
    finally:
        if staged:
            shutil.rmtree(staged, ignore_errors=True)
    if pending and not resume_branch:
        old, trained = pending["branch"], pending["chunks"][-1]["end_step"] - pending["branch"]["start_step"]
        logger.warning("%s: a new branch replaces the unfinished one from step %d (%d of %d steps trained)", name,
                       old["start_step"], trained, old["decay_steps"])  # fmt: skip
    start_seconds = training_clock(read_json(os.path.join(resume, "trainer_state.json")))
    commit = _git_commit()
    limits = (["--max_wall_minutes", f"{minutes:g}"] if minutes else []) + (
        ["--max_chunk_steps", str(chunk_steps)] if chunk_steps else []
    )
    branch_command = command + arguments + limits + ["--resume_from_checkpoint", resume]
    logger.info("%s: cooldown branch from step %d, %d steps, resumed at %d: %s", name, branch_start, steps, start,
                " ".join(branch_command))  # fmt: skip
    status = run_process(branch_command, forward_signals=True, **run_kwargs).returncode
    newest = trained_checkpoint(f"{name}: the cooldown branch", work_dir, status, start)

    state = read_json(os.path.join(newest, "trainer_state.json"))
    record = chunk_record(work_dir, newest, start, start_seconds, line["recipe"]["total_batch"], commit)
    record.update(decay_steps=steps, decay_type=decay_type, branch_start_step=branch_start)
    segments = [*segments, record]
    finished = state["global_step"] >= branch_start + steps
    metric = values.get("metric_for_best_model", "ood_valid_accuracy")
    split = metric_split(metric)
    # the branch's evaluations whose checkpoint is kept (Trainer keeps the best it knows, which may be the line's:
    # any branch checkpoint better than the release is still there, as the release is at least the line's best)
    kept = [e for e in evaluation_history(state) if start < e["step"] and split in e
            and os.path.isdir(os.path.join(work_dir, f"{PREFIX_CHECKPOINT_DIR}-{e['step']}"))]  # fmt: skip
    best = max(kept, key=lambda e: (e[split]["accuracy"], e["step"]), default=None)  # the latest on ties
    current = release_metric(release_dir, metric)
    best_dir = best and os.path.join(work_dir, f"{PREFIX_CHECKPOINT_DIR}-{best['step']}")
    released, checked = release_decision(best and best[split]["accuracy"], current, best_dir, release_dir, values,
                                         split, check)  # fmt: skip
    record["released_step"] = best["step"] if released else None
    if checked:
        record["release_check"] = {"step": best["step"], **checked}
    record["best"] = (
        {"step": best["step"], **{s: v["accuracy"] for s, v in best.items() if s != "step"}} if best else None
    )
    # the branch's segments are part of what the released weights saw: the compute record and the curve count them,
    # and the line's chunks up to the branch's start (the line may have trained on since a branch was cut)
    line_chunks = [chunk for chunk in line["chunks"] if chunk["end_step"] <= branch_start]
    branched = {**line, "chunks": [*line_chunks, *segments]}
    if released:
        run_config = read_json(os.path.join(work_dir, "run_config.json")) or {}
        run_config["cooldown"] = {"start_step": branch_start, "decay_steps": steps, "decay_type": decay_type}
        write_release(release_dir, best_dir, state, branched, run_config, publish, paper)
        logger.warning("%s: released step %d of the cooldown branch (%s %.4f, was %s)", name, best["step"], metric,
                       best[split]["accuracy"], current)  # fmt: skip
    else:
        logger.warning("%s: the release stays (%s %s; the branch's best: %s)", name, metric, current,
                       best[split]["accuracy"] if best else None)  # fmt: skip
    if not finished:  # the branch's newest state and its record, for the next run to resume
        branch = {"start_step": branch_start, "decay_steps": steps, "decay_type": decay_type}
        write_last_checkpoint(release_dir, newest, {"line_id": line.get("line_id"), "branch": branch,
                                                    "chunks": segments}, folder=BRANCH_CHECKPOINT)  # fmt: skip
        logger.warning("%s: the branch stopped at step %d of its %d (from %d); resume_branch continues it", name,
                       state["global_step"], branch_start + steps, branch_start)  # fmt: skip
    elif os.path.isdir(pending_dir):  # finished: no branch is left to resume (aside first: a kill leaves none)
        aside = temporary_sibling(pending_dir)
        os.rename(pending_dir, aside)
        shutil.rmtree(aside, ignore_errors=True)
    _record_branch(last, record)
    return {
        "start_step": branch_start,
        "step": state["global_step"],
        "end_step": branch_start + steps,
        "finished": finished,
        "released": released,
        "metric": metric,
        "branch_best": best[split]["accuracy"] if best else None,
        "release_value": best[split]["accuracy"] if released else current,
        "release_check": record.get("release_check"),
    }


def _record_branch(last: str, record: dict) -> None:
    """Add the branch's record to the line's `continuation.json` (the file replaced whole: a kill leaves either)."""
    path = os.path.join(last, CONTINUATION_FILE)
    line = read_json(path)
    line["branches"] = [*line.get("branches", []), record]
    with open(path + ".new", "w") as f:
        json.dump(line, f, indent=2)
    os.replace(path + ".new", path)
