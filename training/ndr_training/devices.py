"""What depends on the devices a run trains on: the global batch whatever the number of processes
(`--total_batch_size`), and the mixed precision the GPU or CPU supports (`--precision`).

The paper trains with batches of 512 on one GPU. With k data-parallel processes, Trainer's batch is
`per_device_train_batch_size x gradient_accumulation_steps x k`; `--total_batch_size 512` sets the per-device batch
from k (and the accumulation steps), so the same command trains with the paper's batch on 1, 2, 4 or 8 GPUs.
"""

import logging
import os

import torch

from modeling_ndr.training.errors import UsageError


logger = logging.getLogger(__name__)


PRECISIONS = ("auto", "bf16", "fp16", "fp32")
# the TrainingArguments flags that choose a precision themselves (given on the command line, they win)
PRECISION_FLAGS = ("bf16", "fp16")
# set to 1 or 0, it replaces the CPU's own answer to "native bf16?" (a hypervisor that hides the flags, a test suite
# that must behave alike on every CPU: tests/conftest.py sets it)
NATIVE_BF16_VARIABLE = "NDR_CPU_NATIVE_BF16"


def per_device_batch_size(total_batch_size: int, processes: int, accumulation_steps: int = 1) -> int:
    """The per-device batch that makes `total_batch_size` with `processes` processes and `accumulation_steps`.

    Args:
        total_batch_size: the global batch (samples per optimizer step).
        processes: the data-parallel processes (Trainer's `world_size`).
        accumulation_steps: `gradient_accumulation_steps`.

    Returns:
        `total_batch_size / (processes x accumulation_steps)`; a `UsageError` if that is not a whole number >= 1.
    """
    if total_batch_size < 1:
        raise UsageError(f"--total_batch_size must be at least 1, got {total_batch_size}")
    shares = processes * accumulation_steps
    per_device, remainder = divmod(total_batch_size, shares)
    if remainder or per_device < 1:
        raise UsageError(
            f"--total_batch_size {total_batch_size} does not divide into {processes} process(es) x "
            f"{accumulation_steps} accumulation step(s): use a multiple of {shares} (or other accumulation steps)"
        )
    return per_device


