"""Train model variants on one task preset with the same budget and seed, and compare them per split and per depth.

    python training/compare.py --preset ctl_cpu --direction forward
    python training/compare.py --preset ctl_cpu --variants transformer,ndr --output_dir outputs/cmp -- --max_steps 500

Each variant (`configuration/variants/NAME.yaml`) is trained by `training/train.py --preset P --variant NAME` (two
CPU processes by default, as `make demo`), into `OUTPUT_DIR/NAME/`. A variant whose `eval_results.json` exists is not
trained again (an interrupted comparison resumes; `--retrain` forces it). The script writes
`OUTPUT_DIR/comparison.md` (accuracy per variant and split, per depth, and the training time of each run) and
`OUTPUT_DIR/comparison.png` (accuracy against depth, one line per variant, the training depths shaded). Flags after
`--` go to every `train.py` run.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

import yaml

import modeling_ndr
from modeling_ndr.tasks import split_depths


HERE = os.path.dirname(os.path.abspath(__file__))
PAPER_VARIANTS = ("transformer", "rel", "rel_gate", "absrel_gate", "geom_att", "ndr", "ndr_metric")
SPLITS = ("iid_test", "ood_valid", "ood_test")


def train_command(args, variant: str, output_dir: str, extra: list[str]) -> tuple[list[str], dict]:
    """The command that trains one variant, and its environment (gloo data parallelism on the CPU, see README)."""
    flags = ["--preset", args.preset, "--variant", variant, "--output_dir", output_dir, "--disable_tqdm", "true"]
    if args.direction:
        flags += ["--direction", args.direction]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if args.nproc == 1:
        return [sys.executable, os.path.join(HERE, "train.py"), *flags, *extra], env
    env["ACCELERATE_USE_CPU"] = "true"
    launcher = [os.path.join(os.path.dirname(sys.executable), "accelerate"), "launch", "--multi_gpu",
                "--num_processes", str(args.nproc), "--num_machines", "1", "--mixed_precision", "no",
                "--dynamo_backend", "no"]  # fmt: skip
    flags += ["--use_cpu", "--ddp_find_unused_parameters", "false"]
    return [*launcher, os.path.join(HERE, "train.py"), *flags, *extra], env


def train_variant(args, variant: str, extra: list[str]) -> dict:
    """Train one variant (unless done); returns its eval results and training time."""
    output_dir = os.path.join(args.output_dir, variant)
    results_file, timing_file = (os.path.join(output_dir, name) for name in ("eval_results.json", "compare_run.json"))
    if args.retrain or not os.path.isfile(results_file):
        command, env = train_command(args, variant, output_dir, extra)
        os.makedirs(output_dir, exist_ok=True)
        print(f"[compare] training {variant}: {' '.join(command)}", flush=True)
        start = time.time()
        with open(os.path.join(output_dir, "train.log"), "w") as log:
            finished = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        if finished.returncode != 0:
            raise SystemExit(f"[compare] {variant} failed (exit {finished.returncode}); see {output_dir}/train.log")
        with open(timing_file, "w") as f:
            json.dump({"seconds": time.time() - start, "command": command}, f, indent=2)
    else:
        print(f"[compare] {variant}: results exist, not trained again (--retrain to force)", flush=True)
    with open(results_file) as f:
        results = json.load(f)
    seconds = None
    if os.path.isfile(timing_file):
        with open(timing_file) as f:
            seconds = json.load(f)["seconds"]
    return {"results": results, "seconds": seconds}


def minutes(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds / 60:.1f} min"


def write_markdown(path: str, runs: dict, args, extra: list[str], task: str) -> str:
    depths = sorted({int(d) for run in runs.values() for split in run["results"].values() for d in split["by_depth"]})
    lines = [f"# Variants on `{args.preset}`" + (f" ({args.direction})" if args.direction else ""), ""]
    lines += [f"Command: `python training/compare.py {' '.join(sys.argv[1:])}`", ""]
    lines += [f"Measured {datetime.date.today().isoformat()} on {platform.node() or 'this machine'}, "
              f"{os.cpu_count()} CPU cores, {args.nproc} training process(es); same preset, budget and seed for every "
              f"variant{'; extra flags: ' + ' '.join(extra) if extra else ''}.", ""]  # fmt: skip
    lines += ["| variant | " + " | ".join(SPLITS) + " | training time |", "|---" * (len(SPLITS) + 2) + "|"]
    for variant, run in runs.items():
        cells = [f"{run['results'][split]['accuracy']:.3f}" for split in SPLITS]
        lines.append(f"| {variant} | " + " | ".join(cells) + f" | {minutes(run['seconds'])} |")
    lines += [
        "",
        "Accuracy per depth (training depths: " + ", ".join(map(str, split_depths(task)["train"])) + "):",
        "",
    ]
    lines += ["| variant | " + " | ".join(f"depth {d}" for d in depths) + " |", "|---" * (len(depths) + 1) + "|"]
    for variant, run in runs.items():
        by_depth = {int(d): a for split in run["results"].values() for d, a in split["by_depth"].items()}
        lines.append(
            f"| {variant} | " + " | ".join(f"{by_depth[d]:.3f}" if d in by_depth else "" for d in depths) + " |"
        )
    text = "\n".join(lines) + "\n"
    with open(path, "w") as f:
        f.write(text)
    return text


def write_plot(path: str, runs: dict, task: str, title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7.5, 4.2), constrained_layout=True)
    train_depths = split_depths(task)["train"]
    axis.axvspan(min(train_depths) - 0.5, max(train_depths) + 0.5, color="0.9", label="training depths")
    chance = 1 / len(modeling_ndr.task_label_names(task))
    axis.axhline(chance, color="0.5", linestyle=":", linewidth=1, label=f"chance ({chance:.3f})")
    for variant, run in runs.items():
        by_depth = {int(d): a for split in run["results"].values() for d, a in split["by_depth"].items()}
        depths = sorted(by_depth)
        axis.plot(depths, [by_depth[d] for d in depths], marker="o", linewidth=2 if "ndr" in variant else 1.2,
                  label=variant)  # fmt: skip
    axis.set_xlabel("depth (number of composed functions / nesting levels)")
    axis.set_ylabel("accuracy")
    axis.set_ylim(0, 1.02)
    axis.set_title(title)
    axis.legend(fontsize=8, loc="center left", ncol=2)
    figure.savefig(path, dpi=120)


def main():
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="ctl_cpu")
    parser.add_argument("--direction", default=None, help="CTL: forward or backward")
    parser.add_argument("--variants", default=",".join(PAPER_VARIANTS))
    parser.add_argument("--output_dir", default=None, help="default: outputs/compare_<preset>[_<direction>]")
    parser.add_argument("--nproc", type=int, default=2, help="training processes per run (gloo on the CPU)")
    parser.add_argument("--retrain", action="store_true", help="train again even where results exist")
    args = parser.parse_args(argv)
    args.output_dir = args.output_dir or os.path.join(
        "outputs", f"compare_{args.preset}" + (f"_{args.direction}" if args.direction else "")
    )
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    with open(os.path.join(os.path.dirname(HERE), "configuration", f"{args.preset}.yaml")) as f:
        task = (yaml.safe_load(f) or {}).get("task", "ctl")
    runs = {variant: train_variant(args, variant, extra) for variant in variants}
    title = f"{args.preset}" + (f" {args.direction}" if args.direction else "") + ": accuracy per depth"
    text = write_markdown(os.path.join(args.output_dir, "comparison.md"), runs, args, extra, task)
    write_plot(os.path.join(args.output_dir, "comparison.png"), runs, task, title)
    print("\n" + text)
    print(f"[compare] wrote {args.output_dir}/comparison.md and comparison.png")


if __name__ == "__main__":
    main()
