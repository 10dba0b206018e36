"""Relative position keys (`NDRConfig.relative_key_window`, Shaw et al. 2018, clipped): the term each head adds to
its scores against a plain reference, what the term reads of `position_ids` (their offsets, clipped), and every
way the model steps (fixed, adaptive with finished samples leaving the batch, ACT, gradient checkpointing)."""

import functools

import pytest
import torch
from tiny import encoder_or_head_output, left_padded_batch, random_ids, tiny_config

from modeling_ndr import NDRConfig, NDRForTokenClassification, NDRModel
from modeling_ndr.attention_ndr import attention, relative_key_index


def keyed_model(model_class=NDRForTokenClassification, **overrides):
    """A tiny model with relative keys of window 1, the keys drawn well away from their small init (so that a wrong
    offset changes the outputs)."""
    torch.manual_seed(0)
    model = model_class(tiny_config(relative_key_window=1, **overrides)).eval()
    with torch.no_grad():
        (model.ndr if hasattr(model, "ndr") else model).layer.attention.relative_keys.normal_(0, 1.0)
    return model


def test_the_relative_key_term_is_the_query_times_the_key_of_each_pair_s_clipped_offset():
    model = keyed_model()
    module = model.ndr.layer.attention
    b, h, n, e = 2, module.num_heads, 6, module.head_size
    generator = torch.Generator().manual_seed(3)
    query, key, value = (torch.randn(b, h, n, e, generator=generator) for _ in range(3))
    hidden = torch.randn(b, n, h * e, generator=generator)
    ids = torch.tensor([[0, 1, 2, 3, 1, 2], [5, 9, 9, 6, 0, 7]])
    got, weights = module.attend(
        hidden, query, key, value, None, True, relative_key_index=relative_key_index(ids, n, 1, ids.device)
    )

    reference = torch.zeros(b, h, n, n)
    for batch in range(b):
        for i in range(n):
            for j in range(n):
                offset = max(-1, min(1, int(ids[batch, j] - ids[batch, i])))
                reference[batch, :, i, j] = (query[batch, :, i] * module.relative_keys[:, offset + 1]).sum(-1)
    direction = module.direction_proj(hidden).view(b, n, h, 2).permute(3, 0, 2, 1) * module.direction_scale
    left, right = direction[0] + module.logit_bias, direction[1] + module.logit_bias
    expected, expected_weights = attention(query, key, value, None, "geometric", left, right, reference)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(weights, expected_weights)


@pytest.mark.parametrize("model_class", [NDRModel, NDRForTokenClassification])
def test_relative_keys_read_the_offsets_of_position_ids_clipped_to_the_window(model_class):
    model = keyed_model(model_class)
    ids, mask, counted = left_padded_batch()  # left padding: the default counts the real tokens only
    output = functools.partial(encoder_or_head_output, model, ids, mask)
    torch.testing.assert_close(output(), output(position_ids=counted), msg="the default is each real token's index")
    coupled = torch.tensor([[0, 1, 2, 3, 1, 2, 4]] * 2)
    torch.testing.assert_close(output(position_ids=coupled), output(position_ids=coupled + 100), msg="offsets only")
    spread = torch.tensor([[0, 10, 20, 30, 10, 20, 40]] * 2)
    torch.testing.assert_close(output(position_ids=coupled), output(position_ids=spread), msg="clipped to +-1")
    assert not torch.allclose(output(), output(position_ids=coupled)), "other offsets, other outputs"
    one_row = output(position_ids=coupled[:1])
    torch.testing.assert_close(one_row, output(position_ids=coupled), msg="(1, seq) serves the whole batch")
    small = output(position_ids=coupled.to(torch.uint8))  # any integer dtype; the offsets are taken in int64
    torch.testing.assert_close(small, output(position_ids=coupled), msg="uint8 ids: the same offsets")


@pytest.mark.parametrize("encoding", ["relative", "gated", "absolute", "none"])
def test_softmax_attention_reads_relative_keys_beside_any_position_encoding(encoding):
    """The softmax baselines too (whose fused path, with no weights asked for, knows no position terms)."""
    model = keyed_model(attention_type="softmax", position_encoding=encoding, copy_gate=False)
    ids = random_ids(2, 7, seed=4)
    coupled = torch.tensor([[0, 1, 2, 3, 1, 2, 4]] * 2)
    shifted = model(ids, position_ids=coupled + 1).logits
    assert not torch.allclose(model(ids).logits, model(ids, position_ids=coupled).logits), "the keys read the ids"
    if encoding != "absolute":  # (absolute positions read the ids themselves, not only their offsets)
        torch.testing.assert_close(model(ids, position_ids=coupled).logits, shifted, msg="offsets only")


