"""fp32 against bf16 autocast on this CPU, side by side in one run: what `--precision auto` gains where the CPU has
native bf16 (AVX512-BF16 or AMX), and what it would cost where it does not (auto then keeps fp32).

    python benchmarks/precision.py [--repeats 10] [--train_steps 60] [--json out.json]

1. the training step (forward under autocast, backward, AdamW), interleaved, at the three CPU presets' sizes
   (`arithmetic_cpu`, `listops_cpu`, `ctl_cpu`: their model, batch 64 of real task rows, one thread);
2. evaluation (a forward of 500 rows, no gradients) at the same sizes;
3. `train.py`'s real training throughput of the three presets, one process of one thread, `--precision fp32` against
   `--precision bf16`, for `--train_steps` steps each: as its Trainer reports it (`train_samples_per_second`, the
   run's start included) and in the steady state (from a second run of a quarter of the steps: what the rest took).

Without native bf16 the bf16 side is measured once (`emulated`: one step or one forward) and `train.py` in bf16 is
not run: an emulated bf16 matrix product is tens of times slower than fp32 (docs/results/performance.md).
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile

import torch

from common import REPO, interleaved, machine, save_json
from modeling_ndr import NDRConfig, NDRForSequenceClassification
from modeling_ndr.tables import markdown_table
from modeling_ndr.training.presets import read_preset
from ndr_training.devices import cpu_has_native_bf16
from training_step import task_batches


PRESETS = ("arithmetic_cpu", "listops_cpu", "ctl_cpu")
MODEL_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "hidden_dropout_prob",
                "attention_dropout", "gate_dropout")  # fmt: skip


def preset_model(preset: str) -> tuple[NDRForSequenceClassification, str]:
    """The preset's model (its size and dropouts) and task."""
    values = read_preset(preset)
    task = values["task"]
    from modeling_ndr import task_label_names, task_tokenizer

    config = NDRConfig(vocab_size=len(task_tokenizer(task)), num_labels=len(task_label_names(task)),
                       **{k: values[k] for k in MODEL_FIELDS if k in values})  # fmt: skip
    torch.manual_seed(0)
    return NDRForSequenceClassification(config), task


