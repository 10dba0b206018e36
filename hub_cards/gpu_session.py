"""A GPU's time box in one command (`make gpu-session OUT=<folder> MINUTES=9`; docs/clusters.md).

    python hub_cards/gpu_session.py --out OUT --minutes 9 [--release_args "..."] [--steps tests,attention]
    python hub_cards/gpu_session.py --out OUT --minutes 4 --dry_run --release_args "--preset tiny_gpu_release_test ..."

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
   short time box spends most of itself training the release furthest from its target (ListOps today). While the
   data step is still making the data, the release is deferred behind the next step (and again after it), so that
   the GPU's tests and benchmarks use the minutes the release could not train in; it starts once the data is ready,
   with all the time the steps before it left (`deferred_behind` in its record names the steps that ran first);
4. `tests`: the CUDA tests and the Triton kernels' tests (`pytest -m "gpu or triton"`, what `make test-gpu` runs),
   kept as JUnit XML and as text (one line per test, so that a stopped run still says how far it got), and each
   failure's traceback in `tests/failures.txt` as it happens (a stopped run prints no summary);
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
environment; what was packed; for the release, the chunk's speed and when in the window it began to train:
`training_began_s`, `training_began_share`), `session.tar.gz` (logs, test report, benchmark JSON) and
`release-ndr-<task>.tar` with the released folder and its `last-checkpoint/` (split into `.part-NNN` files of 16 MiB
where larger, as `file_parts` keeps files: `cat release-*.tar.part-* | tar -x`).

`--dry_run` (`make gpu-session NO_CUDA=1`) hides CUDA and runs the same steps, sized for the CPU: the CUDA tests of
`tests/unit/test_gpu.py` (they skip), the benchmarks at tiny sizes, and a release continued for at most 0.2 minutes (a
tiny preset through `--release_args`).
"""

import argparse
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable

from gpu_session_plan import (  # noqa: F401  (TARGETS, pack, furthest_release: this script's names too)
    MIB,
    TARGETS,
    Budget,
    chunk_speed,
    furthest_release,
    missing_wheels,
    pack,
    release_copy,
    release_options,
    release_preset,
    training_began,
    wheel_distribution,
)


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_by_path(name: str, path: str):
    """A module of the checkout by its path: this script runs before anything is installed, and
    `modeling_ndr/__init__.py` needs torch and transformers (the module itself uses the standard library only)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


processes = _load_by_path("ndr_processes", os.path.join(REPO, "training", "processes.py"))
RELEASES_DIR = os.path.join(REPO, "hub_cards", "models")
# the steps in their order; `data` runs beside the steps after it (BACKGROUND), until the release (which reads it) or
# the end of the session
STEPS = ("install", "data", "release", "tests", "attention", "training_step")
BACKGROUND = ("data",)
# each other step's share of the time left among the steps still to run (all five: 5% to install, 65% to the release,
# which trains first, then 20% to the tests and 5% and 5% to the benchmarks); the last step gets whatever is left
SHARES = {"install": 0.05, "release": 0.65, "tests": 0.2, "attention": 0.05, "training_step": 0.05}
# the release (or the end of a command without it) waits for a data step still running at most this share of the time
# left, then stops it: by then the step has had the tests' and the benchmarks' time beside it (the release is deferred
# behind them while the data is being made), so one still running is more likely hung (a blocking pyarrow/fsspec
# mismatch) than slow, and the release makes the data the step did not finish itself, reading what it did finish
# (`datasets` renames a cache file into place only once it is complete). Stopping a slow step costs more than waiting
# for it: the release starts that split again (2026-11-27, an H100 machine: ListOps' data took 186 s, a wait of a
# quarter of the time left stopped it at 126 s, and the release spent 186 s making it again and had none left to train)
DATA_WAIT_SHARE = 0.5
MIN_STEP_SECONDS = 5  # a step that would get less is skipped
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
PACKAGES = ("torch", "triton", "transformers", "accelerate", "huggingface_hub", "safetensors", "tokenizers",
            "datasets", "evaluate", "numpy", "pandas", "pyarrow", "pytest")  # fmt: skip


# --------------------------------------------------------------------------------------------------------- steps


@dataclasses.dataclass
class Running:
    """A step's process (`processes.start_process`), with its output in `log_path` and its time limit, counted from
    its start (the data step's is cut once the release is due)."""

    name: str
    process: "processes.Started"
    log_path: str
    limit: float


def start_step(name: str, command: list[str], log_path: str, limit: float, **popen_kwargs) -> Running:
    """Start `command` in its own process group, with its output in `log_path` (the command first)."""
    started = processes.start_process(command, log_path, header=True, own_group=True, **popen_kwargs)
    return Running(name, started, log_path, limit)


def finish_step(step: Running, grace: float) -> dict:
    """Wait for a started step until its limit; past it its process group gets SIGTERM (a training run saves a
    checkpoint then), and SIGKILL `grace` seconds later."""
    done = processes.finish_process(step.process, step.limit, grace)
    status = "timed out" if done.timed_out else "passed" if done.returncode == 0 else "failed"
    return dict(name=step.name, status=status, returncode=done.returncode, seconds=done.seconds,
                limit_seconds=round(step.limit, 1))  # fmt: skip


def run_step(name: str, command: list[str], log_path: str, limit: float, grace: float, **popen_kwargs) -> dict:
    """Run `command` with its output in `log_path`, stopped past `limit` seconds (`finish_step`)."""
    return finish_step(start_step(name, command, log_path, limit, **popen_kwargs), grace)


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
        return command + (["tests/unit/test_gpu.py"] if args.dry_run else [])

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
    # each failed test's traceback as it happens (tests/conftest.py): a stopped run prints no summary
    failures = {"NDR_TEST_FAILURES_LOG": os.path.join(work, "tests", "failures.txt")}
    envs = {"data": {**cache, "CUDA_VISIBLE_DEVICES": ""}, "release": cache, "tests": failures}
    return [Step(name, commands[name], notes[name], envs.get(name, {})) for name in args.steps]


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
    # (the CUDA tests' CPU side takes the PyTorch path without building the fused CPU kernel: tests/conftest.py's
    # `leaves_the_cpu_kernel_unbuilt`)
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

    def finish(step: Step, started: Running) -> dict:
        result = finish_step(started, budget.reserve / 2)
        with open(started.log_path) as f:
            tail = f.read().splitlines()[-12:]
        print("\n".join(f"  | {line}" for line in tail), flush=True)
        if step.name == "data":
            step.note.update(prepared_data(os.path.join(work, "data"), args.datasets_cache))
        if step.name == "release" and step.note.get("folder"):  # the chunk it trained: samples/s, time per step
            step.note["speed"] = chunk_speed(step.note["folder"])
        if step.name == "release":  # when, in the window, it began to train (after the data, deferrals and set-up)
            began = training_began(started.log_path, budget.wall_started)
            step.note["training_began_s"] = began
            step.note["training_began_share"] = None if began is None else round(began / budget.seconds, 3)
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
        started.limit = min(started.limit, time.monotonic() - started.process.started + wait)
        result = finish(step, started)
        if result["status"] == "timed out":
            step.note["stopped"] = (f"still running after a wait of {wait:.0f} s ({DATA_WAIT_SHARE:.0%} of the time "
                                    f"left): stopped, so that {then}")  # fmt: skip
        keep(step, result)

    def data_running() -> bool:
        popen = background[1].process.process if background else None
        return popen is not None and popen.poll() is None

    pending = list(steps)
    while pending:
        step = pending.pop(0)
        if step.name == "release" and pending and data_running():
            # the data is still being made (ListOps' 1M rows take minutes of the CPU): the next step (the GPU's tests,
            # a benchmark) runs beside it first, and the release after it
            step.note.setdefault("deferred_behind", []).append(pending[0].name)
            pending.insert(1, step)
            step = pending.pop(0)
        if step.name == "release" and background:  # the release reads what the data step writes: wait for it
            finish_background("the release trains; it makes the data the step did not finish itself")
            background = None
            save(record, work, out, release_dir, budget)
        shares_left = sum(SHARES.get(later.name, 0.0) for later in [step, *pending])
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
        if pending:  # (the last step's results are packed once, below)
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
