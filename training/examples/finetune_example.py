"""The README's worked example, end to end: fine-tune the `make demo` model on a task it has never seen, against the
same model trained from scratch for the same steps, then the same fine-tuning in plain transformers.

    python training/examples/finetune_example.py [--demo_model outputs/ctl_forward_cpu/export]
    make example-finetune   # the same

1. `lookup_task.py --extend_demo --new_functions 3` writes the new task as jsonl: the demo's nine functions a-i and
   three new ones, j, k, l, with fresh tables, composed freely (train depths 1-5, ood_valid 6-8, ood_test 9-10).
2. `evaluate_model.py DEMO --file ... --unknown_words unk`: the demo model as it is (it reads j, k, l as [UNK]).
3. `train.py --model_name_or_path DEMO --train_file ...`: fine-tune (j, k, l are added to the tokenizer).
4. `train.py --train_file ...`: the same size from scratch for the same steps, a new tokenizer from the texts.
5. `finetune_with_trainer.py`: the README's plain-Python snippet (fine-tuning with Trainer alone).

Fine-tuning uses a learning rate of 3e-4: the preset's 1e-3, right from scratch, is too much for a trained model with
a fresh optimizer (on its own task, 100 such steps took the demo's ood_test accuracy from 0.90 to 0.24).

Each command is printed before it runs and timed; the last lines are the comparison table (markdown).
"""

import argparse
import ast
import json
import os
import re
import shlex
import subprocess
import sys
import time

from modeling_ndr.tables import markdown_table


HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(os.path.dirname(HERE), "train.py")
SPLITS = ("iid_test", "ood_valid", "ood_test")


def run(command: list[str]) -> float:
    """Run `command` (printed first), stop on failure; returns its wall time in seconds."""
    print("\n$ " + shlex.join(command), flush=True)
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - start


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {round(seconds % 60):02d} s"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo_model", default="outputs/ctl_forward_cpu/export", help="The model to fine-tune.")
    parser.add_argument("--output_dir", default="outputs/example_finetune")
    parser.add_argument("--max_steps", default="600", help="Training steps of both train.py runs.")
    parser.add_argument("--skip_trainer_snippet", action="store_true", help="Leave out step 4.")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.demo_model, "config.json")):
        parser.exit(2, f"{args.demo_model}: no trained model there; run `make demo` first (or pass --demo_model)\n")

    data = os.path.join(args.output_dir, "data")
    python = sys.executable
    files = [f"{split}={data}/{split}.jsonl" for split in SPLITS]
    common = [
        "--preset", "ctl_cpu",  # the demo's recipe (one process); --train_file replaces its task
        "--train_file", f"{data}/train.jsonl", "--eval_files", *files, "--depth_column", "depth",
        "--max_steps", args.max_steps, "--eval_steps", "100", "--save_steps", "100",
        "--disable_tqdm", "true", "--report_to", "none",
    ]  # fmt: skip
    finetuned, scratch = (os.path.join(args.output_dir, name) for name in ("finetuned", "scratch"))
    baseline = "demo model as it is (no training)"
    rows = {
        baseline: None,
        "fine-tuned from the demo model": finetuned,
        "from scratch, same size and steps": scratch,
    }
    times = {
        "data": run([python, os.path.join(HERE, "lookup_task.py"), data, "--extend_demo", "--new_functions", "3"])
    }
    evaluate_model = os.path.join(os.path.dirname(HERE), "evaluate_model.py")
    baseline_json = os.path.join(args.output_dir, "demo_model_results.json")
    command = [python, evaluate_model, args.demo_model, "--depth_column", "depth", "--output_json", baseline_json,
               "--unknown_words", "unk"]  # fmt: skip
    times[baseline] = run(command + [arg for file in files for arg in ("--file", file)])
    times["fine-tuned from the demo model"] = run(
        [python, TRAIN, *common, "--model_name_or_path", args.demo_model, "--learning_rate", "3e-4",
         "--output_dir", finetuned]
    )  # fmt: skip
    times["from scratch, same size and steps"] = run([python, TRAIN, *common, "--output_dir", scratch])
    results = {}
    for name, output_dir in rows.items():
        with open(baseline_json if output_dir is None else os.path.join(output_dir, "eval_results.json")) as f:
            results[name] = json.load(f)
    if not args.skip_trainer_snippet:
        name = "fine-tuned with the plain Trainer snippet"
        trainer_dir = os.path.join(args.output_dir, "trainer")
        command = [python, os.path.join(HERE, "finetune_with_trainer.py"), "--model", args.demo_model,
                   "--data_dir", data, "--output_dir", trainer_dir, "--max_steps", args.max_steps]  # fmt: skip
        print("\n$ " + shlex.join(command), flush=True)
        start = time.perf_counter()
        completed = subprocess.run(command, check=True, capture_output=True, text=True)
        times[name] = time.perf_counter() - start
        print(completed.stdout)
        # the snippet prints `split accuracy {depth: accuracy, ...}` for each split
        printed = re.findall(r"^(\w+) ([0-9.]+) (\{.*\})$", completed.stdout, flags=re.MULTILINE)
        results[name] = {
            split: {
                "accuracy": float(accuracy),
                "by_depth": {str(d): a for d, a in ast.literal_eval(by_depth).items()},
            }
            for split, accuracy, by_depth in printed
        }

    print(f"\nCTL + 3 new functions, {args.max_steps} steps of 64 samples; data written in {times['data']:.1f} s\n")
    rows = []
    for name, values in results.items():
        cells = [name, minutes(times[name])] + [f"{values[split]['accuracy']:.3f}" for split in SPLITS]
        by_depth = values["ood_test"]["by_depth"]
        cells += [f"{by_depth[d]:.3f}" if d in by_depth else "–" for d in ("9", "10")]
        rows.append(cells)
    columns = [
        "run",
        "wall time",
        "iid_test",
        "ood_valid (depths 6-8)",
        "ood_test (depths 9-10)",
        "depth 9",
        "depth 10",
    ]
    print(markdown_table(rows, columns))


if __name__ == "__main__":
    main()
