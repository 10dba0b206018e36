"""The one way ndr runs a child process (a training chunk, a comparison's variant, a step of a GPU session): started
with its output where asked, waited for with an optional time limit, stopped on the limit as a scheduler would stop
it (SIGTERM: `train.py` saves a checkpoint and exits 75), killed after a grace period, and, if asked, handed the
stop signals its parent receives.

    result = run_process(["python", "training/train.py", ...], log_path="train.log", limit=600, grace=120)
    result.returncode, result.timed_out, result.seconds

A module of the checkout's scripts, not of the package (`training/compare_runs.py`, `training/run_in_chunks.py`, the
release lines of `hub_cards/`). It uses the standard library only: `hub_cards/gpu_session.py` loads it by path on a
machine where nothing is installed yet.
"""

import dataclasses
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable


# the signals a scheduler sends before it kills a job (`preemption.STOP_SIGNALS` stops a run on them)
FORWARDED_SIGNALS = ("SIGTERM", "SIGUSR1")


@dataclasses.dataclass
class Started:
    """A started child (`process` None: it could not be started; the reason is in its log)."""

    process: subprocess.Popen | None
    own_group: bool
    started: float = dataclasses.field(default_factory=time.monotonic)


@dataclasses.dataclass
class Finished:
    """How a child ended: its exit status (None if it never started), whether the time limit stopped it, and the
    seconds it ran."""

    returncode: int | None
    timed_out: bool
    seconds: float


def start_process(
    command: list[str],
    log_path: str | None = None,
    append: bool = False,
    header: bool = False,
    own_group: bool = False,
    **popen_kwargs,
) -> Started:
    """Start `command`.

    Args:
        command: the program and its arguments.
        log_path (*optional*): where its stdout and stderr go (default: this process's).
        append: add to `log_path` instead of rewriting it.
        header: write the command (`$ ...`) into the log first.
        own_group: start it in a process group of its own, so that a stop reaches its children too (a launcher's
            processes); otherwise a stop is sent to it alone.
        **popen_kwargs: passed to `subprocess.Popen` (`env`, `cwd`).
    """
    if log_path is None:
        return Started(subprocess.Popen(command, start_new_session=own_group, **popen_kwargs), own_group)
    with open(log_path, "a" if append else "w") as log:
        if header:
            log.write(f"$ {shlex.join(command)}\n")
            log.flush()
        try:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=own_group,
                                       **popen_kwargs)  # fmt: skip
        except OSError as error:  # a missing program: said in its log, not raised (a session goes on)
            log.write(f"{error}\n")
            process = None
    return Started(process, own_group)


def _signal(started: Started, number: int) -> None:
    if started.process.poll() is not None:
        return
    if started.own_group:
        os.killpg(started.process.pid, number)
    else:
        started.process.send_signal(number)


def finish_process(
    started: Started,
    limit: float | None = None,
    grace: float = 60.0,
    every_minute: Callable[[float], None] | None = None,
    forward_signals: bool = False,
) -> Finished:
    """Wait for a started child.

    Args:
        started: what `start_process` returned.
        limit (*optional*): seconds from its start; past them it gets SIGTERM, and SIGKILL `grace` seconds later.
        grace: see `limit`.
        every_minute (*optional*): called with the seconds it has run so far, once a minute while it runs (so that a
            caller interrupted itself keeps the time spent).
        forward_signals: pass SIGTERM and SIGUSR1 that this process receives on to the child and keep waiting (a
            training stopped from outside then saves its checkpoint and its caller still sees how it ended). Only
            in the main thread; elsewhere the signals keep their handlers.
    """
    process = started.process
    if process is None:
        return Finished(None, False, 0.0)
    previous = {}
    if forward_signals:
        for name in FORWARDED_SIGNALS:
            number = getattr(signal, name, None)
            if number is None:
                continue
            try:
                previous[number] = signal.signal(number, lambda signum, frame: _signal(started, signum))
            except ValueError:  # not the main thread
                break
    timed_out = False
    try:
        while True:
            wait = 60.0 if every_minute else None
            if limit is not None:
                left = max(0.0, started.started + limit - time.monotonic())
                wait = left if wait is None else min(wait, left)
            try:
                process.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                if limit is not None and time.monotonic() >= started.started + limit:
                    timed_out = True
                    _signal(started, signal.SIGTERM)
                    try:
                        process.wait(timeout=grace)
                    except subprocess.TimeoutExpired:
                        _signal(started, signal.SIGKILL)
                        process.wait()
                    break
                if every_minute:
                    every_minute(time.monotonic() - started.started)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return Finished(process.returncode, timed_out, round(time.monotonic() - started.started, 1))


def run_process(
    command: list[str],
    log_path: str | None = None,
    append: bool = False,
    header: bool = False,
    own_group: bool = False,
    limit: float | None = None,
    grace: float = 60.0,
    every_minute: Callable[[float], None] | None = None,
    forward_signals: bool = False,
    **popen_kwargs,
) -> Finished:
    """`start_process` then `finish_process` (see both for the arguments)."""
    started = start_process(command, log_path, append, header, own_group, **popen_kwargs)
    return finish_process(started, limit, grace, every_minute, forward_signals)
