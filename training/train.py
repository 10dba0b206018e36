"""Train a Neural Data Router on one of the paper's tasks with the Hugging Face Trainer.

    python training/train.py --preset ctl_cpu --direction backward --output_dir runs/ctl-backward
    accelerate launch training/train.py --preset listops_paper --output_dir runs/listops   # several GPUs

`--preset NAME` reads `configuration/NAME.yaml`; any flag on the command line overrides the preset. Every
`TrainingArguments` flag works. The model is evaluated on `iid_test`, `ood_valid` and `ood_test`; the best checkpoint
is the one with the highest `ood_valid` accuracy (the latest on ties, as in the paper) and is loaded at the end.
The run writes `eval_results.json` (accuracy and accuracy per depth of every split) and a hub-ready `export/` folder.
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
from transformers import (
    DataCollatorWithPadding,
    EvalPrediction,
    HfArgumentParser,
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


@dataclass
class TaskArguments:
    """Which task to generate (see `modeling_ndr.load_task`)."""

    task: str = field(default="ctl", metadata={"help": f"One of {modeling_ndr.TASK_NAMES}."})
    direction: str | None = field(default=None, metadata={"help": "CTL only: forward or backward."})
    n_train: int | None = field(default=None, metadata={"help": "Training-set size (default: the paper's)."})
    n_eval: int | None = field(default=None, metadata={"help": "Size of each evaluation split (default 1000)."})
    task_seed: int = field(default=0, metadata={"help": "Seed of the data generation (CTL: also its tables)."})
    balance_depths: bool = field(
        default=False,
        metadata={"help": "Draw training samples uniformly over depths (with replacement). CTL's train set holds 72 "
                  "depth-1 and 486 depth-2 samples against ~24K each at depths 4 and 5; from scratch, a model then "
                  "sits at chance for thousands of steps before it finds the single lookups."},
    )


@dataclass
class ModelArguments:
    """The model: a fresh `NDRConfig` (fields left unset keep the NDRConfig defaults) or `--model_name_or_path`."""

    model_name_or_path: str | None = field(default=None, metadata={"help": "Fine-tune this checkpoint or hub id."})
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
    export_dir: str | None = field(default=None, metadata={"help": "Hub-ready export folder (default: output_dir/export)."})


def preset_path(name: str) -> str:
    """`configuration/NAME.yaml` (or `.yml`, `.json`), or `name` itself if it is a file."""
    candidates = [name] + [os.path.join(CONFIGURATION_DIR, name + ext) for ext in (".yaml", ".yml", ".json")]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return candidate
    available = sorted(os.path.splitext(f)[0] for f in os.listdir(CONFIGURATION_DIR) if f.endswith((".yaml", ".json")))
    raise ValueError(f"--preset {name!r} not found; available presets: {available}")


def parse_arguments(argv: list[str]):
    """Parse the dataclasses; a preset's values become the defaults, so command-line flags override them."""
    parser = HfArgumentParser((TaskArguments, ModelArguments, RunArguments, TrainingArguments))
    pre_parser = HfArgumentParser(RunArguments)
    run_args, _ = pre_parser.parse_known_args(argv)
    preset = {}
    if run_args.preset:
        with open(preset_path(run_args.preset)) as f:
            preset = yaml.safe_load(f) or {}
        known = {action.dest for action in parser._actions}
        unknown = sorted(set(preset) - known)
        if unknown:
            raise ValueError(f"preset {run_args.preset!r} has unknown fields {unknown}; use the names of train.py's flags")
        # argparse converts string defaults with the field's type, but not lists: keep those as they are
        parser.set_defaults(**{k: (str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                               for k, v in preset.items()})
    task_args, model_args, run_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    return task_args, model_args, run_args, training_args, preset


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
    `balance_depths=True` the training samples are drawn uniformly over depths."""

    def __init__(self, *args, balance_depths: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.balance_depths = balance_depths

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


def build_model(task_args: TaskArguments, model_args: ModelArguments, tokenizer) -> NDRForSequenceClassification:
    label_names = modeling_ndr.task_label_names(task_args.task)
    labels = {"id2label": dict(enumerate(label_names)), "label2id": {n: i for i, n in enumerate(label_names)}}
    overrides = {f.name: getattr(model_args, f.name) for f in fields(ModelArguments) if f.name != "model_name_or_path"}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if model_args.model_name_or_path:
        return NDRForSequenceClassification.from_pretrained(model_args.model_name_or_path, **overrides)
    config = NDRConfig(
        vocab_size=len(tokenizer),
        readout=modeling_ndr.task_readout(task_args.task),
        num_labels=len(label_names),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **labels,
        **overrides,
    )
    return NDRForSequenceClassification(config)


def build_datasets(task_args: TaskArguments, tokenizer, training_args: TrainingArguments):
    options = {"direction": task_args.direction} if task_args.direction else {}
    with training_args.main_process_first(desc="generate and tokenize the task"):  # generated once, then cached
        data = modeling_ndr.load_task(
            task_args.task, seed=task_args.task_seed, n_train=task_args.n_train, n_eval=task_args.n_eval, **options
        )
        data = data.map(lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"])
        data = data.rename_column("label", "labels")
    return data


def evaluate_splits(trainer: Trainer, data) -> dict:
    """`{split: {"accuracy": a, "by_depth": {depth: a}}}` for every evaluation split."""
    results = {}
    for split in EVAL_SPLITS:
        metrics = trainer.evaluate(data[split], metric_key_prefix=split)
        prefix = f"{split}_accuracy_depth_"
        results[split] = {
            "accuracy": metrics[f"{split}_accuracy"],
            "by_depth": {k[len(prefix):]: v for k, v in metrics.items() if k.startswith(prefix)},
        }
    return results


def main(argv: list[str] | None = None) -> dict:
    task_args, model_args, run_args, training_args, preset = parse_arguments(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity(training_args.get_process_log_level())
    if run_args.torch_threads:
        torch.set_num_threads(run_args.torch_threads)
    set_seed(training_args.seed)

    tokenizer = modeling_ndr.task_tokenizer(task_args.task)
    data = build_datasets(task_args, tokenizer, training_args)
    model = build_model(task_args, model_args, tokenizer)
    logger.info("model: %s parameters, config %s", f"{model.num_parameters():,}", model.config.to_diff_dict())

    training_args.label_names = ["labels", "depth"]  # the depth travels to compute_metrics (the model ignores it)
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

    if training_args.should_save:
        os.makedirs(training_args.output_dir, exist_ok=True)
        example = data["ood_test"][0]
        run_config = {"preset": run_args.preset, "preset_values": preset, "task": asdict(task_args),
                      "model": asdict(model_args), "seed": training_args.seed, "data_seed": training_args.data_seed,
                      "hub_model_id": training_args.hub_model_id, "command": sys.argv,
                      "example": {"text": tokenizer.decode(example["input_ids"], skip_special_tokens=True),
                                  "label": model.config.id2label[example["labels"]]}}
        with open(os.path.join(training_args.output_dir, "run_config.json"), "w") as f:
            json.dump(run_config, f, indent=2, default=str)

    resume = training_args.resume_from_checkpoint
    if resume in ("auto", "latest", "last", "true", "True"):
        resume = get_last_checkpoint(training_args.output_dir)
        logger.info("resuming from %s", resume or "scratch (no checkpoint found)")
    if training_args.do_train or training_args.max_steps > 0:
        trainer.train(resume_from_checkpoint=resume)

    results = evaluate_splits(trainer, data)
    if training_args.should_save:
        with open(os.path.join(training_args.output_dir, "eval_results.json"), "w") as f:
            json.dump(results, f, indent=2)
        print("\n" + results_table(results) + "\n")
        export_dir = run_args.export_dir or os.path.join(training_args.output_dir, "export")
        trainer.save_model(training_args.output_dir)  # the selected (best) model
        export_model(training_args.output_dir, export_dir, eval_results=results, run_config=run_config)
        print(f"ood_test accuracy: {results['ood_test']['accuracy']:.4f}")
        print(f"exported hub-ready model: {os.path.abspath(export_dir)}")
    if training_args.push_to_hub and training_args.should_save:
        # the export folder is what users load; Trainer pushes checkpoints itself while training
        upload_folder(repo_id=training_args.hub_model_id, folder_path=export_dir, commit_message="NDR export")
    return results


if __name__ == "__main__":
    main()
