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

import dataclasses
import os
from dataclasses import dataclass

import numpy as np
import torch
from transformers import EvalPrediction, Trainer
from transformers.trainer_pt_utils import get_length_grouped_indices
from transformers.trainer_utils import HubStrategy
from transformers.utils import PushInProgress, hf_api

from ..metrics import DEPTH_ACCURACY
from ..tasks import SPLIT_NAMES
from .errors import UsageError


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
            split: dataset.add_column("first_token", [ids[1] if len(ids) > 1 else -1 for ids in dataset["input_ids"]])
            for split, dataset in data.items()
        }
    )


def resolve_sample_shares(items, tokenizer, train) -> list["SampleShare"]:
    """`--sample_shares` with token ids, checked against the tokenizer and the training set: an unknown token, a depth
    without a depth column, or a group with no training sample is one `UsageError` naming it.

    Args:
        items: the flag's values.
        tokenizer: the model's tokenizer.
        train: the encoded training set (`input_ids`, and `depth` where the data has depths).

    Returns:
        The `SampleShare`s `NDRTrainer(sample_shares=...)` takes.
    """
    shares = parse_sample_shares(items)
    if not shares:
        return []
    vocabulary = tokenizer.get_vocab()
    for share in shares:
        if share.token not in vocabulary:
            raise UsageError(f"--sample_shares: {share.token!r} is not a word of the tokenizer's vocabulary")
        if share.depth is not None and "depth" not in train.column_names:
            raise UsageError(f"--sample_shares {share.token}:{share.depth}: the data has no depths (--depth_column)")
    resolved = [dataclasses.replace(share, token=vocabulary[share.token]) for share in shares]
    ids = train["input_ids"]
    first_tokens = [row[1] if len(row) > 1 else -1 for row in ids]
    depths = train["depth"] if "depth" in train.column_names else None
    for share, group in zip(shares, share_groups(first_tokens, depths, [len(row) for row in ids], resolved)):
        if not group.any():
            where = "".join([f" at depth {share.depth}" if share.depth is not None else "",
                             f" with {share.words} words" if share.words is not None else ""])  # fmt: skip
            raise UsageError(f"--sample_shares: no training sample starts with {share.token}{where}")
    return resolved


def depth_weights(depths) -> torch.Tensor:
    """Sampling weights that draw every depth equally often: 1 / (samples of the sample's depth).

    Args:
        depths: each sample's depth.

    Returns:
        A float64 tensor of one weight per sample.
    """
    _, inverse, counts = np.unique(np.asarray(depths), return_inverse=True, return_counts=True)
    return torch.as_tensor(1.0 / counts[inverse], dtype=torch.double)


def operator_weights(depths, operators, balance_depths: bool = False) -> torch.Tensor:
    """Sampling weights that draw every operator equally often within each depth (`--balance_operators`): ListOps'
    `train` split holds 9% `[SM` lists at depth 1, where `[SM` needs all its arguments and is learned only as fast as
    its samples arrive (docs/results/releases.md). Each depth keeps its share of the data, or with `balance_depths`
    every depth is drawn equally often.

    Args:
        depths: each sample's depth.
        operators: each sample's operator (any hashable id: `balanced_sampler` passes the first token's).
        balance_depths: also draw every depth equally often.

    Returns:
        A float64 tensor of one weight per sample.
    """
    depths, operators = np.asarray(depths), np.asarray(operators)
    pairs = np.stack([depths, operators], axis=1)
    _, group, group_counts = np.unique(pairs, axis=0, return_inverse=True, return_counts=True)
    depth_values, depth, depth_counts = np.unique(depths, return_inverse=True, return_counts=True)
    operators_per_depth = np.array([len(np.unique(operators[depths == value])) for value in depth_values])
    depth_share = np.ones(len(depths)) if balance_depths else depth_counts[depth.reshape(-1)].astype(float)
    share = depth_share / operators_per_depth[depth.reshape(-1)]
    return torch.as_tensor(share / group_counts[group.reshape(-1)], dtype=torch.double)


