"""Adaptive computation: ACT halting per column, and inference that runs each sample until its state stops changing."""

import pytest
import torch
from tiny import random_ids, tiny_config

from modeling_ndr import NDRForSequenceClassification, NDRModel


# ----------------------------------------------------------------------------------------------------------- ACT


def test_act_on_a_hand_computed_case():
    """3 steps; column 0 halts at step 2 with a remainder, column 1 runs to the cap, column 2 halts at once."""
    torch.manual_seed(0)
    model = NDRModel(tiny_config(halting="act", act_threshold=0.99)).eval()
    probabilities = iter(torch.tensor([[[0.3, 0.1, 0.995]], [[0.8, 0.1, 0.5]], [[0.5, 0.1, 0.5]]]))
    model.halting.forward = lambda hidden_states: next(probabilities)  # fixed halting probabilities per step
    input_ids = random_ids(1, 3, seed=1)
    out = model(input_ids)

    # the states by hand: a halted column is copied (update_mask 0) from the step after it halted
    states = [model.embeddings(input_ids)]
    for running in ([True, True, True], [True, True, False], [False, True, False]):
        states.append(model.layer(states[-1], None, update_mask=torch.tensor([running])))
    s1, s2, s3 = states[1][0], states[2][0], states[3][0]
    expected = torch.stack([0.3 * s1[0] + 0.7 * s2[0], 0.1 * s1[1] + 0.1 * s2[1] + 0.8 * s3[1], 1.0 * s1[2]])
    torch.testing.assert_close(out.last_hidden_state[0], expected, msg="output = sum_t w_t h_t, remainder last")
    assert out.halting_steps.tolist() == [[2, 3, 1]], "N(t): steps each column ran"
    expected_ponder = ((2 + 0.7) + (3 + 0.8) + (1 + 1.0)) / 3  # N + R, averaged over the real columns
    assert out.ponder_cost.item() == pytest.approx(expected_ponder), "ponder cost N + R"


def test_act_uses_every_step_when_the_threshold_is_never_reached():
    model = NDRModel(tiny_config(halting="act", act_threshold=1.0, num_hidden_layers=5)).eval()
    out = model(random_ids(3, 6, seed=2), attention_mask=torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 6]))
    assert out.halting_steps.tolist() == [[5] * 6, [5] * 4 + [0] * 2, [5] * 6], "no column halts before the cap"
    assert (out.ponder_cost > 5).all(), "N = 5 plus a positive remainder"


def test_act_padded_columns_neither_count_nor_change():
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(halting="act")).eval()
    ids = random_ids(1, 5, seed=3)
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 5 + [0] * 3])
    alone, in_padding = model(ids), model(padded, attention_mask=mask)
    torch.testing.assert_close(in_padding.logits, alone.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(in_padding.ponder_cost, alone.ponder_cost, msg="padding adds no ponder cost")
    assert in_padding.halting_steps[0, 5:].eq(0).all(), "padded columns run no step"


def test_act_running_every_step_gives_the_result_of_stopping_when_all_columns_halted(monkeypatch):
    """On the CPU and at inference the loop stops once every column has halted; a CUDA training step (and a compiled
    one) runs every step instead, to avoid a host sync per step. The extra steps must change nothing."""
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(halting="act", num_hidden_layers=12)).train()
    with torch.no_grad():
        model.ndr.halting.proj.bias.fill_(1.0)  # sigmoid(1) = 0.73: every column halts within two steps
    ids, labels = random_ids(3, 6, seed=10), torch.tensor([0, 1, 2])
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 6])
    stopping = model(ids, attention_mask=mask, labels=labels)
    assert stopping.halting_steps.max() <= 2
    stopping.loss.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)  # what makes the loop run every step
    every_step = model(ids, attention_mask=mask, labels=labels)
    every_step.loss.backward()
    torch.testing.assert_close(every_step.logits, stopping.logits)
    torch.testing.assert_close(every_step.ponder_cost, stopping.ponder_cost)
    assert torch.equal(every_step.halting_steps, stopping.halting_steps)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], msg=name)


def test_act_halting_probabilities_are_float32_under_autocast():
    """The cumulative halting probability is compared with 0.99, which bf16 (8 bits of mantissa) cannot resolve."""
    model = NDRModel(tiny_config(halting="act")).eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.halting(torch.randn(2, 5, 16)).dtype == torch.float32
        out = model(random_ids(2, 5, seed=11))
    assert out.ponder_cost.dtype == torch.float32 and torch.isfinite(out.last_hidden_state).all()


