"""ACT with `act_update_halted=True` (the paper's release, layers/transformer/act_transformer.py): a halted column
keeps being updated, so it still passes values to the others; halting only ends its contribution to its output."""

import pytest
import torch
from tiny import tiny_config

from modeling_ndr import NDRConfig, NDRForSequenceClassification, NDRModel


def ids():
    input_ids = torch.randint(4, 12, (1, 3), generator=torch.Generator().manual_seed(1))
    input_ids[:, 0], input_ids[:, -1] = 2, 3
    return input_ids


@pytest.mark.parametrize("update_halted", [True, False])
def test_act_output_against_a_step_by_step_reference(update_halted):
    """3 steps; column 0 halts at step 2 with a remainder, column 1 runs to the cap, column 2 halts at once. The
    reference applies the layer step by step: to every column (update_halted), or only to the running ones."""
    torch.manual_seed(0)
    model = NDRModel(tiny_config(halting="act", act_update_halted=update_halted)).eval()
    probabilities = iter(torch.tensor([[[0.3, 0.1, 0.995]], [[0.8, 0.1, 0.5]], [[0.5, 0.1, 0.5]]]))
    model.halting.forward = lambda hidden_states: next(probabilities)  # fixed halting probabilities per step
    out = model(ids())

    states = [model.embeddings(ids())]
    for running in ([True, True, True], [True, True, False], [False, True, False]):
        mask = torch.tensor([[True] * 3 if update_halted else running])
        states.append(model.layer(states[-1], None, update_mask=mask))
    s1, s2, s3 = states[1][0], states[2][0], states[3][0]
    expected = torch.stack([0.3 * s1[0] + 0.7 * s2[0], 0.1 * s1[1] + 0.1 * s2[1] + 0.8 * s3[1], 1.0 * s1[2]])
    torch.testing.assert_close(out.last_hidden_state[0], expected, msg="output = sum_t w_t h_t, remainder last")
    assert out.halting_steps.tolist() == [[2, 3, 1]], "N(t) counts the steps before halting either way"
    expected_ponder = ((2 + 0.7) + (3 + 0.8) + (1 + 1.0)) / 3
    assert out.ponder_cost.item() == pytest.approx(expected_ponder), "the ponder cost does not change"


def test_a_halted_column_still_serves_the_others():
    """The same weights and halting: with update_halted, the column that runs to the cap reads the halted columns'
    updated states, so its output differs; the halted column's own output does not."""
    outputs = {}
    for update_halted in (True, False):
        torch.manual_seed(0)
        model = NDRModel(tiny_config(halting="act", act_update_halted=update_halted)).eval()
        probabilities = iter(torch.tensor([[[0.3, 0.1, 0.995]], [[0.8, 0.1, 0.5]], [[0.5, 0.1, 0.5]]]))
        model.halting.forward = lambda hidden_states, p=probabilities: next(p)
        outputs[update_halted] = model(ids()).last_hidden_state[0]
    torch.testing.assert_close(outputs[True][2], outputs[False][2], msg="halted at step 1: the same output")
    assert not torch.allclose(outputs[True][1], outputs[False][1]), "column 1 read column 2's later states"


def test_padding_still_never_runs_and_the_default_keeps_released_behaviour():
    assert NDRConfig().act_update_halted is False, "released configs (no such field) load as before"
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(halting="act", act_update_halted=True)).eval()
    padded = torch.cat([ids(), torch.zeros(1, 2, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    alone, in_padding = model(ids()), model(padded, attention_mask=mask)
    torch.testing.assert_close(in_padding.logits, alone.logits, atol=1e-5, rtol=1e-5)
    assert in_padding.halting_steps[0, 3:].eq(0).all()
