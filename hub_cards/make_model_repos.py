"""Build (and push) the released models: `hub_cards/models/ndr-<name>/`, each the folder a user gets from the Hub.

    python hub_cards/make_model_repos.py                 # copy every trained run into hub_cards/models/
    python hub_cards/make_model_repos.py --train         # train the runs that are missing first (make release)
    python hub_cards/make_model_repos.py --push --org ORG [--names ndr-ctl-forward]   # upload (needs a network)
    python hub_cards/make_model_repos.py --stage DIR     # what --push uploads, written to DIR instead
    python hub_cards/make_model_repos.py --refresh       # re-render built releases' cards (no run in outputs/)
    python hub_cards/make_model_repos.py --names ndr-ctl-backward --other_seeds outputs/seeds/seed1 ...  # its card
                                                         # says what its recipe gave with other training seeds
    python hub_cards/make_model_repos.py --continue arithmetic --minutes 150   # keep training a release (this CPU)
    python hub_cards/make_model_repos.py --gpu listops --minutes 25          # the paper-size model on this GPU
    python hub_cards/make_model_repos.py --cooldown arithmetic --steps 4000  # a decayed branch of the line, released
    python hub_cards/make_model_repos.py --cooldown arithmetic --resume_branch --minutes 60  # on from a time box's cut

Each release is one training run of `training/train.py` with a task preset, launched as `make demo` launches it (two
gloo processes on the CPU), into `outputs/<run>/`. Its folder here holds `config.json` (with `auto_map` and
`id2label`), `model.safetensors`, the tokenizer files, `eval_results.json`, `run_config.json` and a model card whose
model-index holds the measured accuracy per split, with the command, preset, training time and machine.

Releases keep training (`release_line.py`, `release_cooldown.py` beside this script; docs/training.md): `--continue`
resumes a release's line (`last-checkpoint/`) on this CPU for a time box and replaces the release only when
`ood_valid` improved; `--gpu` does the same on this machine's GPUs (a release without a line starts one of the task's
GPU preset); `--cooldown` trains a branch whose learning rate decays to zero over N steps, released if at least as
good (`--resume_branch`: on from where a time box cut it, its `cooldown-checkpoint/`). A line of another recipe is
refused in one line (`--switch_recipe` starts a new line).

The modeling and tokenizer code is not committed here (copies would drift from `modeling_ndr/`): `--push` and
`--stage` add it from the installed package (`save_pretrained` writes it), so the pushed repository also loads with
`trust_remote_code=True` where `ndr` is not installed.
"""

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile

import torch

from line_records import BRANCH_CHECKPOINT, CURVE_FILE, LAST_CHECKPOINT, STATE_FOLDERS, read_line, total_batch
from modeling_ndr.training import export_model, read_preset
from modeling_ndr.training.atomic import atomic_folder, clean_leftovers
from modeling_ndr.training.errors import UsageError, exit_on_usage_error, read_json
from release_check import CHECK_SAMPLES, release_checker
from release_cooldown import cooldown_release
from release_line import continue_release, release_lock


HUB_CARDS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HUB_CARDS)
MODELS_DIR = os.path.join(HUB_CARDS, "models")
DEFAULT_ORG = "ndr-org"
MAX_BYTES = 3 * 1024 * 1024
# the paper-size models are larger (ListOps' d=512 model holds 2.6M parameters, 10.5 MB in float32)
GPU_MAX_BYTES = 16 * 1024 * 1024
RELEASED_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "README.md",
    "eval_results.json",
    "run_config.json",
)
# what a release folder keeps when it is re-rendered (--refresh, make release): the line's state (and an unfinished
# cooldown branch's) and its curve
LINE_FILES = (*STATE_FOLDERS, CURVE_FILE)


