"""A GPU's time box in one command (`make gpu-session OUT=<folder> MINUTES=9`; docs/clusters.md).

    python training/gpu_session.py --out OUT --minutes 9 [--release_args "..."] [--steps tests,attention]
    python training/gpu_session.py --out OUT --minutes 4 --dry_run --release_args "--preset tiny_gpu_release_test ..."

On a fresh CUDA machine with no network and the image's python (no virtualenv), within `--minutes` of wall clock:

1. `install`: the wheels of `.whl/` (`../shared/gpu/fetch_wheels.sh`) whose distributions the image lacks, into
   `<work_dir>/site`, which the later steps find on `PYTHONPATH` (with the checkout: `modeling_ndr` is not installed);
2. `data`: started beside the steps after it, on the CPU with CUDA hidden, `train.py --prepare_data_only` with the
   preset the release trains (`release_preset`) generates and tokenizes the release's data into `--datasets_cache`
   (`HF_DATASETS_CACHE` of this step and the release, under `outputs/`: kept between commands), so that the release,
   which waits for it, reads it from there (ListOps' 1M training rows take minutes of one core); a command without
   the release waits for it at its end, for the next command on the machine. Either waits at most `DATA_WAIT_SHARE`
   of the time left, then stops it (its note says so): a hung data step does not take the release's time, and the
   release makes the data it did not finish itself (a partial cache file is never read: `datasets` renames each into
   place once complete);
3. `release`: what `make gpu-release TASK=<task> MINUTES=<its share>` runs (below), first after the data, so that a
   short time box spends most of itself training the release furthest from its target (ListOps today);
4. `tests`: the CUDA tests and the Triton kernels' tests (`pytest -m "gpu or triton"`, what `make test-gpu` runs),
   kept as JUnit XML and as text (one line per test, so that a stopped run still says how far it got);
5. `attention`: `benchmarks/gpu.py`'s attention op (geometric attention against SDPA, bf16, N = 200, 50, 512);
6. `training_step`: `benchmarks/gpu.py`'s training step of the GPU presets, eager against `torch.compile`.

The `release` step runs `hub_cards/make_model_repos.py --gpu` (with no make and no virtualenv) for the release
furthest below its ood_test target (`furthest_release`), with `--release_args` as its `GPU_RELEASE_ARGS`; it continues
the release's own line (one line per release: CPU hours and GPU minutes add up). It trains a copy of the release,
`--models_copy/ndr-<task>/` (under `outputs/`, which git ignores: a machine keeps it between commands, and a copy of
the checkout sent there leaves it alone), made from `hub_cards/models/` where the machine has none yet; `--models_dir`
in `--release_args` trains that folder instead.

Each step has a time limit: its share (`SHARES`) of the time left, among the steps still to run, so that the time a
step leaves unused goes to the later ones and the last step gets all that is left (`Budget`; `data`, beside them, all
the time left when it starts, cut to `DATA_WAIT_SHARE` of the time left once the release is due); a step past it is
stopped (SIGTERM to its process group, SIGKILL after a grace period) and a failed or stopped step does not stop the
next. After every step the results are packed into OUT (`pack`), because the machines this runs on may hand back
only at most 8 files of at most 16 MiB (64 MiB in all): `session.json` (each step's status, time and limit; the
environment; what was packed), `session.tar.gz` (logs, test report, benchmark JSON) and `release-ndr-<task>.tar`
with the released folder and its `last-checkpoint/` (split into `.part-NNN` files of 16 MiB where larger, named as
`continuation.split_large_files` names them: `cat release-*.tar.part-* | tar -x`).

`--dry_run` (`make gpu-session NO_CUDA=1`) hides CUDA and runs the same steps, sized for the CPU: the CUDA tests of
`tests/test_gpu.py` (they skip), the benchmarks at tiny sizes, and a release continued for at most 0.2 minutes (a
tiny preset through `--release_args`).
"""

