"""The benchmark suite (`make bench`): every figure a ratio measured side by side in one run.

    python benchmarks/run_all.py [--model outputs/ctl_forward_cpu/export] [--out outputs/bench] [--quick]

1. the attention op, forward + backward, geometric (as the model computes it) against SDPA, N in 13, 50, 200, 512,
   time and peak memory (`attention.py`);
2. one training step: the commit before the performance work against now at the `arithmetic_cpu` size, the NDR
   against the `transformer` variant at the `ctl_cpu` size and the paper's CTL size, eager against `torch.compile`
   (`training_step.py`);
3. inference on `iid_test` of an exported CTL model, fixed steps against adaptive steps (`adaptive_steps.py`; skipped
   with a note if there is no exported model: `make demo` writes one);
4. data parallelism: 2 processes x 1 thread against the best single process (`data_parallel.py`);
5. fp32 against bf16 autocast on this CPU at the three CPU presets' sizes: the training step, evaluation, and
   `train.py`'s samples/s (`precision.py`; bf16 measured once where the CPU lacks native bf16);
6. where CUDA is available, the GPU: geometric attention against SDPA's flash and memory-efficient kernels in bf16, and
   training samples/s and peak memory of the GPU presets, eager against `torch.compile` (`gpu.py`); without CUDA the
   report says it was skipped.

Prints one markdown report (machine, date, threads and load average on top) and writes it with the JSON to `--out`.
"""

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys

import torch

import attention
import data_parallel
import gpu
import precision
import training_step
from common import REPO, machine


def run_part(title: str, function, *args) -> tuple[dict, str]:
    """Run one part, echoing its output and keeping the markdown tables it prints."""
    print(f"\n## {title}", flush=True)
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        result = function(*args)
    text = captured.getvalue()
    print(text, flush=True)
    tables = "\n".join(line for line in text.splitlines() if line.startswith(("|", "###")) or not line.strip())
    return result, tables.strip()


def adaptive_part(model: str, out: str, quick: bool) -> tuple[dict | None, str]:
    if not os.path.isfile(os.path.join(model, "config.json")):
        note = f"not measured: no exported model at {model} (`make demo` writes one)"
        print(f"\n## inference, fixed vs adaptive steps\n\n{note}")
        return None, note
    path = os.path.join(out, "adaptive.json")
    command = [sys.executable, os.path.join(REPO, "benchmarks", "adaptive_steps.py"), model, "--json", path]
    if quick:
        command += ["--n-eval", "200", "--n-longer", "200", "--repeats", "2"]
    print("\n## inference, fixed vs adaptive steps\n", flush=True)
    finished = subprocess.run(command, capture_output=True, text=True)
    print(finished.stdout[-6000:])
    if finished.returncode != 0:
        return None, f"failed: {finished.stderr.strip().splitlines()[-1]}"
    with open(path) as f:
        result = json.load(f)
    tables = [line for line in finished.stdout.splitlines() if line.startswith(("|", "Inference"))]
    return result, "\n".join(tables)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.path.join("outputs", "ctl_forward_cpu", "export"))
    parser.add_argument("--out", default=os.path.join("outputs", "bench"))
    parser.add_argument("--quick", action="store_true", help="fewer repeats and sizes (a smoke run)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    facts = machine()
    header = (
        f"# ndr benchmarks, {facts['date']}\n\n{facts['cpu']}, {facts['cores']} cores, torch {facts['torch']} "
        f"({facts['cpu_capability']}; flags {', '.join(facts['cpu_flags']) or 'none of note'}), "
        f"{facts['threads']} threads, load average {facts['load_average']} at the start; "
        f"geometric attention: {'fused CPU kernel' if training_step.modeling_ndr.geometric_ndr.uses_cpu_kernel(torch.zeros(1)) else 'PyTorch'}"  # noqa: E501
    )
    print(header)
    repeats = "3" if args.quick else "10"
    seq = "13,50" if args.quick else "13,50,200,512"
    results, sections = {"machine": facts}, [header]
    results["attention"], text = run_part("attention op", attention.main, ["--seq", seq, "--repeats", repeats])
    sections.append("## Attention op\n\n" + text)
    bf16_args = ["--seq", "13,50" if args.quick else "50,200", "--repeats", repeats, "--dtype", "bf16", "--no-memory"]
    results["attention_bf16"], text = run_part("attention op in bf16", attention.main, bf16_args)
    sections.append("## Attention op in bf16\n\n" + text)
    results["training_step"], text = run_part("training step", training_step.main, ["--repeats", repeats])
    sections.append("## Training step\n\n" + text)
    results["adaptive"], text = adaptive_part(args.model, args.out, args.quick)
    sections.append("## Inference, fixed vs adaptive steps\n\n" + text)
    steps = "8" if args.quick else "30"
    results["data_parallel"], text = run_part("data parallelism", data_parallel.main, ["--steps", steps])
    sections.append("## Data parallelism\n\n" + text)
    precision_args = ["--repeats", repeats, "--train_steps", "10" if args.quick else "60"]
    results["precision"], text = run_part("precision: fp32 against bf16", precision.main, precision_args)
    sections.append("## Precision: fp32 against bf16 autocast\n\n" + text)
    if torch.cuda.is_available():
        gpu_args = ["--repeats", "5" if args.quick else "20"] + (["--seq", "50,200"] if args.quick else [])
        results["gpu"], text = run_part("GPU", gpu.main, gpu_args)
    else:
        results["gpu"], text = None, gpu.NO_CUDA
        print(f"\n## GPU\n\n{text}")
    sections.append("## GPU\n\n" + text)
    results["machine"]["load_average_at_the_end"] = round(os.getloadavg()[0], 2)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write("\n\n".join(sections) + "\n")
    print(f"\nwrote {args.out}/bench.md and bench.json")


if __name__ == "__main__":
    main()
