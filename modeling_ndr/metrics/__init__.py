"""`evaluate` metric modules that ship with the package; each name is the path to give `evaluate.load`.

    import evaluate
    from modeling_ndr.metrics import DEPTH_ACCURACY

    depth_accuracy = evaluate.load(DEPTH_ACCURACY)  # a local module: works offline, unlike evaluate.load("accuracy")
    depth_accuracy.compute(predictions=[0, 1, 2], references=[0, 1, 1], depths=[1, 1, 2])

`evaluate.load` looks for a folder of the metric's *name* in the working directory first, so the full path is used.
"""

import os


DEPTH_ACCURACY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "depth_accuracy")

__all__ = ["DEPTH_ACCURACY"]