import argparse
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASES_DIR = os.path.join(REPO, "hub_cards", "models")
MIB = 2**20
# what the machines may hand back
MAX_FILES, MAX_FILE_BYTES, MAX_TOTAL_BYTES = 8, 16 * MIB, 64 * MIB
# the ood_test accuracy each GPU release is trained towards (make gpu-release TASK=<task>: hub_cards/models/ndr-<task>)
TARGETS = {"ctl-forward": 0.99, "ctl-backward": 0.99, "arithmetic": 0.95, "listops": 0.95}
# the steps in their order; `data` runs beside the steps after it (BACKGROUND), until the release (which reads it) or
# the end of the session
STEPS = ("install", "data", "release", "tests", "attention", "training_step")
BACKGROUND = ("data",)
# each other step's share of the time left among the steps still to run (all five: 5% to install, 65% to the release,
# which trains first, then 20% to the tests and 5% and 5% to the benchmarks); the last step gets whatever is left
SHARES = {"install": 0.05, "release": 0.65, "tests": 0.2, "attention": 0.05, "training_step": 0.05}
# the release (or the end of a command without it) waits for a data step still running at most this share of the time
# left, then stops it: by then the step has had the tests' and the benchmarks' time beside them, so one still running
# is more likely hung (a blocking pyarrow/fsspec mismatch) than slow, and the release makes the data the step did not
# finish itself, reading what it did finish (`datasets` renames a cache file into place only once it is complete);
# waiting longer would take every second of it from the release's training, the session's one result that needs a GPU
DATA_WAIT_SHARE = 0.25
MIN_STEP_SECONDS = 5  # a step that would get less is skipped
MIN_LIMIT_SECONDS = 60  # a step's share is at least this (where it is left): starting Python and torch takes seconds
RELEASE_EVALUATION_SECONDS = 120  # kept from the release's training minutes for its evaluation and export
DRY_RUN_RELEASE_MINUTES = 0.2
# the CUDA tests and the Triton kernels' tests, which run compiled on a GPU (in Triton's interpreter without one)
TEST_MARKERS = "gpu or triton"
# a test's own limit: train.py runs in subprocesses (three in a row in the time-box test) take a minute or more
MIN_TEST_TIMEOUT = 150
# the attention op's lengths, N = 200 (the goal's: docs/clusters.md) first, should the step be stopped early
ATTENTION_LENGTHS = "200,50,512"
# the release the session trains, under outputs/ (git-ignored: kept between commands on one machine)
MODELS_COPY = os.path.join(REPO, "outputs", "gpu_session_models")
# the `datasets` cache of the data and release steps (HF_DATASETS_CACHE), kept there too
DATASETS_CACHE = os.path.join(REPO, "outputs", "gpu_session_datasets")
# the preset of a GPU release without a line (hub_cards/make_model_repos.py's GPU_RELEASES), whose data the data step
# prepares
GPU_PRESETS = {"ctl-forward": "ctl_gpu", "ctl-backward": "ctl_backward_gpu", "arithmetic": "arithmetic_gpu",
               "listops": "listops_gpu"}  # fmt: skip
PACKAGES = ("torch", "triton", "transformers", "accelerate", "huggingface_hub", "safetensors", "tokenizers",
            "datasets", "evaluate", "numpy", "pandas", "pyarrow", "pytest")  # fmt: skip


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

    def left(self) -> float:
        """Seconds the steps may still use."""
        return self.seconds - self.reserve - self.elapsed()

    def limit(self, share: float, shares_left: float) -> float:
        """A step's time limit: its `share` of the time left, of `shares_left` for it and the steps after it (at
        least `MIN_LIMIT_SECONDS`), or what is left if that is less. The last step (`share == shares_left`) gets
        all that is left, and the time a step leaves unused goes to the steps after it."""
        left = self.left()
        return max(0.0, min(max(left * share / shares_left, MIN_LIMIT_SECONDS), left))


# --------------------------------------------------------------------------------------------------------- steps


@dataclasses.dataclass
class Started:
    """A step's process, started (None: it could not be), with its output going to `log_path`."""

    name: str
    process: subprocess.Popen | None
    log_path: str
    limit: float
    started: float = dataclasses.field(default_factory=time.monotonic)


def start_step(name: str, command: list[str], log_path: str, limit: float, **popen_kwargs) -> Started:
    """Start `command` in its own process group, with its output in `log_path`."""
    with open(log_path, "w") as log:
        log.write(f"$ {shlex.join(command)}\n")
        log.flush()
        try:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                       **popen_kwargs)  # fmt: skip
        except OSError as error:
            log.write(f"{error}\n")
            process = None
    return Started(name, process, log_path, limit)


