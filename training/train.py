"""Train a Neural Data Router on one of the paper's tasks with the Hugging Face Trainer.

    python training/train.py --preset ctl_cpu --direction backward --output_dir runs/ctl-backward
    python training/train.py --preset ctl_cpu --config_overrides "hidden_size=64,gate_dropout=0.2"
    accelerate launch training/train.py --preset listops_paper --output_dir runs/listops   # several GPUs

`--preset NAME` reads `configuration/NAME.yaml`; any flag on the command line overrides the preset. Every
`TrainingArguments` flag works. Model fields are set with `--config_overrides "field=value,..."` (any `NDRConfig`
field, as in transformers' `run_clm.py`) or, for the fields that had flags before, with those flags. The model is
evaluated on `iid_test`, `ood_valid` and `ood_test`; the best checkpoint is the one with the highest `ood_valid`
accuracy (the latest on ties, as in the paper) and is loaded at the end. The run writes `eval_results.json` (accuracy
and accuracy per depth of every split) and a hub-ready `export/` folder.

A bad command line, preset or model setting is reported in one line before any data is generated or any step is
trained (exit status 2).
"""

import json
import logging
import os
import sys
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import torch
import transformers
import yaml
from huggingface_hub import upload_folder
from safetensors import safe_open
from transformers import (
    AutoConfig,
    DataCollatorWithPadding,
    EvalPrediction,
    HfArgumentParser,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

import modeling_ndr
from modeling_ndr import NDRConfig, NDRForSequenceClassification


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import export_model, results_table  # noqa: E402


logger = logging.getLogger("ndr.train")
CONFIGURATION_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configuration")
EVAL_SPLITS = ("iid_test", "ood_valid", "ood_test")
RESUME_LATEST = ("auto", "latest", "last", "true", "True")


class UsageError(ValueError):
    """A bad command line, preset or model setting: reported in one line, without a traceback."""


@dataclass
class TaskArguments:
    """Which task to generate (see `modeling_ndr.load_task`)."""

    task: str = field(default="ctl", metadata={"help": "One of ctl, arithmetic, listops."})
    direction: str | None = field(default=None, metadata={"help": "CTL only: forward or backward."})
    n_train: int | None = field(default=None, metadata={"help": "Training-set size (default: the paper's)."})
    n_eval: int | None = field(default=None, metadata={"help": "Size of each evaluation split (default 1000)."})
    task_seed: int = field(default=0, metadata={"help": "Seed of the data generation (CTL: also its tables)."})
    balance_depths: bool = field(
        default=False,
        metadata={
            "help": "Draw training samples uniformly over depths (with replacement). CTL's train set holds 72 "
            "depth-1 and 486 depth-2 samples against ~24K each at depths 4 and 5; from scratch, a model then sits "
            "at chance for thousands of steps before it finds the single lookups."
        },
    )


@dataclass
class ModelArguments:
    """The model: a fresh `NDRConfig` (fields left unset keep the NDRConfig defaults) or `--model_name_or_path`."""

    model_name_or_path: str | None = field(default=None, metadata={"help": "Fine-tune this checkpoint or hub id."})
    config_overrides: str | None = field(
        default=None,
        metadata={"help": 'NDRConfig fields to set, e.g. "hidden_size=64,copy_gate=false,eval_num_hidden_layers=24".'},
    )
    # The flags below predate --config_overrides and are kept for the commands and presets that use them.
    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_attention_heads: int | None = None
    num_hidden_layers: int | None = field(default=None, metadata={"help": "Steps of the shared layer in training."})
    eval_num_hidden_layers: int | None = field(default=None, metadata={"help": "Steps at evaluation, if different."})
    hidden_dropout_prob: float | None = None
    attention_dropout: float | None = None
    gate_dropout: float | None = None
    gate_bias_init: float | None = None
    copy_gate: bool | None = None
    attention_type: str | None = None
    normalize_attention: bool | None = None


@dataclass
class RunArguments:
    preset: str | None = field(default=None, metadata={"help": "Name or path of a YAML/JSON preset."})
    torch_threads: int | None = field(default=None, metadata={"help": "torch threads per process (default: torch's)."})
    export_dir: str | None = field(
        default=None, metadata={"help": "Hub-ready export folder (default: output_dir/export)."}
    )


ARGUMENT_CLASSES = (TaskArguments, ModelArguments, RunArguments, TrainingArguments)
MIRRORED_CONFIG_FIELDS = tuple(
    f.name for f in fields(ModelArguments) if f.name not in ("model_name_or_path", "config_overrides")
)


class ArgumentParser(HfArgumentParser):
    """`HfArgumentParser` whose errors are one line (argparse prints the whole usage, ~120 lines here)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def preset_path(name: str) -> str:
    """`configuration/NAME.yaml` (or `.yml`, `.json`), or `name` itself if it is a file."""
    candidates = [name] + [os.path.join(CONFIGURATION_DIR, name + ext) for ext in (".yaml", ".yml", ".json")]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return candidate
    available = sorted(os.path.splitext(f)[0] for f in os.listdir(CONFIGURATION_DIR) if f.endswith((".yaml", ".json")))
    raise UsageError(f"--preset {name!r} not found; available presets: {available}")


def read_preset(name: str) -> dict:
    path = preset_path(name)
    try:
        with open(path) as f:
            values = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as error:
        raise UsageError(f"--preset {path}: cannot read it ({str(error).splitlines()[0]})") from None
    if not isinstance(values, dict):
        raise UsageError(f"--preset {path}: expected a mapping of flag names to values, got {type(values).__name__}")
    known = {f.name for dataclass_type in ARGUMENT_CLASSES for f in fields(dataclass_type)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UsageError(f"preset {name!r} has unknown fields {unknown}; use the names of train.py's flags")
    return values


def parse_arguments(argv: list[str]):
    """Parse the dataclasses; a preset's values become the defaults, so command-line flags override them."""
    parser = ArgumentParser(ARGUMENT_CLASSES)
    run_args, _ = ArgumentParser(RunArguments).parse_known_args(argv)
    preset = read_preset(run_args.preset) if run_args.preset else {}
    # argparse converts string defaults with the field's type, but not lists: keep those as they are
    parser.set_defaults(
        **{k: (str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v) for k, v in preset.items()}
    )
    try:
        task_args, model_args, run_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    except ValueError as error:  # TrainingArguments' own consistency checks, unused arguments
        raise UsageError(str(error).strip().splitlines()[0]) from None
    return task_args, model_args, run_args, training_args, preset


def parse_config_overrides(text: str | None) -> dict:
    """`"a=1,b=false,c=none,d=text"` → `{"a": 1, "b": False, "c": None, "d": "text"}` (values read as YAML)."""
    if not text:
        return {}
    values = {}
    for item in text.split(","):
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise UsageError(f"--config_overrides: {item!r} is not of the form field=value")
        values[name.strip()] = yaml.safe_load(value.strip()) if value.strip() else None
    known = set(NDRConfig().to_dict()) | set(modeling_ndr.configuration_ndr.FIELD_RULES)
    unknown = sorted(set(values) - known)
    if unknown:
        raise UsageError(f"--config_overrides: {unknown} are not NDRConfig fields")
    return values


def config_values(model_args: ModelArguments) -> dict:
    """The NDRConfig fields this run sets: the mirrored flags, then `--config_overrides` (which wins)."""
    values = {name: getattr(model_args, name) for name in MIRRORED_CONFIG_FIELDS}
    values = {name: value for name, value in values.items() if value is not None}
    values.update(parse_config_overrides(model_args.config_overrides))
    return values


def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
    """Accuracy, and accuracy per depth (`accuracy_depth_<d>`), from the logits, the labels and the depths."""
    labels, depths = prediction.label_ids
    correct = np.argmax(prediction.predictions, axis=-1) == labels
    metrics = {"accuracy": float(correct.mean())}
    for depth in np.unique(depths):
        metrics[f"accuracy_depth_{int(depth)}"] = float(correct[depths == depth].mean())
    return metrics


class NDRTrainer(Trainer):
    """`Trainer` with the paper's two differences: AdamW decays *all* parameters (Trainer exempts biases and norms),
    and the best checkpoint is the *latest* one with the best metric (Trainer keeps the first). With
    `balance_depths=True` the training samples are drawn uniformly over depths. The `depth` column travels with the
    batch to `compute_metrics` (it is one of `label_names`) but never reaches the model."""

    def __init__(self, *args, balance_depths: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.balance_depths = balance_depths

    def compute_loss(self, model, inputs, *args, **kwargs):
        return super().compute_loss(model, {k: v for k, v in inputs.items() if k != "depth"}, *args, **kwargs)

    def _get_train_sampler(self, train_dataset=None):
        if not self.balance_depths:
            return super()._get_train_sampler(train_dataset)
        depths = np.asarray((train_dataset or self.train_dataset)["depth"])
        _, inverse, counts = np.unique(depths, return_inverse=True, return_counts=True)
        # the same generator seed in every process: accelerate shards one common sequence of batches
        generator = torch.Generator().manual_seed(self.args.seed)
        weights = torch.as_tensor(1.0 / counts[inverse], dtype=torch.double)
        return torch.utils.data.WeightedRandomSampler(weights, num_samples=len(depths), generator=generator)

    def get_decay_parameter_names(self, model) -> list[str]:
        return [name for name, _ in model.named_parameters()]

    def _determine_best_metric(self, metrics, trial):
        key = self.args.metric_for_best_model or ""
        key = key if key.startswith("eval_") else f"eval_{key}"
        if self.state.best_metric is not None and metrics.get(key) == self.state.best_metric:
            self.state.best_global_step = self.state.global_step
            return True
        return super()._determine_best_metric(metrics, trial)


def resolve_checkpoint(path: str) -> str:
    """`--model_name_or_path`: a folder holding `config.json`, or a hub id found in the Hugging Face cache."""
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


def check_resume(resume: str | None, output_dir: str) -> str | None:
    """The checkpoint folder to resume from, after checking that its files can be read."""
    if resume is None or resume in ("false", "False", ""):
        return None
    if resume in RESUME_LATEST:
        resume = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
        logger.info("resuming from %s", resume or "scratch (no checkpoint found)")
        if resume is None:
            return None
    if not os.path.isdir(resume):
        raise UsageError(f"--resume_from_checkpoint {resume}: no such checkpoint folder")
    for name in ("trainer_state.json", "model.safetensors"):
        path = os.path.join(resume, name)
        if not os.path.isfile(path):
            raise UsageError(f"--resume_from_checkpoint {resume}: {name} is missing (not a Trainer checkpoint)")
    try:
        with open(os.path.join(resume, "trainer_state.json")) as f:
            json.load(f)
        with safe_open(os.path.join(resume, "model.safetensors"), "pt") as f:
            list(f.keys())
    except Exception as error:  # noqa: BLE001 - any unreadable file is reported the same way
        raise UsageError(f"--resume_from_checkpoint {resume}: cannot read it ({str(error).splitlines()[0]})") from None
    return resume


def build_tokenizer_and_model(task_args: TaskArguments, model_args: ModelArguments):
    """The tokenizer and the model of this run; every mismatch between them and the task is reported first."""
    task = task_args.task
    label_names = modeling_ndr.task_label_names(task)
    values = config_values(model_args)
    if model_args.model_name_or_path:
        path = resolve_checkpoint(model_args.model_name_or_path)
        try:
            model = NDRForSequenceClassification.from_pretrained(path, **values)
        except ValueError as error:
            raise UsageError(str(error).splitlines()[0]) from None
        checkpoint_labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
        if checkpoint_labels != label_names:
            raise UsageError(
                f"{path}: the checkpoint's labels {checkpoint_labels} are not the {task} task's labels "
                f"{label_names}; fine-tune on a task with the same labels"
            )
        try:
            tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
        except (OSError, ValueError):
            tokenizer = modeling_ndr.task_tokenizer(task)
            logger.info("%s has no tokenizer files: using the %s task's tokenizer", path, task)
        missing = [token for token in modeling_ndr.task_vocabulary(task) if token not in tokenizer.get_vocab()]
        if missing:
            raise UsageError(f"{path}: the checkpoint's tokenizer lacks the {task} task's tokens {missing[:10]}")
        if len(tokenizer) > model.config.vocab_size:
            raise UsageError(
                f"{path}: the tokenizer has {len(tokenizer)} tokens but the model only "
                f"vocab_size={model.config.vocab_size} embeddings"
            )
        return tokenizer, model
    tokenizer = modeling_ndr.task_tokenizer(task)
    try:
        config = NDRConfig(
            vocab_size=len(tokenizer),
            readout=modeling_ndr.task_readout(task),
            num_labels=len(label_names),
            id2label=dict(enumerate(label_names)),
            label2id={name: index for index, name in enumerate(label_names)},
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **values,
        )
    except (ValueError, TypeError) as error:
        raise UsageError(str(error).splitlines()[0]) from None
    return tokenizer, NDRForSequenceClassification(config)


def build_datasets(task_args: TaskArguments, tokenizer, training_args: TrainingArguments):
    options = {"direction": task_args.direction} if task_args.direction else {}
    with training_args.main_process_first(desc="generate and tokenize the task"):  # generated once, then cached
        try:
            data = modeling_ndr.load_task(
                task_args.task, seed=task_args.task_seed, n_train=task_args.n_train, n_eval=task_args.n_eval, **options
            )
        except ValueError as error:
            raise UsageError(str(error)) from None
        data = data.map(lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"])
        data = data.rename_column("label", "labels")
    return data


def evaluate_splits(trainer: Trainer, data) -> dict:
    """Evaluate every split (Trainer logs and saves `<split>_results.json`) and return
    `{split: {"accuracy": a, "by_depth": {depth: a}}}`: the nested form that `eval_results.json`, the model card and
    the release tests read (Trainer's own files are flat, one key per metric)."""
    results = {}
    for split in EVAL_SPLITS:
        metrics = trainer.evaluate(data[split], metric_key_prefix=split)
        trainer.log_metrics(split, metrics)
        trainer.save_metrics(split, metrics)
        prefix = f"{split}_accuracy_depth_"
        results[split] = {
            "accuracy": metrics[f"{split}_accuracy"],
            "by_depth": {k[len(prefix) :]: v for k, v in metrics.items() if k.startswith(prefix)},
        }
    return results


def main(argv: list[str] | None = None) -> dict:
    task_args, model_args, run_args, training_args, preset = parse_arguments(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity(training_args.get_process_log_level())
    if task_args.task not in modeling_ndr.TASK_NAMES:
        raise UsageError(f"--task {task_args.task!r} is not a task; choose one of {modeling_ndr.TASK_NAMES}")
    if run_args.torch_threads:
        torch.set_num_threads(run_args.torch_threads)
    resume = check_resume(training_args.resume_from_checkpoint, training_args.output_dir)
    set_seed(training_args.seed)

    tokenizer, model = build_tokenizer_and_model(task_args, model_args)
    data = build_datasets(task_args, tokenizer, training_args)
    logger.info("model: %s parameters, config %s", f"{model.num_parameters():,}", model.config.to_diff_dict())

    training_args.label_names = ["labels", "depth"]  # the depth travels to compute_metrics, not to the model
    trainer = NDRTrainer(
        model=model,
        args=training_args,
        train_dataset=data["train"],
        eval_dataset={split: data[split] for split in EVAL_SPLITS},
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=compute_metrics,
        balance_depths=task_args.balance_depths,
    )

    total_batch = training_args.train_batch_size * training_args.gradient_accumulation_steps * training_args.world_size
    logger.info("processes: %d, total train batch size: %d", training_args.world_size, total_batch)

    run_config = {}
    if training_args.should_save:
        os.makedirs(training_args.output_dir, exist_ok=True)
        example = data["ood_test"][0]
        run_config = {
            "preset": run_args.preset,
            "preset_values": preset,
            "task": asdict(task_args),
            "model": asdict(model_args),
            "config_values": config_values(model_args),
            "seed": training_args.seed,
            "data_seed": training_args.data_seed,
            "hub_model_id": training_args.hub_model_id,
            "command": sys.argv,
            "example": {
                "text": tokenizer.decode(example["input_ids"], skip_special_tokens=True),
                "label": model.config.id2label.get(example["labels"], str(example["labels"])),
            },
        }
        with open(os.path.join(training_args.output_dir, "run_config.json"), "w") as f:
            json.dump(run_config, f, indent=2, default=str)

    if training_args.do_train or training_args.max_steps > 0:
        train_result = trainer.train(resume_from_checkpoint=resume)
        trainer.log_metrics("train", train_result.metrics)
        trainer.save_metrics("train", train_result.metrics)
        trainer.save_state()

    results = evaluate_splits(trainer, data)
    export_dir = run_args.export_dir or os.path.join(training_args.output_dir, "export")
    if training_args.should_save:
        with open(os.path.join(training_args.output_dir, "eval_results.json"), "w") as f:
            json.dump(results, f, indent=2)
        print("\n" + results_table(results) + "\n")
        trainer.save_model(training_args.output_dir)  # the selected (best) model
        export_model(training_args.output_dir, export_dir, eval_results=results, run_config=run_config)
        print(f"ood_test accuracy: {results['ood_test']['accuracy']:.4f}")
        print(f"exported hub-ready model: {os.path.abspath(export_dir)}")
    if training_args.push_to_hub and training_args.should_save:
        # Trainer.push_to_hub uploads output_dir (checkpoints and Trainer's own card); users should get the export
        # folder with our card, so it is uploaded instead.
        upload_folder(repo_id=training_args.hub_model_id, folder_path=export_dir, commit_message="NDR export")
    return results


if __name__ == "__main__":
    try:
        main()
    except UsageError as error:
        print(f"{os.path.basename(sys.argv[0])}: error: {error}", file=sys.stderr)
        sys.exit(2)