def test_act_loss_adds_the_ponder_cost_and_trains_the_halting_unit():
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(halting="act", act_ponder_weight=0.01))
    ids, labels = random_ids(4, 6, seed=4), torch.tensor([0, 1, 2, 1])
    out = model(ids, labels=labels)
    classification = torch.nn.functional.cross_entropy(out.logits, labels)
    torch.testing.assert_close(out.loss, classification + 0.01 * out.ponder_cost.mean())
    out.loss.backward()
    gradient = model.ndr.halting.proj.weight.grad
    assert gradient is not None and gradient.abs().sum() > 0, "the halting unit receives a gradient"


# ---------------------------------------------------------------------------------------------- adaptive steps


def shut_gates(model):
    with torch.no_grad():
        model.ndr.layer.copy_gate.fc_out.weight.zero_()
        model.ndr.layer.copy_gate.fc_out.bias.fill_(-1e4)


def test_a_model_with_shut_gates_stops_after_one_step_and_returns_its_input():
    model = NDRForSequenceClassification(tiny_config(adaptive_steps=True)).eval()
    shut_gates(model)
    ids = random_ids(3, 6, seed=5)
    out = model.ndr(ids)
    assert out.num_steps_taken.tolist() == [1, 1, 1], "nothing changed in the first step: done"
    torch.testing.assert_close(out.last_hidden_state, model.ndr.embeddings(ids), msg="the input state, unchanged")


def per_sample_changes(model, ids, mask, steps):
    """Relative state change of every sample at every step of a fixed-step run: (steps, batch)."""
    states = model.ndr(ids, attention_mask=mask, num_steps=steps, adaptive_steps=False, output_hidden_states=True)
    states = states.hidden_states
    changes = [(new - old).norm(dim=-1) / old.norm(dim=-1) for old, new in zip(states[:-1], states[1:])]
    return torch.stack([change.masked_fill(mask == 0, 0).amax(-1) for change in changes])


# A sample's numbers may differ in the last bits between batch sizes (other matrix-product kernels), on the CPU and
# more so on GPUs. Tests of adaptive steps therefore put the threshold where no sample's change comes closer than this
# (relative), so that no decision to stop can flip between batch sizes; the outputs then agree to float rounding.
MARGIN = 1e-3


def threshold_between(changes: torch.Tensor) -> float:
    """A threshold at the middle of the widest gap between the per-step changes (steps, batch) of all samples that
    lets the samples stop at different steps; it is at least `MARGIN` (relative) from every change."""
    values = changes.flatten().sort().values
    best, best_gap = None, 0.0
    for low, high in zip(values[:-1].tolist(), values[1:].tolist()):
        middle = (low + high) / 2
        stops = [next((t for t in range(len(column)) if column[t] < middle), len(column)) for column in changes.T]
        if len(set(stops)) > 1 and (high - low) / middle > best_gap:
            best, best_gap = middle, (high - low) / middle
    assert best is not None and best_gap > 2 * MARGIN, f"no threshold {MARGIN:g} away from every change: {changes}"
    return best


def test_a_sample_gets_the_same_result_alone_and_in_a_batch_with_harder_samples():
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(adaptive_steps=True, max_adaptive_steps=12)).eval()
    ids = random_ids(6, 8, seed=6)
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0  # a shorter sample, padded
    ids[0, 4] = 3
    changes = per_sample_changes(model, ids, mask, steps=12)
    model.config.adaptive_threshold = threshold_between(changes)  # some samples finish early, others late
    batch = model(ids, attention_mask=mask)
    assert len(set(batch.num_steps_taken.tolist())) > 1, "the samples of this batch finish at different steps"
    for row in range(6):
        length = int(mask[row].sum())
        alone = model(ids[row : row + 1, :length])
        assert alone.num_steps_taken.item() == batch.num_steps_taken[row].item(), f"sample {row}: same step count"
        torch.testing.assert_close(alone.logits[0], batch.logits[row], atol=1e-5, rtol=1e-5, msg=f"sample {row}")


