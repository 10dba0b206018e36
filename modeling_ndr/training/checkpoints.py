"""The model a run starts from: a new NDR for the data (the task's tokenizer, or one built from the training texts),
or a trained checkpoint adapted to it (new words added to its tokenizer and embeddings, a new classification head
for a different label set), and the checkpoint a run resumes from. Every problem is reported before any step."""

import json
import logging
import math
import os
import re
import zipfile

from safetensors import safe_open
from transformers import AutoConfig
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .. import tasks
from ..configuration_ndr import NDRConfig
from ..modeling_ndr import NDRForSequenceClassification, NDRForTokenClassification
from ..tokenization_ndr import NDRTokenizerFast, build_tokenizer, extend_tokenizer
from .arguments import DataArguments, ModelArguments
from .errors import UsageError, first_line
from .presets import config_values


logger = logging.getLogger(__name__)
# "The newest complete checkpoint in output_dir, if any" for --resume_from_checkpoint: `auto`, or `true` (what
# Trainer.train's resume_from_checkpoint=True means)
RESUME_LATEST = ("auto", "true")
# the classification head: re-initialised when the labels change (its weights have names starting with this)
HEAD = "classifier"
# the model of a run: one label per text, or one per token (your own token task: `token_labels`)
MODEL_CLASSES = {False: NDRForSequenceClassification, True: NDRForTokenClassification}
# NDRConfig fields that change the shapes of the weights (named in the error when a checkpoint does not fit)
SHAPE_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "attention_type", "copy_gate")


def resolve_checkpoint(path: str) -> str:
    """Check `--model_name_or_path` before anything is read or trained.

    Args:
        path: a folder holding `config.json`, or a hub id (found on the Hub or in the Hugging Face cache).

    Returns:
        `path`; a one-line `UsageError` if it names no saved model.
    """
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise UsageError(f"--model_name_or_path {path}: the folder holds no config.json (not a saved model)")
        return path
    if os.path.exists(path):
        raise UsageError(f"--model_name_or_path {path}: expected a folder (or a hub id), got a file")
    try:
        AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as error:
        reason = str(error).strip().splitlines()[0]
        raise UsageError(
            f"--model_name_or_path {path!r}: no such folder, and no such model on the Hub or in the "
            f"local cache ({reason[:160]})"
        ) from None
    return path


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


def check_problem_type(problem_type: str | None, origin: str) -> None:
    """Check that a run's `problem_type` is one train.py trains: single-label classification (one class per row).

    Args:
        problem_type: the NDRConfig `problem_type` the run would set or keep (None: single-label, from the labels).
        origin: the words that say where it comes from, for the error.
    """
    if problem_type not in (None, "single_label_classification"):
        raise UsageError(
            f"{origin}={problem_type!r}: train.py trains single-label classification (one class name or integer per "
            "row); the model computes regression and multi-label losses when called directly, but train.py's data "
            "checks, labels and metrics are for classes"
        )


def label_config(label_names: list[str]) -> dict:
    """The NDRConfig fields of a label set: `id2label` and `label2id`, ids in the order of `label_names`."""
    return {
        "id2label": dict(enumerate(label_names)),
        "label2id": {name: index for index, name in enumerate(label_names)},
    }


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