class BalancedSampler(torch.utils.data.Sampler):
    """`--balance_depths`: each epoch draws as many samples as the dataset holds, weighted by `weights` (with
    replacement: the draws of `WeightedRandomSampler` with the same generator); with `lengths`
    (`--train_sampling_strategy group_by_length`) the draws are then ordered as `LengthGroupedSampler` orders them, so
    each batch of `batch_size` holds samples of similar length (less padding).

    Epoch e's order is the e-th one drawn from a generator seeded with `seed`, whether or not this sampler drew the
    epochs before it: a run resumed in a later epoch (Trainer calls `set_epoch`, then skips the batches already
    trained) sees the samples of the run that was not interrupted. The same seed in every process: accelerate shards
    one common sequence of batches.

    Args:
        weights: one sampling weight per sample (`depth_weights`).
        seed: the seed of the draws (the run's `--seed`).
        lengths: each sample's length in tokens, to group batches by length (None: no grouping).
        batch_size: the size of the groups of similar length (Trainer's: batch size x accumulation steps).
    """

    def __init__(self, weights: torch.Tensor, seed: int, lengths: list[int] | None = None, batch_size: int = 1):
        self.weights, self.seed, self.lengths, self.batch_size = weights, seed, lengths, batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.epoch = None  # set by `set_epoch`; None: the epoch after the last one drawn
        self.epochs_drawn = 0  # the epochs whose draws the generator has made

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.weights)

    def _draw(self, skip: bool = False) -> list[int] | None:
        draws = torch.multinomial(self.weights, len(self.weights), replacement=True, generator=self.generator)
        if self.lengths is None:
            return None if skip else draws.tolist()
        if skip:  # the generator's only use in get_length_grouped_indices (tests/test_preemption.py checks it)
            torch.randperm(len(draws), generator=self.generator)
            return None
        draws = draws.tolist()
        order = get_length_grouped_indices([self.lengths[i] for i in draws], self.batch_size, generator=self.generator)
        return [draws[position] for position in order]

    def __iter__(self):
        epoch = self.epochs_drawn if self.epoch is None else self.epoch
        if epoch < self.epochs_drawn:  # an earlier epoch again: start over from the seed
            self.generator.manual_seed(self.seed)
            self.epochs_drawn = 0
        while self.epochs_drawn < epoch:  # a later epoch (a resumed run): skip the epochs before it
            self._draw(skip=True)
            self.epochs_drawn += 1
        order = self._draw()
        self.epochs_drawn += 1
        return iter(order)


@dataclass(frozen=True)
class SampleShare:
    """One `--sample_shares` group: the training samples whose first token (after [BOS]) is `token` and, where given,
    whose depth is `depth` and whose text has `words` words, drawn as `share` of all draws."""

    token: str | int
    depth: int | None
    words: int | None
    share: float


def parse_sample_shares(items) -> list[SampleShare]:
    """`--sample_shares` items, `TOKEN[:DEPTH[:WORDS]]=SHARE` (e.g. `[SM:1=0.25`: [SM lists of depth 1; `[SM:1:4=0.1`:
    those of 4 words, `[SM d d ]`).

    Args:
        items: the flag's values (strings).

    Returns:
        One `SampleShare` per item, in their order; a `UsageError` naming the item if it is malformed, a share is not
        in (0, 1], or the shares add up to more than 1 (shares of 1 in all: only those groups are drawn).
    """
    shares = []
    for item in items or ():
        group, equals, value = item.rpartition("=")
        token, *numbers = group.split(":")
        try:
            share = float(value)
            depth, words = (([int(n) for n in numbers]) + [None, None])[:2] if len(numbers) <= 2 else (None, None)
            ok = len(numbers) <= 2 and all(n is None or n >= 0 for n in (depth, words))
        except ValueError:
            share, ok = None, False
        if not equals or not token or share is None or not ok or not 0 < share <= 1:
            raise UsageError(
                f"--sample_shares {item!r}: expected FIRST_TOKEN[:DEPTH[:WORDS]]=SHARE with 0 < SHARE <= 1 (e.g. "
                "'[SM:1=0.25': a quarter of the draws are [SM lists of depth 1; '[SM:1=1': only those)"
            )
        shares.append(SampleShare(token, depth, words, share))
    if sum(share.share for share in shares) > 1 + 1e-9:
        raise UsageError(f"--sample_shares {' '.join(items)}: the shares add up to more than 1")
    return shares


def share_groups(first_tokens, depths, lengths, shares) -> list[np.ndarray]:
    """Each share's group as a boolean mask over the samples; a sample belongs to the first share that names it.

    Args:
        first_tokens: each sample's first token id (after [BOS]).
        depths: each sample's depth (None: the shares name no depth).
        lengths: each sample's length in tokens, [BOS] and [EOS] included (a text of w words: w + 2).
        shares: `SampleShare`s whose `token` is an id.
    """
    first_tokens, claimed, groups = np.asarray(first_tokens), np.zeros(len(first_tokens), dtype=bool), []
    for share in shares:
        group = first_tokens == share.token
        if share.depth is not None:
            group &= np.asarray(depths) == share.depth
        if share.words is not None:
            group &= np.asarray(lengths) == share.words + 2
        group &= ~claimed
        claimed |= group
        groups.append(group)
    return groups


