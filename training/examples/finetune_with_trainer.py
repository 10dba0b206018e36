"""Fine-tune a trained NDR on new jsonl data with `transformers`, `datasets` and `evaluate`, and one function of this
package that adapts the checkpoint to the data as train.py does.

    python training/examples/finetune_with_trainer.py --model outputs/ctl_forward_cpu/export \\
        --data_dir outputs/example_finetune/data --output_dir outputs/example_finetune/trainer

DATA_DIR holds train.jsonl, iid_test.jsonl, ood_valid.jsonl and ood_test.jsonl, one sample a line, e.g.
{"text": "101 j k", "label": "011", "depth": 2} (training/examples/lookup_task.py writes them). The model is adapted
to the data by `modeling_ndr.training.adapted_checkpoint`: words its tokenizer lacks get new ids and embedding rows,
and labels other than the model's get a new classification head (both said in the log). The rest is what
`train.py --model_name_or_path MODEL --train_file ...` does, less the depth-balanced sampling and the paper's
checkpoint-selection tie rule.
"""

import argparse
import logging

import evaluate
import torch
from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

from datasets import load_dataset
from modeling_ndr.metrics import DEPTH_ACCURACY
from modeling_ndr.training import adapted_checkpoint


parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="outputs/ctl_forward_cpu/export", help="a trained NDR: folder or hub id")
parser.add_argument("--data_dir", default="outputs/example_finetune/data", help="the four jsonl files")
parser.add_argument("--output_dir", default="outputs/example_finetune/trainer", help="checkpoints and the model")
parser.add_argument("--max_steps", type=int, default=600, help="optimizer steps of 64 samples")
parser.add_argument("--learning_rate", type=float, default=3e-4, help="lower than from scratch: the model is trained")
parser.add_argument("--eval_steps", type=int, default=100, help="evaluate on ood_valid (and save) every N steps")
args = parser.parse_args()
logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")  # the adaptation's warnings: new words, new head

splits = ("train", "iid_test", "ood_valid", "ood_test")
data = load_dataset("json", data_files={split: f"{args.data_dir}/{split}.jsonl" for split in splits})
labels = sorted({str(label) for label in data["train"]["label"]})
# the tokenizer with the data's new words added, the embeddings resized (old ids keep their rows), and a new head
# if the labels are not the model's; the same function train.py uses
tokenizer, model = adapted_checkpoint(
    args.model, task=None, values={}, label_names=labels, texts=data["train"]["text"]
)


def encode(batch):
    return {**tokenizer(batch["text"]), "labels": [model.config.label2id[str(label)] for label in batch["label"]]}


encoded = data.map(encode, batched=True, remove_columns=["text", "label"])  # keeps the depth column
depth_accuracy = evaluate.load(DEPTH_ACCURACY)  # a local evaluate module: no Hub needed


def compute_metrics(prediction):
    predictions = prediction.predictions.argmax(-1)
    return {"accuracy": depth_accuracy.compute(predictions=predictions, references=prediction.label_ids)["accuracy"]}


training_args = TrainingArguments(
    args.output_dir,
    max_steps=args.max_steps,
    per_device_train_batch_size=64,
    per_device_eval_batch_size=500,
    learning_rate=args.learning_rate,
    lr_scheduler_type="constant",
    weight_decay=0.01,
    max_grad_norm=5.0,
    eval_strategy="steps",
    eval_steps=args.eval_steps,
    save_steps=args.eval_steps,
    save_total_limit=2,
    load_best_model_at_end=True,
    metric_for_best_model="ood_valid_accuracy",
    dataloader_pin_memory=torch.cuda.is_available(),  # pinned memory speeds up copies to a GPU; torch warns without
    report_to="none",
)
trainer = Trainer(
    model=model,
    args=training_args,
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
trainer.save_model(f"{args.output_dir}/model")
