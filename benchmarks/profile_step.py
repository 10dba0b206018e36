"""Where one training step's time goes, fp32 against bf16 autocast: torch.profiler's operators by self CPU time, one
thread, at a CPU preset's size (its model, batches of 64 real task rows), each precision profiled over the same steps
after a warm-up.

    python benchmarks/profile_step.py [--preset arithmetic_cpu] [--steps 20] [--top 15] [--json out.json]

The table groups operators into what they are (matrix products, the casts that autocast adds, the geometric-attention
kernel, the optimizer, the other elementwise and bookkeeping work), so that the part of a step that bf16 does not speed
up can be read off: on short sequences the work around the matrix products is most of a step.
"""

import argparse
import collections

import torch

from common import machine, save_json
from modeling_ndr.tables import markdown_table
from precision import preset_model, step_function
from training_step import task_batches


GROUPS = (  # (group, operator-name fragments), the first that matches wins
    ("matrix products", ("addmm", "::mm", "bmm", "matmul", "linear", "mkldnn", "onednn")),
    ("casts (autocast)", ("_to_copy", "::to", "copy_")),
    ("geometric attention kernel", ("ndr_geometric", "geometric")),
    ("optimizer (AdamW)", ("adam", "_foreach", "lerp", "addcdiv", "sqrt")),
    ("layer norm", ("layer_norm",)),
    ("dropout and masks", ("dropout", "bernoulli", "masked", "where")),
)


def group_of(name: str) -> str:
    lowered = name.lower()
    return next((group for group, fragments in GROUPS if any(f in lowered for f in fragments)), "other elementwise")


def profile(step, steps: int) -> tuple[float, list[tuple[str, float, int]]]:
    """Total self CPU milliseconds per step and the operators `(name, self ms per step, calls per step)`."""
    for _ in range(3):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    events = [(e.key, e.self_cpu_time_total / 1e3 / steps, e.count // steps) for e in prof.key_averages()]
    events.sort(key=lambda e: -e[1])
    return sum(e[1] for e in events), events


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="arithmetic_cpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model, task = preset_model(args.preset)
    batches = task_batches(task, 64)
    results = {}
    for name, bf16 in (("fp32", False), ("bf16", True)):
        total, events = profile(step_function(model, batches, bf16), args.steps)
        groups = collections.Counter()
        for key, ms, _ in events:
            groups[group_of(key)] += ms
        results[name] = {"total_ms": total, "groups": dict(groups), "top": events[: args.top]}
    print(f"### One training step at the `{args.preset}` size, self CPU time per step (one thread)\n")
    names = sorted(set(results["fp32"]["groups"]) | set(results["bf16"]["groups"]),
                   key=lambda g: -results["bf16"]["groups"].get(g, 0))  # fmt: skip
    rows = [[group, f"{results['fp32']['groups'].get(group, 0):.1f}", f"{results['bf16']['groups'].get(group, 0):.1f}",
             f"{100 * results['bf16']['groups'].get(group, 0) / results['bf16']['total_ms']:.0f}%"]
            for group in names]  # fmt: skip
    rows.append(["**all**", f"{results['fp32']['total_ms']:.1f}", f"{results['bf16']['total_ms']:.1f}", "100%"])
    print(markdown_table(rows, ["what", "fp32 (ms)", "bf16 (ms)", "share of the bf16 step"]))
    print(f"\nbf16 speed-up of the profiled step: {results['fp32']['total_ms'] / results['bf16']['total_ms']:.2f}x\n")
    print(f"### The {args.top} largest operators under bf16 autocast\n")
    print(markdown_table([[f"`{key}`", f"{ms:.2f}", str(calls)] for key, ms, calls in results["bf16"]["top"]],
                         ["operator", "self ms per step", "calls per step"]))  # fmt: skip
    return save_json(args.json, {"machine": machine(), "preset": args.preset, **results})


if __name__ == "__main__":
    main()
