"""Accuracy, and accuracy per depth: the NDR paper's measure of systematic generalisation, as an `evaluate` metric.

Load it by path, which needs no network (`evaluate.load("accuracy")` needs the Hugging Face Hub):

    import evaluate
    from modeling_ndr.metrics import DEPTH_ACCURACY

    depth_accuracy = evaluate.load(DEPTH_ACCURACY)
    depth_accuracy.compute(predictions=[0, 1, 2, 2], references=[0, 1, 1, 2], depths=[1, 1, 2, 2])
    # {'accuracy': 0.75, 'by_depth': {1: 1.0, 2: 0.5}, 'count_by_depth': {1: 2, 2: 2}}

`depths` may be left out (`by_depth` is then empty); it is a keyword of `compute` (`add_batch` takes only predictions
and references). The result has the form of one split's entry in `train.py`'s `eval_results.json`.

`evaluate` scans this script's imports to check its dependencies: keep one package per `import` line and no comment on
an import line (the scan reads `import a, b` as a package named `a,`, and a comment as a download address).
"""

import evaluate
import numpy as np

import datasets


_CITATION = """\
@inproceedings{csordas2022ndr,
  title={The Neural Data Router: Adaptive Control Flow in Transformers Improves Systematic Generalization},
  author={Csord{\\'a}s, R{\\'o}bert and Irie, Kazuki and Schmidhuber, J{\\"u}rgen},
  booktitle={International Conference on Learning Representations (ICLR)},
  year={2022}
}
"""

_DESCRIPTION = """\
Accuracy (the share of predictions equal to their reference) over all samples and separately for each problem depth
(number of composed functions, nesting level of an expression, ...). A model that generalises systematically keeps its
accuracy at depths deeper than any it was trained on.
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions (`list` of `int`): predicted class ids.
    references (`list` of `int`): true class ids.
    depths (`list` of `int`, *optional*): the depth of each sample, in the order of `predictions` (a keyword of
        `compute`, not accumulated by `add_batch`).

Returns:
    accuracy (`float`): share of correct predictions, in [0, 1].
    by_depth (`dict[int, float]`): accuracy of the samples of each depth, in increasing depth order (empty without
        depths).
    count_by_depth (`dict[int, int]`): number of samples of each depth.

Examples:
    >>> depth_accuracy = evaluate.load(DEPTH_ACCURACY)
    >>> depth_accuracy.compute(predictions=[0, 1, 2, 2], references=[0, 1, 1, 2], depths=[1, 1, 2, 2])
    {'accuracy': 0.75, 'by_depth': {1: 1.0, 2: 0.5}, 'count_by_depth': {1: 2, 2: 2}}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class DepthAccuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            # evaluate requires every feature in every call, so the optional `depths` is a keyword of `_compute`
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
            reference_urls=["https://arxiv.org/abs/2110.07732"],
        )

    def _compute(self, predictions, references, depths=None):
        correct = np.asarray(predictions) == np.asarray(references)
        if correct.size == 0:
            raise ValueError("depth_accuracy: no predictions to score")
        by_depth, count_by_depth = {}, {}
        if depths is not None:
            depths = np.asarray(depths)
            if depths.shape != correct.shape:
                raise ValueError(f"depth_accuracy: {depths.size} depths for {correct.size} predictions")
            for depth in np.unique(depths):
                selected = depths == depth
                by_depth[int(depth)] = float(correct[selected].mean())
                count_by_depth[int(depth)] = int(selected.sum())
        return {"accuracy": float(correct.mean()), "by_depth": by_depth, "count_by_depth": count_by_depth}
