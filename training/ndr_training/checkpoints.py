"""The model a run starts from (`build_tokenizer_and_model`: new, or a checkpoint adapted by the package's
`modeling_ndr.training.finetuning`) and the checkpoint a run resumes from. Every problem is reported before any
step."""

import json
import logging
import math
import os
import re
import zipfile

from safetensors import safe_open
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from modeling_ndr import tasks
from modeling_ndr.configuration_ndr import NDRConfig
from modeling_ndr.tokenization_ndr import build_tokenizer
from modeling_ndr.training.errors import UsageError, first_line
from modeling_ndr.training.finetuning import MODEL_CLASSES, adapted_checkpoint, check_problem_type, label_config

from .arguments import DataArguments, ModelArguments
from .flags import config_values


logger = logging.getLogger(__name__)
# "The newest complete checkpoint in output_dir, if any" for --resume_from_checkpoint: `auto`, or `true` (what
# Trainer.train's resume_from_checkpoint=True means)
RESUME_LATEST = ("auto", "true")
# What `Trainer._save_checkpoint` writes into checkpoint-N/, in this order: the model (config, weights, tokenizer,
# training_args.bin), the optimizer and scheduler states, the RNG states, and trainer_state.json last. A crash while
# saving leaves the folder without some of them, or with a file cut short.
OPTIMIZER_STATES = ("optimizer.pt", "scheduler.pt")


def checkpoint_problem(folder: str, optimizer_states: bool = True) -> str | None:
    """What keeps `folder` from being a complete Trainer checkpoint, or None if it is one.

    Complete means: `trainer_state.json` parses, `model.safetensors` opens and its size covers every tensor it
    lists, and (with `optimizer_states`) `optimizer.pt` and `scheduler.pt` are whole zip archives, as `torch.save`
    writes them. Reading the headers is enough; no tensor is loaded.

    Args:
        folder: a `checkpoint-N` folder.
        optimizer_states: whether the optimizer and scheduler states must be there (False for runs that save only
            the model, or whose states DeepSpeed or FSDP write in their own layout).

    Returns:
        A short reason (`model.safetensors is missing`, `trainer_state.json cannot be read (...)`), or None.
    """
    for name in ("trainer_state.json", "model.safetensors"):
        if not os.path.isfile(os.path.join(folder, name)):
            return f"{name} is missing"
    try:
        with open(os.path.join(folder, "trainer_state.json")) as f:
            json.load(f)
    except (OSError, ValueError) as error:
        return f"trainer_state.json cannot be read ({first_line(error)})"
    try:
        with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
            list(f.keys())  # safetensors checks that the file covers every tensor its header lists
    except Exception as error:  # noqa: BLE001 - safetensors' own error type, or an OSError
        return f"model.safetensors cannot be read ({first_line(error)})"
    for name in OPTIMIZER_STATES if optimizer_states else ():
        if not os.path.isfile(os.path.join(folder, name)):
            return f"{name} is missing"
        try:
            zipfile.ZipFile(os.path.join(folder, name)).close()  # a file cut short has no zip directory at its end
        except (OSError, zipfile.BadZipFile) as error:
            return f"{name} cannot be read ({first_line(error)})"
    return None


def saves_optimizer_states(training_args) -> bool:
    """Whether this run's checkpoints hold `optimizer.pt` and `scheduler.pt` (not with `--save_only_model`, nor where
    DeepSpeed or FSDP write the states in their own layout), so that `checkpoint_problem` asks for them.

    Args:
        training_args: the run's `TrainingArguments`.

    Returns:
        True for a plain Trainer run.
    """
    return not (training_args.save_only_model or training_args.deepspeed or training_args.fsdp)


def check_resume(resume: str | None, output_dir: str, optimizer_states: bool = True) -> str | None:
    """The checkpoint folder to resume from, after checking that it is complete.

    Args:
        resume: `--resume_from_checkpoint`: None or `false` (start afresh), a checkpoint folder, or one of
            `RESUME_LATEST` (`auto` or `true`: the newest complete checkpoint in `output_dir`, if
            any; newer incomplete ones, left by a crash while saving, are skipped with a warning naming them).
        output_dir: the run's output folder.
        optimizer_states: whether a checkpoint must hold the optimizer and scheduler states (`checkpoint_problem`).

    Returns:
        The checkpoint folder for `Trainer.train(resume_from_checkpoint=...)`, or None to start afresh; a one-line
        `UsageError` if a folder named on the command line is not a complete checkpoint.
    """
    if resume is None or resume in ("false", "False", ""):
        return None
    if resume in RESUME_LATEST:
        return latest_complete_checkpoint(output_dir, optimizer_states)
    if not os.path.isdir(resume):
        raise UsageError(f"--resume_from_checkpoint {resume}: no such checkpoint folder")
    if problem := checkpoint_problem(resume, optimizer_states):
        raise UsageError(f"--resume_from_checkpoint {resume}: {problem} (not a complete Trainer checkpoint)")
    return resume