def finish_step(step: Started, grace: float) -> dict:
    """Wait for a started step until its limit (counted from its start); past it its process group gets SIGTERM (a
    training run saves a checkpoint then), and SIGKILL `grace` seconds later."""
    process, limit = step.process, step.limit
    if process is None:
        return dict(name=step.name, status="failed", returncode=None, seconds=0.0, limit_seconds=round(limit, 1))
    try:
        returncode = process.wait(timeout=max(0.0, step.started + limit - time.monotonic()))
        status = "passed" if returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        status = "timed out"
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        returncode = process.returncode
    seconds = round(time.monotonic() - step.started, 1)
    return dict(name=step.name, status=status, returncode=returncode, seconds=seconds, limit_seconds=round(limit, 1))


def run_step(name: str, command: list[str], log_path: str, limit: float, grace: float, **popen_kwargs) -> dict:
    """Run `command` with its output in `log_path`, stopped past `limit` seconds (`finish_step`)."""
    return finish_step(start_step(name, command, log_path, limit, **popen_kwargs), grace)


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


@dataclasses.dataclass
class Step:
    name: str
    # the command, given the step's time limit in seconds; None: nothing to do
    command: Callable[[float], list[str] | None]
    note: dict = dataclasses.field(default_factory=dict)
    env: dict = dataclasses.field(default_factory=dict)  # set for the step, over `child_environment`'s


def session_steps(args, work: str, site: str, has_cuda: bool) -> list[Step]:
    python = sys.executable
    gpu_bench = [python, os.path.join("benchmarks", "gpu.py")]
    tiny = ["--device", "cpu", "--tiny", "--compile-backend", "eager", "--repeats", "1"] if args.dry_run else []
    notes = {name: {} for name in STEPS}
    release_args = shlex.split(args.release_args)
    options = release_options(release_args)
    no_cuda = "no CUDA device: the GPU presets are not trained on a CPU"

    def chosen_release() -> tuple[str | None, dict | None, str | None]:
        """The task (None: every release is at its target), every task's distance to its target, and the folder
        trained. Chosen among the checkout's releases, the same in every command of a window."""
        task, gaps = (args.task, None) if args.task else furthest_release(options.models_dir or RELEASES_DIR)
        return task, gaps, task and os.path.join(options.models_dir or args.models_copy, f"ndr-{task}")

    def release_to_train(step: str) -> tuple[str, dict | None, str] | None:
        """`chosen_release()` for a step that works on the release, or None (the reason in the step's note)."""
        if not (has_cuda or args.dry_run):
            notes[step]["skipped"] = no_cuda
            return None
        task, gaps, folder = chosen_release()
        if task is None:
            notes[step].update(task=None, ood_test_gap_to_target=gaps)
            notes[step]["skipped"] = "every release has reached its ood_test target"
            return None
        return task, gaps, folder

    def install(limit):
        missing, present = missing_wheels(args.wheels)
        notes["install"].update(wheels=args.wheels, installed=missing, already_installed=present)
        if not missing:
            return None
        return [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target", site,
                *(os.path.join(args.wheels, wheel) for wheel in missing)]  # fmt: skip

    def data(limit):
        if (chosen := release_to_train("data")) is None:
            return None
        task, _, folder = chosen
        # the line is in the copy once a session made it, else in the release the release step copies
        line_dir = folder if os.path.isdir(folder) else os.path.join(RELEASES_DIR, f"ndr-{task}")
        try:
            preset = release_preset(task, line_dir, options)
        except (OSError, ValueError, KeyError) as error:
            notes["data"]["skipped"] = f"{line_dir}: no preset ({error!r}); the release makes its data itself"
            return None
        notes["data"].update(task=task, preset=preset, datasets_cache=args.datasets_cache)
        # train.py's own preparation, into the cache the release's train.py reads (on the CPU: the GPU is measured)
        return [python, os.path.join("training", "train.py"), "--preset", preset, "--prepare_data_only", "true",
                "--output_dir", os.path.join(work, "data"), "--disable_tqdm", "true"]  # fmt: skip

    def tests(limit):
        report = os.path.join(work, "tests", "junit.xml")
        # -v: a line per test as it ends, so that a run stopped at its limit still says which test it was in
        command = [python, "-m", "pytest", "-v", "-m", TEST_MARKERS, "-rfEs", "--durations=20", "-p",
                   "no:cacheprovider", "--continue-on-collection-errors", f"--junitxml={report}"]  # fmt: skip
        if importlib.util.find_spec("pytest_timeout"):  # one hanging test does not take the others' time
            command.append(f"--timeout={max(MIN_TEST_TIMEOUT, int(limit / 3))}")
        return command + (["tests/test_gpu.py"] if args.dry_run else [])

    def attention(limit):
        sizes = ["--seq", "13" if args.dry_run else ATTENTION_LENGTHS]
        return gpu_bench + tiny + sizes + ["--presets", "", "--json", os.path.join(work, "bench", "attention.json")]

    def training_step(limit):
        presets = ["--presets", "ctl_gpu"] if args.dry_run else []
        return gpu_bench + tiny + presets + ["--seq", "", "--json", os.path.join(work, "bench", "training_step.json")]

    def release(limit):
        if (chosen := release_to_train("release")) is None:
            return None
        task, gaps, folder = chosen
        extra = []
        if options.models_dir is None:  # the copy this machine keeps, made where it has none
            extra = ["--models_dir", args.models_copy]
            notes["release"]["copied_from"] = release_copy(os.path.join(RELEASES_DIR, f"ndr-{task}"), folder)
        notes["release"].update(task=task, ood_test_gap_to_target=gaps, folder=folder)
        minutes = max(0.0, limit - min(RELEASE_EVALUATION_SECONDS, 0.3 * limit)) / 60
        minutes = min(minutes, DRY_RUN_RELEASE_MINUTES) if args.dry_run else minutes
        notes["release"]["minutes"] = round(minutes, 2)
        # make gpu-release's command, on the image's python (no make, no .venv there)
        return [python, os.path.join("hub_cards", "make_model_repos.py"), "--gpu", task, "--minutes",
                f"{minutes:.2f}", *release_args, *extra]  # fmt: skip

    commands = dict(install=install, data=data, tests=tests, attention=attention, training_step=training_step,
                    release=release)  # fmt: skip
    cache = {"HF_DATASETS_CACHE": args.datasets_cache}  # the data step writes there what the release reads
    envs = {"data": {**cache, "CUDA_VISIBLE_DEVICES": ""}, "release": cache}
    return [Step(name, commands[name], notes[name], envs.get(name, {})) for name in args.steps]


