"""An exponential moving average (EMA) of the weights, kept during training beside them: `WeightAverage`.

`train.py --ema_decay 0.999` adds it. After every optimizer step the average moves towards the weights,
`average = decay * average + (1 - decay) * weights` (in float32, on the weights' device); each checkpoint then holds a
folder `ema/` with the average as a model that loads on its own (`from_pretrained`, `training/evaluate_model.py`), and
a run resumed from that checkpoint goes on from its average. Training, evaluation and checkpoint selection use the
weights themselves: the average is a second model to compare, not a replacement (with a constant learning rate the
weights scatter around a basin, and their average may sit nearer its centre).
"""

import logging
import os

import torch
from safetensors.torch import load_file, save_file
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR


logger = logging.getLogger(__name__)

EMA_FOLDER = "ema"


class WeightAverage(TrainerCallback):
    """Keep an EMA of the model's floating-point weights and save it into every checkpoint (`checkpoint-N/ema/`).

    Args:
        decay: how much of the average each step keeps, in (0, 1) (0.999: about the last 1,000 steps).
        resume_from_checkpoint: the checkpoint the run resumes from, if any: its `ema/` is the average to go on from
            (a checkpoint without one starts the average at the resumed weights).
    """

    def __init__(self, decay: float, resume_from_checkpoint: str | None = None):
        if not 0 < decay < 1:
            raise ValueError(f"--ema_decay {decay}: expected a decay between 0 and 1 (e.g. 0.999)")
        self.decay, self.resume_from_checkpoint = decay, resume_from_checkpoint
        self.average: dict[str, torch.Tensor] | None = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        weights = _float_weights(model)
        saved = os.path.join(self.resume_from_checkpoint or "", EMA_FOLDER, "model.safetensors")
        if self.resume_from_checkpoint and os.path.isfile(saved):
            loaded = load_file(saved)
            self.average = {name: loaded[name].to(w.device, torch.float32) for name, w in weights.items()}
        else:
            self.average = {name: w.detach().float().clone() for name, w in weights.items()}

    @torch.no_grad()
    def on_step_end(self, args, state, control, model=None, **kwargs):
        for name, weight in _float_weights(model).items():
            self.average[name].lerp_(weight.detach().float(), 1.0 - self.decay)

    def on_save(self, args, state, control, model=None, processing_class=None, **kwargs):
        if not state.is_world_process_zero or self.average is None:
            return
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}", EMA_FOLDER)
        os.makedirs(folder, exist_ok=True)
        model.config.save_pretrained(folder)
        if processing_class is not None:
            processing_class.save_pretrained(folder)
        tensors = {name: value.cpu().contiguous() for name, value in self.average.items()}
        save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        logger.info("weight average (EMA, decay %g) saved to %s", self.decay, folder)


def _float_weights(model) -> dict[str, torch.Tensor]:
    """The model's floating-point parameters by name (the unwrapped model's names: what a checkpoint holds)."""
    model = getattr(model, "module", model)  # DistributedDataParallel
    return {name: p for name, p in model.named_parameters() if p.is_floating_point()}
