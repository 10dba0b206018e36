"""How `NDRTrainer` draws its training samples: uniformly over depths (`--balance_depths`), over root operators
within a depth (`--balance_operators`), and with chosen shares of the draws for groups of samples (`--sample_shares
TOKEN[:DEPTH[:WORDS]][@NESTED]=SHARE`: e.g. ListOps' flat `[SM` lists, over-represented so that the sum is learned).
Each is a weight per sample for a `BalancedSampler`, which draws with replacement, the same per seed in every process.
"""

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from transformers.trainer_pt_utils import get_length_grouped_indices

from modeling_ndr.training.errors import UsageError


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
    brackets = bracket_ids(vocabulary) if any(share.nested is not None for share in shares) else None
    if brackets is not None and not brackets[0]:
        raise UsageError("--sample_shares ...@NESTED: the vocabulary has no list brackets (words '[OP' and ']')")
    resolved = [dataclasses.replace(share, token=vocabulary[share.token], brackets=brackets) for share in shares]
    first_tokens, lengths = first_tokens_and_lengths(train)
    depths = depth_values(train)
    for share, group in zip(shares, share_groups(first_tokens, depths, lengths, resolved, nested_of(train, resolved))):
        if not group.any():
            where = "".join([f" at depth {share.depth}" if share.depth is not None else "",
                             f" with {share.words} words" if share.words is not None else "",
                             f" with {share.nested} nested arguments" if share.nested else ""])  # fmt: skip
            raise UsageError(f"--sample_shares: no training sample starts with {share.token}{where}")
    return resolved


def bracket_ids(vocabulary: dict) -> tuple[frozenset, int | None]:
    """The ids of the words that open a list (`[MIN`, `[SM`, ...: starting with `[`, not ending with `]`, so not
    `[BOS]`) and of `]`, which closes one."""
    openers = frozenset(i for word, i in vocabulary.items() if word.startswith("[") and not word.endswith("]"))
    return openers, vocabulary.get("]")


def nested_arguments(ids, openers, closer) -> int:
    """The most arguments of one list that are nested lists themselves (lists holding a list): 0 for a flat list or
    `[SM [MAX 1 2 ] [MIN 3 4 ] ]`, 1 for a chain (`[SM 1 [MAX 2 [MIN 3 4 ] ] ]`), 2 for
    `[SM [MAX [MIN 1 2 ] 3 ] [MED [SM 4 5 ] 6 ] ]`."""
    stack, most = [], 0  # per open list: [height of its tallest list argument, its arguments of height >= 2]
    for token in ids:
        if token in openers:
            stack.append([0, 0])
        elif token == closer and stack:
            tallest, nested = stack.pop()
            most = max(most, nested)
            if stack:
                stack[-1][0] = max(stack[-1][0], tallest + 1)
                stack[-1][1] += tallest + 1 >= 2
    return most


def nested_of(dataset, shares) -> np.ndarray | None:
    """`nested_arguments` of every sample (None where no share asks for it; a Python pass over the token ids, 5.6 s
    for ListOps' 1M rows on a 2-core Xeon, made by the shares' check and again by the sampler)."""
    asking = [share for share in shares if share.nested is not None]
    if not asking:
        return None
    openers, closer = asking[0].brackets
    column = dataset.with_format("arrow")["input_ids"].to_pylist()
    return np.fromiter((nested_arguments(ids, openers, closer) for ids in column), dtype=np.int64, count=len(column))


def first_tokens_and_lengths(dataset) -> tuple[np.ndarray, np.ndarray]:
    """Each sample's first token id after [BOS] (-1 where it has fewer than two tokens) and its length in tokens,
    read from the `input_ids` column's Arrow buffers (ListOps' 1M rows in a second, where a Python list per row takes
    most of a minute; `tests/unit/test_trainer.py` checks it against the rows read one by one).

    Args:
        dataset: a `datasets.Dataset` with an `input_ids` column (a selection or shuffle of one included).
    """
    import pyarrow as pa

    column = dataset.with_format("arrow")["input_ids"]
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = column.offsets.to_numpy()  # absolute positions in `values`, a slice's included
    lengths = np.diff(offsets)
    values = column.values.to_numpy(zero_copy_only=False)
    second = np.minimum(offsets[:-1] + 1, max(len(values) - 1, 0))
    first_tokens = np.where(lengths > 1, values[second] if len(values) else -1, -1).astype(np.int64)
    return first_tokens, lengths.astype(np.int64)