def test_recording_per_step_outputs_does_not_change_adaptive_results():
    torch.manual_seed(0)
    model = NDRForSequenceClassification(tiny_config(adaptive_steps=True, max_adaptive_steps=10)).eval()
    ids = random_ids(5, 7, seed=7)
    mask = torch.ones_like(ids)
    model.config.adaptive_threshold = threshold_between(per_sample_changes(model, ids, mask, steps=10))
    compact = model(ids)  # finished samples leave the batch: other batch sizes than the recorded run
    recorded = model(ids, output_attentions=True, output_gates=True)
    assert recorded.num_steps_taken.tolist() == compact.num_steps_taken.tolist()
    torch.testing.assert_close(recorded.logits, compact.logits, atol=1e-5, rtol=1e-5)
    steps = int(recorded.num_steps_taken.max())
    assert len(recorded.attentions) == len(recorded.gates) == steps, "one entry per step run"
    assert all(a.shape[0] == 5 for a in recorded.attentions), "every recorded step holds the whole batch"
    finished = recorded.num_steps_taken.tolist().index(min(recorded.num_steps_taken.tolist()))
    after = recorded.gates[int(recorded.num_steps_taken[finished])]  # the step after that sample finished
    assert (after[finished] == 0).all(), "a finished sample copies: its gates are shut"


def test_the_cap_is_respected():
    model = NDRForSequenceClassification(tiny_config(adaptive_steps=True, adaptive_threshold=1e-12)).eval()
    out = model(random_ids(3, 6, seed=8))
    assert out.num_steps_taken.tolist() == [6, 6, 6], "max_adaptive_steps defaults to 2 x num_hidden_layers"
    assert model(random_ids(2, 6, seed=8), num_steps=4).num_steps_taken.tolist() == [4, 4], "num_steps caps it"


def test_adaptive_steps_off_reproduces_the_fixed_step_outputs_exactly():
    torch.manual_seed(0)
    fixed = NDRForSequenceClassification(tiny_config()).eval()
    adaptive = NDRForSequenceClassification(tiny_config(adaptive_steps=True))
    adaptive.load_state_dict(fixed.state_dict())
    adaptive.eval()
    ids = random_ids(4, 7, seed=9)
    assert torch.equal(adaptive(ids, adaptive_steps=False).logits, fixed(ids).logits)
    assert adaptive(ids, adaptive_steps=False).num_steps_taken is None
    adaptive.train()
    assert torch.equal(adaptive(ids).logits, fixed.train()(ids).logits), "training always runs the fixed steps"


def test_the_halting_unit_starts_unlikely_to_halt_also_after_reloading(tmp_path):
    model = NDRForSequenceClassification(tiny_config(halting="act"))
    bias = model.ndr.halting.proj.bias
    assert bias.item() == -3.0, "act_halting_bias_init: sigmoid(-3) ≈ 0.05, so no column halts early at the start"
    assert model.ndr.halting.proj.weight.std().item() < 0.05, "small weights (initializer_range)"
    model.save_pretrained(tmp_path)
    reloaded = NDRForSequenceClassification.from_pretrained(tmp_path)
    assert torch.equal(reloaded.ndr.halting.proj.bias, bias), "a loaded model keeps its trained halting unit"


def test_an_exported_adaptive_model_runs_adaptively_through_automodel_and_pipeline(tmp_path):
    """The choice is in config.json, so `AutoModel*` and `pipeline` users get adaptive inference without code."""
    import json

    from transformers import AutoModel, AutoModelForSequenceClassification, pipeline

    from modeling_ndr import task_label_names, task_tokenizer

    tokenizer = task_tokenizer("ctl")
    labels = task_label_names("ctl")
    torch.manual_seed(0)
    config = tiny_config(vocab_size=len(tokenizer), num_labels=len(labels), adaptive_steps=True,
                         max_adaptive_steps=10, id2label=dict(enumerate(labels)))  # fmt: skip
    model = NDRForSequenceClassification(config).eval()
    words = sorted(word for word in tokenizer.get_vocab() if word.isalnum())
    texts = [" ".join(words[i : i + 3 + i % 3]) for i in range(0, 24, 4)]
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    changes = per_sample_changes(model, encoded["input_ids"], encoded["attention_mask"], steps=10)
    model.config.adaptive_threshold = threshold_between(changes)  # the pipeline runs each text alone
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with open(tmp_path / "config.json") as f:
        saved = json.load(f)
    assert saved["adaptive_steps"] is True and saved["max_adaptive_steps"] == 10

    expected = model(**encoded)
    fixed = model(**encoded, adaptive_steps=False)
    assert expected.num_steps_taken.min() < 10 and not torch.allclose(expected.logits, fixed.logits)
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    out = loaded(**encoded)
    assert out.num_steps_taken.tolist() == expected.num_steps_taken.tolist()
    torch.testing.assert_close(out.logits, expected.logits)
    base = AutoModel.from_pretrained(tmp_path).eval()
    assert base(**encoded).num_steps_taken.tolist() == expected.num_steps_taken.tolist()

    classify = pipeline("text-classification", model=str(tmp_path), top_k=None)
    for text, logits in zip(texts, expected.logits):
        scores = {item["label"]: item["score"] for item in classify([text])[0]}
        single = torch.tensor([scores[label] for label in labels])
        torch.testing.assert_close(single, logits.softmax(-1), atol=1e-5, rtol=1e-4)


