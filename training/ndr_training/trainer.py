"""The NDR's `Trainer`: `NDRTrainer` (AdamW decays every parameter, the best checkpoint is the latest with the best
metric (`LatestBestOnTies`), training samples optionally drawn uniformly over depths), the depth-balanced samplers, the
per-depth `compute_metrics` built on the package's `evaluate` metric, and `evaluate_splits`, the nested results that
`eval_results.json` and the model card read.

Use them in your own Trainer script:

    from ndr_training import NDRTrainer, load_depth_accuracy, metrics_function

    args.label_names = ["labels", "depth"]  # the depth travels to compute_metrics, not to the model
    trainer = NDRTrainer(model=model, args=args, train_dataset=train, eval_dataset={"ood": ood},
                         compute_metrics=metrics_function(load_depth_accuracy()), balance_depths=True)
"""

import os
import re
import shutil

import numpy as np
from transformers import EvalPrediction, Trainer, TrainerCallback
from transformers.trainer_utils import HubStrategy, SaveStrategy
from transformers.utils import PushInProgress, hf_api

from modeling_ndr.metrics import load_depth_accuracy  # noqa: F401  (this module's name since it was one)
from modeling_ndr.tasks import SPLIT_NAMES, ctlpp_split_names
from modeling_ndr.training.errors import UsageError

from .sampling import balanced_sampler, first_tokens_and_lengths


# the evaluation splits of the paper's tasks; the best checkpoint is selected on ood_valid
EVAL_SPLITS = tuple(split for split in SPLIT_NAMES if split != "train")


def metrics_function(depth_accuracy, first_token_names: dict[int, str] | None = None):
    """`compute_metrics` for Trainer: accuracy, accuracy per depth when the batch carries depths, and with
    `first_token_names` accuracy per first token (ListOps: per root operator) and per first token and depth.

    Args:
        depth_accuracy: the metric of `load_depth_accuracy`.
        first_token_names: token id -> the name used in the metric keys (`first_token_metric_names`); the batch then
            carries a `first_token` column after `depth` (`label_names = ["labels", "depth", "first_token"]`).

    Returns:
        A function from `EvalPrediction` to `{"accuracy": a, "accuracy_depth_<d>": a, ..., "count": n,
        "count_depth_<d>": n, ...}` (flat, as Trainer logs them; the counts are the samples scored, which under data
        parallelism shows that every sample counted once), with first tokens also `accuracy_first_<name>` and
        `accuracy_first_<name>_depth_<d>`; with `label_names = ["labels", "depth"]` its `label_ids` are
        `(labels, depths)`.
    """

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        labels, depths, first_tokens = prediction.label_ids, None, None
        if isinstance(labels, (tuple, list)):  # label_names = ["labels", "depth"(, "first_token")]
            labels, depths, *rest = labels
            first_tokens = rest[0] if rest else None
        predicted = np.argmax(prediction.predictions, axis=-1)
        result = depth_accuracy.compute(predictions=predicted, references=labels, depths=depths)
        metrics = {
            "accuracy": result["accuracy"],
            **{f"accuracy_depth_{d}": a for d, a in result["by_depth"].items()},
            "count": len(labels),
            **{f"count_depth_{d}": n for d, n in result["count_by_depth"].items()},
        }
        if first_token_names and first_tokens is not None:
            correct = predicted == labels
            for token in np.unique(first_tokens):
                name = first_token_names.get(int(token), str(int(token)))
                group = first_tokens == token
                metrics[f"accuracy_first_{name}"] = float(correct[group].mean())
                for depth in np.unique(depths[group]) if depths is not None else ():
                    metrics[f"accuracy_first_{name}_depth_{int(depth)}"] = float(
                        correct[group & (depths == depth)].mean()
                    )
        return metrics

    return compute_metrics


def first_token_metric_names(tokenizer) -> dict[int, str]:
    """Token id -> a name for metric keys (letters, digits and _ only: `[SM` -> `SM`), for every word of the
    tokenizer's vocabulary; `metrics_function(..., first_token_names=...)`."""
    names = {}
    for word, token_id in tokenizer.get_vocab().items():
        names[token_id] = "".join(c if c.isalnum() or c == "_" else "" for c in word) or f"id{token_id}"
    return names