def adapted_checkpoint(
    path: str, task: str | None, values: dict, label_names: list[str], texts: list[str], per_token: bool = False
):
    """A trained NDR ready for this data: its tokenizer with the data's new words added and the embeddings resized
    (old ids keep their rows), and a new classification head if its labels are not the data's.

    Args:
        path: `--model_name_or_path`.
        task: the paper's task of this run (its tokenizer stands in for a checkpoint without one), or None.
        values: NDRConfig fields to set on the checkpoint's config (they must not change the weights' shapes).
        label_names: the data's classes.
        texts: texts holding every word of the data.
        per_token: load it as `NDRForTokenClassification` (a token task; a sequence classifier's encoder loads into
            it, and its head where the labels are the same).

    Returns:
        `(tokenizer, model)`; a `UsageError` if the checkpoint is not an NDR or its weights do not fit.
    """
    path = resolve_checkpoint(path)
    checkpoint_config = AutoConfig.from_pretrained(path)
    if checkpoint_config.model_type != "ndr":
        raise UsageError(f"--model_name_or_path {path}: a {checkpoint_config.model_type!r} model, not an NDR")
    if "problem_type" not in values:
        check_problem_type(checkpoint_config.problem_type, f"--model_name_or_path {path}: its config's problem_type")
    checkpoint_labels = [checkpoint_config.id2label[i] for i in range(checkpoint_config.num_labels)]
    new_head = set(checkpoint_labels) != set(label_names)
    if not new_head:
        label_names = checkpoint_labels  # the same classes: keep the checkpoint's ids, and with them its head
    try:
        model, loading = MODEL_CLASSES[per_token].from_pretrained(
            path, **values, **label_config(label_names), ignore_mismatched_sizes=True, output_loading_info=True
        )
    except ValueError as error:
        raise UsageError(str(error).splitlines()[0]) from None
    untrained = [key for key, *_ in loading["mismatched_keys"]] + list(loading["missing_keys"])
    if body := sorted(key for key in untrained if not key.startswith(HEAD + ".")):
        differing = [
            f"{name}={values[name]!r} (the checkpoint has {getattr(checkpoint_config, name, None)!r})"
            for name in SHAPE_FIELDS
            if name in values and values[name] != getattr(checkpoint_config, name, None)
        ]
        raise UsageError(
            f"--model_name_or_path {path}: {len(body)} of its weights (e.g. {body[0]}) do not fit the model this run "
            f"asks for: {', '.join(differing) or 'the settings differ'}; leave out the flags (or the preset's values) "
            "that change its shapes"
        )
    if new_head:
        head = getattr(model, HEAD)
        for parameter in head.parameters():  # marked as loaded, which would make `_init_weights` skip them
            parameter._is_hf_initialized = False
        head.apply(model._init_weights)
        logger.warning(
            "%s: the checkpoint's %d labels %s are not the data's %d labels %s: the classification head is new "
            "(randomly initialised), the rest of the model is fine-tuned",
            path, len(checkpoint_labels), checkpoint_labels[:10], len(label_names), label_names[:10],
        )  # fmt: skip
    return adapted_tokenizer(path, task, texts, model)


def adapted_tokenizer(path: str, task: str | None, texts: list[str], model):
    """The checkpoint's tokenizer with the data's new words added, and the model's embeddings resized to it.

    Args:
        path: the checkpoint folder or hub id.
        task: the paper's task whose tokenizer stands in when the checkpoint has none, or None.
        texts: texts holding every word of the data.
        model: the loaded model (changed in place: its embeddings grow by the new words).

    Returns:
        `(tokenizer, model)`.
    """
    try:
        tokenizer = NDRTokenizerFast.from_pretrained(path)
    except (OSError, ValueError, TypeError):
        if not task:
            raise UsageError(
                f"--model_name_or_path {path}: no tokenizer files; the model's word ids are unknown"
            ) from None
        tokenizer = tasks.task_tokenizer(task)
        logger.info("%s has no tokenizer files: using the %s task's tokenizer", path, task)
    try:
        extended = extend_tokenizer(tokenizer, texts)
    except ValueError as error:
        raise UsageError(f"--model_name_or_path {path}: {error}") from None
    if len(extended) > model.config.vocab_size:
        # The new rows get the model's own initialisation, as in a fresh model. transformers' default (mean_resizing)
        # gives every new row the mean of the old rows when their covariance is singular (fewer words than
        # dimensions, as here), so new words start identical and learn apart only slowly.
        model.resize_token_embeddings(len(extended), mean_resizing=False)
    if len(extended) > len(tokenizer):
        new_words = sorted(set(extended.get_vocab()) - set(tokenizer.get_vocab()))
        logger.warning(
            "%s: %d words of the data are new to the checkpoint's tokenizer (%s): vocabulary %d -> %d tokens, "
            "embeddings resized (old ids keep their rows; the new rows are initialised as in a new model)",
            path, len(new_words), " ".join(new_words[:20]), len(tokenizer), len(extended),
        )  # fmt: skip
    return extended, model


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
