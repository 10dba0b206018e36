"""Time-boxed and preemptible training: a run stops at a step boundary with a checkpoint, exits with status 75, and
the same command with `--resume_from_checkpoint auto` continues it exactly where it stopped.

What stops a run (`TimeBoxCallback`, a `TrainerCallback`):

- `--max_wall_minutes M`: M minutes after `train.py` started (its setup included), at the next optimizer step;
- SIGTERM or SIGUSR1 (what schedulers send before they kill a job; SLURM: `--signal=USR1@120`), at the next step;
- `--max_chunk_steps N`: after N optimizer steps in this process (deterministic chunks, as the tests use).

The stop saves a regular Trainer checkpoint (weights, optimizer, scheduler, RNG states of every process, trainer
state with the best checkpoint so far), writes `stopped.json` into the output folder, and `train.py` exits with
`EXIT_STOPPED` = 75 (`os.EX_TEMPFAIL`, "try again"); a finished run exits 0. So a requeue loop is

    until python training/train.py ... --max_wall_minutes 9 --resume_from_checkpoint auto; [ $? -ne 75 ]; do :; done

or, keeping a failure's exit status and also working under `accelerate launch`/`torchrun` (which exit 1 when their
processes exit 75; `stopped.json` tells a stop from a failure), the checkout's driver:

    python training/run_in_chunks.py --chunk_minutes 9 -- python training/train.py --preset listops_gpu ...

Under data parallelism the processes agree on the step: each one's wish to stop (a signal may reach only some of
them, and their clocks differ) is combined with an all-reduce (max) at every `check_every`-th step boundary, on the
CPU through a gloo group, so the check never waits for the GPU.
"""

import datetime
import json
import logging
import os
import signal
import time

import torch
from safetensors.torch import load_file
from transformers import TrainerCallback
from transformers.trainer_utils import TrainOutput
from transformers.utils import SAFE_WEIGHTS_NAME

from modeling_ndr.training.errors import UsageError


logger = logging.getLogger(__name__)

EXIT_STOPPED = 75  # os.EX_TEMPFAIL (POSIX "temporary failure; try again"); os.EX_TEMPFAIL is missing on Windows
STOP_SIGNALS = ("SIGTERM", "SIGUSR1")
STOPPED_FILE = "stopped.json"
# the key of the running training time in `trainer_state.json`'s `stateful_callbacks` (not a callback class name:
# Trainer's `restore_callback_states_from_checkpoint` must not try to rebuild a callback from it)
CLOCK_KEY = "ndr_training_clock"
# why a process wants to stop, in increasing priority: the all-reduce keeps the largest code, so every process reports
# the same reason
REASONS = ("", "max_chunk_steps", "max_wall_minutes", *STOP_SIGNALS)


class RunFinished(Exception):
    """Raised at the start of `Trainer.train` when the checkpoint it resumed from is the run's last step (a run killed
    during its final evaluation or export): there is nothing to train, and Trainer's epoch loop would train one step
    past `max_steps` where that falls mid-epoch. `finish_resumed_run` ends training instead."""


class TrainingStopped(Exception):
    """A run stopped before its last step, with a checkpoint to resume from (`train.py` exits with `EXIT_STOPPED`).

    Args:
        step: the global step of the checkpoint.
        reason: what stopped it: `max_wall_minutes`, `max_chunk_steps`, `SIGTERM` or `SIGUSR1`.
        checkpoint: the checkpoint folder written at `step`.
    """

    def __init__(self, step: int, reason: str, checkpoint: str | None):
        super().__init__(f"stopped at step {step} ({reason}); checkpoint {checkpoint}; resume with the same command "
                         "and --resume_from_checkpoint auto")  # fmt: skip
        self.step, self.reason, self.checkpoint = step, reason, checkpoint


