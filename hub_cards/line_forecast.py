"""Where a release line's band is going: the mean and spread of a split's accuracy per window of training samples, a
least-squares line through the latest windows, and the samples at which that line reaches a target (an
extrapolation, which the figure and the table say).

    python hub_cards/line_forecast.py hub_cards/models/ndr-listops --split ood_test --window 1e6 --fit_from 20e6 \
        --target 0.885 --plot docs/results/listops_band_forecast.png

A line at a constant learning rate swings from one evaluation to the next (ListOps' `ood_test` by +-0.04 on 1,000
samples); its releases come from cooldown branches of the line, which land above the band. So what says whether more
of a recipe reaches a goal is the band's mean against samples seen, not its best point: this reads every evaluation of
the line (the release's `last-checkpoint/`, earlier lines included) and fits the band's trend.
"""

import argparse
import os

import numpy as np

from line_records import LAST_CHECKPOINT, curve_points, read_line
from modeling_ndr.training.errors import read_json


def band(points: list[dict], split: str, window: float) -> list[dict]:
    """`{"start", "end", "samples", "mean", "sd", "n"}` per window of `window` samples that holds evaluations of
    `split` (`samples`: the mean samples seen of its evaluations)."""
    seen = np.array([p["samples"] for p in points if p.get(split) is not None], dtype=float)
    values = np.array([p[split] for p in points if p.get(split) is not None], dtype=float)
    rows = []
    for start in np.arange(0, seen.max() + window, window) if len(seen) else []:
        inside = (seen >= start) & (seen < start + window)
        if inside.any():
            rows.append({"start": float(start), "end": float(start + window), "samples": float(seen[inside].mean()),
                         "mean": float(values[inside].mean()), "sd": float(values[inside].std()),
                         "n": int(inside.sum())})  # fmt: skip
    return rows


def trend(rows: list[dict], fit_from: float, target: float | None = None) -> dict:
    """The least-squares line `mean = intercept + slope * samples` through the windows that start at `fit_from` or
    later, and the samples where it reaches `target` (None where it does not rise or no target is given)."""
    fitted = [row for row in rows if row["start"] >= fit_from]
    if len(fitted) < 2:
        raise ValueError(f"fewer than two windows from {fit_from:,.0f} samples on: nothing to fit")
    x, y = np.array([r["samples"] for r in fitted]), np.array([r["mean"] for r in fitted])
    slope, intercept = np.polyfit(x, y, 1)
    reaches = None
    if target is not None and slope > 0:
        reaches = float(max((target - intercept) / slope, x.max()))
    return {"slope_per_million": float(slope * 1e6), "intercept": float(intercept), "windows": len(fitted),
            "fit_from": fit_from, "target": target, "reaches_target_at": reaches}  # fmt: skip


def plot_forecast(points: list[dict], rows: list[dict], fitted: dict, split: str, path=None, title: str = ""):
    """Every evaluation of `split` (dots), the windows' means with their spread, and the fitted line extended to where
    it reaches the target (dashed: an extrapolation)."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4), layout="constrained")
    xs = [p["samples"] / 1e6 for p in points if p.get(split) is not None]
    axes.plot(xs, [p[split] for p in points if p.get(split) is not None], ".", color="tab:orange", alpha=0.25,
              markersize=3, label=f"{split}, each evaluation")  # fmt: skip
    axes.errorbar([r["samples"] / 1e6 for r in rows], [r["mean"] for r in rows], yerr=[r["sd"] for r in rows],
                  fmt="o-", color="tab:red", markersize=3, linewidth=1, label="window mean +- sd")  # fmt: skip
    end = fitted["reaches_target_at"] or max(r["samples"] for r in rows)
    line = np.linspace(fitted["fit_from"], end, 50)
    axes.plot(line / 1e6, fitted["intercept"] + fitted["slope_per_million"] * line / 1e6, "--", color="black",
              linewidth=1, label=f"least squares from {fitted['fit_from'] / 1e6:.0f}M (extrapolated)")  # fmt: skip
    if fitted["target"] is not None:
        axes.axhline(fitted["target"], color="tab:green", linestyle=":", linewidth=1, label="target")
    axes.set_xlabel("training samples seen (millions)")
    axes.set_ylabel("accuracy")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    axes.set_title((f"{title}: " if title else "") + f"the band of {split} and its trend", fontsize=10)
    if path:
        figure.savefig(path, dpi=110)
    return figure


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("release", help="a release folder with a line (its last-checkpoint/)")
    parser.add_argument("--split", default="ood_test")
    parser.add_argument("--window", type=float, default=1e6, help="samples per window")
    parser.add_argument("--fit_from", type=float, required=True, help="fit the windows from this many samples on")
    parser.add_argument("--target", type=float, default=None)
    parser.add_argument("--plot", default=None, help="save the figure here")
    args = parser.parse_args(argv)
    line = read_line(args.release)
    if line is None:
        raise SystemExit(f"{args.release}: no {LAST_CHECKPOINT}/, so no line to forecast")
    points = curve_points(line, read_json(os.path.join(args.release, LAST_CHECKPOINT, "trainer_state.json")))
    rows = band(points, args.split, args.window)
    fitted = trend(rows, args.fit_from, args.target)
    print("| samples (M) | evaluations | mean | sd |\n|---|---|---|---|")
    for row in rows:
        if row["start"] >= args.fit_from:
            window = f"{row['start'] / 1e6:.1f}-{row['end'] / 1e6:.1f}"
            print(f"| {window} | {row['n']} | {row['mean']:.3f} | {row['sd']:.3f} |")
    reaches = fitted["reaches_target_at"]
    print(f"\nslope {fitted['slope_per_million']:+.4f} per million samples over {fitted['windows']} windows; "
          + (f"the line reaches {args.target} at {reaches / 1e6:.1f}M samples (an extrapolation)" if reaches
             else "it does not reach the target (no rise)" if args.target is not None else ""))  # fmt: skip
    if args.plot:
        plot_forecast(points, rows, fitted, args.split, args.plot, os.path.basename(os.path.normpath(args.release)))
    return fitted


if __name__ == "__main__":
    main()
