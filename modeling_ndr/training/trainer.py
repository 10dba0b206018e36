"""The NDR's `Trainer`: `NDRTrainer` (AdamW decays every parameter, the best checkpoint is the latest with the best
metric, training samples optionally drawn uniformly over depths), the depth-balanced samplers, the per-depth
`compute_metrics` built on the package's `evaluate` metric, and `evaluate_splits`, the nested results that
`eval_results.json` and the model card read.

Use them in your own Trainer script:

    from modeling_ndr.training import NDRTrainer, load_depth_accuracy, metrics_function

    args.label_names = ["labels", "depth"]  # the depth travels to compute_metrics, not to the model
    trainer = NDRTrainer(model=model, args=args, train_dataset=train, eval_dataset={"ood": ood},
                         compute_metrics=metrics_function(load_depth_accuracy()), balance_depths=True)
"""

import numpy as np
import torch
from transformers import EvalPrediction, Trainer
from transformers.trainer_pt_utils import get_length_grouped_indices

from ..metrics import DEPTH_ACCURACY
from ..tasks import SPLIT_NAMES


# the evaluation splits of the paper's tasks; the best checkpoint is selected on ood_valid
EVAL_SPLITS = tuple(split for split in SPLIT_NAMES if split != "train")


def load_depth_accuracy():
    """The package's `evaluate` metric (`modeling_ndr.metrics.DEPTH_ACCURACY`), loaded by path (no Hub).

    `evaluate` is imported here: the import takes seconds, and a bad command line is reported before that.

    Returns:
        The `evaluate.EvaluationModule`: `compute(predictions, references, depths=None)` gives
        `{"accuracy": a, "by_depth": {depth: a}}`.
    """
    import evaluate

    return evaluate.load(DEPTH_ACCURACY, keep_in_memory=True)  # in memory: no cache files shared between processes


def metrics_function(depth_accuracy):
    """`compute_metrics` for Trainer: accuracy, and accuracy per depth when the batch carries depths.

    Args:
        depth_accuracy: the metric of `load_depth_accuracy`.

    Returns:
        A function from `EvalPrediction` to `{"accuracy": a, "accuracy_depth_<d>": a, ...}` (flat, as Trainer logs
        them); with `label_names = ["labels", "depth"]` its `label_ids` are `(labels, depths)`.
    """

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        labels, depths = prediction.label_ids, None
        if isinstance(labels, (tuple, list)):  # label_names = ["labels", "depth"]
            labels, depths = labels
        result = depth_accuracy.compute(
            predictions=np.argmax(prediction.predictions, axis=-1), references=labels, depths=depths
        )
        return {"accuracy": result["accuracy"], **{f"accuracy_depth_{d}": a for d, a in result["by_depth"].items()}}

    return compute_metrics


def depth_weights(depths) -> torch.Tensor:
    """Sampling weights that draw every depth equally often: 1 / (samples of the sample's depth).

    Args:
        depths: each sample's depth.

    Returns:
        A float64 tensor of one weight per sample.
    """
    _, inverse, counts = np.unique(np.asarray(depths), return_inverse=True, return_counts=True)
    return torch.as_tensor(1.0 / counts[inverse], dtype=torch.double)


class LengthGroupedBalancedSampler(torch.utils.data.Sampler):
    """`--balance_depths` with `--train_sampling_strategy group_by_length`: each epoch draws as many samples as the
    dataset holds, weighted by `weights` (with replacement, as `WeightedRandomSampler`), then orders the draws as
    `LengthGroupedSampler` does, so each batch of `batch_size` holds samples of similar length (less padding).

    Args:
        weights: one sampling weight per sample (`depth_weights`).
        lengths: each sample's length in tokens.
        batch_size: the size of the groups of similar length (Trainer's: batch size × accumulation steps).
        generator: the random generator (the same seed in every process).
    """

    def __init__(self, weights: torch.Tensor, lengths: list[int], batch_size: int, generator: torch.Generator):
        self.weights, self.lengths, self.batch_size, self.generator = weights, lengths, batch_size, generator

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        draws = torch.multinomial(self.weights, len(self.lengths), replacement=True, generator=self.generator).tolist()
        drawn_lengths = [self.lengths[index] for index in draws]
        order = get_length_grouped_indices(drawn_lengths, self.batch_size, generator=self.generator)
        return iter([draws[position] for position in order])


