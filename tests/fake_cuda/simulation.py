"""Simulated CUDA for the tests in this folder: the model on "cuda" tensors that hold no data (`FakeTensorMode`),
CUDA autocast on them, and a watch on every read of a CUDA tensor's values by the host (`HostReads`).

Fake tensors carry shapes, dtypes and devices through the real operators (their shape rules, their device checks,
autocast's casts, autograd), so a tensor made on the wrong device or in the wrong dtype fails here as it would on a
GPU. They hold no values, so whatever reads values on the host cannot run: `HostReads` turns each such read into an
error that names the line, unless the test allows it at that place and says what it reads. (On a GPU a host read
waits for every queued kernel: in a training step it stalls the GPU once per read.)

The process must know a CUDA device before torch is imported (`fake_cuda_preload.py`; a CUDA build of torch knows
one anyway): tests/e2e/test_simulated_cuda.py starts such a process. What is and is not simulated: docs/clusters.md.
"""

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch
import yaml
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode

from modeling_ndr import NDRConfig, NDRForSequenceClassification


if not (torch.backends.cuda.is_built() or "fake_cuda_preload" in sys.modules):  # indexing would abort the process
    raise RuntimeError(
        "tests/fake_cuda needs torch to know a CUDA device from its import on; run it as "
        "tests/e2e/test_simulated_cuda.py does: PYTHONPATH=tests/fake_cuda python -m pytest -p fake_cuda_preload "
        "tests/fake_cuda"
    )
REPO = Path(__file__).resolve().parents[2]
VARIANTS = sorted(path.stem for path in (REPO / "configuration" / "variants").glob("*.yaml"))
_TORCH_DIR = str(Path(torch.__file__).parent)


def variant_config(variant: str, **overrides) -> NDRConfig:
    """A tiny config of a variant in configuration/variants/ (its NDRConfig fields, small sizes, 3 labels)."""
    with open(REPO / "configuration" / "variants" / f"{variant}.yaml") as f:
        fields = {k: v for k, v in yaml.safe_load(f).items() if k not in ("tasks", "presets")}
    fields.update(vocab_size=12, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_hidden_layers=2)
    return NDRConfig(**{**fields, "num_labels": 3, **overrides})


def fake_cuda_mode() -> FakeTensorMode:
    """Inside it, tensors are fake. Real (CPU) tensors may come in, as a data loader's batches do; mixed with CUDA
    tensors in one operator they raise, as on a GPU."""
    return FakeTensorMode(allow_non_fake_inputs=True)


def fake_cuda_model(config: NDRConfig, model_class=NDRForSequenceClassification):
    """A model whose parameters are fake CUDA tensors (call inside `fake_cuda_mode()`): built on the meta device (no
    memory, no initialisation; outside the fake mode, which would wrap meta tensors too) and moved with `to_empty`,
    as a large model is placed on a GPU."""
    with unset_fake_temporarily(), torch.device("meta"):
        model = model_class(config)
    return model.to_empty(device="cuda")


def cuda_batch(batch: int = 4, seq: int = 7, vocab: int = 12, labels: int = 3) -> dict:
    """A batch on (fake) CUDA with one padded row, made where the model would get it."""
    mask = torch.ones(batch, seq, dtype=torch.long, device="cuda")
    mask[1, 5:] = 0
    return {
        "input_ids": torch.randint(0, vocab, (batch, seq), device="cuda"),
        "attention_mask": mask,
        "labels": torch.randint(0, labels, (batch,), device="cuda"),
    }


def cuda_autocast(dtype: torch.dtype = torch.bfloat16) -> torch.autocast:
    """`torch.autocast("cuda", dtype)`, which would switch itself off here: it asks `torch.cuda.is_available()` (and
    `is_bf16_supported()`) when it is made. Only those two questions are answered yes, while it is made; entered, it
    turns on PyTorch's own CUDA autocast, whose casts then apply to the fake CUDA tensors as on a GPU."""
    with (
        mock.patch("torch.cuda.is_available", return_value=True),
        mock.patch("torch.cuda.is_bf16_supported", return_value=True),
    ):
        return torch.autocast("cuda", dtype=dtype)


