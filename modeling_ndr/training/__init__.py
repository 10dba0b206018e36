"""What a user of the library needs around the model to train, fine-tune, evaluate and export an NDR with the
Hugging Face Trainer: the presets, a checkpoint adapted to new data, the one evaluation path and the hub-ready export.
`import modeling_ndr` does not import this subpackage.

    from modeling_ndr.training import adapted_checkpoint, export_model, predict, read_preset

- `presets`: presets (`configuration/NAME.yaml`, `base:`), model variants, `--config_overrides`
- `finetuning`: a trained checkpoint adapted to your data (`adapted_checkpoint`: new words get ids and embedding
  rows, new labels a new head)
- `evaluation`: `predict`, predictions and steps per sample in padded batches, with fixed or adaptive steps
- `export`: the hub-ready folder and its model card (`python -m modeling_ndr.training export CHECKPOINT OUT`)
- `adaptive`: what a card shows of adaptive steps where the export chose them
- `atomic`: folders written whole or not at all (`atomic_folder`): exports, release folders, dataset repositories
- `errors`: `UsageError` (a one-line user error, exit status 2), `first_line`, `exit_on_usage_error`

`training/train.py`, the command that trains (presets, resumable and time-boxed runs, your own files, one run per
folder), is a script of the checkout, as transformers' examples are; its own modules live beside it
(`training/ndr_training/`).
"""

from .atomic import atomic_folder, check_replaceable, clean_leftovers
from .errors import UsageError, exit_on_usage_error, first_line
from .evaluation import Predictions, padded_batches, predict
from .export import EXPORT_FILES, build_model_card, export_model, results_table
from .finetuning import adapted_checkpoint, label_config, resolve_checkpoint
from .presets import parse_config_overrides, read_preset, read_variant


__all__ = [
    "EXPORT_FILES",
    "Predictions",
    "UsageError",
    "adapted_checkpoint",
    "atomic_folder",
    "build_model_card",
    "check_replaceable",
    "clean_leftovers",
    "exit_on_usage_error",
    "export_model",
    "first_line",
    "label_config",
    "padded_batches",
    "parse_config_overrides",
    "predict",
    "read_preset",
    "read_variant",
    "resolve_checkpoint",
    "results_table",
]
