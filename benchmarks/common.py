"""What the benchmarks share: interleaved timing, machine facts, and loading an earlier commit's model code next to
the current one. (Their tables: `modeling_ndr.tables.markdown_table`.)"""

import datetime
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable

import torch


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# train.py's own modules (`ndr_training`), beside it in training/: the benchmarks that time or read its pieces import
# this module first
sys.path.insert(0, os.path.join(REPO, "training"))
# The commit before the performance work (issue 11): "before" in the comparisons.
REFERENCE_COMMIT = "6cddcbd"
# the variables that hold a CPU's instruction sets back (docs/performance.md, "Other kinds of CPU on this one")
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def machine() -> dict:
    """The facts a timing depends on."""
    cpu = platform.processor() or platform.machine()
    flags = set()
    if os.path.isfile("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            fields = [line.split(":", 1) for line in f if ":" in line]
        names = [value.strip() for key, value in fields if key.strip() == "model name"]
        cpu = names[0] if names else cpu
        flags = set(next((value.split() for key, value in fields if key.strip() == "flags"), []))
    return {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu,
        # what the kernels and bf16 depend on: AVX2, AVX-512, native bf16 (AVX512-BF16, AMX)
        "cpu_flags": [flag for flag in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if flag in flags],
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        # instruction sets held back on purpose (ATen's vector code, oneDNN's and MKL's matrix products): a run that
        # stands in for a CPU kind without them (AVX2 only, AVX-512 without bf16) says so
        "isa_limits": {name: os.environ[name] for name in ISA_LIMITS if name in os.environ},
        "load_average": round(os.getloadavg()[0], 2),
    }


def interleaved(contenders: dict[str, Callable[[], object]], repeats: int, warmup: int = 2) -> dict[str, float]:
    """Median seconds per call of each contender, calling them in turn each round (machine noise hits all alike)."""
    times = {name: [] for name in contenders}
    for round_index in range(warmup + repeats):
        for name, function in contenders.items():
            start = time.perf_counter()
            function()
            if round_index >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def load_reference_package(commit: str = REFERENCE_COMMIT, name: str = "ndr_reference"):
    """The model code of `commit` as package `name` (its modeling files only: its `__init__` would register the
    same auto classes again). Returns the package's `modeling_ndr` module."""
    if f"{name}.modeling_ndr" in sys.modules:
        return sys.modules[f"{name}.modeling_ndr"]
    folder = os.path.join(tempfile.gettempdir(), f"{name}-{commit}")
    if not os.path.isdir(os.path.join(folder, "modeling_ndr")):
        os.makedirs(folder, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", REPO, "archive", commit, "modeling_ndr"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
    package = types.ModuleType(name)
    package.__path__ = [os.path.join(folder, "modeling_ndr")]
    sys.modules[name] = package
    return importlib.import_module(f"{name}.modeling_ndr")


def ratio(numerator: float, denominator: float) -> str:
    return f"{numerator / denominator:.2f}x"


def save_json(path: str | None, results: dict) -> dict:
    """Write a benchmark's results to `path` (its `--json`), if given; returns them."""
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=2)
    return results
