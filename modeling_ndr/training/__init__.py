"""Training the NDR with the Hugging Face Trainer: the pieces `training/train.py` is built from, importable for your
own scripts. `import modeling_ndr` does not import this subpackage (it needs `datasets`; `evaluate` is imported only
when the metric is loaded).

    from modeling_ndr.training import NDRTrainer, load_depth_accuracy, metrics_function, prepare_own_data

Modules, in the order `train.py` uses them:

- `errors`: `UsageError` (a one-line user error, exit status 2), `first_line`, `exit_on_usage_error`
- `arguments`: `DataArguments`, `ModelArguments`, `RunArguments`, `parse_arguments` (presets as the parser's
  defaults), `flags_on_command_line`, and the checks of the data source and `--metric_for_best_model`
- `locking`: one run per output folder (`lock_output_dir`: a second run fails at once, naming the holder)
- `presets`: presets (`configuration/NAME.yaml`, `base:`), model variants, `--config_overrides`, `config_values`
- `data`: your own files or dataset, read and checked; label names; `encode`
- `token_labels`: your own token task (one label per word): its checks, encoding and `compute_metrics`
- `checkpoints`: a new model or a checkpoint adapted to the data; the checkpoint to resume from, and the optimizer
  settings a resumed run keeps from it (`restored_optimizer_settings`)
- `trainer`: `NDRTrainer`, per-depth (and per-first-token) `compute_metrics`, `evaluate_splits`
- `sampling`: how training samples are drawn: over depths, over root operators, with `--sample_shares`
- `devices`: the global batch whatever the number of processes (`--total_batch_size`), `--precision`
- `preemption`: time-boxed and preemptible runs (`--max_wall_minutes`, SIGTERM/SIGUSR1: a checkpoint, exit 75;
  `training/run_in_chunks.py` in the checkout resumes them until they finish)
- `records`: `run_config.json`, the machine description, `read_json`, and a run's logged history
  (`evaluation_history`, `training_losses`)
- `export`: the hub-ready folder and its model card
- `atomic`: folders written whole or not at all (`atomic_folder`): exports, release folders, dataset repositories
- `evaluation`: the one evaluation path, `predict`: predictions and steps per sample in padded batches, with fixed
  or adaptive steps (`evaluate_model.py`, `compare.py`, the export's adaptive-steps study and the benchmarks use it)
- `adaptive`: what a card shows of adaptive steps (fixed against adaptive, per split and depth) where the export
  chose them (the checkout's `training/adaptive_study.py`, `export_model`'s `study`)
- `weight_average`: `WeightAverage`, an EMA of the weights saved into every checkpoint (`--ema_decay`)
- `schedules`: `PonderWeightSchedule`, ACT's ponder weight warmed up once the task starts to be learned
  (`--ponder_warmup_loss`, `--ponder_warmup_steps`)
- `stopping`: `StopAtAccuracy`, training ended at the first evaluation where a split reaches an accuracy
  (`--stop_at_accuracy iid_test=0.95`; `compare.py --budget_steps`)
"""

from .arguments import (
    ARGUMENT_CLASSES,
    DataArguments,
    ModelArguments,
    RunArguments,
    check_data_arguments,
    check_training_steps,
    evaluation_files,
    flags_on_command_line,
    parse_arguments,
)
from .atomic import atomic_folder, check_replaceable, clean_leftovers
from .checkpoints import (
    RESUME_LATEST,
    adapted_checkpoint,
    build_tokenizer_and_model,
    check_problem_type,
    check_resume,
    checkpoint_problem,
    label_config,
    latest_complete_checkpoint,
    new_model,
    resolve_checkpoint,
    restored_optimizer_settings,
    saves_optimizer_states,
)
from .data import (
    Source,
    check_eval_labels,
    encode,
    first_problem_in_file,
    label_namer,
    label_names_of,
    load_dataset_splits,
    prepare_own_data,
    read_data_file,
    read_own_data,
    standard_columns,
    warn_long_texts,
    warn_unknown_words,
)
from .devices import (
    apply_total_batch_size,
    cpu_has_native_bf16,
    describe_precision,
    per_device_batch_size,
    precision_defaults,
)
from .errors import UsageError, exit_on_usage_error, first_line
from .evaluation import Predictions, padded_batches, predict
from .export import EXPORT_FILES, build_model_card, export_model, results_table
from .locking import OutputDirLock, lock_output_dir
from .preemption import EXIT_STOPPED, TimeBoxCallback, TrainingStopped
from .presets import config_values, parse_config_overrides, read_preset, read_variant
from .records import machine_description, run_record, training_record, write_run_config
from .sampling import BalancedSampler, SampleShare, balanced_sampler, depth_weights, parse_sample_shares
from .trainer import (
    EVAL_SPLITS,
    NDRTrainer,
    check_best_metric,
    evaluate_splits,
    load_depth_accuracy,
    metrics_function,
)


__all__ = [
    # errors
    "UsageError",
    "exit_on_usage_error",
    "first_line",
    # arguments
    "ARGUMENT_CLASSES",
    "DataArguments",
    "ModelArguments",
    "RunArguments",
    "check_best_metric",
    "check_data_arguments",
    "check_training_steps",
    "evaluation_files",
    "flags_on_command_line",
    "parse_arguments",
    # presets
    "config_values",
    "parse_config_overrides",
    "read_preset",
    "read_variant",
    # locking
    "OutputDirLock",
    "lock_output_dir",
    # data
    "Source",
    "check_eval_labels",
    "first_problem_in_file",
    "warn_long_texts",
    "encode",
    "label_namer",
    "label_names_of",
    "load_dataset_splits",
    "prepare_own_data",
    "read_data_file",
    "read_own_data",
    "standard_columns",
    "warn_unknown_words",
    # checkpoints
    "RESUME_LATEST",
    "adapted_checkpoint",
    "build_tokenizer_and_model",
    "check_problem_type",
    "check_resume",
    "checkpoint_problem",
    "latest_complete_checkpoint",
    "restored_optimizer_settings",
    "saves_optimizer_states",
    "label_config",
    "new_model",
    "resolve_checkpoint",
    # trainer
    "EVAL_SPLITS",
    "BalancedSampler",
    "NDRTrainer",
    "balanced_sampler",
    "depth_weights",
    "SampleShare",
    "parse_sample_shares",
    "evaluate_splits",
    "load_depth_accuracy",
    "metrics_function",
    # devices
    "apply_total_batch_size",
    "cpu_has_native_bf16",
    "describe_precision",
    "per_device_batch_size",
    "precision_defaults",
    # preemption
    "EXIT_STOPPED",
    "TimeBoxCallback",
    "TrainingStopped",
    # records
    "machine_description",
    "run_record",
    "training_record",
    "write_run_config",
    # evaluation
    "Predictions",
    "padded_batches",
    "predict",
    # export
    "build_model_card",
    "export_model",
    "results_table",
    "EXPORT_FILES",
    # atomic
    "atomic_folder",
    "check_replaceable",
    "clean_leftovers",
]