def test_adaptive_steps_with_relative_keys_give_a_sample_in_a_batch_its_result_alone():
    """Finished samples leave the batch (and their ids with them): each sample's result is the one it gets alone."""
    model = keyed_model(NDRModel, adaptive_steps=True, adaptive_threshold=0.15, max_adaptive_steps=12)
    ids, mask = random_ids(4, 9, seed=5), torch.ones(4, 9, dtype=torch.long)
    positions = torch.tensor([[0, 1, 2, 3, 4, 1, 2, 3, 5], [0, 1, 2, 3, 4, 5, 6, 7, 8]] * 2)
    positions[2] = positions[2].flip(0)
    mask[3, :3] = 0  # left padding, for the default ids
    for given in (positions, None):
        batch = model(ids, attention_mask=mask, position_ids=given)
        assert len(set(batch.num_steps_taken.tolist())) > 1, "samples finish at different steps (the batch shrinks)"
        for row in range(4):
            alone = model(
                ids[row : row + 1], attention_mask=mask[row : row + 1],
                position_ids=None if given is None else given[row : row + 1],
            )  # fmt: skip
            torch.testing.assert_close(batch.last_hidden_state[row : row + 1], alone.last_hidden_state)
            assert int(alone.num_steps_taken) == int(batch.num_steps_taken[row])
        recorded = model(ids, attention_mask=mask, position_ids=given, output_hidden_states=True)  # frozen rows
        real = mask.bool()  # (padding columns are not frozen alike in the two ways; nothing reads them)
        torch.testing.assert_close(recorded.last_hidden_state[real], batch.last_hidden_state[real])


@pytest.mark.parametrize("halting", ["none", "act"])
def test_gradient_checkpointing_reads_the_same_position_ids(halting):
    model = keyed_model(halting=halting, num_hidden_layers=2).train()
    ids, labels = random_ids(2, 6, seed=7), torch.tensor([[-100, 0, 1, 2, 1, -100]] * 2)
    positions = torch.tensor([[0, 1, 2, 1, 2, 3], [0, 3, 2, 1, 1, 4]])

    def loss_and_gradient():
        model.zero_grad()
        loss = model(ids, labels=labels, position_ids=positions).loss
        loss.backward()
        return loss.detach(), model.ndr.layer.attention.relative_keys.grad.clone()

    plain = loss_and_gradient()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    layer, precomputes = model.ndr.layer, []
    original = layer.precompute
    layer.precompute = lambda *args: precomputes.append(args[1] if len(args) > 1 else None) or original(*args)
    checkpointed = loss_and_gradient()
    assert precomputes and all(ids is not None for ids in precomputes), "each checkpointed step precomputes, with ids"
    torch.testing.assert_close(plain[0], checkpointed[0])
    torch.testing.assert_close(plain[1], checkpointed[1])
    assert plain[1].abs().sum() > 0, "the keys learn"


def test_relative_keys_are_checked_with_the_field_named():
    with pytest.raises(ValueError, match=r"NDRConfig.relative_key_window=-1 is invalid: expected an integer >= 0"):
        NDRConfig(relative_key_window=-1)
    with pytest.raises(ValueError, match="relative_key_window=1 with NDRConfig.attention_scores='metric' is invalid"):
        NDRConfig(relative_key_window=1, attention_scores="metric", position_encoding="none")
    assert NDRConfig(relative_key_window=2).reads_position_ids and not NDRConfig().reads_position_ids
    model = NDRForTokenClassification(tiny_config(relative_key_window=2)).eval()
    assert model.ndr.layer.attention.relative_keys.shape == (2, 5, 8), "(heads, 2w + 1 offsets, head size)"
    with pytest.raises(ValueError, match=r"position_ids must have shape \(batch, seq\) = \(2, 5\)"):
        model(random_ids(2, 5, seed=2), position_ids=torch.arange(4).expand(2, 4))