# --------------------------------------------------------------------------------------------------------- packing


def _move_in_parts(source: str, out: str, name: str, file_bytes: int) -> list[str]:
    """Move `source` into `out` as `name`, or as `name.part-000`, `name.part-001`, ... of at most `file_bytes` each
    (the part names of `modeling_ndr.training.continuation.split_large_files`; this script imports no ndr code)."""
    if os.path.getsize(source) <= file_bytes:
        shutil.move(source, os.path.join(out, name))
        return [name]
    parts = []
    with open(source, "rb") as f:
        for index in itertools.count():
            chunk = f.read(file_bytes)
            if not chunk:
                break
            parts.append(f"{name}.part-{index:03d}")
            with open(os.path.join(out, parts[-1]), "wb") as part:
                part.write(chunk)
    os.remove(source)
    return parts


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
    files = _move_in_parts(session, out, "session.tar.gz", max_file_bytes)
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
                packed["files"] += _move_in_parts(tar, out, f"release-{name}.tar", max_file_bytes)
                break
            os.remove(tar)
            packed["left_out"].append(left_out.format(size / MIB))
    elif release_dir:
        packed["left_out"].append(f"{release_dir} (no such folder)")
    shutil.rmtree(scratch)
    packed["files"].append("session.json")
    return packed


# --------------------------------------------------------------------------------------------------------- session


def environment(has_cuda: bool) -> dict:
    """The versions and the device the results depend on."""
    facts = {"python": sys.version.split()[0], "executable": sys.executable, "cuda_available": has_cuda}
    for package in PACKAGES:
        try:
            facts[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            facts[package] = None
    try:
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30)
        facts["nvidia_smi"] = smi.stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired) as error:
        facts["nvidia_smi"] = str(error)
    return facts


