"""What a GPU session (`gpu_session.py`) decides and keeps: which release it continues (the one furthest below its
target) with which preset and from which copy, which wheels it installs, the time each step gets (`Budget`), and how
its results are packed into the folder that comes back (`pack`: a few files of limited size). Standard library only,
as `gpu_session.py`.
"""

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import os
import re
import shutil
import tarfile
import time
from collections.abc import Callable

from file_parts import MAX_FILE_BYTES, write_in_parts


# the ood_test accuracy each GPU release is trained towards (make gpu-release TASK=<task>: hub_cards/models/ndr-<task>)
TARGETS = {"ctl-forward": 0.99, "ctl-backward": 0.99, "arithmetic": 0.95, "listops": 0.95}
# the preset of a GPU release without a line (hub_cards/make_model_repos.py's GPU_RELEASES), whose data the data step
# prepares
GPU_PRESETS = {"ctl-forward": "ctl_gpu", "ctl-backward": "ctl_backward_gpu", "arithmetic": "arithmetic_gpu",
               "listops": "listops_gpu"}  # fmt: skip
MIN_LIMIT_SECONDS = 60  # a step's share is at least this (where it is left): starting Python and torch takes seconds
MIB = 2**20
# what the machines may hand back
MAX_FILES, MAX_TOTAL_BYTES = 8, 64 * MIB  # and files of at most file_parts.MAX_FILE_BYTES (16 MiB)


# ------------------------------------------------------------------------------------------- which release, budget


def ood_test_accuracy(release_dir: str) -> float | None:
    """The release's measured ood_test accuracy (`eval_results.json`), None if it has none."""
    path = os.path.join(release_dir, "eval_results.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f).get("ood_test", {}).get("accuracy")


def furthest_release(models_dir: str, targets: dict[str, float] = TARGETS) -> tuple[str | None, dict[str, float]]:
    """The task whose release (`<models_dir>/ndr-<task>/`) is furthest below its ood_test target, and every task's
    distance to it (target minus accuracy; a release without results counts as accuracy 0). None when every release
    has reached its target."""
    gaps = {}
    for task, target in targets.items():
        accuracy = ood_test_accuracy(os.path.join(models_dir, f"ndr-{task}"))
        gaps[task] = round(target - (accuracy or 0.0), 6)
    task = max(gaps, key=gaps.get)
    return (task if gaps[task] > 0 else None), gaps


def release_options(release_args: list[str]) -> argparse.Namespace:
    """What the session reads of `--release_args` (`hub_cards/make_model_repos.py`'s flags): `models_dir`, `preset`,
    `switch_recipe`."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--models_dir", default=None)
    parser.add_argument("--preset", default=None)
    parser.add_argument("--switch_recipe", action="store_true")
    return parser.parse_known_args(release_args)[0]


def release_preset(task: str, release_dir: str, options: argparse.Namespace) -> str:
    """The preset `make gpu-release` trains `task` with (`make_model_repos.py`'s `continue_line`): `--preset`, else
    the line's own (its `last-checkpoint/continuation.json`) unless `--switch_recipe`, else the task's GPU preset."""
    if options.preset:
        return options.preset
    line = os.path.join(release_dir, "last-checkpoint", "continuation.json")
    if not options.switch_recipe and os.path.isfile(line):
        with open(line) as f:
            return json.load(f)["recipe"]["preset"]
    return GPU_PRESETS[task]


@dataclasses.dataclass
class Budget:
    """The session's wall clock: `reserve` seconds at the end are kept for stopping a step and packing."""

    seconds: float
    started: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def reserve(self) -> float:
        return min(60.0, max(10.0, 0.05 * self.seconds))

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def wall_started(self) -> float:
        """The start as `time.time()` (what the logs' time stamps are read against)."""
        return time.time() - self.elapsed()

    def left(self) -> float:
        """Seconds the steps may still use."""
        return self.seconds - self.reserve - self.elapsed()

    def limit(self, share: float, shares_left: float) -> float:
        """A step's time limit: its `share` of the time left, of `shares_left` for it and the steps after it (at
        least `MIN_LIMIT_SECONDS`), or what is left if that is less. The last step (`share == shares_left`) gets
        all that is left, and the time a step leaves unused goes to the steps after it."""
        left = self.left()
        return max(0.0, min(max(left * share / shares_left, MIN_LIMIT_SECONDS), left))


# the line train.py logs as its training begins, before its first step (ndr_training.preemption), with its time stamp
TRAINING_BEGINS = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO ndr_training\.preemption: chunk \d+ of this run"
)


def training_began(log_path: str, wall_started: float) -> float | None:
    """Seconds from `wall_started` (`time.time()` at the session's start) to the moment the run that wrote `log_path`
    began training, just before its first step: the time stamp of the line train.py's time box logs then (a release
    always has one), in this machine's local time as logging writes it. None where none began."""
    try:
        with open(log_path, errors="replace") as f:
            for line in f:
                if found := TRAINING_BEGINS.match(line):
                    stamp = datetime.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f")
                    return round(stamp.timestamp() - wall_started, 1)
    except OSError:
        return None
    return None


def chunk_speed(release_dir: str) -> dict | None:
    """The speed of the newest chunk of a release's line (its `last-checkpoint/continuation.json`): optimizer steps,
    samples, training seconds (the time box's clock: setup, evaluation and export excluded), samples per second and
    seconds per step, with the device and precision it ran in; None where the release has no line or no chunk."""
    try:
        with open(os.path.join(release_dir, "last-checkpoint", "continuation.json")) as f:
            chunk = (json.load(f).get("chunks") or [None])[-1]
    except (OSError, ValueError):
        return None
    if not chunk or chunk.get("end_step", 0) <= chunk.get("start_step", 0) or not chunk.get("seconds"):
        return None
    steps = chunk["end_step"] - chunk["start_step"]
    return {
        "steps": steps,
        "samples": steps * chunk["total_batch"],
        "seconds": chunk["seconds"],
        "samples_per_second": round(steps * chunk["total_batch"] / chunk["seconds"], 1),
        "seconds_per_step": round(chunk["seconds"] / steps, 4),
        "device": chunk.get("device"),
        "precision": chunk.get("precision"),
    }


# ----------------------------------------------------------------------------------------------- what it brings


def release_copy(source: str, copy: str) -> str | None:
    """Make `copy` a copy of the release folder `source`, unless it exists (a previous session on this machine left
    its line there) or `source` does not; whole or not at all. Returns what it copied from, None if nothing."""
    if os.path.isdir(copy) or not os.path.isdir(source):
        return None
    partial = f"{copy}.copying"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial)
    os.replace(partial, copy)
    return source