def depth_values(dataset) -> np.ndarray | None:
    """The `depth` column as a numpy array (None where there is none), read from its Arrow buffers: `dataset["depth"]`
    is a lazy column that `np.asarray` reads row by row (ListOps' 1M rows: 11 s at each use, measured beside a
    training; the line's three `--sample_shares` groups with a depth, checked and then drawn, made a resumed chunk
    spend most of a minute on it before its first step).

    Args:
        dataset: a `datasets.Dataset` (a selection or shuffle of one included).
    """
    if "depth" not in dataset.column_names:
        return None
    return dataset.with_format("arrow")["depth"].to_numpy()


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
        if skip:  # the generator's only use in get_length_grouped_indices (tests/e2e/test_preemption.py checks it)
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
    whose depth is `depth`, whose text has `words` words and one of whose lists has at least `nested` arguments that
    are nested lists (`nested_arguments`), drawn as `share` of all draws."""

    token: str | int
    depth: int | None
    words: int | None
    share: float
    nested: int | None = None
    brackets: tuple | None = None  # (opener ids, closer id), set by `resolve_sample_shares` where `nested` is given


def parse_sample_shares(items) -> list[SampleShare]:
    """`--sample_shares` items, `TOKEN[:DEPTH[:WORDS]][@NESTED]=SHARE` (e.g. `[SM:1=0.25`: [SM lists of depth 1;
    `[SM:1:4=0.1`: those of 4 words, `[SM d d ]`; `[MAX:5@2=0.1`: [MAX lists of depth 5 in which some list has two or
    more arguments that are nested lists themselves).

    Args:
        items: the flag's values (strings).

    Returns:
        One `SampleShare` per item, in their order; a `UsageError` naming the item if it is malformed, a share is not
        in (0, 1], or the shares add up to more than 1 (shares of 1 in all: only those groups are drawn).
    """
    shares = []
    for item in items or ():
        group, equals, value = item.rpartition("=")
        group, at, nested = group.partition("@")
        token, *numbers = group.split(":")
        try:
            share = float(value)
            depth, words = (([int(n) for n in numbers]) + [None, None])[:2] if len(numbers) <= 2 else (None, None)
            nested = int(nested) if at else None
            ok = (
                len(numbers) <= 2
                and all(n is None or n >= 0 for n in (depth, words))
                and (nested is None or nested >= 1)
            )
        except ValueError:
            share, ok = None, False
        if not equals or not token or share is None or not ok or not 0 < share <= 1:
            raise UsageError(
                f"--sample_shares {item!r}: expected FIRST_TOKEN[:DEPTH[:WORDS]][@NESTED]=SHARE with 0 < SHARE <= 1 "
                "(e.g. '[SM:1=0.25': a quarter of the draws are [SM lists of depth 1; '[SM:1=1': only those; "
                "'[MAX:5@2=0.1': [MAX lists of depth 5 with a list of two or more nested list arguments)"
            )
        shares.append(SampleShare(token, depth, words, share, nested))
    if sum(share.share for share in shares) > 1 + 1e-9:
        raise UsageError(f"--sample_shares {' '.join(items)}: the shares add up to more than 1")
    return shares


def share_groups(first_tokens, depths, lengths, shares, nested=None) -> list[np.ndarray]:
    """Each share's group as a boolean mask over the samples; a sample belongs to the first share that names it.

    Args:
        first_tokens: each sample's first token id (after [BOS]).
        depths: each sample's depth (None: the shares name no depth).
        lengths: each sample's length in tokens, [BOS] and [EOS] included (a text of w words: w + 2).
        shares: `SampleShare`s whose `token` is an id.
        nested: each sample's `nested_arguments` (None: the shares name no `nested`).
    """
    first_tokens, claimed, groups = np.asarray(first_tokens), np.zeros(len(first_tokens), dtype=bool), []
    for share in shares:
        group = first_tokens == share.token
        if share.depth is not None:
            group &= np.asarray(depths) == share.depth
        if share.words is not None:
            group &= np.asarray(lengths) == share.words + 2
        if share.nested is not None:
            group &= np.asarray(nested) >= share.nested
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
    first_tokens, lengths = first_tokens_and_lengths(dataset)
    depths = depth_values(dataset)
    if balance_operators:
        weights = operator_weights(depths, first_tokens, balance_depths)
    elif balance_depths:
        weights = depth_weights(depths)
    else:
        weights = torch.ones(len(dataset), dtype=torch.double)
    if shares:
        groups = share_groups(first_tokens, depths, lengths, shares, nested_of(dataset, shares))
        weights = shared_weights(weights, groups, shares)
    if args.train_sampling_strategy != "group_by_length":
        return BalancedSampler(weights, args.seed)
    batch_size = args.train_batch_size * args.gradient_accumulation_steps  # as Trainer's grouping
    return BalancedSampler(weights, args.seed, lengths.tolist(), batch_size)