def shared_weights(weights: torch.Tensor, groups: list[np.ndarray], shares: list[SampleShare]) -> torch.Tensor:
    """`weights` changed so that each group (`share_groups`) gets its share of the draws (`--sample_shares`), and
    every other sample the rest in proportion to its weight. A ListOps recipe keeps flat `[SM` lists (depth 1) at a
    quarter of the draws while the whole `train` split trains (docs/results/listops-recipes.md).

    Args:
        weights: one sampling weight per sample (uniform, `depth_weights` or `operator_weights`).
        groups: one boolean mask per share, disjoint.
        shares: the `SampleShare`s.

    Returns:
        A float64 tensor of one weight per sample, summing to 1.
    """
    weights = weights.double() / weights.sum()
    result, claimed = weights.clone(), torch.zeros(len(weights), dtype=torch.bool)
    for mask, share in zip(groups, shares):
        group = torch.as_tensor(mask)
        if not group.any():
            raise ValueError(f"no training sample in the group of {share}")
        result[group] = share.share * weights[group] / weights[group].sum()
        claimed |= group
    rest = max(0.0, 1 - sum(share.share for share in shares))
    if (~claimed).any():
        result[~claimed] = rest * weights[~claimed] / weights[~claimed].sum()
    return result


def balanced_sampler(dataset, args, balance_depths: bool = True, balance_operators: bool = False, shares=()):
    """The sampler of `balance_depths=True` (depths drawn uniformly) and/or `balance_operators=True` (within each
    depth, every operator -- the first token after [BOS] -- drawn uniformly) and/or `shares` (groups of samples given
    a share of the draws, `shared_weights`), with replacement, length-grouped if
    `args.train_sampling_strategy == "group_by_length"`.

    Args:
        dataset: the training set, with `input_ids` and (for depth balancing and depth groups) `depth` columns.
        args: the run's `TrainingArguments` (seed, batch size, accumulation, sampling strategy).
        balance_depths: draw every depth equally often.
        balance_operators: draw every operator equally often within a depth (`operator_weights`).
        shares: `SampleShare`s with token ids (`--sample_shares`, `resolve_sample_shares`).

    Returns:
        A `BalancedSampler` of `len(dataset)` indices per epoch.
    """
    first_tokens, lengths = None, [len(ids) for ids in dataset["input_ids"]]
    if balance_operators or shares:
        first_tokens = [ids[1] if len(ids) > 1 else -1 for ids in dataset["input_ids"]]
    depths = dataset["depth"] if "depth" in dataset.column_names else None
    if balance_operators:
        weights = operator_weights(depths, first_tokens, balance_depths)
    elif balance_depths:
        weights = depth_weights(depths)
    else:
        weights = torch.ones(len(dataset), dtype=torch.double)
    if shares:
        weights = shared_weights(weights, share_groups(first_tokens, depths, lengths, shares), shares)
    if args.train_sampling_strategy != "group_by_length":
        return BalancedSampler(weights, args.seed)
    batch_size = args.train_batch_size * args.gradient_accumulation_steps  # as Trainer's grouping
    return BalancedSampler(weights, args.seed, lengths, batch_size)


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

    Four private Trainer methods are overridden (`_get_train_sampler`, `_determine_best_metric`,
    `_push_from_checkpoint`, `_init_training_state`: a run resumed from its final checkpoint trains no step more);
    tests/test_trainer.py pins their signatures and behaviour, so a transformers release that changes them fails
    there.

    Args:
        balance_depths: draw training samples uniformly over the `depth` column (see `balanced_sampler`).
        balance_operators: draw every operator (first token) equally often within each depth (`operator_weights`).
        sample_shares: `SampleShare`s with token ids: each group gets its share of the draws (`shared_weights`;
            `--sample_shares`).
        *args: `Trainer`'s positional arguments.
        **kwargs: `Trainer`'s keyword arguments.
    """

    def __init__(
        self, *args, balance_depths: bool = False, balance_operators: bool = False, sample_shares=(), **kwargs
    ):
        super().__init__(*args, **kwargs)
        self.balance_depths, self.balance_operators = balance_depths, balance_operators
        self.sample_shares = list(sample_shares)

    def compute_loss(self, model, inputs, *args, **kwargs):
        inputs = {k: v for k, v in inputs.items() if k not in ("depth", "first_token")}
        return super().compute_loss(model, inputs, *args, **kwargs)

    def _get_train_sampler(self, train_dataset=None):
        if not (self.balance_depths or self.balance_operators or self.sample_shares):
            return super()._get_train_sampler(train_dataset)
        return balanced_sampler(train_dataset or self.train_dataset, self.args, self.balance_depths,
                                self.balance_operators, self.sample_shares)  # fmt: skip

    def _init_training_state(self, max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint,
                             trial):  # fmt: skip
        epochs_trained, steps_trained = super()._init_training_state(
            max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
        )
        if resume_from_checkpoint is not None and self.state.global_step >= max_steps:
            # resumed from the run's last checkpoint (killed during its final evaluation or export): nothing is left
            # to train, and Trainer's epoch loop would train one step more before its first check of max_steps
            return num_train_epochs, 0
        return epochs_trained, steps_trained

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
