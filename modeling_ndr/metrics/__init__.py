"""`evaluate` metric modules that ship with the package; each name is the path to give `evaluate.load`.

    import evaluate
    from modeling_ndr.metrics import DEPTH_ACCURACY

    depth_accuracy = evaluate.load(DEPTH_ACCURACY)  # a local module: works offline, unlike evaluate.load("accuracy")
    depth_accuracy.compute(predictions=[0, 1, 2], references=[0, 1, 1], depths=[1, 1, 2])

`evaluate.load` looks for a folder of the metric's *name* in the working directory first, so the full path is used.
"""

import os


DEPTH_ACCURACY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "depth_accuracy")
TOKEN_ACCURACY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "token_accuracy")


def load_depth_accuracy():
    """The package's `evaluate` metric (`DEPTH_ACCURACY`), loaded by path (no Hub).

    `evaluate` is imported here: the import takes seconds, and `import modeling_ndr.metrics` stays instant.

    Returns:
        The `evaluate.EvaluationModule`: `compute(predictions, references, depths=None)` gives
        `{"accuracy": a, "by_depth": {depth: a}}`.
    """
    import evaluate

    return evaluate.load(DEPTH_ACCURACY, keep_in_memory=True)  # in memory: no cache files shared between processes


def load_token_accuracy():
    """The package's token-task metric (`TOKEN_ACCURACY`: character and sequence accuracy, per length), loaded by
    path (no Hub).

    `evaluate` is imported here: the import takes seconds, and `import modeling_ndr.metrics` stays instant.

    Returns:
        The `evaluate.EvaluationModule`: `compute(predictions, references, lengths=None)` gives
        `{"character_accuracy": a, "sequence_accuracy": a, "count": n, "character_accuracy_length_<n>": a, ...}`.
    """
    import evaluate

    return evaluate.load(TOKEN_ACCURACY, keep_in_memory=True)  # in memory: no cache files shared between processes


__all__ = ["DEPTH_ACCURACY", "TOKEN_ACCURACY", "load_depth_accuracy", "load_token_accuracy"]
