"""Schedules of loss weights during training.

`PonderWeightSchedule` warms up ACT's ponder weight (`NDRConfig.act_ponder_weight`, tau). With the full weight from
the first step, the ponder cost is the only part of the loss with a gradient while the task loss sits at chance: the
halting unit learns to stop every column after a few steps before the task is learned, and with a few steps it is
never learned. So the weight stays at 0 until the task starts to be learned (the logged training loss falls to
`start_loss`), then grows linearly to the target over `ramp_steps` optimizer steps:

    tau(step) = target * clip((step - start_step) / ramp_steps, 0, 1)

`train.py` adds it for ACT models when `--ponder_warmup_loss` or `--ponder_warmup_steps` is given. The step at which
the ramp started travels in every checkpoint (`trainer_state.json`), so a resumed run continues the same schedule.
"""

import logging

from transformers import TrainerCallback


logger = logging.getLogger(__name__)

# the key of the schedule's state in `trainer_state.json`'s `stateful_callbacks` (not a callback class name: Trainer's
# `restore_callback_states_from_checkpoint` must not try to rebuild a callback from it)
PONDER_KEY = "ndr_ponder_schedule"


def ponder_weight(target: float, step: int, start_step: int | None, ramp_steps: int) -> float:
    """tau at `step`: 0 before `start_step` (or while it is None), then linear up to `target` over `ramp_steps`.

    Args:
        target: the weight at the end of the ramp (`act_ponder_weight` of the run's config).
        step: the global optimizer step.
        start_step: the step at which the ramp starts; None: not yet.
        ramp_steps: the length of the ramp; 0 jumps to `target` at `start_step`.

    Returns:
        The weight.
    """
    if start_step is None or step < start_step:
        return 0.0
    if ramp_steps <= 0:
        return target
    return target * min(1.0, (step - start_step) / ramp_steps)


class PonderWeightSchedule(TrainerCallback):
    """Sets `model.config.act_ponder_weight` before every optimizer step (see the module docstring); at the end of
    training it is the target again, so the saved config holds the weight the schedule was going to.

    Args:
        target: the final weight (the config's `act_ponder_weight` when training starts, if None).
        start_loss: the ramp starts at the first logged training loss at or below this value (every process sees the
            same logged loss: Trainer averages it over processes); None: it starts at step 0.
        ramp_steps: optimizer steps from 0 to the target.
    """

    def __init__(self, target: float | None = None, start_loss: float | None = None, ramp_steps: int = 0):
        self.target = target
        self.start_loss = start_loss
        self.ramp_steps = ramp_steps
        self.start_step = None if start_loss is not None else 0

    def _set(self, model, step: int) -> None:
        if model is not None:
            model.config.act_ponder_weight = ponder_weight(self.target, step, self.start_step, self.ramp_steps)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.target is None:
            self.target = float(model.config.act_ponder_weight)
        saved = (state.stateful_callbacks or {}).get(PONDER_KEY) or {}
        if state.global_step and "start_step" in saved:  # resumed: the ramp started (or not) in an earlier chunk
            self.start_step = saved["start_step"]
        self._set(model, state.global_step)
        return control

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        self._set(model, state.global_step)
        return control

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        loss = (logs or {}).get("loss")
        if self.start_step is None and loss is not None and loss <= self.start_loss:
            self.start_step = state.global_step
            logger.info(
                "training loss %.4f <= %g at step %d: the ponder weight grows to %g over %d steps",
                loss, self.start_loss, state.global_step, self.target, self.ramp_steps,
            )  # fmt: skip
        return control

    def on_step_end(self, args, state, control, **kwargs):
        state.stateful_callbacks[PONDER_KEY] = {"start_step": self.start_step}  # saved with every checkpoint
        return control

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if model is not None:
            model.config.act_ponder_weight = self.target
        return control


__all__ = ["PonderWeightSchedule", "ponder_weight", "PONDER_KEY"]
