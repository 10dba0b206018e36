"""One evaluation path: a model's predictions per sample, in padded batches, with the steps each sample ran. Every
script that predicts goes through `predict` (`training/evaluate_model.py`, the ponder steps of `training/compare.py`,
the adaptive-steps study of an export, `benchmarks/adaptive_steps.py`), as nanoGPT's scripts share one
`estimate_loss`.

    from modeling_ndr.training.evaluation import predict

    result = predict(model.eval(), tokenizer, ["101 a b", "011 c"], adaptive_steps=True)
    result.label_ids, result.steps  # two arrays of shape (2,)

A sample's result does not depend on the batch it is in (the model masks padding, and adaptive steps stop each sample
on its own), so the batch size only trades memory for speed.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from ..modeling_ndr import readout_positions, resolve_num_steps


def pad_position_ids(rows, width: int, padding_side: str) -> torch.Tensor:
    """Rows of `position_ids` padded with 0 (the padding is masked) to `width`, on the tokenizer's `padding_side`."""
    left = padding_side == "left"
    return torch.tensor([[0] * (width - len(row)) + list(row) if left else list(row) + [0] * (width - len(row))
                         for row in rows])  # fmt: skip


@dataclass
class Predictions:
    """What `predict` returns, one entry per sample, in the order of the inputs.

    Args:
        label_ids: the predicted class ids, `(n,)` integers (`config.id2label` names them); for a token classifier
            (`NDRForTokenClassification`) one `(length,)` array per sample, an id per token ([BOS] and [EOS]
            included), in an object array.
        steps: the steps each sample ran, `(n,)`: with adaptive steps the steps it ran before its state settled; with
            ACT halting the mean halting step of its real columns (floats); otherwise the fixed step count.
        model_chose_steps: whether the model chose its steps (ACT halting or adaptive steps) rather than running a
            fixed count.
        readout_steps: with ACT halting, the halting step of the column the classifier reads, `(n,)`; else None.
    """

    label_ids: np.ndarray
    steps: np.ndarray
    model_chose_steps: bool
    readout_steps: np.ndarray | None = None


def padded_batches(tokenizer, inputs, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
    """The inputs in batches of `batch_size`, padded to the batch's longest sequence by `tokenizer.pad`. (Calling a
    fast tokenizer with `padding=True` instead would leave padding switched on in the `tokenizer.json` it saves
    afterwards.)

    Args:
        tokenizer: the model's tokenizer.
        inputs: texts (a list of strings), or encoded rows: a `datasets.Dataset` with `input_ids` (other columns are
            left out).
        batch_size: samples per batch.

    Yields:
        `{"input_ids", "attention_mask"}`, tensors of shape `(batch, longest)`; and `position_ids` where the encoded
        rows have them (a coupled token task: `token_labels.encode_token_task`), padded with 0 on the same side.
    """
    encoded_rows = hasattr(inputs, "column_names")
    positions = encoded_rows and "position_ids" in inputs.column_names
    if encoded_rows:
        names = [*tokenizer.model_input_names, *(["position_ids"] if positions else [])]
        inputs = inputs.select_columns([name for name in names if name in inputs.column_names])
    for start in range(0, len(inputs), batch_size):
        chunk = inputs[start : start + batch_size]
        row_positions = chunk.pop("position_ids") if positions else None
        # verbose=False: transformers' warning about long inputs speaks of indexing errors, which the NDR does not have
        encoded = chunk if encoded_rows else tokenizer(list(chunk), verbose=False)
        batch = tokenizer.pad(encoded, return_tensors="pt")
        if row_positions is not None:
            batch["position_ids"] = pad_position_ids(
                row_positions, batch["input_ids"].shape[1], tokenizer.padding_side
            )
        yield batch


@torch.no_grad()
def predict(
    model,
    tokenizer,
    inputs,
    batch_size: int = 256,
    adaptive_steps: bool | None = None,
    num_steps: int | None = None,
    adaptive_threshold: float | None = None,
) -> Predictions:
    """Predict every input with a fixed number of steps or with adaptive steps.

    Args:
        model: an `NDRForSequenceClassification` or `NDRForTokenClassification`, in eval mode.
        tokenizer: its tokenizer.
        inputs: texts, or encoded rows (see `padded_batches`).
        batch_size: samples per forward pass.
        adaptive_steps: run adaptive steps (True) or the fixed step count (False); None: as the config says.
        num_steps: the step count (with adaptive steps: the cap); None: the config's.
        adaptive_threshold: the threshold of adaptive steps for this call (None: the config's); the config is left as
            it was.

    Returns:
        `Predictions`.
    """
    config = model.config
    kept_threshold = config.adaptive_threshold
    device = next(model.parameters()).device
    label_ids, steps, readout_steps = [], [], []
    try:
        if adaptive_threshold is not None:
            config.adaptive_threshold = adaptive_threshold
        for batch in padded_batches(tokenizer, inputs, batch_size):
            batch = {name: tensor.to(device) for name, tensor in batch.items()}
            out = model(**batch, adaptive_steps=adaptive_steps, num_steps=num_steps)
            mask = batch["attention_mask"]
            predicted = out.logits.argmax(-1).cpu().numpy()  # (b,), or (b, n) with a label per token
            if predicted.ndim == 2:  # each row without its padding (on the right)
                rows = np.empty(len(predicted), dtype=object)
                rows[:] = [row[:length] for row, length in zip(predicted, mask.sum(-1).tolist())]
                predicted = rows
            label_ids.append(predicted)
            if out.halting_steps is not None:  # ACT: (b, n) steps per column
                halting = out.halting_steps.float()
                steps.append(((halting * mask).sum(-1) / mask.sum(-1)).cpu().numpy())
                positions = readout_positions(mask, config.readout)
                readout_steps.append(halting[torch.arange(len(positions), device=device), positions].cpu().numpy())
            elif out.num_steps_taken is not None:  # adaptive steps: (b,)
                steps.append(out.num_steps_taken.cpu().numpy())
            else:
                steps.append(np.full(len(mask), resolve_num_steps(num_steps, config, training=False)))
    finally:
        config.adaptive_threshold = kept_threshold
    if not label_ids:
        raise ValueError("predict needs at least one input")
    return Predictions(
        label_ids=np.concatenate(label_ids),
        steps=np.concatenate(steps),
        model_chose_steps=out.halting_steps is not None or out.num_steps_taken is not None,
        readout_steps=np.concatenate(readout_steps) if readout_steps else None,
    )


__all__ = ["Predictions", "padded_batches", "predict"]