def add_first_token_column(data):
    """Each split with a `first_token` column, its first token id after [BOS] (`--eval_by_first_token`), which travels
    to `compute_metrics` as one of `label_names`."""
    return type(data)(
        {
            split: dataset.add_column("first_token", first_tokens_and_lengths(dataset)[0])
            for split, dataset in data.items()
        }
    )


# where `--keep_tied_best` keeps the checkpoints that tied the best metric (hard links into the output folder)
TIED_BEST_FOLDER = "tied-best"


class LatestBestOnTies(TrainerCallback):
    """The best checkpoint is the *latest* one with the best metric, as in the paper (Trainer keeps the first).

    Trainer calls `on_evaluate` with each evaluation's metrics before it compares them with `state.best_metric`; a
    tie moves `state.best_global_step` here, and Trainer's comparison (strictly better only) leaves it there, so the
    checkpoint saved next becomes `best_model_checkpoint`. (With `save_strategy="best"` Trainer saves only on a strict
    improvement, so a tie there saves nothing and the first stays the best.)

    With `keep_tied=True` (`train.py --keep_tied_best`) the checkpoint a tie takes the place of is kept, as hard links,
    in `OUTPUT_DIR/tied-best/` before `save_total_limit` deletes it, and the folder is emptied at each strict
    improvement: it holds the earlier checkpoints with the best metric, so that a release tool can compare them on a
    larger sample (`hub_cards/release_line.py`) instead of taking the latest of a tie on 1,000 samples."""

    def __init__(self, keep_tied: bool = False):
        self.keep_tied = keep_tied

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        key = args.metric_for_best_model or ""
        key = key if key.startswith("eval_") else f"eval_{key}"
        value = (metrics or {}).get(key)
        if state.best_metric is None or value is None:
            return
        keeping = self.keep_tied and state.is_world_process_zero
        tied_folder = os.path.join(args.output_dir, TIED_BEST_FOLDER)
        if value == state.best_metric and args.save_strategy in (SaveStrategy.STEPS, SaveStrategy.EPOCH):
            if keeping and state.best_model_checkpoint and os.path.isdir(state.best_model_checkpoint):
                kept = os.path.join(tied_folder, os.path.basename(state.best_model_checkpoint))
                if not os.path.isdir(kept):
                    shutil.copytree(state.best_model_checkpoint, kept, copy_function=os.link)
            state.best_global_step = state.global_step
        elif keeping and (value > state.best_metric if args.greater_is_better else value < state.best_metric):
            shutil.rmtree(tied_folder, ignore_errors=True)  # a strict improvement: no earlier checkpoint ties it


