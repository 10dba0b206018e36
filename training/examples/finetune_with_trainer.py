"""Fine-tune a trained NDR on new jsonl data with nothing but `transformers`, `datasets` and `evaluate`.

    python training/examples/finetune_with_trainer.py [MODEL DATA_DIR OUTPUT_DIR]

This is the README's paste-able snippet (without the `sys.argv` line). It does what `train.py --model_name_or_path
MODEL --train_file ...` does, less the depth-balanced sampling and the paper's checkpoint-selection tie rule.
Defaults: the `make demo` model and the data of `training/examples/lookup_task.py`.
"""

import sys

import evaluate
from datasets import load_dataset
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

import modeling_ndr  # noqa: F401  (registers NDR with the Auto classes)
from modeling_ndr.metrics import DEPTH_ACCURACY
from modeling_ndr.tokenization_ndr import extend_tokenizer


model_path, data_dir, output_dir = (
    "outputs/ctl_forward_cpu/export",
    "outputs/example_finetune/data",
    "outputs/example_finetune/trainer",
)
model_path, data_dir, output_dir = sys.argv[1:4] or (model_path, data_dir, output_dir)  # the example runner's paths

splits = ("train", "iid_test", "ood_valid", "ood_test")
data = load_dataset("json", data_files={split: f"{data_dir}/{split}.jsonl" for split in splits})

tokenizer = AutoTokenizer.from_pretrained(model_path)
tokenizer = extend_tokenizer(tokenizer, data["train"]["text"])  # new words get new ids; old ids are kept
model = AutoModelForSequenceClassification.from_pretrained(model_path)
# a row for each new word, initialised as in a new model (the default, mean_resizing, gives all new rows the same
# vector when the old ones are fewer than the hidden size)
model.resize_token_embeddings(len(tokenizer), mean_resizing=False)


def encode(batch):
    return {**tokenizer(batch["text"]), "labels": [model.config.label2id[label] for label in batch["label"]]}


encoded = data.map(encode, batched=True, remove_columns=["text", "label"])  # keeps the depth column
depth_accuracy = evaluate.load(DEPTH_ACCURACY)  # a local evaluate module: no Hub needed


def compute_metrics(prediction):
    predictions = prediction.predictions.argmax(-1)
    return {"accuracy": depth_accuracy.compute(predictions=predictions, references=prediction.label_ids)["accuracy"]}


args = TrainingArguments(
    output_dir,
    max_steps=600,
    per_device_train_batch_size=64,
    per_device_eval_batch_size=500,
    learning_rate=3e-4,  # gentler than from scratch: the model is trained, the optimizer fresh
    lr_scheduler_type="constant",
    weight_decay=0.01,
    max_grad_norm=5.0,
    eval_strategy="steps",
    eval_steps=100,
    save_steps=100,
    save_total_limit=2,
    load_best_model_at_end=True,
    metric_for_best_model="ood_valid_accuracy",
    report_to="none",
)
trainer = Trainer(
    model=model,
    args=args,
    train_dataset=encoded["train"],
    eval_dataset={"ood_valid": encoded["ood_valid"]},
    processing_class=tokenizer,
    data_collator=DataCollatorWithPadding(tokenizer),
    compute_metrics=compute_metrics,
)
trainer.train()
for split in ("iid_test", "ood_valid", "ood_test"):
    output = trainer.predict(encoded[split])  # Trainer drops the depth column (no model input); rows keep their order
    result = depth_accuracy.compute(
        predictions=output.predictions.argmax(-1), references=output.label_ids, depths=encoded[split]["depth"]
    )
    print(split, result["accuracy"], result["by_depth"])
trainer.save_model(f"{output_dir}/model")
