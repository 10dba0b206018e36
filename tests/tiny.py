"""The tests' tiny NDR: one config (vocabulary 12, hidden 16, 3 steps, 3 labels, no dropout) that a test changes
with keyword arguments, and token ids of a batch with [BOS] and [EOS] in place, as transformers' model testers build
them."""

import torch

from modeling_ndr import NDRConfig


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
