"""Ending a run once it has learned what was asked: `StopAtAccuracy` ends training at the first evaluation where a
split's accuracy reaches a threshold, with a checkpoint of that step, and the run then finishes as any finished run
does (`train.py` evaluates the selected model and exports it; exit 0).

`train.py --stop_at_accuracy iid_test=0.95` adds it; `training/compare.py --budget_steps` uses it to measure how many
steps a baseline needs to fit its training distribution. (Trainer's `EarlyStoppingCallback` stops when a metric stops
improving; it has no threshold.)
"""

import logging

from transformers import TrainerCallback

from modeling_ndr.training.errors import UsageError


logger = logging.getLogger(__name__)


def parse_stop_at_accuracy(value: str, splits) -> tuple[str, float]:
    """`--stop_at_accuracy SPLIT=ACCURACY` as `(split, accuracy)`, checked against the run's evaluation splits.

    Args:
        value: e.g. `"iid_test=0.95"`.
        splits: the splits the run evaluates on.

    Returns:
        `("iid_test", 0.95)`; a one-line `UsageError` for a split the run does not evaluate or an accuracy outside
        [0, 1].
    """
    split, equals, accuracy = value.partition("=")
    try:
        threshold = float(accuracy)
    except ValueError:
        threshold = None
    if not equals or threshold is None or not 0 <= threshold <= 1:
        raise UsageError(f"--stop_at_accuracy {value!r}: expected SPLIT=ACCURACY with an accuracy in [0, 1]")
    if split not in splits:
        raise UsageError(f"--stop_at_accuracy {value!r}: the run evaluates on {', '.join(splits)}, not on {split!r}")
    return split, threshold


class StopAtAccuracy(TrainerCallback):
    """End training at the first evaluation where `split`'s accuracy is at least `threshold`, saving a checkpoint of
    that step. Every process sees the same metrics (Trainer gathers the predictions before computing them), so under
    data parallelism all of them stop at the same step.

    Args:
        split: the evaluation split (`iid_test`; Trainer logs its accuracy as `eval_iid_test_accuracy`).
        threshold: the accuracy that ends training.
    """

    def __init__(self, split: str, threshold: float):
        self.split, self.threshold = split, threshold
        self.stop_step: int | None = None

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        accuracy = (metrics or {}).get(f"eval_{self.split}_accuracy")
        if self.stop_step is None and accuracy is not None and accuracy >= self.threshold:
            self.stop_step = state.global_step
            control.should_training_stop = True
            control.should_save = True  # Trainer saves after the evaluation: the step is a checkpoint to go on from
            logger.info("%s accuracy %.4f at step %d reaches %g: training ends here", self.split, accuracy,
                        state.global_step, self.threshold)  # fmt: skip
        return control