def balanced_sampler(dataset, args) -> torch.utils.data.Sampler:
    """The sampler of `balance_depths=True`: depths drawn uniformly (with replacement), length-grouped if
    `args.train_sampling_strategy == "group_by_length"`.

    Args:
        dataset: the training set, with `depth` and `input_ids` columns.
        args: the run's `TrainingArguments` (seed, batch size, accumulation, sampling strategy).

    Returns:
        A sampler of `len(dataset)` indices per epoch.
    """
    weights = depth_weights(dataset["depth"])
    # the same generator seed in every process: accelerate shards one common sequence of batches
    generator = torch.Generator().manual_seed(args.seed)
    if args.train_sampling_strategy != "group_by_length":
        return torch.utils.data.WeightedRandomSampler(weights, num_samples=len(weights), generator=generator)
    lengths = [len(ids) for ids in dataset["input_ids"]]
    batch_size = args.train_batch_size * args.gradient_accumulation_steps  # as Trainer's grouping
    return LengthGroupedBalancedSampler(weights, lengths, batch_size, generator)


class NDRTrainer(Trainer):
    """`Trainer` with the paper's two differences: AdamW decays *all* parameters (Trainer exempts biases and norms),
    and the best checkpoint is the *latest* one with the best metric (Trainer keeps the first). With
    `balance_depths=True` the training samples are drawn uniformly over depths. The `depth` column travels with the
    batch to `compute_metrics` (it is one of `label_names`) but never reaches the model.

    Two private Trainer methods are overridden (`_get_train_sampler`, `_determine_best_metric`); tests/test_trainer.py
    pins their signatures and behaviour, so a transformers release that changes them fails there.

    Args:
        balance_depths: draw training samples uniformly over the `depth` column (see `balanced_sampler`).
        *args, **kwargs: `Trainer`'s.
    """

    def __init__(self, *args, balance_depths: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.balance_depths = balance_depths

    def compute_loss(self, model, inputs, *args, **kwargs):
        return super().compute_loss(model, {k: v for k, v in inputs.items() if k != "depth"}, *args, **kwargs)

    def _get_train_sampler(self, train_dataset=None):
        if not self.balance_depths:
            return super()._get_train_sampler(train_dataset)
        return balanced_sampler(train_dataset or self.train_dataset, self.args)

    def get_decay_parameter_names(self, model) -> list[str]:
        return [name for name, _ in model.named_parameters()]

    def _determine_best_metric(self, metrics, trial):
        # a tie with the best so far moves the best checkpoint to this one (the paper keeps the latest)
        key = self.args.metric_for_best_model or ""
        key = key if key.startswith("eval_") else f"eval_{key}"
        if self.state.best_metric is not None and metrics.get(key) == self.state.best_metric:
            self.state.best_global_step = self.state.global_step
            return True
        return super()._determine_best_metric(metrics, trial)


def evaluate_splits(trainer: Trainer, data, splits) -> dict:
    """Evaluate every split (Trainer logs and saves `<split>_results.json`).

    Args:
        trainer: the trainer, with `compute_metrics=metrics_function(...)`.
        data: the encoded splits, by name.
        splits: the names of the splits to evaluate.

    Returns:
        `{split: {"accuracy": a, "by_depth": {depth: a}}}`: the nested form that `eval_results.json`, the model card
        and the release tests read (Trainer's own files are flat, one key per metric); `by_depth` is empty without
        depths.
    """
    results = {}
    for split in splits:
        metrics = trainer.evaluate(data[split], metric_key_prefix=split)
        trainer.log_metrics(split, metrics)
        trainer.save_metrics(split, metrics)
        prefix = f"{split}_accuracy_depth_"
        results[split] = {
            "accuracy": metrics[f"{split}_accuracy"],
            "by_depth": {k[len(prefix) :]: v for k, v in metrics.items() if k.startswith(prefix)},
        }
    return results
