"""The ponder-weight warm-up of ACT models (`ndr_training.schedules`): its formula, the callback's events,
and a real Trainer run in which the weight stays 0 until the loss falls, reaches the target, and is saved as such."""

import json

import pytest
import torch
from transformers import DataCollatorWithPadding, TrainerControl, TrainerState, TrainingArguments

from datasets import Dataset
from modeling_ndr import NDRConfig, NDRForSequenceClassification, build_tokenizer
from ndr_training import NDRTrainer
from ndr_training.schedules import PONDER_KEY, PonderWeightSchedule, ponder_weight


@pytest.mark.parametrize(
    ("step", "start", "ramp", "expected"),
    [(5, None, 10, 0.0), (5, 10, 10, 0.0), (10, 10, 10, 0.0), (15, 10, 10, 0.015), (20, 10, 10, 0.03),
     (400, 10, 10, 0.03), (10, 10, 0, 0.03), (0, 0, 4, 0.0), (1, 0, 4, 0.0075)],
)  # fmt: skip
def test_ponder_weight_is_zero_then_linear_up_to_the_target(step, start, ramp, expected):
    assert ponder_weight(0.03, step, start, ramp) == pytest.approx(expected)


class Holder:
    def __init__(self, weight):
        self.config = NDRConfig(halting="act", act_ponder_weight=weight)


def test_the_callback_waits_for_the_loss_then_ramps_and_restores_the_target():
    model, state, control = Holder(0.02), TrainerState(), TrainerControl()
    schedule = PonderWeightSchedule(start_loss=1.0, ramp_steps=4)
    schedule.on_train_begin(None, state, control, model=model)
    assert schedule.target == 0.02 and model.config.act_ponder_weight == 0.0, "the config's weight is the target"
    for step, loss in [(0, 2.1), (1, 2.0), (2, 0.9), (3, 0.5), (4, 0.5), (5, 0.5), (6, 0.5), (7, 0.5)]:
        state.global_step = step
        schedule.on_step_begin(None, state, control, model=model)
        weights = model.config.act_ponder_weight
        schedule.on_step_end(None, state, control)
        schedule.on_log(None, state, control, logs={"loss": loss}, model=model)
        assert weights == pytest.approx(ponder_weight(0.02, step, 2 if step > 2 else None, 4))
    assert state.stateful_callbacks[PONDER_KEY] == {"start_step": 2}, "the start travels in checkpoints"
    resumed = PonderWeightSchedule(start_loss=1.0, ramp_steps=4)
    state.global_step = 4
    resumed.on_train_begin(None, state, control, model=model)
    assert resumed.start_step == 2 and model.config.act_ponder_weight == pytest.approx(0.01), "a resumed run goes on"
    schedule.on_train_end(None, state, control, model=model)
    assert model.config.act_ponder_weight == 0.02


def test_a_trainer_run_keeps_the_weight_at_zero_until_the_loss_falls(tmp_path):
    words = [str(i) for i in range(6)]
    tokenizer = build_tokenizer(texts=[" ".join(words)])
    texts = [" ".join(words[i % 6 : i % 6 + 3]) for i in range(48)]
    data = Dataset.from_dict({"text": texts, "labels": [i % 2 for i in range(48)]})
    data = data.map(lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"])
    torch.manual_seed(0)
    config = NDRConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=16, num_hidden_layers=4,
                       num_labels=2, halting="act", act_ponder_weight=0.05)  # fmt: skip
    model = NDRForSequenceClassification(config)
    seen = []

    class Record(PonderWeightSchedule):
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            super().on_step_begin(args, state, control, model=model, **kwargs)
            seen.append(model.config.act_ponder_weight)

    arguments = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True, max_steps=12,
                                  logging_steps=1, per_device_train_batch_size=8, learning_rate=3e-3,
                                  save_strategy="steps", save_steps=12)  # fmt: skip
    collator = DataCollatorWithPadding(tokenizer)
    trainer = NDRTrainer(model=model, args=arguments, train_dataset=data, data_collator=collator,
                         callbacks=[Record(start_loss=10.0, ramp_steps=4)])  # fmt: skip
    trainer.train()
    # the first logged loss (step 1) is below 10: the ramp starts at step 1 and reaches 0.05 at step 5
    assert seen[:6] == pytest.approx([0.0, 0.0, 0.0125, 0.025, 0.0375, 0.05]) and seen[-1] == pytest.approx(0.05)
    assert model.config.act_ponder_weight == 0.05
    state = json.loads((tmp_path / "checkpoint-12" / "trainer_state.json").read_text())
    assert state["stateful_callbacks"][PONDER_KEY] == {"start_step": 1}
