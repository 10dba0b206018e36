"""The tests' tiny NDR: one config (vocabulary 12, hidden 16, 3 steps, 3 labels, no dropout) that a test changes
with keyword arguments, and token ids of a batch with [BOS] and [EOS] in place, as transformers' model testers build
them."""

import torch

from modeling_ndr import NDRConfig, NDRModel


def tiny_config(**overrides) -> NDRConfig:
    """The tiny config, `overrides` applied (e.g. `tiny_config(halting="act", num_hidden_layers=2)`)."""
    values = dict(vocab_size=12, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_hidden_layers=3,
                  num_labels=3, hidden_dropout_prob=0.0, attention_dropout=0.0, gate_dropout=0.0)  # fmt: skip
    return NDRConfig(**{**values, **overrides})


def random_ids(batch: int, seq: int, seed: int) -> torch.LongTensor:
    """`(batch, seq)` token ids of the tiny vocabulary: [BOS] (2) first, [EOS] (3) last, words 4-11 between."""
    ids = torch.randint(4, 12, (batch, seq), generator=torch.Generator().manual_seed(seed))
    ids[:, 0], ids[:, -1] = 2, 3
    return ids


def left_padded_batch() -> tuple[torch.LongTensor, torch.LongTensor, torch.LongTensor]:
    """Two rows of 7 token ids, the second left-padded by two, its attention mask, and the position ids a model
    gives such a batch by default (each real token's index): `(ids, mask, counted)`."""
    ids, mask = random_ids(2, 7, seed=1), torch.ones(2, 7, dtype=torch.long)
    mask[1, :2] = 0
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def encoder_or_head_output(model, ids, mask, **kwargs) -> torch.Tensor:
    """`last_hidden_state` of an `NDRModel`, the `logits` of a model with a head."""
    result = model(ids, attention_mask=mask, **kwargs)
    return result.last_hidden_state if isinstance(model, NDRModel) else result.logits


# the train.py flags of a tiny CTL run (backward: the direction that fits in a few steps), as `tiny_train_args` gives
# them
TINY_TRAIN = {
    "preset": "ctl_cpu", "direction": "backward", "n_train": 512, "n_eval": 64, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 3, "per_device_train_batch_size": 32,
    "per_device_eval_batch_size": 64, "disable_tqdm": "true", "seed": 1,
}  # fmt: skip


def tiny_train_args(**changes) -> list[str]:
    """`train.py` flags of the tiny run, `changes` applied: a value replaces or adds a flag, None drops it (e.g.
    `tiny_train_args(max_steps=40, seed=3)`)."""
    flags = []
    for name, value in {**TINY_TRAIN, **changes}.items():
        if value is not None:
            flags += [f"--{name}", str(value)]
    return flags