@dataclasses.dataclass(frozen=True)
class Release:
    preset: str
    run: str  # under outputs/
    direction: str | None = None
    flags: tuple[str, ...] = ()  # more train.py flags of the release's run

    def train_command(self) -> list[str]:
        """The training launch, run from the repository root: paths in it are relative, as the run records them."""
        command = cpu_launch() + ["--preset", self.preset, "--output_dir", os.path.relpath(self.output_dir(), REPO),
                                  "--disable_tqdm", "true"]  # fmt: skip
        return command + (["--direction", self.direction] if self.direction else []) + list(self.flags)

    def output_dir(self) -> str:
        return os.path.join(REPO, "outputs", self.run)


def cpu_launch() -> list[str]:
    """train.py in two gloo processes on this CPU, as `make demo` launches it (its environment: `CPU_ENV`)."""
    return [os.path.join(os.path.dirname(sys.executable), "accelerate"), "launch", "--multi_gpu", "--num_processes",
            "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            os.path.join("training", "train.py"), "--use_cpu", "--ddp_find_unused_parameters", "false"]  # fmt: skip


CPU_ENV = {"ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}


RELEASES = {
    # Both CTL directions come from the ~30-minute recipe (README): forward 0.995, backward 0.996 on ood_test, where
    # make demo (ctl_cpu, ~10 minutes) gives forward 0.87-0.98 depending on where it stops, and backward chance.
    # They are make demo-forward-long and make demo-backward-long (the preset was called ctl_backward_cpu_long when
    # they trained; their run records name it by its name now, the recipe unchanged).
    "ndr-ctl-forward": Release("ctl_cpu_long", "ctl_forward_cpu_long", "forward"),
    "ndr-ctl-backward": Release("ctl_cpu_long", "ctl_backward_cpu_long", "backward"),
    "ndr-arithmetic": Release("arithmetic_cpu", "arithmetic_cpu"),
    "ndr-listops": Release("listops_cpu", "listops_cpu"),
    # one output per digit position (the carry task of docs/token-tasks.md): the NDR of make compare-tokens, whose
    # run is this preset's (copied to outputs/carry_cpu)
    "ndr-addition": Release("carry_cpu", "carry_cpu"),
    # the Universal Transformer's copy and reverse (docs/token-tasks.md): coupled positions read by relative keys; the
    # model computes its coupled ids itself (config.position_coupling), so the pipeline answers as training scored
    "ndr-copy": Release("copy_cpu", "copy_cpu"),
    "ndr-reverse": Release("reverse_cpu", "reverse_cpu"),
    # CTL++'s parallel_branch variant (R; docs/ctlpp.md): the preset's run trained on to 11,134 steps, where a time box
    # stopped it (a constant rate: the same run as one of 11,134 steps), its last checkpoint exported
    "ndr-ctlpp": Release("ctlpp_cpu", "ctlpp/R_seed42", flags=("--max_steps", "11134")),
}
# make gpu-release TASK=<task>: a release's line on this machine's GPUs (each call resumes it for MINUTES); a release
# without a line starts one of the paper-size preset here. The work folder is the release's, whatever the device.
GPU_RELEASES = {
    "ctl-forward": ("ndr-ctl-forward", Release("ctl_gpu", "release/ndr-ctl-forward")),
    "ctl-backward": ("ndr-ctl-backward", Release("ctl_backward_gpu", "release/ndr-ctl-backward")),
    "arithmetic": ("ndr-arithmetic", Release("arithmetic_gpu", "release/ndr-arithmetic")),
    "listops": ("ndr-listops", Release("listops_gpu", "release/ndr-listops")),
}
# make release-continue TASK=<task>: the line a release keeps training on this CPU (2 gloo processes)
CPU_CONTINUATIONS = {
    "arithmetic": ("ndr-arithmetic", Release("arithmetic_cpu_continue", "release/ndr-arithmetic")),
    "listops": ("ndr-listops", Release("listops_cpu_continue", "release/ndr-listops")),
}
# the paper's NDR: training samples (steps x 512) and ood_test accuracy, marked on a release's learning curve
PAPER_BUDGETS = {
    "ndr-ctl-forward": {"samples": 30_000 * 512, "ood_test": 1.00},
    "ndr-ctl-backward": {"samples": 30_000 * 512, "ood_test": 1.00},
    "ndr-arithmetic": {"samples": 50_000 * 512, "ood_test": 0.98},  # 0.98 "after about 50K steps"
    "ndr-listops": {"samples": 100_000 * 512, "ood_test": 0.99},
}


def build(name: str, org: str, train: bool, refresh: bool = False) -> str | None:
    """Copy a trained run into `hub_cards/models/<name>/` (training it first with `train`); None if untrained.
    With `refresh`, a release whose run is not in `outputs/` is re-rendered from its own folder (same weights,
    results and run record; the card and config as today's code writes them)."""
    release = RELEASES[name]
    run = release.output_dir()
    released = os.path.join(MODELS_DIR, name)
    # a replacement a kill cut in two: finished (else a line's last-checkpoint/ is a hidden sibling, left out below)
    for folder in (released, *(os.path.join(released, state) for state in STATE_FOLDERS)):
        clean_leftovers(folder)
    if os.path.isdir(os.path.join(released, LAST_CHECKPOINT)):  # its line makes it now, not the run of RELEASES
        if refresh:
            return _copy_release(name, released, org)
        print(f"[release] {name}: keeps training (its last-checkpoint/); make release-continue, not make release")
        return released
    if refresh and not os.path.isfile(os.path.join(run, "eval_results.json")):
        if not os.path.isfile(os.path.join(released, "eval_results.json")):
            print(f"[release] {name}: nothing to refresh (no run in {run}, no release in {released})")
            return None
        return _copy_release(name, released, org)  # the export is staged before the folder is replaced
    if not os.path.isfile(os.path.join(run, "eval_results.json")):
        if not train:
            command = " ".join(release.train_command())
            print(f"[release] {name}: no trained run in {run} (--train trains it: {command})")
            return None
        print(f"[release] {name}: training {' '.join(release.train_command())}", flush=True)
        subprocess.run(release.train_command(), check=True, env=dict(os.environ, **CPU_ENV), cwd=REPO)
    return _copy_release(name, run, org)


def continue_line(
    name: str,
    release: Release,
    minutes: float | None,
    command: list[str],
    processes: int,
    preset: str | None = None,
    outputs_dir: str | None = None,
    models_dir: str = MODELS_DIR,
    org: str = DEFAULT_ORG,
    switch_recipe: bool = False,
    warm_start: bool = True,
    env: dict | None = None,
    chunk_steps: int | None = None,
    resume: str | None = None,
    max_bytes: int = MAX_BYTES,
    check_samples: int = CHECK_SAMPLES,
) -> dict:
    """Resume the training line of release `name` for `minutes` (`release_line.continue_release`), then print what
    happened. The chunk trains the line's own recipe, with its global batch whatever the number of processes here;
    `preset` or `switch_recipe` (a new line) choose another, and a release without a line starts one of
    `release.preset`.

    Args:
        name: the release (`ndr-<task>`).
        release: its default preset and work folder under outputs/.
        minutes: the time box.
        command: the launch of train.py without `--preset` and `--output_dir` (added here).
        processes: the processes the launch starts (for the recipe's total batch).
        preset: another preset than the line's or the release's (the tests use tiny ones).
        outputs_dir: where the work folder goes (default `outputs/`).
        models_dir: where the release folder is (default `hub_cards/models/`).
        org: the hub namespace of the card.
        switch_recipe: a line of another recipe is replaced by a new line of this one.
        warm_start: a new line starts from the release's weights.
        env: the environment of the launch.
        chunk_steps: stop the chunk after this many steps instead (the tests' deterministic chunks).
        resume: the command that continues the line, as the card shows it (`make release-continue TASK=...`).
        max_bytes: the size budget of the released files.
        check_samples: the release check's fresh samples of the selection split (`release_check`; 0: no check).

    Returns:
        `continue_release`'s summary.
    """
    release_dir = os.path.join(models_dir, name)
    line = read_line(release_dir)
    global_batch = None
    if preset is None and line is not None and not switch_recipe:  # the line's recipe, whatever device started it
        preset, global_batch = line["recipe"]["preset"], line["recipe"]["total_batch"]
        command = command + ["--total_batch_size", str(global_batch)]
    preset = preset or release.preset
    work_dir, shown = work_folder(outputs_dir, release.run)
    values = read_preset(preset)
    recipe = {"preset": preset, "values": values, "total_batch": global_batch or total_batch(values, processes),
              "resume": resume}  # fmt: skip
    summary = continue_release(
        release_dir, work_dir, command + ["--preset", preset, "--output_dir", shown, "--disable_tqdm", "true",
                                "--keep_tied_best", "true"],
        minutes, recipe, publisher(name, org, max_bytes), warm_start=warm_start, switch_recipe=switch_recipe,
        paper=PAPER_BUDGETS.get(name), chunk_steps=chunk_steps, check=checker(check_samples), cwd=REPO, env=env,
    )  # fmt: skip
    value = f"{summary['release_value']:.4f}" if summary["release_value"] is not None else "none"
    outcome = "released" if summary["released"] else "release kept"
    horizon = "; the line reached its horizon" if summary["finished"] else ""
    print(f"[release] {name}: line at step {summary['step']} ({summary['samples'] / 1e6:.2f}M samples); {outcome} "
          f"({summary['metric']} {value}){check_line(summary['release_check'])}{horizon}")  # fmt: skip
    return summary


def checker(samples: int):
    """The release check of `samples` fresh samples (`release_check.release_checker`); None for 0 (no check)."""
    return release_checker(samples) if samples else None


def check_line(record: dict | None) -> str:
    """The release check's result as the `[release]` line shows it ('' where none ran)."""
    if not record:
        return ""
    if "error" in record:
        return f"; the release check of step {record['step']} could not run ({record['error']})"
    return (f"; release check of step {record['step']}: {record['candidate']:.4f} vs the release's "
            f"{record['release']:.4f} on {record['samples']:,} fresh {record['split']} samples")  # fmt: skip


def work_folder(outputs_dir: str | None, run: str) -> tuple[str, str]:
    """A line's work folder under `outputs_dir` (default `outputs/`), and how train.py's `--output_dir` names it
    (relative to the repository where it lies inside it, as run records show paths)."""
    work_dir = os.path.join(outputs_dir or os.path.join(REPO, "outputs"), run)
    relative = os.path.relpath(work_dir, REPO)
    return work_dir, work_dir if relative.startswith("..") else relative


def publisher(name: str, org: str, max_bytes: int):
    """The `publish` of `continuation.write_release` for release `name`: its files with the card of `org/name`."""

    def publish(checkpoint: str, staging: str, eval_results: dict, run_config: dict) -> None:
        _released_files(name, checkpoint, staging, org, max_bytes, eval_results, run_config)

    return publish


def cpu_continue(task: str, minutes: float, **kwargs) -> dict:
    """`make release-continue`: the line of release `task` (`CPU_CONTINUATIONS`) on this CPU for `minutes`, two gloo
    processes as `make demo` launches them; a release without a line starts one of the task's CPU preset."""
    if task not in CPU_CONTINUATIONS:
        raise UsageError(
            f"--continue {task}: no CPU line for it; choose one of {', '.join(sorted(CPU_CONTINUATIONS))}"
        )
    name, release = CPU_CONTINUATIONS[task]
    resume = f"make release-continue TASK={task} MINUTES=<minutes>"
    return continue_line(name, release, minutes, cpu_launch(), processes=2, env=dict(os.environ, **CPU_ENV),
                         resume=resume, **kwargs)  # fmt: skip


def cpu_cooldown(
    task: str,
    steps: int | None,
    minutes: float | None = None,
    decay_type: str | None = None,
    outputs_dir: str | None = None,
    models_dir: str = MODELS_DIR,
    org: str = DEFAULT_ORG,
    command: list[str] | None = None,
    processes: int = 2,
    env: dict | None = None,
    chunk_steps: int | None = None,
    resume_branch: bool = False,
    check_samples: int = CHECK_SAMPLES,
) -> dict:
    """`make release-cooldown`: a cooldown branch of release `task`'s line on this CPU (`cooldown.cooldown_release`),
    with the line's recipe and global batch, into the work folder `<line's work folder>-cooldown`;
    `make release-cooldown-resume`: the release's unfinished branch, trained on from its `cooldown-checkpoint/`.

    Args:
        task: a key of `CPU_CONTINUATIONS`.
        steps: the branch's steps (the decay to zero); None when resuming a branch (it has its own).
        minutes: a time box for this run of the branch.
        decay_type: the decay's shape (linear, cosine, 1-sqrt; None: linear, or a resumed branch's own).
        outputs_dir, models_dir, org: as `continue_line`'s.
        command: the launch of train.py (default: two gloo processes, as `make release-continue`).
        processes: the processes `command` starts.
        env: the launch's environment (default: `CPU_ENV`).
        chunk_steps: stop this run after this many steps (`--max_chunk_steps`).
        resume_branch: resume the unfinished branch instead of starting one.
        check_samples: the release check's fresh samples (`release_check`; 0: no check).
    """
    if task not in CPU_CONTINUATIONS:
        raise UsageError(f"--cooldown {task}: no line for it; choose one of {', '.join(sorted(CPU_CONTINUATIONS))}")
    name, release = CPU_CONTINUATIONS[task]
    release_dir = os.path.join(models_dir, name)
    line = read_line(release_dir)
    if line is None:
        raise UsageError(f"{name}: no line to branch from (make release-continue TASK={task} starts one)")
    work_dir, shown = work_folder(outputs_dir, release.run + "-cooldown")
    recipe = line["recipe"]
    launch = (command or cpu_launch()) + ["--total_batch_size", str(recipe["total_batch"])]  # the line's batch
    summary = cooldown_release(
        release_dir, work_dir,
        launch + ["--preset", recipe["preset"], "--output_dir", shown, "--disable_tqdm", "true"],
        steps, publisher(name, org, MAX_BYTES), paper=PAPER_BUDGETS.get(name), decay_type=decay_type,
        minutes=minutes, chunk_steps=chunk_steps, resume_branch=resume_branch, check=checker(check_samples), cwd=REPO,
        env=env or dict(os.environ, **CPU_ENV),
    )  # fmt: skip
    value = f"{summary['release_value']:.4f}" if summary["release_value"] is not None else "none"
    outcome = "released" if summary["released"] else "release kept"
    print(
        f"[release] {name}: cooldown branch from step {summary['start_step']} at step {summary['step']} of "
        f"{summary['end_step']}; best {summary['metric']} {summary['branch_best']}; {outcome} ({value})"
        f"{check_line(summary['release_check'])}"
    )
    if not summary["finished"]:
        print(f"[release] {name}: the branch is unfinished (its {BRANCH_CHECKPOINT}/); "
              f"make release-cooldown-resume TASK={task} RELEASE_ARGS=\"--minutes <minutes>\" trains on")  # fmt: skip
    return summary


def gpu_release(task: str, minutes: float, processes: int | None = None, **kwargs) -> dict:
    """`make gpu-release`: the line of release `task` on this machine's GPUs for `minutes` (a line a CPU started
    trains on here, faster, with its global batch); a release without a line starts one of the task's GPU preset
    (the paper's recipe, `GPU_RELEASES`) from a new model.

    Args:
        task: a key of `GPU_RELEASES`.
        minutes: the time box.
        processes: data-parallel processes (default: one per visible GPU, one without CUDA).
        **kwargs: `continue_line`'s `preset`, `outputs_dir`, `models_dir`, `org`, `switch_recipe`.
    """
    name, release = GPU_RELEASES[task]
    processes = processes or max(1, torch.cuda.device_count())
    resume = f"make gpu-release TASK={task} MINUTES=<minutes>"
    # a CPU line's preset asks for the CPU: on a GPU it is told not to (without one, as in a dry run, it trains there)
    command = gpu_launch(processes) + (["--use_cpu", "false"] if torch.cuda.is_available() else [])
    return continue_line(name, release, minutes, command, processes, warm_start=False, resume=resume,
                         max_bytes=GPU_MAX_BYTES, **kwargs)  # fmt: skip


def gpu_launch(processes: int) -> list[str]:
    """The launch of train.py on one GPU, or `accelerate launch` with `configuration/accelerate/multi_gpu.yaml` on
    several. The preset sets the precision (`precision: auto`) and the global batch (`total_batch_size`), whatever the
    number of GPUs."""
    train = os.path.join("training", "train.py")
    if processes == 1:
        return [sys.executable, train]
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    config = os.path.join("configuration", "accelerate", "multi_gpu.yaml")
    return [accelerate, "launch", "--config_file", config, "--num_processes", str(processes), train]


def _copy_release(name: str, run: str, org: str, models_dir: str | None = None, max_bytes: int = MAX_BYTES,
                  run_config: dict | None = None, study: bool = True) -> str:  # fmt: skip
    target = os.path.join(models_dir or MODELS_DIR, name)  # MODELS_DIR as it is now, the folder build() looked at
    # the new release is complete in a hidden sibling before it replaces the old one (atomic_folder): an interrupted
    # build, or one over the size budget, leaves the previous release as it was; the line's state stays with it, and
    # a continuation of the release waits for no one: one of them is refused (release_lock)
    with release_lock(target), atomic_folder(target) as new:
        size = _released_files(name, run, new, org, max_bytes, run_config=run_config, study=study)
        for entry in LINE_FILES:
            if os.path.isdir(kept := os.path.join(target, entry)):
                shutil.copytree(kept, os.path.join(new, entry))
            elif os.path.isfile(kept):
                shutil.copy2(kept, new)
    print(f"[release] {name}: {target} ({size / 2**20:.2f} MB)")
    return target


def _released_files(name, source, target, org, max_bytes, eval_results=None, run_config=None, study=True) -> int:
    """Export `source` (a run or a checkpoint) with the card of `org/name` and copy the released files into `target`;
    returns their size (a `SystemExit` over `max_bytes`). `study=False`: the export study (the adaptive-steps choice)
    is not run again, the model's config and the results and record of `source` are kept."""
    from adaptive_study import export_study  # a module of the training scripts (release_line puts them on sys.path)

    with tempfile.TemporaryDirectory() as staging:
        export_model(source, staging, eval_results, run_config, f"{org}/{name}", study=export_study if study else None)
        for file in RELEASED_FILES:
            if os.path.isfile(os.path.join(staging, file)):
                shutil.copy2(os.path.join(staging, file), target)
    size = sum(os.path.getsize(os.path.join(target, file)) for file in RELEASED_FILES
               if os.path.isfile(os.path.join(target, file)))  # fmt: skip
    if size > max_bytes:
        raise SystemExit(f"[release] {name}: {size / 2**20:.1f} MB is over the {max_bytes / 2**20:.0f} MB budget")
    return size


# what a run of another seed must share with the release to count as its recipe (keys both run records hold)
RECIPE_FIELDS = ("preset", "preset_values", "task", "model", "variant", "config_values")
RUN_ONLY_FIELDS = {"output_dir", "precision"}  # where a run wrote, and the precision asked for (recorded per run)


def record_other_seeds(name: str, runs: list[str], org: str = DEFAULT_ORG, models_dir: str | None = None) -> list:
    """Record in release `name`'s `run_config.json` what other training seeds of its recipe gave, and re-render its
    card with them (the weights and results unchanged). `runs` are `train.py` output folders (their `export/`, as
    train.py writes it, or an export folder itself); each must have trained the release's recipe (preset, task,
    model, steps) with another seed, else a `UsageError` names the run and the field. The list replaces the one
    recorded before, so it holds exactly the runs given."""
    released = os.path.join(models_dir or MODELS_DIR, name)
    release = read_json(os.path.join(released, "run_config.json"))
    if release is None:
        raise UsageError(f"{name}: {released} has no run_config.json (not built: run `make release` first)")
    recorded = []
    for run in runs:
        folder = os.path.join(run, "export") if os.path.isdir(os.path.join(run, "export")) else run
        config, results = (read_json(os.path.join(folder, file)) for file in ("run_config.json", "eval_results.json"))
        if config is None or results is None:
            raise UsageError(f"--other_seeds {run}: no run_config.json and eval_results.json (not a train.py run)")
        for field in RECIPE_FIELDS:
            ours, theirs = release.get(field), config.get(field)
            if isinstance(ours, dict) and isinstance(theirs, dict):
                keys = (set(ours) & set(theirs)) - RUN_ONLY_FIELDS
                ours, theirs = {key: ours[key] for key in keys}, {key: theirs[key] for key in keys}
            if ours != theirs:
                raise UsageError(f"--other_seeds {run}: its {field} is not {name}'s ({theirs} against {ours})")
        steps = (config.get("training") or {}).get("steps"), (release.get("training") or {}).get("steps")
        if steps[0] != steps[1]:
            raise UsageError(f"--other_seeds {run}: trained {steps[0]} steps, {name} {steps[1]}")
        if config.get("seed") == release.get("seed") or config.get("seed") in [entry["seed"] for entry in recorded]:
            raise UsageError(f"--other_seeds {run}: seed {config.get('seed')} is already {name}'s or given before")
        recorded.append({
            "seed": config.get("seed"),
            "accuracy": {split: values["accuracy"] for split, values in results.items()},
            "fixed": {split: values["fixed_steps"]["accuracy"] for split, values in results.items()
                      if values.get("fixed_steps")},
            "machine": ", ".join(filter(None, (config.get("machine"), config.get("precision")))),
            "commit": config.get("commit"),
            "finished": (config.get("training") or {}).get("finished"),
        })  # fmt: skip
    # the record and the card it renders replace the release's together; the release's own choice of adaptive steps
    # and its results stand (the export study is not run again)
    _copy_release(name, released, org, models_dir, run_config={**release, "other_seeds": recorded}, study=False)
    print(f"[release] {name}: {len(recorded)} other seed(s) recorded in its run_config.json and card")
    return recorded


def stage(name: str, out_dir: str) -> str:
    """The folder `--push` uploads: the released files plus the modeling code (written by `save_pretrained`)."""
    from transformers import AutoTokenizer

    from modeling_ndr.training.export import head_class

    source = os.path.join(MODELS_DIR, name)
    if not os.path.isfile(os.path.join(source, "config.json")):
        raise SystemExit(f"[release] {name}: {source} is not built (run `make release` first)")
    target = os.path.join(out_dir, name)
    shutil.copytree(source, target, dirs_exist_ok=True)
    head_class(source).from_pretrained(source).save_pretrained(target)  # the same weights (and head), + code
    AutoTokenizer.from_pretrained(source).save_pretrained(target)  # the same tokenizer, + tokenization_ndr.py
    for file in ("README.md", "config.json"):  # the released versions, byte for byte
        shutil.copy2(os.path.join(source, file), target)
    return target


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--names", nargs="+", choices=sorted(RELEASES), default=list(RELEASES))
    parser.add_argument("--org", default=DEFAULT_ORG, help="Hub namespace used in the cards and by --push.")
    parser.add_argument("--train", action="store_true", help="Train the runs that do not exist yet.")
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="Re-render the cards of built releases whose runs are not in outputs/ (after a template change).",
    )
    parser.add_argument(
        "--other_seeds",
        nargs="+",
        metavar="RUN",
        help="With one --names: record what these runs of the release's recipe with other seeds gave (train.py "
        "output folders) in its run_config.json, and re-render its card to say so.",
    )
    parser.add_argument("--push", action="store_true", help="Upload each built folder with its modeling code.")
    parser.add_argument("--stage", help="Write what --push would upload into this folder instead.")
    line = parser.add_argument_group("releases that keep training (make release-continue, make gpu-release)")
    line.add_argument("--continue", dest="continue_task", choices=sorted(CPU_CONTINUATIONS),
                      help="Resume this release's line on this CPU for --minutes.")  # fmt: skip
    line.add_argument("--gpu", choices=sorted(GPU_RELEASES), help="Resume this task's GPU line for --minutes.")
    line.add_argument(
        "--cooldown",
        choices=sorted(CPU_CONTINUATIONS),
        help="Train a branch of this release's line whose learning rate decays to 0 over --steps.",
    )
    line.add_argument("--steps", type=int, default=None, help="The cooldown branch's steps.")
    line.add_argument("--decay_type", default=None, help="The cooldown's shape: linear (default), cosine or 1-sqrt.")
    line.add_argument(
        "--resume_branch",
        action="store_true",
        help="With --cooldown: train on the release's unfinished branch (its cooldown-checkpoint/).",
    )
    line.add_argument("--minutes", type=float, default=None, help="The time box of the chunk (wall-clock minutes).")
    line.add_argument("--switch_recipe", action="store_true", help="Replace a line of another recipe by a new one.")
    line.add_argument("--from_scratch", action="store_true", help="A new line starts from a new model.")
    line.add_argument("--processes", type=int, default=None, help="GPU processes (default: one per visible GPU).")
    line.add_argument("--preset", default=None, help="Another preset than the release's.")
    line.add_argument("--outputs_dir", default=None, help="Where the work folder goes (default: outputs/).")
    line.add_argument("--models_dir", default=MODELS_DIR, help="Where the release folder is.")
    line.add_argument(
        "--check_samples",
        type=int,
        default=CHECK_SAMPLES,
        help="A checkpoint that wins on ood_valid replaces the release only if it is also at least as accurate on "
        "this many fresh samples of the split (0: no check).",
    )
    args = parser.parse_args(argv)
    if args.check_samples < 0:
        raise UsageError(f"--check_samples {args.check_samples}: the release check's sample size, 0 (none) or more")
    if args.resume_branch and not args.cooldown:
        raise UsageError("--resume_branch resumes a cooldown branch: pass --cooldown TASK too")
    if args.other_seeds:
        if len(args.names) != 1:
            raise UsageError("--other_seeds RUN ...: name the one release they belong to with --names")
        record_other_seeds(args.names[0], args.other_seeds, args.org)
        return
    if args.cooldown:
        if not args.resume_branch and (not args.steps or args.steps <= 0):
            raise UsageError("--steps N (N > 0): the cooldown branch's steps")
        cpu_cooldown(args.cooldown, args.steps, args.minutes, args.decay_type, args.outputs_dir, args.models_dir,
                     args.org, resume_branch=args.resume_branch, check_samples=args.check_samples)  # fmt: skip
        return
    if args.gpu or args.continue_task:
        if not args.minutes or args.minutes <= 0:
            raise UsageError("--minutes M (M > 0): the time box of the chunk")
        common = {
            "preset": args.preset,
            "outputs_dir": args.outputs_dir,
            "models_dir": args.models_dir,
            "org": args.org,
            "check_samples": args.check_samples,
        }
        if args.gpu:
            gpu_release(args.gpu, args.minutes, args.processes, switch_recipe=args.switch_recipe, **common)
        else:
            cpu_continue(args.continue_task, args.minutes, switch_recipe=args.switch_recipe,
                         warm_start=not args.from_scratch, **common)  # fmt: skip
        return
    if args.push or args.stage:
        from huggingface_hub import HfApi

        with tempfile.TemporaryDirectory() as scratch:
            for name in args.names:
                folder = stage(name, args.stage or scratch)
                if args.push:
                    api = HfApi()
                    api.create_repo(f"{args.org}/{name}", exist_ok=True)
                    api.upload_folder(repo_id=f"{args.org}/{name}", folder_path=folder, commit_message="NDR release")
                    print(f"[release] pushed {args.org}/{name}")
                else:
                    print(f"[release] staged {folder}")
        return
    built = [name for name in args.names if build(name, args.org, args.train, args.refresh)]
    missing = sorted(set(args.names) - set(built))
    untrained = f"; not trained: {', '.join(missing)}" if missing else ""
    print(f"[release] built: {', '.join(built) or 'none'}{untrained}")


if __name__ == "__main__":
    exit_on_usage_error(main)  # a folder it must not replace: one line, exit status 2