def latest_complete_checkpoint(output_dir: str, optimizer_states: bool = True) -> str | None:
    """The newest complete `checkpoint-N` folder of `output_dir` (highest N), or None if there is none.

    Args:
        output_dir: the run's output folder.
        optimizer_states: whether a checkpoint must hold the optimizer and scheduler states.

    Returns:
        The folder; each newer incomplete one is named in a warning (a crash while saving leaves one behind).
    """
    steps = {}
    if os.path.isdir(output_dir):
        for name in os.listdir(output_dir):
            match = re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", name)
            if match and os.path.isdir(os.path.join(output_dir, name)):
                steps[int(match[1])] = os.path.join(output_dir, name)
    for step in sorted(steps, reverse=True):
        if (problem := checkpoint_problem(steps[step], optimizer_states)) is None:
            logger.info("resuming from %s", steps[step])
            return steps[step]
        logger.warning(
            "--resume_from_checkpoint auto: skipping %s, an incomplete checkpoint (%s; a crash while saving?); "
            "delete it once the run has resumed", steps[step], problem,
        )  # fmt: skip
    logger.info("--resume_from_checkpoint auto: no complete checkpoint in %s, starting afresh", output_dir)
    return None


# what a resumed optimizer keeps from its checkpoint: the field of each param group, and the argument that would set it
RESTORED_OPTIMIZER_FIELDS = (
    ("initial_lr", "learning_rate"),
    ("weight_decay", "weight_decay"),
    ("eps", "adam_epsilon"),
)


def restored_optimizer_settings(checkpoint: str | None, training_args) -> list[str]:
    """The optimizer settings a resumed run keeps from its checkpoint although its arguments ask for others.

    `Trainer.train(resume_from_checkpoint=...)` builds the optimizer from the arguments and then loads `optimizer.pt`,
    whose param groups bring their own learning rate, weight decay and epsilon (and `scheduler.pt` its base rate): a
    `--learning_rate` or `--weight_decay` given on resume is not used. A schedule given on resume is (its factor is
    computed afresh).

    Args:
        checkpoint: the checkpoint folder the run resumes from (`check_resume`'s answer; None: it starts afresh).
        training_args: the run's `TrainingArguments`.

    Returns:
        One `"--argument X (the checkpoint's optimizer keeps Y)"` per setting that differs; empty when they agree,
        when there is no checkpoint or when it holds no `optimizer.pt`.
    """
    path = checkpoint and os.path.join(checkpoint, "optimizer.pt")
    if not path or not os.path.isfile(path):
        return []
    import torch

    try:  # mmap: the settings are read, the moments' tensors are not
        groups = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("param_groups", [])
    except Exception:  # noqa: BLE001 - a state only the optimizer that wrote it can read: the Trainer says what it can
        return []
    differences = []
    for field, argument in RESTORED_OPTIMIZER_FIELDS:
        asked = getattr(training_args, argument)
        # the Trainer's first group is the one --weight_decay sets; the other, of the parameters it never decays
        # (biases, norms), has a weight decay of 0 whatever the argument says
        chosen = groups[:1] if field == "weight_decay" else groups
        kept = {group[field] for group in chosen if field in group}
        if kept and not any(math.isclose(value, asked) for value in kept):
            shown = ", ".join(f"{value:g}" for value in sorted(kept))
            differences.append(f"--{argument} {asked:g} (the checkpoint's optimizer keeps {shown})")
    return differences


def new_model(task: str | None, values: dict, label_names: list[str], texts: list[str], per_token: bool = False):
    """A fresh tokenizer and model.

    Args:
        task: one of the paper's tasks (its fixed vocabulary and readout), or None for your own data.
        values: the NDRConfig fields to set.
        label_names: the classes, in id order.
        texts: the training texts (own data): every word in them gets a token.
        per_token: one label per token (`NDRForTokenClassification`), not per text.

    Returns:
        `(tokenizer, model)`; a `UsageError` for an invalid NDRConfig setting.
    """
    tokenizer = tasks.task_tokenizer(task) if task else build_tokenizer(texts=texts)
    if task in tasks.TASK_NAMES:
        values = {"readout": tasks.task_readout(task), **values}
    try:
        config = NDRConfig(
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **label_config(label_names),
            **values,
        )
    except (ValueError, TypeError) as error:
        raise UsageError(str(error).splitlines()[0]) from None
    return tokenizer, MODEL_CLASSES[per_token](config)


def build_tokenizer_and_model(
    data_args: DataArguments,
    model_args: ModelArguments,
    label_names,
    texts=None,
    values: dict | None = None,
    per_token: bool = False,
):
    """The tokenizer and the model of a run; every problem is reported before any step is trained.

    Args:
        data_args: the data (a task, or your own).
        model_args: `--model_name_or_path` (adapt a checkpoint) or a new model.
        label_names: the data's classes, in id order.
        texts: the training texts of your own data (for the paper's tasks the task's vocabulary is used).
        values: the NDRConfig fields to set (default: `config_values(model_args)`).
        per_token: a token task (one label per token: `NDRForTokenClassification`).

    Returns:
        `(tokenizer, model)`.
    """
    task = data_args.task if not data_args.own_data else None
    values = config_values(model_args) if values is None else values
    check_problem_type(values.get("problem_type"), "--config_overrides problem_type")
    if task:
        texts = [" ".join(tasks.task_vocabulary(task))]
    if model_args.model_name_or_path:
        return adapted_checkpoint(model_args.model_name_or_path, task, values, label_names, texts, per_token)
    return new_model(task, values, label_names, texts, per_token)