def autocast(bf16: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def step_function(model, batches, bf16: bool):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    state = {"index": 0}

    def step():
        model.train()
        batch = batches[state["index"] % len(batches)]
        state["index"] += 1
        optimizer.zero_grad()
        with autocast(bf16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()

    return step


def eval_function(model, batch, bf16: bool):
    inputs = {k: v for k, v in batch.items() if k != "labels"}

    def forward():
        model.eval()
        with torch.no_grad(), autocast(bf16):
            model(**inputs)

    return forward


def model_rows(repeats: int, native: bool) -> list[dict]:
    rows = []
    for preset in PRESETS:
        model, task = preset_model(preset)
        batches = task_batches(task, 64)
        evaluation = task_batches(task, 500, count=1)[0]
        if native:
            step = interleaved({"fp32": step_function(model, batches, False),
                                "bf16": step_function(model, batches, True)}, repeats)  # fmt: skip
            forward = interleaved({"fp32": eval_function(model, evaluation, False),
                                   "bf16": eval_function(model, evaluation, True)}, max(3, repeats // 2))  # fmt: skip
        else:  # emulated bf16: one measured call of each after one warm-up
            step = {"fp32": interleaved({"fp32": step_function(model, batches, False)}, repeats)["fp32"]}
            step.update(interleaved({"bf16": step_function(model, batches, True)}, 1, warmup=1))
            forward = {"fp32": interleaved({"fp32": eval_function(model, evaluation, False)}, 3)["fp32"]}
            forward.update(interleaved({"bf16": eval_function(model, evaluation, True)}, 1, warmup=1))
        rows.append({
            "preset": preset, "step_fp32_ms": step["fp32"] * 1e3, "step_bf16_ms": step["bf16"] * 1e3,
            "step_speedup": step["fp32"] / step["bf16"], "eval_fp32_samples_s": 500 / forward["fp32"],
            "eval_bf16_samples_s": 500 / forward["bf16"], "eval_speedup": forward["fp32"] / forward["bf16"],
        })  # fmt: skip
    return rows


def train_run(preset: str, precision: str, steps: int) -> tuple[float, float]:
    """`(samples, seconds)` of `steps` steps of `preset`'s train.py run as its Trainer reports them
    (`train_samples_per_second` times `train_runtime`, and `train_runtime`), one process of one thread."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, os.path.join(REPO, "training", "train.py"), "--preset", preset, "--precision",
                   precision, "--max_steps", str(steps), "--eval_strategy", "no", "--save_strategy", "no",
                   "--load_best_model_at_end", "false", "--torch_threads", "1", "--report_to", "none",
                   "--disable_tqdm", "true", "--n_eval", "16", "--output_dir", out]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, cwd=REPO,
                                env=dict(os.environ, OMP_NUM_THREADS="1"))  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"{preset} {precision}: {result.stderr.strip().splitlines()[-1]}")
        with open(os.path.join(out, "train_results.json")) as f:
            results = json.load(f)
    return results["train_samples_per_second"] * results["train_runtime"], results["train_runtime"]


def short_run(steps: int) -> int:
    """The steps of the shorter run whose time the steady state leaves out: a quarter of `steps`, at least 1."""
    return max(1, steps // 4)


def train_throughput(preset: str, precision: str, steps: int) -> dict:
    """train.py's samples/s over `steps` steps as its Trainer reports them (`reported`: the run's start inside
    `Trainer.train` included: the first step's one-time work, the sampler, which weigh on a run of a few dozen steps)
    and in its steady state (`steady`: the samples and seconds a run of `steps` takes beyond one of `steps // 4`,
    which leaves that start out, as it is in a run of thousands of steps); `start_seconds`: what the run took beyond
    its steps at the steady rate."""
    short = short_run(steps)
    samples, seconds = train_run(preset, precision, steps)
    short_samples, short_seconds = train_run(preset, precision, short)
    step_seconds = (seconds - short_seconds) / (steps - short)
    return {
        "reported": samples / seconds,
        "steady": (samples - short_samples) / (seconds - short_seconds),
        "start_seconds": seconds - steps * step_seconds,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--train_steps", type=int, default=60, help="train.py steps per preset and precision")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.train_steps < 2:
        parser.error(
            "--train_steps: at least 2 (the steady state is what a run takes beyond one of a quarter of them)"
        )
    torch.set_num_threads(1)
    native = cpu_has_native_bf16()
    print(f"native bf16 on this CPU (AVX512-BF16 or AMX): {'yes' if native else 'no'}; "
          f"--precision auto trains in {'bf16' if native else 'fp32'} here\n")  # fmt: skip
    rows = model_rows(args.repeats, native)
    table = [[f"`{r['preset']}`", f"{r['step_fp32_ms']:.0f}", f"{r['step_bf16_ms']:.0f}", f"{r['step_speedup']:.2f}x",
              f"{r['eval_fp32_samples_s']:.0f}", f"{r['eval_bf16_samples_s']:.0f}", f"{r['eval_speedup']:.2f}x"]
             for r in rows]  # fmt: skip
    print("### Training step and evaluation, fp32 against bf16 autocast (one thread)\n")
    print(markdown_table(table, ["preset size", "step fp32 (ms)", "step bf16 (ms)", "bf16 speed-up",
                                 "eval fp32 (samples/s)", "eval bf16 (samples/s)", "bf16 speed-up"]))  # fmt: skip
    if not native:
        print("\nbf16 is emulated on this CPU (measured once per cell): `--precision auto` keeps fp32 here.")
    throughput = []
    for preset in PRESETS:
        fp32 = train_throughput(preset, "fp32", args.train_steps)
        bf16 = train_throughput(preset, "bf16", args.train_steps) if native else None
        throughput.append({"preset": preset, "fp32": fp32, "bf16": bf16,
                           "speedup": bf16["reported"] / fp32["reported"] if bf16 else None,
                           "steady_speedup": bf16["steady"] / fp32["steady"] if bf16 else None})  # fmt: skip
    print(f"\n### train.py training samples/s ({args.train_steps} steps, one process of one thread)\n")
    short = short_run(args.train_steps)
    print(
        "As the Trainer reports them (the run's start included), and in the steady state (what the last "
        f"{args.train_steps - short} steps took beyond a run of {short}); "
        "start: the seconds a run spends beyond its steps.\n"
    )
    train_table = []
    for t in throughput:
        fp32, bf16 = t["fp32"], t["bf16"] or {}
        start = f"{fp32['start_seconds']:.1f}" + (f" / {bf16['start_seconds']:.1f}" if bf16 else "")
        train_table.append([
            f"`{t['preset']}`", f"{fp32['reported']:.0f}", f"{bf16['reported']:.0f}" if bf16 else "not run",
            f"{t['speedup']:.2f}x" if bf16 else "–", f"{fp32['steady']:.0f}",
            f"{bf16['steady']:.0f}" if bf16 else "not run", f"{t['steady_speedup']:.2f}x" if bf16 else "–", start,
        ])  # fmt: skip
    print(markdown_table(train_table, ["preset", "fp32", "bf16", "bf16 speed-up", "fp32 steady", "bf16 steady",
                                       "steady speed-up", "start s (fp32 / bf16)"]))  # fmt: skip
    return save_json(args.json, {"machine": machine(), "native_bf16": native, "model": rows, "train": throughput})


if __name__ == "__main__":
    main()
