"""The fast paths of the training step against plain references: cheaper dropout masks, the fused q/k/v/direction
projection, and the fused first layers of the update and the copy gate. (Geometric attention's kernel is tested in
test_geometric_attention.py, the compiled model in test_compile.py.)"""

import pytest
import torch

from modeling_ndr import NDRConfig, NDRForSequenceClassification
from modeling_ndr.dropout_ndr import NDRDropout, dropout_mask


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_masks_drop_at_rate_p_and_scale_what_they_keep(p):
    torch.manual_seed(0)
    mask = dropout_mask(torch.Size([1000, 1001]), p, torch.device("cpu"), torch.float32)
    dropped = (mask == 0).float().mean().item()
    assert abs(dropped - p) < 0.003, f"drop rate {dropped} for p={p}"  # 4 standard errors at 1e6 draws is < 0.002
    torch.testing.assert_close(mask[mask != 0], torch.full_like(mask[mask != 0], 1 / (1 - p)))
    rows, columns = (mask == 0).float().mean(1), (mask == 0).float().mean(0)
    assert rows.std() < 0.05 and columns.std() < 0.05, "no structure across rows or columns"


def test_dropout_masks_follow_the_global_seed_and_differ_between_calls():
    torch.manual_seed(3)
    first, second = (dropout_mask(torch.Size([64, 37]), 0.1, torch.device("cpu"), torch.float32) for _ in range(2))
    torch.manual_seed(3)
    again = dropout_mask(torch.Size([64, 37]), 0.1, torch.device("cpu"), torch.float32)
    assert torch.equal(first, again) and not torch.equal(first, second)


def test_ndr_dropout_is_the_identity_in_eval_and_its_gradient_uses_the_same_mask():
    layer = NDRDropout(0.3)
    x = torch.randn(20, 30, requires_grad=True)
    assert layer.eval()(x) is x
    torch.manual_seed(1)
    y = layer.train()(x)
    y.sum().backward()
    kept = y != 0
    torch.testing.assert_close(x.grad, kept.float() / 0.7)
    torch.testing.assert_close(y[kept], x[kept] / 0.7)


def tiny(**overrides):
    values = dict(vocab_size=12, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_hidden_layers=2,
                  num_labels=3, hidden_dropout_prob=0.0, attention_dropout=0.0, gate_dropout=0.0)  # fmt: skip
    values.update(overrides)
    torch.manual_seed(0)
    return NDRForSequenceClassification(NDRConfig(**values)).eval()


@pytest.mark.parametrize("position_encoding", ["direction", "relative"])
def test_the_fused_projection_equals_the_separate_linear_layers(position_encoding):
    attention = tiny(position_encoding=position_encoding, attention_type="softmax").ndr.layer.attention
    with torch.no_grad():
        for projection in (attention.q_proj, attention.k_proj, attention.v_proj):
            projection.weight.normal_()
        attention.q_proj.bias.normal_()
    h = torch.randn(3, 5, 16)
    fused = attention.projections(h)
    separate = [attention.q_proj(h), attention.k_proj(h), attention.v_proj(h)]
    if position_encoding == "direction":
        separate.append(attention.direction_proj(h))
    assert len(fused) == len(separate)
    for a, b in zip(fused, separate):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_the_fused_update_and_gate_layers_equal_the_formula_of_the_paper():
    """h <- g * u + (1 - g) * h with u = update(LN(h + attention(h))), g = gate(LN(h + attention(h))), each computed
    through its own modules, against the layer, which computes the first layers of both in one matrix product."""
    layer = tiny().ndr.layer
    with torch.no_grad():
        layer.copy_gate.fc_out.bias.zero_()  # gates near 0.5, so both terms matter
    h = torch.randn(2, 6, 16)
    mixed = layer.attention_layer_norm(h + layer.attention(h, None, True)[0])
    update = layer.update(mixed)  # each child module runs on its own
    gate = layer.copy_gate(mixed)
    torch.testing.assert_close(layer(h), gate * update + (1 - gate) * h, atol=1e-5, rtol=1e-5)
    assert 0.1 < gate.mean() < 0.9, "both the update and the old state contribute"