def wheel_distribution(file_name: str) -> str:
    """The distribution a wheel file holds (`datasets-5.2.0-py3-none-any.whl` -> `datasets`)."""
    return re.sub(r"[-_.]+", "-", file_name.split("-")[0]).lower()


def missing_wheels(wheels_dir: str) -> tuple[list[str], list[str]]:
    """The wheels of `wheels_dir` whose distribution is not installed, and those that are (kept as installed)."""
    missing, present = [], []
    for wheel in sorted(f for f in os.listdir(wheels_dir) if f.endswith(".whl")) if os.path.isdir(wheels_dir) else []:
        try:
            importlib.metadata.version(wheel_distribution(wheel))
            present.append(wheel)
        except importlib.metadata.PackageNotFoundError:
            missing.append(wheel)
    return missing, present


# --------------------------------------------------------------------------------------------------------- packing


def _tar(path: str, folder: str, arcname: str, compress: bool, exclude: Callable[[str], object] | None) -> str:
    with tarfile.open(path, "w:gz" if compress else "w") as tar:
        tar.add(folder, arcname=arcname, filter=lambda info: None if exclude and exclude(info.name) else info)
    return path


def pack(
    out: str,
    work: str,
    release_dir: str | None,
    max_files: int = MAX_FILES,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_total: int = MAX_TOTAL_BYTES,
) -> dict:
    """Write what the session keeps into `out` (emptied first: it holds only what this session packed), within the
    limits, keeping one file for `session.json`: `session.tar.gz` (everything in `work` but the installed wheels),
    then the released folder as `release-<name>.tar`, or without its `last-checkpoint/` where the whole does not
    fit. Returns what it packed and what it left out."""
    for name in os.listdir(out):
        os.remove(os.path.join(out, name))
    scratch = os.path.join(work, ".pack")
    os.makedirs(scratch, exist_ok=True)
    excluded = re.compile(r"^session/(site|\.pack)(/|$)")
    session = _tar(os.path.join(scratch, "session.tar.gz"), work, "session", True, excluded.match)
    files = write_in_parts(session, out, "session.tar.gz", max_file_bytes)
    packed = {"files": files, "left_out": []}
    if release_dir and os.path.isdir(release_dir):
        name = os.path.basename(os.path.normpath(release_dir))
        checkpoint = re.compile(rf"^{re.escape(name)}/last-checkpoint(/|$)").match
        attempts = (
            (None, f"{name}/last-checkpoint/ (the release with it does not fit: {{:.1f}} MiB)"),
            (checkpoint, f"{name}/ (it does not fit even without its last-checkpoint/: {{:.1f}} MiB)"),
        )
        for exclude, left_out in attempts:
            tar = _tar(os.path.join(scratch, f"release-{name}.tar"), release_dir, name, False, exclude)
            size = os.path.getsize(tar)
            used = sum(os.path.getsize(os.path.join(out, file)) for file in packed["files"])
            # a file and 1 MiB are kept for session.json
            if len(packed["files"]) + -(-size // max_file_bytes) + 1 <= max_files and used + size + MIB <= max_total:
                packed["files"] += write_in_parts(tar, out, f"release-{name}.tar", max_file_bytes)
                break
            os.remove(tar)
            packed["left_out"].append(left_out.format(size / MIB))
    elif release_dir:
        packed["left_out"].append(f"{release_dir} (no such folder)")
    shutil.rmtree(scratch)
    packed["files"].append("session.json")
    return packed