class NDRTrainer(Trainer):
    """`Trainer` with the paper's two differences: AdamW decays *all* parameters (Trainer exempts biases and norms),
    and the best checkpoint is the *latest* one with the best metric (Trainer keeps the first). With
    `balance_depths=True` the training samples are drawn uniformly over depths. The `depth` column travels with the
    batch to `compute_metrics` (it is one of `label_names`) but never reaches the model.

    With `push_to_hub`, the Hub gets the hub-ready export folder with ndr's card, once (`push_to_hub`, which train.py
    calls after the export), not `output_dir` with Trainer's card at every save and in `save_model`; checkpoints are
    uploaded only where `hub_strategy` asks for them (`checkpoint`: into `last-checkpoint/`, `all_checkpoints`: each
    into its own folder, as Trainer does). Trainer creates the repository when it is built (`--hub_model_id`, else
    the output folder's name in your namespace; `--hub_token`, `--hub_private_repo`), so a bad token fails at once.

    Ties go to the latest checkpoint through a callback (`LatestBestOnTies`); a run resumed from its final checkpoint
    trains no step more through another (`TimeBoxCallback` raises `RunFinished` when training begins). Two private
    Trainer methods are overridden, for want of a public hook (docs/contributing.md lists them and why):
    `_get_train_sampler` and `_push_from_checkpoint`; tests/unit/test_trainer.py pins their signatures and behaviour,
    so a transformers release that changes them fails there.

    Args:
        balance_depths: draw training samples uniformly over the `depth` column (see `balanced_sampler`).
        balance_operators: draw every operator (first token) equally often within each depth (`operator_weights`).
        sample_shares: `SampleShare`s with token ids: each group gets its share of the draws (`shared_weights`;
            `--sample_shares`).
        *args: `Trainer`'s positional arguments.
        **kwargs: `Trainer`'s keyword arguments.
    """

    def __init__(
        self,
        *args,
        balance_depths: bool = False,
        balance_operators: bool = False,
        sample_shares=(),
        keep_tied_best: bool = False,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.add_callback(LatestBestOnTies(keep_tied_best))
        self.balance_depths, self.balance_operators = balance_depths, balance_operators
        self.sample_shares = list(sample_shares)

    def compute_loss(self, model, inputs, *args, **kwargs):
        # the columns that travel to compute_metrics beside the labels (depth, first_token, a token task's length)
        travelling = {"depth", "first_token", *(self.args.label_names or ())} - {"labels"}
        inputs = {k: v for k, v in inputs.items() if k not in travelling}
        return super().compute_loss(model, inputs, *args, **kwargs)

    def _get_train_sampler(self, train_dataset=None):
        if not (self.balance_depths or self.balance_operators or self.sample_shares):
            return super()._get_train_sampler(train_dataset)
        return balanced_sampler(train_dataset or self.train_dataset, self.args, self.balance_depths,
                                self.balance_operators, self.sample_shares)  # fmt: skip

    def get_decay_parameter_names(self, model) -> list[str]:
        return [name for name, _ in model.named_parameters()]

    # ---- the Hub: the export folder once, checkpoints only when hub_strategy asks for them

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        # Trainer's save_model also pushes output_dir with Trainer's card; here the Hub gets the export (push_to_hub)
        super().save_model(output_dir, _internal_call=True)

    def push_to_hub(
        self,
        commit_message: str | None = "End of training",
        blocking: bool = True,
        token: str | None = None,
        revision: str | None = None,
        private: bool | None = None,
        export_dir: str | None = None,
    ):
        """Upload the hub-ready export folder (`export_model`: weights, config, tokenizer, modeling code, ndr's model
        card and results) to the run's repository, `self.hub_model_id` — where `Trainer.push_to_hub` uploads
        `output_dir` with a card of its own.

        Args:
            commit_message: the commit's message.
            blocking: wait for the upload (False: return a `Future`).
            token: a token with write access (default `--hub_token`, else the one `huggingface_hub` finds).
            revision: the branch (default `--hub_revision`, else main).
            private: whether a repository created now is private (default `--hub_private_repo`).
            export_dir: the folder to upload (default `output_dir/export`, where train.py writes it).

        Returns:
            `huggingface_hub`'s `CommitInfo` (a `Future` of it if not `blocking`); None on processes other than the
            main one.
        """
        export_dir = export_dir or os.path.join(self.args.output_dir, "export")
        if not os.path.isfile(os.path.join(export_dir, "README.md")):
            raise FileNotFoundError(f"{export_dir}: no export with its model card there (export_model writes one)")
        token = token if token is not None else self.args.hub_token
        if self.hub_model_id is None:  # push_to_hub was off when the Trainer was built
            self.init_hf_repo(token=token, private=private)
        if not self.is_world_process_zero():
            return None
        self._finish_current_push()  # a checkpoint still uploading lands first
        return hf_api().upload_folder(
            repo_id=self.hub_model_id,
            folder_path=export_dir,
            commit_message=commit_message,
            token=token,
            run_as_future=not blocking,
            revision=revision or self.args.hub_revision,
        )

    def _push_from_checkpoint(self, checkpoint_folder):
        # Trainer uploads output_dir (the model copied there, its own files, anything else in the folder) at every
        # save, and the checkpoint too with hub_strategy checkpoint/all_checkpoints; here only that checkpoint is
        # uploaded, and only with those two
        strategy = self.args.hub_strategy
        if not self.is_world_process_zero() or strategy not in (HubStrategy.CHECKPOINT, HubStrategy.ALL_CHECKPOINTS):
            return
        if not self.args.hub_always_push and self.push_in_progress is not None and not self.push_in_progress.is_done():
            return  # as Trainer: the previous upload is still running, this save is skipped
        job = hf_api().upload_folder(
            repo_id=self.hub_model_id,
            folder_path=checkpoint_folder,
            path_in_repo="last-checkpoint"
            if strategy == HubStrategy.CHECKPOINT
            else os.path.basename(checkpoint_folder),
            commit_message=f"Training in progress, step {self.state.global_step}, checkpoint",
            token=self.args.hub_token,
            run_as_future=True,
            revision=self.args.hub_revision,
        )
        if self.push_in_progress is None or self.push_in_progress.is_done():
            self.push_in_progress = PushInProgress([job])
        else:
            self.push_in_progress.jobs.append(job)


def evaluate_splits(trainer: Trainer, data, splits) -> dict:
    """Evaluate every split (Trainer logs and saves `<split>_results.json`).

    Args:
        trainer: the trainer, with `compute_metrics=metrics_function(...)`.
        data: the encoded splits, by name.
        splits: the names of the splits to evaluate.

    Returns:
        `{split: {"accuracy": a, "by_depth": {depth: a}}}`: the nested form that `eval_results.json`, the model card
        and the release tests read (Trainer's own files are flat, one key per metric); `by_depth` is empty without
        depths. A token task's splits also hold `character_accuracy` and, per length, `by_length` (sequence
        accuracy) and `character_by_length` (`token_labels.token_metrics_function`).
    """
    results = {}
    for split in splits:
        metrics = trainer.evaluate(data[split], metric_key_prefix=split)
        trainer.log_metrics(split, metrics)
        trainer.save_metrics(split, metrics)
        results[split] = nested_results(metrics, f"{split}_")
    return results


def nested_results(metrics: dict, prefix: str = "") -> dict:
    """One split's flat metrics (`<prefix>accuracy`, `<prefix>accuracy_depth_<d>`; a token task's
    `<prefix>character_accuracy` and `..._length_<n>`) in the nested form of `eval_results.json`."""
    results = {"accuracy": metrics[f"{prefix}accuracy"], "by_depth": _suffixed(metrics, f"{prefix}accuracy_depth_")}
    if f"{prefix}character_accuracy" in metrics:
        results.update(
            character_accuracy=metrics[f"{prefix}character_accuracy"],
            by_length=_suffixed(metrics, f"{prefix}accuracy_length_"),
            character_by_length=_suffixed(metrics, f"{prefix}character_accuracy_length_"),
        )
    return results


def _suffixed(metrics: dict, prefix: str) -> dict:
    """`{suffix: value}` of the metrics named `prefix<suffix>` (a depth, a length)."""
    return {key[len(prefix) :]: value for key, value in metrics.items() if key.startswith(prefix)}


def task_eval_splits(data_args) -> list[str]:
    """The evaluation splits of one of the paper's tasks (CTL++: its variant's test splits)."""
    if data_args.task == "ctlpp":
        variant = data_args.task_variant or "parallel_branch"
        return ctlpp_split_names(variant, data_args.function_overlap or 0, data_args.symbol_overlap)[1:]
    return list(EVAL_SPLITS)


def check_best_metric(training_args, eval_splits: list[str], given: set[str]) -> None:
    """Check that `--metric_for_best_model` names a metric this run's evaluation reports: `<split>_accuracy`,
    `<split>_accuracy_depth_<d>` or `<split>_loss` (Trainer would only fail at the first evaluation), and that a
    run evaluating during training has something to evaluate.

    Args:
        training_args: the run's `TrainingArguments`.
        eval_splits: the names of the evaluation splits.
        given: the flags given on the command line (to say where a bad value came from).
    """
    if training_args.eval_strategy != "no" and not eval_splits:
        raise UsageError(
            f"--eval_strategy {training_args.eval_strategy} evaluates during training, but there is no evaluation "
            "split: add --validation_file or --eval_files NAME=FILE, or pass --eval_strategy no"
        )
    metric = training_args.metric_for_best_model
    if metric is None or not (training_args.load_best_model_at_end or training_args.eval_strategy != "no"):
        return
    name = metric.removeprefix("eval_")
    for split in eval_splits:
        rest = name[len(split) + 1 :] if name.startswith(split + "_") else ""
        if re.fullmatch(r"accuracy|accuracy_depth_\d+|accuracy_first_\w+|loss", rest):
            return
    origin = "" if "metric_for_best_model" in given else " (from the preset or Trainer's default)"
    example = f"; e.g. --metric_for_best_model {eval_splits[-1]}_accuracy" if eval_splits else ""
    raise UsageError(
        f"--metric_for_best_model {metric!r}{origin} is not reported by this run: it evaluates {eval_splits} and "
        f"reports <split>_accuracy, <split>_accuracy_depth_<d> and <split>_loss{example}"
    )
