"""Build (and push) the released models: `hub_cards/models/ndr-<name>/`, each the folder a user gets from the Hub.

    python hub_cards/make_model_repos.py                 # copy every trained run into hub_cards/models/
    python hub_cards/make_model_repos.py --train         # train the runs that are missing first (make release)
    python hub_cards/make_model_repos.py --push --org ORG [--names ndr-ctl-forward]   # upload (needs a network)
    python hub_cards/make_model_repos.py --stage DIR     # what --push uploads, written to DIR instead
    python hub_cards/make_model_repos.py --refresh       # re-render built releases' cards (no run in outputs/)
    python hub_cards/make_model_repos.py --gpu listops --chunk_minutes 8.5   # the paper-size model on this GPU

Each release is one training run of `training/train.py` with a task preset, launched as `make demo` launches it (two
gloo processes on the CPU), into `outputs/<run>/`. Its folder here holds `config.json` (with `auto_map` and
`id2label`), `model.safetensors`, the tokenizer files, `eval_results.json`, `run_config.json` and a model card whose
model-index holds the measured accuracy per split, with the command, preset, training time and machine.

`--gpu TASK` (`make gpu-release TASK=...`) trains the task's GPU preset (`configuration/<task>_gpu.yaml`, the paper's
recipe fitted into 40 minutes of one H100) on this machine's GPUs in resumable chunks (`run_in_chunks`: each chunk
stops with a checkpoint after `--chunk_minutes` and the next resumes it; running the command again continues an
interrupted release), evaluates, and writes `hub_cards/models/ndr-<task>/` with its card, replacing the CPU release.

The modeling code is not committed here (copies would drift from `modeling_ndr/`): `--push` and `--stage` add it
from the installed package (`save_pretrained` writes it), so the pushed repository also loads with
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

from modeling_ndr.training import export_model, run_in_chunks
from modeling_ndr.training.atomic import atomic_folder
from modeling_ndr.training.errors import exit_on_usage_error


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


@dataclasses.dataclass(frozen=True)
class Release:
    preset: str
    run: str  # under outputs/
    direction: str | None = None

    def train_command(self) -> list[str]:
        """The training launch, run from the repository root: paths in it are relative, as the run records them."""
        bin_dir = os.path.dirname(sys.executable)
        command = [os.path.join(bin_dir, "accelerate"), "launch", "--multi_gpu", "--num_processes", "2",
                   "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                   os.path.join("training", "train.py"), "--preset", self.preset, "--use_cpu",
                   "--ddp_find_unused_parameters", "false", "--output_dir", os.path.relpath(self.output_dir(), REPO),
                   "--disable_tqdm", "true"]  # fmt: skip
        return command + (["--direction", self.direction] if self.direction else [])

    def output_dir(self) -> str:
        return os.path.join(REPO, "outputs", self.run)


RELEASES = {
    # Both CTL directions come from the ~30-minute recipe (README): forward 0.995, backward 0.996 on ood_test, where
    # make demo (ctl_cpu, ~10 minutes) gives forward 0.87-0.98 depending on where it stops, and backward chance.
    # They are make demo-forward-long and make demo-backward-long (their run records name the preset by its old name,
    # ctl_backward_cpu_long).
    "ndr-ctl-forward": Release("ctl_cpu_long", "ctl_forward_cpu_long", "forward"),
    "ndr-ctl-backward": Release("ctl_cpu_long", "ctl_backward_cpu_long", "backward"),
    "ndr-arithmetic": Release("arithmetic_cpu", "arithmetic_cpu"),
    "ndr-listops": Release("listops_cpu", "listops_cpu"),
}
# make gpu-release TASK=<task>: the paper-size models, trained on this machine's GPUs in resumable chunks. A GPU
# release replaces the CPU one of the same name in hub_cards/models/; point its RELEASES entry to the GPU run so that
# --refresh re-renders the GPU run (make gpu-release, not --train, trains it again).
GPU_RELEASES = {
    "ctl-forward": ("ndr-ctl-forward", Release("ctl_gpu", "ctl_forward_gpu")),
    "ctl-backward": ("ndr-ctl-backward", Release("ctl_backward_gpu", "ctl_backward_gpu")),
    "arithmetic": ("ndr-arithmetic", Release("arithmetic_gpu", "arithmetic_gpu")),
    "listops": ("ndr-listops", Release("listops_gpu", "listops_gpu")),
}


def build(name: str, org: str, train: bool, refresh: bool = False) -> str | None:
    """Copy a trained run into `hub_cards/models/<name>/` (training it first with `train`); None if untrained.
    With `refresh`, a release whose run is not in `outputs/` is re-rendered from its own folder (same weights,
    results and run record; the card and config as today's code writes them)."""
    release = RELEASES[name]
    run = release.output_dir()
    released = os.path.join(MODELS_DIR, name)
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
        env = dict(os.environ, ACCELERATE_USE_CPU="true", OMP_NUM_THREADS="1")
        subprocess.run(release.train_command(), check=True, env=env, cwd=REPO)
    return _copy_release(name, run, org)


def gpu_train_command(preset: str, output_dir: str, processes: int) -> list[str]:
    """One chunk's launch (`run_in_chunks` adds `--max_wall_minutes` and `--resume_from_checkpoint auto`): train.py
    on one GPU, or `accelerate launch` with `configuration/accelerate/multi_gpu.yaml` on several. The preset sets the
    precision (`precision: auto`) and the global batch (`total_batch_size`), whatever the number of GPUs."""
    train = [os.path.join("training", "train.py"), "--preset", preset, "--output_dir", output_dir,
             "--disable_tqdm", "true"]  # fmt: skip
    if processes == 1:
        return [sys.executable] + train
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    config = os.path.join("configuration", "accelerate", "multi_gpu.yaml")
    return [accelerate, "launch", "--config_file", config, "--num_processes", str(processes)] + train


def gpu_release(
    task: str,
    chunk_minutes: float,
    processes: int | None = None,
    preset: str | None = None,
    outputs_dir: str | None = None,
    models_dir: str = MODELS_DIR,
    org: str = DEFAULT_ORG,
) -> str:
    """Train `GPU_RELEASES[task]` in chunks of `chunk_minutes` (unless its run has finished), then write its folder.

    Args:
        task: a key of `GPU_RELEASES`.
        chunk_minutes: each chunk's wall-clock limit (`--max_wall_minutes`).
        processes: data-parallel processes (default: one per visible GPU, one without CUDA).
        preset: another preset than the task's (the tests use a tiny one).
        outputs_dir: where the run goes (default `outputs/`).
        models_dir: where the released folder goes (default `hub_cards/models/`).
        org: the hub namespace of the card.

    Returns:
        The released folder.
    """
    name, release = GPU_RELEASES[task]
    processes = processes or max(1, torch.cuda.device_count())
    output_dir = os.path.join(outputs_dir or os.path.join(REPO, "outputs"), release.run)
    shown = os.path.relpath(output_dir, REPO) if not os.path.relpath(output_dir, REPO).startswith("..") else output_dir
    command = gpu_train_command(preset or release.preset, shown, processes)
    if not os.path.isfile(os.path.join(output_dir, "eval_results.json")):
        print(f"[release] {name}: training in chunks of {chunk_minutes:g} min, {processes} process(es)", flush=True)
        status = run_in_chunks(command, chunk_minutes, output_dir=output_dir, cwd=REPO)
        if status != 0:
            raise SystemExit(f"[release] {name}: training failed (exit status {status}); the same command resumes it")
    return _copy_release(name, output_dir, org, models_dir, GPU_MAX_BYTES)


def _copy_release(name: str, run: str, org: str, models_dir: str = MODELS_DIR, max_bytes: int = MAX_BYTES) -> str:
    target = os.path.join(models_dir, name)
    # the new release is complete in a hidden sibling before it replaces the old one (atomic_folder): an interrupted
    # build, or one over the size budget, leaves the previous release as it was
    with tempfile.TemporaryDirectory() as staging, atomic_folder(target) as new:
        export_model(run, staging, repo_id=f"{org}/{name}")  # re-render the card for the released hub id
        for file in RELEASED_FILES:
            if os.path.isfile(os.path.join(staging, file)):
                shutil.copy2(os.path.join(staging, file), new)
        size = sum(os.path.getsize(os.path.join(new, file)) for file in os.listdir(new))
        if size > max_bytes:
            raise SystemExit(f"[release] {name}: {size / 2**20:.1f} MB is over the {max_bytes / 2**20:.0f} MB budget")
    print(f"[release] {name}: {target} ({size / 2**20:.2f} MB)")
    return target


def stage(name: str, out_dir: str) -> str:
    """The folder `--push` uploads: the released files plus the modeling code (written by `save_pretrained`)."""
    from modeling_ndr import NDRForSequenceClassification

    source = os.path.join(MODELS_DIR, name)
    if not os.path.isfile(os.path.join(source, "config.json")):
        raise SystemExit(f"[release] {name}: {source} is not built (run `make release` first)")
    target = os.path.join(out_dir, name)
    shutil.copytree(source, target, dirs_exist_ok=True)
    NDRForSequenceClassification.from_pretrained(source).save_pretrained(target)  # the same weights, + code
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
    parser.add_argument("--push", action="store_true", help="Upload each built folder with its modeling code.")
    parser.add_argument("--stage", help="Write what --push would upload into this folder instead.")
    gpu = parser.add_argument_group("GPU releases (make gpu-release TASK=...)")
    gpu.add_argument("--gpu", choices=sorted(GPU_RELEASES), help="Train this task's GPU preset in chunks, release it.")
    gpu.add_argument("--chunk_minutes", type=float, default=8.5, help="Wall-clock minutes of each training chunk.")
    gpu.add_argument("--processes", type=int, default=None, help="Processes (default: one per visible GPU).")
    gpu.add_argument("--preset", default=None, help="Another preset than the task's GPU preset.")
    gpu.add_argument("--outputs_dir", default=None, help="Where the run goes (default: outputs/).")
    gpu.add_argument("--models_dir", default=MODELS_DIR, help="Where the released folder goes.")
    args = parser.parse_args(argv)
    if args.gpu:
        gpu_release(args.gpu, args.chunk_minutes, args.processes, args.preset, args.outputs_dir, args.models_dir,
                    args.org)  # fmt: skip
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