def test_evaluate_model_reports_mean_steps_per_depth_for_act_and_adaptive_models(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    from modeling_ndr import task_label_names, task_tokenizer

    spec = importlib.util.spec_from_file_location(
        "evaluate_model", Path(__file__).resolve().parents[2] / "training" / "evaluate_model.py"
    )
    evaluate_model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(evaluate_model)
    tokenizer = task_tokenizer("ctl")
    labels = task_label_names("ctl")
    for name, fields in {"act": dict(halting="act"), "adaptive": dict(adaptive_steps=True)}.items():
        torch.manual_seed(0)
        config = tiny_config(vocab_size=len(tokenizer), num_labels=len(labels), id2label=dict(enumerate(labels)),
                             label2id={label: i for i, label in enumerate(labels)}, **fields)  # fmt: skip
        NDRForSequenceClassification(config).save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
        results = evaluate_model.main([str(tmp_path / name), "--task", "ctl", "--n_eval", "40"])
        for split, values in results.items():
            assert 1 <= values["mean_steps"] <= 6, f"{name} {split}: steps within the cap"
            assert set(values["mean_steps_by_depth"]) == set(values["by_depth"]), f"{name} {split}: every depth"
        assert "Steps used" in capsys.readouterr().out
    fixed = tiny_config(vocab_size=len(tokenizer), num_labels=len(labels), id2label=dict(enumerate(labels)),
                        label2id={label: i for i, label in enumerate(labels)})  # fmt: skip
    NDRForSequenceClassification(fixed).save_pretrained(tmp_path / "fixed")
    tokenizer.save_pretrained(tmp_path / "fixed")
    results = evaluate_model.main([str(tmp_path / "fixed"), "--task", "ctl", "--n_eval", "40"])
    assert all("mean_steps" not in values for values in results.values()), "fixed-step models report no steps"


def test_evaluate_model_reports_mean_steps_per_length_for_a_token_classifier_with_adaptive_steps(tmp_path, capsys):
    from scripts import load_script

    from modeling_ndr import NDRForTokenClassification
    from modeling_ndr.tasks import token_task_label_names, token_task_tokenizer

    evaluate_model = load_script("training/evaluate_model.py", "ndr_evaluate_token_steps")
    tokenizer, labels = token_task_tokenizer("carry"), token_task_label_names("carry")
    torch.manual_seed(0)
    config = tiny_config(vocab_size=len(tokenizer), num_labels=len(labels), id2label=dict(enumerate(labels)),
                         label2id={label: i for i, label in enumerate(labels)}, adaptive_steps=True)  # fmt: skip
    NDRForTokenClassification(config).save_pretrained(tmp_path / "adaptive")
    tokenizer.save_pretrained(tmp_path / "adaptive")
    argv = [str(tmp_path / "adaptive"), "--task", "carry", "--n_eval", "8", "--split", "test_40",
            "--split", "test_100"]  # fmt: skip
    results = evaluate_model.main(argv)
    for split, length in (("test_40", "40"), ("test_100", "100")):
        assert 1 <= results[split]["mean_steps"] <= 6, f"{split}: adaptive steps within the cap (twice 3)"
        assert results[split]["mean_steps_by_length"] == {length: results[split]["mean_steps"]}, split
    assert "| split | mean steps | length 40 | length 100 |" in capsys.readouterr().out
    fixed = evaluate_model.main([*argv, "--adaptive_steps", "false"])
    assert all("mean_steps" not in values for values in fixed.values()), "fixed steps: no steps reported"