def _caller():
    """The innermost frame outside torch and this file: the line that called the operator."""
    frame = sys._getframe(1)
    while frame is not None and _inside_torch_or_here(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _inside_torch_or_here(filename: str) -> bool:
    return filename == __file__ or filename.startswith(_TORCH_DIR)


def _place(frame) -> str:
    """`file.py:function` of a frame."""
    return "<unknown>" if frame is None else f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"


class OpDtypes(TorchDispatchMode):
    """Records `(place, operator, dtype, shape)` of every operator with one tensor output (place: `file.py:function`
    that called it)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.ops.append((_place(_caller()), func, out.dtype, tuple(out.shape)))
        return out


# ------------------------------------------------------------------------------------------------ host reads


class HostReadError(AssertionError):
    """The host read a CUDA tensor's values at a place the test did not allow."""


@dataclass(frozen=True)
class Answer:
    """What an allowed read at one place returns, fake tensors having no values: `scalar` for `.item()`, `bool()`,
    `.any()` in an `if` and the like; `kept(n)` is how many of a bool mask's n entries it selects (indexing with a
    mask, `nonzero`)."""

    scalar: bool | int | float = True
    kept: Callable[[int], int] = lambda n: n // 2


_INDEXING = {
    torch.ops.aten.index.Tensor,
    torch.ops.aten.index_put.default,
    torch.ops.aten.index_put_.default,
    torch.ops.aten._index_put_impl_.default,
}


def _is_mask(index) -> bool:
    return isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)


def read_kind(func, args, kwargs) -> str | None:
    """How an operator reads CUDA values on the host, or None: `"scalar"` (`.item()`, `bool()`, `.tolist()`,
    `torch.equal`: operators tagged `data_dependent_output`), `"mask"` (indexing with a bool mask), `"shape"` (an
    output whose size depends on values: `nonzero`, `unique`, `masked_select`), `"copy"` (to the CPU)."""
    if func in _INDEXING:  # tagged dynamic_output_shape, but only a bool mask makes the size depend on values
        return "mask" if any(_is_mask(index) for index in args[1]) and args[0].device.type == "cuda" else None
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if not any(t.device.type == "cuda" for t in tensors):
        return None  # a CPU tensor's values are on the host already: reading them waits for nothing
    if func is torch.ops.aten._to_copy.default and kwargs.get("device") is not None:
        return "copy" if torch.device(kwargs["device"]).type == "cpu" else None
    if func is torch.ops.aten.copy_.default:
        return "copy" if args[0].device.type == "cpu" else None
    if torch.Tag.data_dependent_output in func.tags or func is torch.ops.aten.is_nonzero.default:
        return "scalar"  # is_nonzero: bool(tensor), which reaches this mode whole in inference mode
    if torch.Tag.dynamic_output_shape in func.tags:
        return "shape"
    return None


class HostReads(TorchDispatchMode):
    """Fails on every read of CUDA values by the host (`read_kind`) except at the places in `allowed`
    (`"modeling_ndr.py:_act_steps"`: file and function), where the read is recorded in `reads` and answered with the
    `Answer` given. Use it inside `fake_cuda_mode()`, which it hands every operator on to."""

    def __init__(self, allowed: dict[str, Answer] | None = None):
        super().__init__()
        self.allowed = allowed or {}
        self.reads: list[tuple[str, str]] = []  # (place, kind) of every allowed read, in order

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = read_kind(func, args, kwargs)
        if kind is None:
            return func(*args, **kwargs)
        frame = _caller()
        place = _place(frame)
        if place not in self.allowed:
            line = "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"
            raise HostReadError(f"{func} reads CUDA values on the host ({kind}) at {line} ({place})")
        self.reads.append((place, kind))
        answer = self.allowed[place]
        if kind == "scalar":
            return answer.scalar
        if kind == "copy":
            return func(*args, **kwargs)
        if kind == "mask":  # each bool mask becomes the long indices of the entries it keeps
            indices = []
            for index in args[1]:
                if not _is_mask(index):
                    indices.append(index)
                    continue
                kept = torch.zeros(answer.kept(index.numel()), dtype=torch.long, device=index.device)
                indices += [kept] * index.dim()
            return func(args[0], indices, *args[2:], **kwargs)
        if func is torch.ops.aten.nonzero.default:
            return torch.zeros(answer.kept(args[0].numel()), args[0].dim(), dtype=torch.long, device=args[0].device)
        raise HostReadError(f"{func} ({kind}) at {place} is allowed, but the simulation cannot answer it")
