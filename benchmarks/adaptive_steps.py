"""Fixed steps against adaptive steps on a trained CTL model: accuracy and mean steps per depth, and inference time.

    python benchmarks/adaptive_steps.py outputs/ctl_forward_cpu/export [--study] [--json results.json]

The model is evaluated on `iid_test`, `ood_valid`, `ood_test` of its task (CTL, the direction of its training run)
and on compositions longer than any split (11 and 12 functions, drawn with the same function tables):

* **fixed**: the model's evaluation step count (`eval_num_hidden_layers` or `num_hidden_layers`);
* **adaptive**: each sample runs until the relative change of every real column's state in one step is below
  `adaptive_threshold` (`--threshold`, default the model's config value), at most `--max-steps`.

Inference wall time on `iid_test` (batches of `--batch-size`) is measured fixed and adaptive interleaved, median of
`--repeats`, in one run. `--study` first compares stopping criteria on per-step records of a long fixed run: the copy
gates of every real column below a threshold, the state change below a tolerance, and the prediction unchanged for k
steps; it prints, per criterion and threshold, accuracy and mean steps per split.
"""

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import modeling_ndr  # noqa: F401  (registers the NDR auto classes)
from modeling_ndr import load_task
from modeling_ndr.tables import markdown_table
from modeling_ndr.tasks import ctl_compositions
from modeling_ndr.training.evaluation import padded_batches, predict