class TimeBoxCallback(TrainerCallback):
    """Stop training at a step boundary, with a checkpoint, after a wall-clock limit, a number of steps in this
    process, or on SIGTERM/SIGUSR1; then `raise_if_stopped()` raises `TrainingStopped`.

    The signal handlers are installed when training begins and restored when it ends: before the first step there is
    nothing to save, and a signal during the final evaluation or export keeps its default effect.

    Args:
        max_wall_minutes: stop at the first step boundary this many minutes after `start_time` (None: no limit).
        max_chunk_steps: stop after this many optimizer steps in this process (None: no limit).
        check_every: under data parallelism, the processes combine their wishes to stop every this many steps.
        start_time: `time.monotonic()` when the run started (default: when the callback is made).
        handle_signals: install handlers for SIGTERM and SIGUSR1 while training.
    """

    def __init__(
        self,
        max_wall_minutes: float | None = None,
        max_chunk_steps: int | None = None,
        check_every: int = 1,
        start_time: float | None = None,
        handle_signals: bool = True,
    ):
        if max_wall_minutes is not None and max_wall_minutes <= 0:
            raise UsageError(f"--max_wall_minutes must be positive, got {max_wall_minutes}")
        if max_chunk_steps is not None and max_chunk_steps < 1:
            raise UsageError(f"--max_chunk_steps must be at least 1, got {max_chunk_steps}")
        self.max_wall_minutes, self.max_chunk_steps, self.check_every = max_wall_minutes, max_chunk_steps, check_every
        self.start_time = time.monotonic() if start_time is None else start_time
        self.handle_signals = handle_signals
        self.signal_received: str | None = None  # set by the handler (only a name: handlers must do little)
        self.stop_reason: str | None = None  # set when all processes agreed to stop
        self.stop_step: int | None = None
        self.checkpoint: str | None = None
        self.previous_seconds = 0.0  # training time of the earlier chunks of this run (from the checkpoint)
        self.chunks = 1
        self._train_start = None
        self._first_step = 0
        self._saved_handlers = {}
        self._group = None

    # ------------------------------------------------------------------------------------------------------ signals

    def _on_signal(self, signum, frame) -> None:
        self.signal_received = signal.Signals(signum).name

    def _install_handlers(self) -> None:
        if not self.handle_signals:
            return
        for name in STOP_SIGNALS:
            number = getattr(signal, name, None)
            if number is None:  # Windows has no SIGUSR1
                continue
            try:
                self._saved_handlers[number] = signal.signal(number, self._on_signal)
            except ValueError:  # not the main thread: signals stay with their default handlers
                logger.warning("%s is not handled: training does not run in the main thread", name)

    def _restore_handlers(self) -> None:
        for number, handler in self._saved_handlers.items():
            signal.signal(number, handler)
        self._saved_handlers = {}

    # ---------------------------------------------------------------------------------------------------- callbacks

    def on_train_begin(self, args, state, control, **kwargs):
        clock = (state.stateful_callbacks or {}).get(CLOCK_KEY) or {}
        self.previous_seconds = float(clock.get("seconds", 0.0)) if state.global_step else 0.0
        self.chunks = int(clock.get("chunks", 0)) if state.global_step else 0  # the chunks before this one
        if state.global_step and state.global_step >= state.max_steps:  # no chunk of training: the clock stands
            raise RunFinished(f"resumed at step {state.global_step} of {state.max_steps}: nothing left to train")
        self._train_start = time.monotonic()
        self._first_step = state.global_step
        self.chunks += 1
        self._group = _stop_flag_group(args)
        if state.is_world_process_zero:  # a stale marker would make a driver take a later failure for a stop
            _remove(os.path.join(args.output_dir, STOPPED_FILE))
        self._install_handlers()
        limits = [f"after {self.max_wall_minutes:g} min wall clock"] if self.max_wall_minutes else []
        limits += [f"after {self.max_chunk_steps} steps"] if self.max_chunk_steps else []
        limits += [f"on {'/'.join(STOP_SIGNALS)}"] if self._saved_handlers else []
        if limits:
            logger.info(
                "chunk %d of this run from step %d: stops with a checkpoint (exit %d) %s",
                self.chunks, state.global_step, EXIT_STOPPED, " or ".join(limits),
            )  # fmt: skip

    def on_step_end(self, args, state, control, **kwargs):
        # the running training time travels in every checkpoint's trainer_state.json (written after this event)
        state.stateful_callbacks[CLOCK_KEY] = {"seconds": round(self.training_seconds, 3), "chunks": self.chunks}
        if state.global_step >= state.max_steps:  # the last step: the run finishes (evaluation, export) instead
            return control
        if (state.global_step - self._first_step) % self.check_every:
            return control
        reason = self._agreed_reason(args, self._local_reason(state))
        if reason:
            self.stop_reason, self.stop_step = reason, state.global_step
            control.should_save = True
            control.should_training_stop = True
            logger.warning("stopping at step %d (%s): saving a checkpoint", state.global_step, reason)
        return control

    def on_save(self, args, state, control, **kwargs):
        if self.stop_step is not None and state.global_step == self.stop_step:
            self.checkpoint = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            # The stop checkpoint holds the real state, written above. What remains of this process is Trainer's end
            # of training: without a best checkpoint it neither loads the best weights (wasted time) nor, with
            # save_total_limit=1, deletes every other checkpoint -- the stop checkpoint included.
            state.best_model_checkpoint = None
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self._restore_handlers()
        if self.stop_reason and state.is_world_process_zero:
            record = {
                "step": self.stop_step,
                "reason": self.stop_reason,
                "checkpoint": self.checkpoint,
                "training_seconds": round(self.training_seconds, 1),
                "chunks": self.chunks,
                "time": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            }
            with open(os.path.join(args.output_dir, STOPPED_FILE), "w") as f:
                json.dump(record, f, indent=2)
        return control

    # ------------------------------------------------------------------------------------------------------ helpers

    @property
    def training_seconds(self) -> float:
        """Seconds of training of this run so far: the earlier chunks' and this chunk's (setup excluded)."""
        return self.previous_seconds + (time.monotonic() - self._train_start if self._train_start else 0.0)

    @property
    def stopped(self) -> bool:
        """Whether training stopped before its last step (a checkpoint was saved at `stop_step`)."""
        return self.stop_reason is not None

    def _local_reason(self, state) -> int:
        """This process's wish to stop, as an index into `REASONS` (0: none)."""
        if self.signal_received:
            return REASONS.index(self.signal_received)
        if self.max_wall_minutes is not None and time.monotonic() - self.start_time >= 60 * self.max_wall_minutes:
            return REASONS.index("max_wall_minutes")
        if self.max_chunk_steps is not None and state.global_step - self._first_step >= self.max_chunk_steps:
            return REASONS.index("max_chunk_steps")
        return 0

    def _agreed_reason(self, args, local: int) -> str:
        """The reason all processes stop for ("" to go on): the largest of their wishes."""
        if self._group is not None:
            group, device = self._group
            flag = torch.tensor([local], dtype=torch.int32, device=device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=group)
            local = int(flag.item())
        return REASONS[local]

    def raise_if_stopped(self) -> None:
        """Raise `TrainingStopped` if training stopped before its last step (call it after `trainer.train()`)."""
        if self.stopped:
            raise TrainingStopped(self.stop_step, self.stop_reason, self.checkpoint)


