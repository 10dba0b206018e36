"""`--ema_decay`: `WeightAverage`, an exponential moving average of the weights saved into every checkpoint."""

import pytest
import torch
from safetensors.torch import load_file
from transformers import DataCollatorWithPadding, Trainer, TrainerCallback, TrainingArguments

from datasets import Dataset
from modeling_ndr import NDRConfig, NDRForSequenceClassification, build_tokenizer
from ndr_training.weight_average import WeightAverage


TEXTS = ["a b", "b a c", "c c a b", "a", "b c", "c a"] * 4


class RecordWeights(TrainerCallback):
    """The float weights after every optimizer step (runs before `WeightAverage`, which is added after it)."""

    def __init__(self):
        self.steps = []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.initial = {name: p.detach().float().clone() for name, p in model.named_parameters()}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.steps.append({name: p.detach().float().clone() for name, p in model.named_parameters()})


def train(output_dir, max_steps, resume=None, decay=0.5):
    torch.manual_seed(0)
    tokenizer = build_tokenizer(texts=TEXTS)
    config = NDRConfig(vocab_size=len(tokenizer), hidden_size=8, intermediate_size=8, num_attention_heads=2,
                       num_hidden_layers=2, num_labels=2, hidden_dropout_prob=0.0, gate_dropout=0.0)  # fmt: skip
    model = NDRForSequenceClassification(config)
    data = Dataset.from_dict({"text": TEXTS, "label": [len(t) % 2 for t in TEXTS]})
    data = data.map(lambda row: tokenizer(row["text"]), remove_columns=["text"])
    args = TrainingArguments(output_dir=str(output_dir), max_steps=max_steps, per_device_train_batch_size=4,
                             learning_rate=0.05, save_steps=3, save_strategy="steps", report_to="none", use_cpu=True,
                             seed=0, disable_tqdm=True, lr_scheduler_type="constant")  # fmt: skip
    recorder = RecordWeights()
    trainer = Trainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                      data_collator=DataCollatorWithPadding(tokenizer),
                      callbacks=[recorder, WeightAverage(decay, resume)])  # fmt: skip
    trainer.train(resume_from_checkpoint=resume)
    return recorder


def test_the_average_follows_every_step_and_each_checkpoint_holds_it_as_a_model_folder(tmp_path):
    recorded = train(tmp_path, 6)
    for step in (3, 6):
        saved = load_file(tmp_path / f"checkpoint-{step}" / "ema" / "model.safetensors")
        assert saved.keys() == recorded.initial.keys()
        for name, value in saved.items():
            expected = recorded.initial[name].double()  # the average starts at the weights training starts from
            for weights in recorded.steps[:step]:
                expected = 0.5 * expected + 0.5 * weights[name].double()
            torch.testing.assert_close(value.double(), expected, atol=1e-6, rtol=0, msg=f"step {step}: {name}")
    assert not torch.equal(saved["classifier.weight"], recorded.steps[-1]["classifier.weight"]), "not the weights"
    loaded = NDRForSequenceClassification.from_pretrained(tmp_path / "checkpoint-6" / "ema")
    assert torch.equal(loaded.classifier.weight, saved["classifier.weight"]), "ema/ loads as a model"
    assert (tmp_path / "checkpoint-6" / "ema" / "tokenizer.json").is_file()


def test_a_resumed_run_goes_on_from_the_saved_average(tmp_path):
    train(tmp_path / "whole", 6)
    train(tmp_path / "chunked", 3)
    train(tmp_path / "chunked", 6, resume=str(tmp_path / "chunked" / "checkpoint-3"))
    whole = load_file(tmp_path / "whole" / "checkpoint-6" / "ema" / "model.safetensors")
    chunked = load_file(tmp_path / "chunked" / "checkpoint-6" / "ema" / "model.safetensors")
    for name in whole:
        torch.testing.assert_close(chunked[name], whole[name], atol=1e-6, rtol=0, msg=name)


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5])
def test_a_decay_outside_0_1_is_refused_naming_the_flag(decay):
    with pytest.raises(ValueError, match=r"--ema_decay .*between 0 and 1"):
        WeightAverage(decay)