def task_splits(model_dir: str, n_eval: int, n_longer: int) -> tuple[dict[str, list[dict]], str]:
    """The evaluation splits of the model's CTL task and the longer compositions, as lists of rows."""
    run_config = {}
    path = os.path.join(model_dir, "run_config.json")
    if os.path.isfile(path):
        with open(path) as f:
            run_config = json.load(f)
    task = run_config.get("task", {})
    if task.get("task", "ctl") != "ctl":
        raise SystemExit(f"{model_dir}: this benchmark needs a CTL model, got task {task.get('task')!r}")
    direction = task.get("direction") or "forward"
    seed = task.get("task_seed", 0)
    data = load_task("ctl", seed=seed, n_train=100, n_eval=n_eval, direction=direction)
    splits = {name: list(data[name]) for name in ("iid_test", "ood_valid", "ood_test")}
    splits["longer (11-12)"] = ctl_compositions([11, 12], n_longer // 2, seed=seed, direction=direction)
    return splits, direction


def labels_and_depths(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([row["label"] for row in rows]), np.array([row["depth"] for row in rows])


def evaluate(model, tokenizer, rows, batch_size, adaptive: bool, max_steps: int | None):
    """Predictions, labels, depths and steps per sample."""
    texts = [row["text"] for row in rows]
    predicted = predict(model, tokenizer, texts, batch_size, adaptive_steps=adaptive,
                        num_steps=max_steps if adaptive else None)  # fmt: skip
    return predicted.label_ids, *labels_and_depths(rows), predicted.steps


def fixed_steps(model) -> int:
    return model.config.eval_num_hidden_layers or model.config.num_hidden_layers


@torch.no_grad()
def step_records(model, tokenizer, rows, batch_size, steps):
    """Per sample and step: the largest mean copy gate, the largest relative state change (over real columns) and
    the prediction read from that step's state. Arrays of shape (samples, steps)."""
    gates, changes, predictions = [], [], []
    position = modeling_ndr.modeling_ndr.readout_positions
    for encoded in padded_batches(tokenizer, [row["text"] for row in rows], batch_size):
        # a fixed run (the model may run adaptive steps as loaded): every step recorded for every sample
        out = model.ndr(**encoded, num_steps=steps, adaptive_steps=False, output_hidden_states=True, output_gates=True)
        mask = encoded["attention_mask"].bool()
        states = out.hidden_states
        readout = position(encoded["attention_mask"], model.config.readout)
        rows_index = torch.arange(len(mask))
        gate = torch.stack([g.mean(-1).masked_fill(~mask, 0).amax(-1) for g in out.gates], dim=1)
        change = torch.stack(
            [
                ((new - old).norm(dim=-1) / old.norm(dim=-1).clamp_min(1e-6)).masked_fill(~mask, 0).amax(-1)
                for old, new in zip(states[:-1], states[1:])
            ],
            dim=1,
        )
        prediction = torch.stack(
            [model.classifier(state[rows_index, readout]).argmax(-1) for state in states[1:]], dim=1
        )
        gates.append(gate.numpy())
        changes.append(change.numpy())
        predictions.append(prediction.numpy())
    return (*(np.concatenate(values) for values in (gates, changes, predictions)), *labels_and_depths(rows))


def stop_steps(signal: np.ndarray, threshold: float) -> np.ndarray:
    """The first step (1-based) whose signal is below `threshold`, or the last step."""
    below = signal < threshold
    return np.where(below.any(1), below.argmax(1) + 1, signal.shape[1])


def unchanged_steps(predictions: np.ndarray, k: int) -> np.ndarray:
    """The first step after which the prediction has not changed for k steps, or the last step."""
    same = np.concatenate([np.zeros((len(predictions), 1), bool), predictions[:, 1:] == predictions[:, :-1]], 1)
    run = np.zeros(len(predictions), int)
    stop = np.full(len(predictions), predictions.shape[1])
    for step in range(predictions.shape[1]):
        run = np.where(same[:, step], run + 1, 0)
        newly = (run >= k) & (stop == predictions.shape[1])
        stop = np.where(newly, step + 1, stop)
    return stop


def criterion_study(model, tokenizer, splits, batch_size, steps) -> list[dict]:
    records = {name: step_records(model, tokenizer, rows, batch_size, steps) for name, rows in splits.items()}
    criteria = [("gate below", t) for t in (0.05, 0.1, 0.2, 0.3)]
    criteria += [("state change below", t) for t in (0.3, 0.2, 0.15, 0.1, 0.07, 0.05, 0.03, 0.01)]
    criteria += [("prediction unchanged for", k) for k in (2, 3, 5)]
    results = []
    for kind, threshold in criteria:
        row = {"criterion": f"{kind} {threshold}"}
        for name, (gates, changes, predictions, labels, _) in records.items():
            if kind == "gate below":
                stop = stop_steps(gates, threshold)
            elif kind == "state change below":
                stop = stop_steps(changes, threshold)
            else:
                stop = unchanged_steps(predictions, threshold)
            predicted = predictions[np.arange(len(stop)), stop - 1]
            row[name] = f"{(predicted == labels).mean():.3f} / {stop.mean():.1f}"
        results.append(row)
    fixed = {"criterion": f"fixed {fixed_steps(model)} steps"}
    for name, (_, _, predictions, labels, _) in records.items():
        fixed[name] = f"{(predictions[:, fixed_steps(model) - 1] == labels).mean():.3f} / {fixed_steps(model):.1f}"
    return [fixed, *results]


def time_inference(model, tokenizer, rows, batch_size, repeats, max_steps) -> dict[str, float]:
    encoded = list(padded_batches(tokenizer, [row["text"] for row in rows], batch_size))
    times = {"fixed": [], "adaptive": []}
    with torch.no_grad():
        for round_index in range(repeats + 1):
            for mode in times:
                start = time.perf_counter()
                adaptive = mode == "adaptive"
                for inputs in encoded:
                    model(**inputs, adaptive_steps=adaptive, num_steps=max_steps if adaptive else None)
                if round_index > 0:  # the first round warms up
                    times[mode].append(time.perf_counter() - start)
    return {mode: statistics.median(values) for mode, values in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="an exported model folder or hub id (CTL)")
    parser.add_argument("--threshold", type=float, default=None, help="adaptive_threshold (default: the config's)")
    parser.add_argument("--max-steps", type=int, default=None, help="cap (default: max_adaptive_steps or 2x steps)")
    parser.add_argument("--n-eval", type=int, default=1000, help="samples per evaluation split")
    parser.add_argument("--n-longer", type=int, default=1000, help="samples of 11-12 functions")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5, help="timing rounds (fixed and adaptive interleaved)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--study", action="store_true", help="compare stopping criteria first")
    parser.add_argument("--study-steps", type=int, default=28)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model = AutoModelForSequenceClassification.from_pretrained(args.model).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if args.threshold is not None:
        model.config.adaptive_threshold = args.threshold
    max_steps = args.max_steps or model.config.max_adaptive_steps or 2 * model.config.num_hidden_layers
    splits, direction = task_splits(args.model, args.n_eval, args.n_longer)
    print(f"model {args.model} (CTL {direction}); fixed: {fixed_steps(model)} steps; adaptive: threshold "
          f"{model.config.adaptive_threshold}, at most {max_steps} steps; threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    results = {"model": args.model, "direction": direction, "threshold": model.config.adaptive_threshold,
               "max_steps": max_steps, "fixed_steps": fixed_steps(model)}  # fmt: skip

    if args.study:
        study = criterion_study(model, tokenizer, splits, args.batch_size, args.study_steps)
        print(f"\nStopping criteria on a {args.study_steps}-step run (accuracy / mean steps):\n")
        print(markdown_table(study))
        results["study"] = study

    table, by_depth = [], {}
    for name, rows in splits.items():
        row = {"split": name}
        for mode in ("fixed", "adaptive"):
            predicted, labels, depths, steps = evaluate(model, tokenizer, rows, args.batch_size, mode == "adaptive",
                                                        max_steps)  # fmt: skip
            row[f"{mode} accuracy"] = f"{(predicted == labels).mean():.3f}"
            row[f"{mode} mean steps"] = f"{steps.mean():.1f}"
            for depth in np.unique(depths):
                at = depths == depth
                by_depth.setdefault(int(depth), {"depth": int(depth)})
                by_depth[int(depth)][f"{mode} accuracy"] = f"{(predicted[at] == labels[at]).mean():.3f}"
                by_depth[int(depth)][f"{mode} mean steps"] = f"{steps[at].mean():.1f}"
        table.append(row)
    print("\nPer split:\n\n" + markdown_table(table))
    print("\nPer depth:\n\n" + markdown_table([by_depth[d] for d in sorted(by_depth)]))
    timing = time_inference(model, tokenizer, splits["iid_test"], args.batch_size, args.repeats, max_steps)
    speedup = timing["fixed"] / timing["adaptive"]
    print(f"\nInference on iid_test ({len(splits['iid_test'])} samples, batches of {args.batch_size}, median of "
          f"{args.repeats}): fixed {timing['fixed'] * 1000:.0f} ms, adaptive {timing['adaptive'] * 1000:.0f} ms, "
          f"adaptive is {speedup:.2f}x faster")  # fmt: skip
    results.update(per_split=table, per_depth=[by_depth[d] for d in sorted(by_depth)], timing_seconds=timing,
                   speedup=speedup)  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
