"""What a run records about itself in `output_dir/run_config.json`: its preset and arguments, the NDRConfig fields
it set, seeds, command, machine, an example of its data and, once trained, how long training took; and what its
`trainer_state.json` logged (`evaluation_history`, `training_losses`). The model card
(`export.build_model_card`) and `hub_cards/make_model_repos.py` read it."""

import datetime
import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import asdict

import torch

from .devices import describe_precision


def run_record(data_args, model_args, run_args, training_args, preset: dict, config_values: dict, example: dict):
    """The run's record, as `run_config.json` holds it.

    Args:
        data_args: the parsed `DataArguments` (`parse_arguments`).
        model_args: the parsed `ModelArguments`.
        run_args: the parsed `RunArguments`.
        training_args: the parsed `TrainingArguments`.
        preset: the preset's values.
        config_values: the NDRConfig fields the run set (`config_values`).
        example: one sample of the data, `{"text": ..., "label": ...}`, shown on the model card.

    Returns:
        A JSON-serialisable dict (values `json` cannot write are written as text).
    """
    return {
        "preset": run_args.preset,
        "preset_values": preset,
        "task": asdict(data_args),
        "model": asdict(model_args),
        "variant": run_args.variant,
        "config_values": config_values,
        "seed": training_args.seed,
        "data_seed": training_args.data_seed,
        "hub_model_id": training_args.hub_model_id,
        "metric_for_best_model": training_args.metric_for_best_model if training_args.load_best_model_at_end else None,
        "command": sys.argv,
        "machine": machine_description(),
        "processes": training_args.world_size,
        "precision": describe_precision(training_args),
        "example": example,
        "ndr_version": _package_version(),
        "commit": source_commit(),
    }


def _package_version() -> str:
    from modeling_ndr import __version__

    return __version__


def source_commit(path: str | None = None) -> str | None:
    """The git commit of the checkout that holds `path` (default: the running script), with `+changes` when its
    tracked files differ from it; None outside a git checkout (a wheel run from elsewhere) or without git."""
    folder = os.path.dirname(os.path.abspath(path or sys.argv[0] or "."))
    try:
        commit = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return None
        changed = subprocess.run(["git", "-C", folder, "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return commit.stdout.strip() + ("+changes" if changed.stdout.strip() else "")


def training_record(train_metrics: dict, global_step: int) -> dict:
    """What training took, for `run_config["training"]`: seconds, steps and when it finished.

    Args:
        train_metrics: `TrainOutput.metrics` (`train_runtime` in seconds).
        global_step: the step training ended at.
    """
    return {
        "seconds": round(train_metrics["train_runtime"], 1),
        "steps": global_step,
        "finished": datetime.datetime.now().astimezone().isoformat(timespec="minutes"),
    }


def write_run_config(output_dir: str, run_config: dict) -> None:
    """Write `output_dir/run_config.json` (values `json` cannot write are written as text)."""
    with open(os.path.join(output_dir, "run_config.json"), "w") as f:
        json.dump(run_config, f, indent=2, default=str)


def machine_description() -> str:
    """What the model card says a run was trained on: the GPU, or the CPU model and its core count (with torch's
    version)."""
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} CPU cores, torch {torch.__version__}"


# ---------------------------------------------------------------------------------------------- a run's history

# Trainer logs each evaluation split in an entry of its own: `eval_<split>_accuracy`, with `_depth_<d>` per depth and
# `_first_<TOKEN>[_depth_<d>]` per first token (`--eval_by_first_token`)
_EVAL_KEY = re.compile(r"eval_(\w+?)_accuracy(?:_first_(\w+?))?(?:_depth_(\d+))?")


def evaluation_history(trainer_state: dict) -> list[dict]:
    """Every evaluation of a run: `[{"step": s, "<split>": {"accuracy": a, "by_depth": {d: a}, "by_first_token":
    {TOKEN: a, "TOKEN_depth_d": a}}, ...}]` by step, the entries of one step merged.

    Args:
        trainer_state: the content of a checkpoint's `trainer_state.json` (its `log_history`).
    """
    by_step: dict[int, dict] = {}
    for entry in trainer_state.get("log_history", []):
        for key, value in entry.items():
            if not (match := _EVAL_KEY.fullmatch(key)):
                continue
            split = by_step.setdefault(entry["step"], {}).setdefault(match[1], {"accuracy": None, "by_depth": {}})
            if match[2] is not None:
                token = match[2] + (f"_depth_{match[3]}" if match[3] is not None else "")
                split.setdefault("by_first_token", {})[token] = value
            elif match[3] is not None:
                split["by_depth"][match[3]] = value
            else:
                split["accuracy"] = value
    return [{"step": step, **splits} for step, splits in sorted(by_step.items())]


def training_losses(trainer_state: dict) -> list[tuple[int, float]]:
    """The logged training losses of a run: `[(step, loss), ...]`."""
    return [(entry["step"], entry["loss"]) for entry in trainer_state.get("log_history", []) if "loss" in entry]