def finish_resumed_run(trainer, time_box: "TimeBoxCallback") -> TrainOutput:
    """What `Trainer.train` would have returned for a run resumed from its last step (`RunFinished`): the model
    holding the best checkpoint's weights where `load_best_model_at_end` asks for them (Trainer has loaded the last
    step's), and the run's training time so far.

    Args:
        trainer: the run's Trainer, its `state` the checkpoint's (Trainer restored it before `on_train_begin`).
        time_box: the run's `TimeBoxCallback`, its clock read from the checkpoint.

    Returns:
        A `TrainOutput` (`metrics["train_runtime"]`: the training seconds of all chunks).
    """
    best = trainer.state.best_model_checkpoint
    if trainer.args.load_best_model_at_end and best and os.path.isfile(os.path.join(best, SAFE_WEIGHTS_NAME)):
        logger.info("resumed at the last step: the best checkpoint's weights (%s) as training would end", best)
        trainer.model.load_state_dict(load_file(os.path.join(best, SAFE_WEIGHTS_NAME)))
    metrics = {"train_runtime": round(time_box.training_seconds, 4)}
    return TrainOutput(trainer.state.global_step, 0.0, metrics)


def _stop_flag_group(args):
    """`(group, device)` for the all-reduce of the stop flag under data parallelism, None for one process.

    A gloo group reduces a CPU tensor: no GPU synchronisation. Where gloo cannot be had, the default group reduces a
    tensor on the training device."""
    if args.world_size <= 1 or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return None
    if torch.distributed.get_backend() == "gloo":
        return None, "cpu"
    try:
        return torch.distributed.new_group(backend="gloo"), "cpu"
    except (RuntimeError, ValueError) as error:
        logger.warning("no gloo group for the stop flag (%s): it is reduced on %s", error, args.device)
        return None, args.device


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def read_stopped(output_dir: str) -> dict | None:
    """The `stopped.json` of a run's output folder (where and why it stopped), None if there is none.

    Args:
        output_dir: the run's `--output_dir`.

    Returns:
        `{"step", "reason", "checkpoint", "training_seconds", "chunks", "time"}` or None.
    """
    try:
        with open(os.path.join(output_dir, STOPPED_FILE)) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None