def apply_total_batch_size(training_args, total_batch_size: int | None, given: set[str]) -> None:
    """Set `training_args.per_device_train_batch_size` from `--total_batch_size` and the number of processes.

    A `--per_device_train_batch_size` on the command line wins over a preset's `total_batch_size`; both on the command
    line is an error.

    Args:
        training_args: the run's `TrainingArguments` (its `world_size` and `gradient_accumulation_steps` are read).
        total_batch_size: `--total_batch_size` (None: the per-device batch stays as given).
        given: the fields given on the command line (`flags_on_command_line`).
    """
    if total_batch_size is None:
        return
    if "per_device_train_batch_size" in given:
        if "total_batch_size" in given:
            raise UsageError("give --total_batch_size or --per_device_train_batch_size, not both")
        return
    training_args.per_device_train_batch_size = per_device_batch_size(
        total_batch_size, training_args.world_size, training_args.gradient_accumulation_steps
    )


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware: AVX512-BF16 or AMX (what oneDNN uses for bf16).

    Elsewhere bf16 is emulated, and slow: on an AVX2-only EPYC (a Zen 4 whose hypervisor hides AVX-512), a
    1024x1024 bf16 matrix product ran at 0.7 GFLOP/s against 73 in float32, one thread (docs/results/performance.md).

    `NDR_CPU_NATIVE_BF16=1` (or `0`) in the environment replaces the CPU's answer.

    Returns:
        True where torch reports AVX512-BF16 or AMX tiles (or the environment says so).
    """
    forced = os.environ.get(NATIVE_BF16_VARIABLE)
    if forced is not None:
        if forced not in ("0", "1"):
            raise UsageError(f"{NATIVE_BF16_VARIABLE}={forced!r}: set it to 1 (native bf16) or 0 (none), or unset it")
        return forced == "1"
    return cpu_reports_native_bf16()


def cpu_reports_native_bf16() -> bool:
    """What this CPU itself reports (`cpu_has_native_bf16` without the environment's override)."""
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private in torch 2.x, hence the getattr
    return any(callable(check := getattr(cpu, name, None)) and check() for name in checks)


def precision_defaults(precision: str | None, use_cpu: bool, given: set[str]) -> dict:
    """The `TrainingArguments` values that `--precision` stands for on this machine.

    `auto` is bf16 autocast with TF32 matmuls on a GPU that has bf16 (Ampere and later), plain fp32 on older GPUs (a
    V100 or T4 has no bf16; fp16 is `--precision fp16`); on the CPU (`--use_cpu`, or a machine without a GPU) it is
    bf16 autocast where the CPU has native bf16 (`cpu_has_native_bf16`: AVX512-BF16 or AMX) and fp32 elsewhere, where
    emulated bf16 is many times slower. bf16 on a machine without a GPU also sets `use_cpu` (TrainingArguments refuses
    bf16 there without it); fp16 needs a GPU. The geometric attention, the copy gate and the halting probabilities
    compute in float32 under any autocast; the weights stay float32.

    Args:
        precision: one of `PRECISIONS`, or None (Trainer's flags as given).
        use_cpu: the run trains on the CPU (`--use_cpu`), GPUs or not.
        given: the fields given on the command line: `--bf16`/`--fp16` there override `--precision`, and `--tf32`
            keeps its value.

    Returns:
        `{"bf16": ..., "fp16": ..., "tf32": ..., "use_cpu": ...}` (the keys to set), empty if nothing changes.
    """
    if precision is None:
        return {}
    if precision not in PRECISIONS:
        raise UsageError(f"--precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    if given & set(PRECISION_FLAGS):
        return {}
    cuda, asked = torch.cuda.is_available() and not use_cpu, precision
    if precision == "auto" and cuda:
        precision = "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp32"
    elif precision == "auto":
        precision = "bf16" if cpu_has_native_bf16() else "fp32"
    if precision == "fp16" and not cuda:
        where = "--use_cpu" if use_cpu else "this machine has no GPU"
        raise UsageError(f"--precision fp16 needs a GPU ({where}): on the CPU use --precision bf16, fp32 or auto")
    values = {"bf16": precision == "bf16", "fp16": precision == "fp16"}
    if cuda and "tf32" not in given and _tf32_available():
        values["tf32"] = True  # the float32 matmuls outside autocast
    if values["bf16"] and not cuda and not use_cpu:
        # no GPU: the run trains on the CPU anyway, and TrainingArguments takes bf16 there only with use_cpu
        if "use_cpu" in given:
            raise UsageError(
                f"--precision {asked} (bf16 here) on this machine, which has no GPU, trains on the CPU and needs "
                "--use_cpu: drop --use_cpu false (or pass --precision fp32)"
            )
        values["use_cpu"] = True
    return values


def gpu_preset_on_cpu(preset: str | None, task: str | None) -> str | None:
    """What to say when a preset made for a GPU (named `*_gpu` or `*_paper`) trains on a machine without one: it
    trains on the CPU (with the precision `--precision` resolves to there), which takes far longer than the preset's
    budget was sized for. None where there is nothing to say.

    Args:
        preset: the run's preset name.
        task: the run's task (names the CPU-sized preset to use instead).

    Returns:
        One line for the log, or None.
    """
    if not preset or not preset.endswith(("_gpu", "_paper")) or torch.cuda.is_available():
        return None
    instead = f"; --preset {task}_cpu is the recipe sized for a CPU" if task else ""
    return f"--preset {preset} is sized for a GPU and this machine has none: it trains on the CPU, far slower{instead}"


def precision_note(precision: str | None, training_args) -> str | None:
    """One line on what the run trains in and why, where a launch command could say otherwise: `accelerate launch
    --mixed_precision no` (what `make demo` runs) adds no autocast of its own, and train.py's `--precision` decides.

    Args:
        precision: the run's `--precision` (None: Trainer's flags as given).
        training_args: the run's `TrainingArguments`.

    Returns:
        The line, or None for a run in fp32 that nothing contradicts.
    """
    words = describe_precision(training_args)
    if words == "fp32" and precision != "auto":
        return None
    on_gpu = torch.cuda.is_available() and not training_args.use_cpu
    if precision == "auto":
        device = "GPU" if on_gpu else "CPU"
        has = "has" if training_args.bf16 else "has no"
        why = f"--precision auto: this {device} {has} native bf16"
    else:
        why = f"--precision {precision}" if precision else "--bf16/--fp16"
    launcher = os.environ.get("ACCELERATE_MIXED_PRECISION")
    if launcher and launcher != "no":
        return f"training in {words} ({why}; the launcher's --mixed_precision {launcher} too)"
    return f"training in {words} ({why}; train.py sets it, a launcher's --mixed_precision no adds nothing)"


def _tf32_available() -> bool:
    from transformers.utils import is_torch_tf32_available  # TrainingArguments raises for tf32 where this is False

    return is_torch_tf32_available()


def describe_precision(training_args) -> str:
    """A few words for the log and the run record: `bf16 autocast, TF32 matmuls`, `fp32`, ...

    Args:
        training_args: the run's `TrainingArguments`.

    Returns:
        The description.
    """
    words = "bf16 autocast" if training_args.bf16 else "fp16 autocast" if training_args.fp16 else "fp32"
    if torch.cuda.is_available() and not training_args.use_cpu and torch.backends.cuda.matmul.allow_tf32:
        words += ", TF32 matmuls"
    return words
