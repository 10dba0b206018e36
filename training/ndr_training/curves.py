"""Curves of a `train.py` run's logged evaluations (needs matplotlib): accuracy per first token of the text
(`--eval_by_first_token`; ListOps: per root operator) against the samples seen."""

from .records import evaluation_history


def first_token_curves(trainer_state: dict, split: str) -> dict[str, list[tuple[int, float]]]:
    """Accuracy per first token against the step, from a run's `trainer_state.json` (`--eval_by_first_token`):
    `{"SM": [(step, accuracy), ...], "SM_depth_1": [...], ...}` for `split`."""
    curves = {}
    for evaluation in evaluation_history(trainer_state):
        for token, value in ((evaluation.get(split) or {}).get("by_first_token") or {}).items():
            curves.setdefault(token, []).append((evaluation["step"], value))
    return curves


def plot_first_token_curves(runs: dict[str, tuple[dict, int]], split: str = "iid_test", depth: int = 1, path=None):
    """Accuracy per first token (ListOps: per root operator) against training samples seen, one panel per run: each
    operator on all of `split` (solid) and at `depth` (dashed), so that the record shows when each leaves chance.

    Args:
        runs: `{label: (trainer_state, samples per step)}`.
        split: the evaluation split.
        depth: the depth drawn dashed (1: ListOps' flat lists).
        path (*optional*): save the figure there.

    Returns:
        `matplotlib.figure.Figure`.
    """
    import matplotlib.pyplot as plt

    figure, panels = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.6), layout="constrained", squeeze=False)
    for axes, (label, (state, batch)) in zip(panels[0], runs.items()):
        curves = first_token_curves(state, split)
        tokens = sorted(name for name in curves if "_depth_" not in name)
        for index, token in enumerate(tokens):
            color = f"C{index}"
            for name, style in ((token, "-"), (f"{token}_depth_{depth}", "--")):
                if name in curves:
                    steps, values = zip(*curves[name])
                    axes.plot([s * batch / 1e3 for s in steps], values, style, color=color, linewidth=1.3,
                              label=token if style == "-" else None)  # fmt: skip
        axes.set_title(label, fontsize=9)
        axes.set_xlabel("training samples seen (thousands)")
        axes.set_ylim(0, 1.02)
        axes.set_xlim(left=0)
        axes.grid(alpha=0.3)
    panels[0][0].set_ylabel(f"{split} accuracy (dashed: depth {depth})")
    panels[0][0].legend(loc="upper left", fontsize=8)
    if path is not None:
        figure.savefig(path, dpi=110)
        plt.close(figure)
    return figure
