"""Run a `train.py` command in resumable chunks until it finishes: each chunk is the command plus
`--max_wall_minutes M --resume_from_checkpoint auto`, and a chunk that stopped (exit 75, or `stopped.json` under a
launcher that exits 1) is followed by the next one.

    python training/run_in_chunks.py --chunk_minutes 9 -- python training/train.py --preset listops_gpu ...

A script of the checkout; train.py's part is `ndr_training.preemption`, beside it (the time box, the signals and
`stopped.json`).
"""

import argparse
import os
import sys
import time

from ndr_training.preemption import EXIT_STOPPED, STOPPED_FILE, read_stopped
from processes import run_process


def output_dir_of(command: list[str]) -> str | None:
    """The `--output_dir` of a `train.py` command line (`--output_dir X` or `--output_dir=X`), None if absent."""
    for index, arg in enumerate(command):
        if arg == "--output_dir" and index + 1 < len(command):
            return command[index + 1]
        if arg.startswith("--output_dir="):
            return arg.split("=", 1)[1]
    return None


def run_in_chunks(
    command: list[str],
    chunk_minutes: float,
    output_dir: str | None = None,
    max_chunks: int = 10_000,
    **run_kwargs,
) -> int:
    """Run a `train.py` command in chunks of `chunk_minutes` until it finishes.

    Each chunk is the command plus `--max_wall_minutes chunk_minutes --resume_from_checkpoint auto`. A chunk that
    exits 75, or fails (launchers exit 1 when their processes exit 75) after writing `stopped.json`, is followed by
    the next one; one that stopped at the same step as the chunk before (no progress) ends the loop.

    Args:
        command: the launch, e.g. `["python", "training/train.py", "--preset", "listops_gpu", "--output_dir", D]`.
        chunk_minutes: the wall-clock limit of each chunk (a chunk overruns it by at most one step, one evaluation
            if one is due, and saving the checkpoint).
        output_dir: where the run writes (default: the command's `--output_dir`), to read `stopped.json`.
        max_chunks: give up after this many chunks.
        **run_kwargs: passed to `processes.run_process` (`env`, `cwd`, `log_path`).

    Returns:
        0 when the run finished; the exit status of a chunk that failed; `EXIT_STOPPED` after `max_chunks`.
    """
    output_dir = output_dir or output_dir_of(command)
    if output_dir and run_kwargs.get("cwd"):
        output_dir = os.path.join(run_kwargs["cwd"], output_dir)
    chunk_args = ["--max_wall_minutes", f"{chunk_minutes:g}", "--resume_from_checkpoint", "auto"]
    last_step = None
    for chunk in range(1, max_chunks + 1):
        if output_dir:
            stopped_file = os.path.join(output_dir, STOPPED_FILE)
            if os.path.exists(stopped_file):
                os.remove(stopped_file)
        started = time.monotonic()
        print(f"[chunks] chunk {chunk}: {' '.join(command + chunk_args)}", flush=True)
        status = run_process(command + chunk_args, **run_kwargs).returncode
        stop = read_stopped(output_dir) if output_dir else None
        minutes = (time.monotonic() - started) / 60
        if status == 0:
            print(f"[chunks] chunk {chunk} finished the run ({minutes:.1f} min)", flush=True)
            return 0
        if status != EXIT_STOPPED and stop is None:
            print(f"[chunks] chunk {chunk} failed with exit status {status} ({minutes:.1f} min)", flush=True)
            return status
        step = stop["step"] if stop else None
        if step is not None and step == last_step:
            print(f"[chunks] chunk {chunk} stopped at step {step} again: no progress, giving up", flush=True)
            return 1
        last_step = step
        reason = stop["reason"] if stop else "exit 75"
        print(f"[chunks] chunk {chunk} stopped at step {step} ({reason}, {minutes:.1f} min): resuming", flush=True)
    return EXIT_STOPPED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python training/run_in_chunks.py",
        description="Run a train.py command in resumable chunks until it finishes (exit 0), or fails (its status).",
        usage="%(prog)s --chunk_minutes M [--output_dir DIR] -- COMMAND ...",
    )
    parser.add_argument("--chunk_minutes", type=float, required=True, help="wall-clock minutes of each chunk")
    parser.add_argument("--output_dir", help="the run's output folder (default: the command's --output_dir)")
    parser.add_argument("--max_chunks", type=int, default=10_000)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the train.py launch, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    return run_in_chunks(command, args.chunk_minutes, args.output_dir, args.max_chunks)


if __name__ == "__main__":
    sys.exit(main())
