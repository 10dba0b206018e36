"""Character and sequence accuracy of one-output-per-token predictions, overall and per length, as an `evaluate`
metric: the Universal Transformer paper's measures for its algorithmic tasks (copy, reverse, addition).

Load it by path, which needs no network:

    import evaluate
    from modeling_ndr.metrics import TOKEN_ACCURACY

    token_accuracy = evaluate.load(TOKEN_ACCURACY)
    token_accuracy.compute(
        predictions=[[0, 1, 2], [3, 3, 0]], references=[[-100, 1, 2], [3, 4, -100]], lengths=[2, 4]
    )
    # {'character_accuracy': 0.75, 'sequence_accuracy': 0.5, 'count': 2, 'character_accuracy_length_2': 1.0, ...}

Each row is a list of label ids, one per token; a reference of -100 is not scored (special tokens, padding, the
tokens that carry no answer), so Trainer's padded arrays can be passed as they are. `lengths` (one per row) is a
keyword of `compute` (`add_batch` takes only predictions and references); without it there are no per-length keys.
The keys are flat, as Trainer logs them (`depth_accuracy`'s `accuracy_depth_<d>` has the same form).

`evaluate` scans this script's imports to check its dependencies: keep one package per `import` line and no comment on
an import line (the scan reads `import a, b` as a package named `a,`, and a comment as a download address).
"""

import evaluate
import numpy as np

import datasets


_CITATION = """\
@inproceedings{dehghani2019universal,
  title={Universal Transformers},
  author={Dehghani, Mostafa and Gouws, Stephan and Vinyals, Oriol and Uszkoreit, Jakob and Kaiser, {\\L}ukasz},
  booktitle={International Conference on Learning Representations (ICLR)},
  year={2019}
}
"""

_DESCRIPTION = """\
Character accuracy (the share of scored tokens predicted right) and sequence accuracy (the share of rows whose scored
tokens are all right), overall and per length. A reference of -100 is not scored. A model that generalises to longer
inputs keeps both at lengths longer than any it was trained on.
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions (`list` of `list` of `int`): predicted label ids, one list per row.
    references (`list` of `list` of `int`): true label ids, as long as each row's predictions; -100 is not scored.
    lengths (`list` of `int`, *optional*): the length of each row, in the order of `predictions` (a keyword of
        `compute`, not accumulated by `add_batch`).

Returns:
    character_accuracy (`float`): share of the scored tokens predicted right, in [0, 1].
    sequence_accuracy (`float`): share of the rows whose scored tokens are all right, in [0, 1].
    count (`int`): the number of rows.
    character_accuracy_length_<n>, sequence_accuracy_length_<n>, count_length_<n>: the same for the rows of each
        length `n`, in increasing order (only with `lengths`).

Examples:
    >>> token_accuracy = evaluate.load(TOKEN_ACCURACY)
    >>> token_accuracy.compute(predictions=[[0, 1], [2, 2]], references=[[0, 1], [2, -100]])
    {'character_accuracy': 1.0, 'sequence_accuracy': 1.0, 'count': 2}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TokenAccuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            # evaluate requires every feature in every call, so the optional `lengths` is a keyword of `_compute`
            features=datasets.Features(
                {
                    "predictions": datasets.List(datasets.Value("int64")),
                    "references": datasets.List(datasets.Value("int64")),
                }
            ),
            reference_urls=["https://arxiv.org/abs/1807.03819"],
        )

    def _compute(self, predictions, references, lengths=None):
        if len(predictions) == 0:
            raise ValueError("token_accuracy: no predictions to score")
        right_tokens, scored_tokens = np.zeros(len(predictions)), np.zeros(len(predictions))
        for row, (predicted, reference) in enumerate(zip(predictions, references)):
            predicted, reference = np.asarray(predicted), np.asarray(reference)
            if predicted.shape != reference.shape:
                raise ValueError(
                    f"token_accuracy: row {row} has {predicted.size} predictions for {reference.size} references"
                )
            scored = reference != -100
            if not scored.any():
                raise ValueError(f"token_accuracy: row {row} has no scored token (every reference is -100)")
            scored_tokens[row] = scored.sum()
            right_tokens[row] = (predicted[scored] == reference[scored]).sum()

        def accuracies(selected) -> tuple[float, float]:
            character = right_tokens[selected].sum() / scored_tokens[selected].sum()
            sequence = (right_tokens[selected] == scored_tokens[selected]).mean()
            return float(character), float(sequence)

        every_row = np.ones(len(predictions), dtype=bool)
        character, sequence = accuracies(every_row)
        result = {"character_accuracy": character, "sequence_accuracy": sequence, "count": len(predictions)}
        if lengths is not None:
            lengths = np.asarray(lengths)
            if lengths.shape != (len(predictions),):
                raise ValueError(f"token_accuracy: {lengths.size} lengths for {len(predictions)} rows")
            for length in np.unique(lengths):
                selected = lengths == length
                character, sequence = accuracies(selected)
                result[f"character_accuracy_length_{int(length)}"] = character
                result[f"sequence_accuracy_length_{int(length)}"] = sequence
                result[f"count_length_{int(length)}"] = int(selected.sum())
        return result