def child_environment(site: str, dry_run: bool) -> dict:
    env = {name: value for name, value in os.environ.items() if name not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    paths = [site, REPO] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env.update(PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")  # fmt: skip
    # the CUDA tests' CPU side on the PyTorch path: building the fused CPU kernel there would take a minute of the
    # GPU's time (a GPU never runs it; the CPU suite checks that it computes what the PyTorch path does)
    env.setdefault("NDR_GEOMETRIC_KERNEL", "torch")
    if dry_run:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_session(args, fakes: dict[str, Callable[[list[str]], list[str]]] | None = None) -> dict:
    """Run the steps within `args.minutes`, packing into `args.out` after each; `fakes` maps a step's name to what
    runs in place of its command (given the command; the tests fake the long steps). Returns the session record
    (`session.json`)."""
    budget = Budget(args.minutes * 60)
    work, out = os.path.abspath(args.work_dir), os.path.abspath(args.out)
    if os.path.isdir(out) and os.listdir(out) and not os.path.isfile(os.path.join(out, "session.json")):
        raise SystemExit(f"gpu_session: {out} is not empty (it holds only what the session packs, emptied first)")
    if os.path.isdir(work) and os.listdir(work) and not os.path.isfile(os.path.join(work, "environment.json")):
        raise SystemExit(f"gpu_session: {work} is not a session's work folder (it would be emptied)")
    shutil.rmtree(work, ignore_errors=True)
    for folder in (out, os.path.join(work, "logs"), os.path.join(work, "tests"), os.path.join(work, "bench")):
        os.makedirs(folder, exist_ok=True)
    site = os.path.join(work, "site")
    if args.dry_run:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch  # (once CUDA is hidden)

    has_cuda = torch.cuda.is_available()
    record = dict(started=datetime.datetime.now().isoformat(timespec="seconds"), minutes=args.minutes,
                  dry_run=args.dry_run, command=sys.argv, environment=environment(has_cuda), steps=[])  # fmt: skip
    with open(os.path.join(work, "environment.json"), "w") as f:
        json.dump(record["environment"], f, indent=2)
    env = child_environment(site, args.dry_run)
    release_dir = None
    steps = session_steps(args, work, site, has_cuda)
    background = None  # (the data step, its process): it runs beside the steps after it

    def finish(step: Step, started: Started) -> dict:
        result = finish_step(started, budget.reserve / 2)
        with open(started.log_path) as f:
            tail = f.read().splitlines()[-12:]
        print("\n".join(f"  | {line}" for line in tail), flush=True)
        if step.name == "data":
            step.note.update(prepared_data(os.path.join(work, "data"), args.datasets_cache))
        return result

    def keep(step: Step, result: dict) -> None:
        result.update(step.note)
        record["steps"].append(result)
        print(f"[session] {step.name}: {result['status']} ({result['seconds']:.0f} s)", flush=True)

    def finish_background(then: str) -> None:
        """Wait for the data step at most `DATA_WAIT_SHARE` of the time left, then stop it as any step past its limit
        (`finish_step`), its note saying so and that `then`; keep its result."""
        step, started = background
        wait = DATA_WAIT_SHARE * max(0.0, budget.left())
        started.limit = min(started.limit, time.monotonic() - started.started + wait)
        result = finish(step, started)
        if result["status"] == "timed out":
            step.note["stopped"] = (f"still running after a wait of {wait:.0f} s ({DATA_WAIT_SHARE:.0%} of the time "
                                    f"left): stopped, so that {then}")  # fmt: skip
        keep(step, result)

    for index, step in enumerate(steps):
        if step.name == "release" and background:  # the release reads what the data step writes: wait for it
            finish_background("the release trains; it makes the data the step did not finish itself")
            background = None
            save(record, work, out, release_dir, budget)
        shares_left = sum(SHARES.get(later.name, 0.0) for later in steps[index:])
        # a step beside the others may take all the time left; each other step its share
        limit = budget.left() if step.name in BACKGROUND else budget.limit(SHARES[step.name], shares_left)
        result = dict(name=step.name, status="skipped", seconds=0.0, limit_seconds=round(limit, 1))
        if limit < MIN_STEP_SECONDS:
            result["reason"] = "no time left"
        elif (argv := step.command(limit)) is None:
            result["status"] = "nothing to do"
        else:
            argv = fakes[step.name](argv) if step.name in (fakes or {}) else argv
            beside = " beside the steps after it" if step.name in BACKGROUND else ""
            print(f"[session] {step.name} (at most {limit:.0f} s{beside}): {shlex.join(argv)}", flush=True)
            log = os.path.join(work, "logs", f"{step.name}.log")
            started = start_step(step.name, argv, log, limit, env={**env, **step.env}, cwd=REPO)
            if step.name in BACKGROUND:
                background = (step, started)
                continue
            result = finish(step, started)
        keep(step, result)
        if step.name == "release" and step.note.get("folder"):
            release_dir = step.note["folder"]
        if step is not steps[-1]:  # (the last step's results are packed once, below)
            save(record, work, out, release_dir, budget)
    if background:  # a command without the release: the data is kept for the next command on this machine
        finish_background("the command ends; the next release makes the data the step did not finish itself")
    save(record, work, out, release_dir, budget)
    print(
        f"[session] {record['seconds']:.0f} s of {budget.seconds:.0f}; {out}: {', '.join(record['packed']['files'])}"
    )
    return record


def prepared_data(data_dir: str, cache: str) -> dict:
    """What the data step prepared (`train.py --prepare_data_only` lists it in `data_dir/data_files.json`): the files
    of the `datasets` cache that the release reads, relative to `cache`, with their modification times in ns (a file
    written again would change its time), and how many of them the step wrote (the others were there)."""
    path = os.path.join(data_dir, "data_files.json")
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        prepared = json.load(f)
    files = {os.path.relpath(file, cache): os.stat(file).st_mtime_ns for file in prepared["cache_files"]
             if os.path.isfile(file)}  # fmt: skip
    return {"cache_files": files, "written": len(prepared["written"])}


def save(record: dict, work: str, out: str, release_dir: str | None, budget: Budget) -> None:
    """Pack the session so far into `out`, with its record (`session.json`, also in the work folder)."""
    with open(os.path.join(work, "session.json"), "w") as f:
        json.dump(record, f, indent=2)
    record["packed"] = pack(out, work, release_dir)
    record["seconds"] = round(budget.elapsed(), 1)
    record["within_budget"] = record["seconds"] <= budget.seconds
    with open(os.path.join(out, "session.json"), "w") as f:
        json.dump(record, f, indent=2)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="Where the at most 8 files go (new or empty).")
    parser.add_argument("--minutes", type=float, default=9.0, help="Wall-clock budget of the whole session.")
    parser.add_argument("--release_args", default="", help="GPU_RELEASE_ARGS of make gpu-release (one string).")
    parser.add_argument("--task", default=None, choices=sorted(TARGETS), help="Release to continue (default: the "
                        "one furthest below its target).")  # fmt: skip
    parser.add_argument("--steps", default=",".join(STEPS), help="Which steps, comma-separated, in their order.")
    parser.add_argument("--wheels", default=os.path.join(REPO, ".whl"), help="The wheel folder (fetch_wheels.sh).")
    parser.add_argument("--work_dir", default=os.path.join(REPO, "outputs", "gpu_session"))
    parser.add_argument("--models_copy", default=MODELS_COPY, help="Where the release trained is kept (a copy of "
                        "hub_cards/models/ndr-<task>/ made where none is there), unless --release_args names "
                        "--models_dir.")  # fmt: skip
    parser.add_argument("--datasets_cache", default=DATASETS_CACHE, help="The `datasets` cache (HF_DATASETS_CACHE) "
                        "into which the data step prepares the release's data, and from which the release reads "
                        "it.")  # fmt: skip
    parser.add_argument("--dry_run", action="store_true", help="Hide CUDA; the same steps at CPU sizes.")
    args = parser.parse_args(argv)
    steps = args.steps.split(",")
    if unknown := sorted(set(steps) - set(STEPS)):
        parser.error(f"unknown steps {', '.join(unknown)}; the steps are {', '.join(STEPS)}")
    args.steps = [name for name in STEPS if name in steps]
    return run_session(args)


if __name__ == "__main__":
    main()
