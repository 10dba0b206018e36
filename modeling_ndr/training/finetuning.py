"""A trained checkpoint ready for a user's data: new words added to its tokenizer and embeddings, a new classification
head for a different label set. `train.py --model_name_or_path` fine-tunes through `adapted_checkpoint`, as a script
of your own can (`training/examples/finetune_with_trainer.py`). Every problem is a one-line `UsageError`, before any
step."""

import logging
import os

from transformers import AutoConfig

from .. import tasks
from ..modeling_ndr import NDRForSequenceClassification, NDRForTokenClassification
from ..tokenization_ndr import NDRTokenizerFast, extend_tokenizer
from .errors import UsageError


logger = logging.getLogger(__name__)
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
