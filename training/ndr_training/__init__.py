"""`training/train.py`'s own modules: a script's machinery, beside it in the checkout (as transformers' examples keep
theirs), not in the package. The package (`modeling_ndr.training`) holds what a user's own script needs: presets,
`adapted_checkpoint`, `predict` and the export.

Modules, in the order `train.py` uses them:

- `arguments`: `DataArguments`, `ModelArguments`, `RunArguments`, `parse_arguments` (presets as the parser's
  defaults), `flags_on_command_line`, and the checks of the data source and `--metric_for_best_model`
- `flags`: the flags as a run's values: `config_values` (the NDRConfig fields of a run), `variant_flags`,
  `default_preset`
- `locking`: one run per output folder (`lock_output_dir`: a second run fails at once, naming the holder)
- `data`, `data_files`: your own files or dataset, read and checked; label names; `encode`
- `token_labels`: your own token task (one label per word): its checks, encoding and `compute_metrics`
- `checkpoints`: the run's model (new, or adapted by `modeling_ndr.training.finetuning`); the checkpoint to resume
  from, and the optimizer settings a resumed run keeps from it (`restored_optimizer_settings`)
- `trainer`: `NDRTrainer`, per-depth (and per-first-token) `compute_metrics`, `evaluate_splits`
- `sampling`: how training samples are drawn: over depths, over root operators, with `--sample_shares`
- `devices`: the global batch whatever the number of processes (`--total_batch_size`), `--precision`
- `preemption`: time-boxed and preemptible runs (`--max_wall_minutes`, SIGTERM/SIGUSR1: a checkpoint, exit 75;
  `training/run_in_chunks.py` resumes them until they finish)
- `records`: `run_config.json`, the machine description, and a run's logged history; `curves`: its first-token
  curves drawn
- `weight_average`: `WeightAverage`, an EMA of the weights saved into every checkpoint (`--ema_decay`)
- `schedules`: `PonderWeightSchedule`, ACT's ponder weight warmed up once the task starts to be learned
- `stopping`: `StopAtAccuracy`, training ended at the first evaluation where a split reaches an accuracy
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
from .checkpoints import (
    RESUME_LATEST,
    build_tokenizer_and_model,
    check_resume,
    checkpoint_problem,
    latest_complete_checkpoint,
    new_model,
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
from .flags import config_values, default_preset, variant_flags
from .locking import (
    OutputDirLock,
    lock_output_dir,
)
from .preemption import (
    EXIT_STOPPED,
    TimeBoxCallback,
    TrainingStopped,
)
from .records import (
    machine_description,
    run_record,
    training_record,
    write_run_config,
)
from .sampling import (
    BalancedSampler,
    SampleShare,
    balanced_sampler,
    depth_weights,
    parse_sample_shares,
)
from .trainer import (
    EVAL_SPLITS,
    NDRTrainer,
    check_best_metric,
    evaluate_splits,
    load_depth_accuracy,
    metrics_function,
)


__all__ = [
    "new_model",
    "config_values",
    "default_preset",
    "variant_flags",
    "ARGUMENT_CLASSES",
    "BalancedSampler",
    "DataArguments",
    "EVAL_SPLITS",
    "EXIT_STOPPED",
    "ModelArguments",
    "NDRTrainer",
    "OutputDirLock",
    "RESUME_LATEST",
    "RunArguments",
    "SampleShare",
    "Source",
    "TimeBoxCallback",
    "TrainingStopped",
    "apply_total_batch_size",
    "balanced_sampler",
    "build_tokenizer_and_model",
    "check_best_metric",
    "check_data_arguments",
    "check_eval_labels",
    "check_resume",
    "check_training_steps",
    "checkpoint_problem",
    "cpu_has_native_bf16",
    "depth_weights",
    "describe_precision",
    "encode",
    "evaluate_splits",
    "evaluation_files",
    "first_problem_in_file",
    "flags_on_command_line",
    "label_namer",
    "label_names_of",
    "latest_complete_checkpoint",
    "load_dataset_splits",
    "load_depth_accuracy",
    "lock_output_dir",
    "machine_description",
    "metrics_function",
    "parse_arguments",
    "parse_sample_shares",
    "per_device_batch_size",
    "precision_defaults",
    "prepare_own_data",
    "read_data_file",
    "read_own_data",
    "restored_optimizer_settings",
    "run_record",
    "saves_optimizer_states",
    "standard_columns",
    "training_record",
    "warn_long_texts",
    "warn_unknown_words",
    "write_run_config",
]
