"""Give a CPU-only PyTorch a CUDA device that does nothing (`fake_cuda.cpp`), for the simulated-CUDA tests.

FakeTensorMode runs "cuda" tensors without a GPU, but a CPU-only build of PyTorch stops at indexing and backward
without a CUDA device guard and CUDA hooks. PyTorch looks its hooks up once, while it is imported, so this module must
run before `import torch`: as a pytest plugin, `python -m pytest -p preload tests/fake_cuda` (with this folder on
`PYTHONPATH`), which is what tests/e2e/test_simulated_cuda.py starts. It builds the library with
`torch.utils.cpp_extension` in a throwaway process (about 2 s the first time, then cached in
`~/.cache/torch_extensions`; that process has torch imported, and the library is loaded into it too), then loads it
here. With a CUDA build of PyTorch it does nothing: its own guard and hooks serve fake CUDA tensors. Linux only."""

import ctypes
import glob
import os
import subprocess
import sys


SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_cuda.cpp")

# prints the library's path, or nothing where torch has CUDA of its own
BUILD = """
import hashlib, sys, torch
from torch.utils.cpp_extension import load
if not torch.backends.cuda.is_built():
    source = open(sys.argv[1]).read()
    digest = hashlib.sha1((source + torch.__version__).encode()).hexdigest()[:10]
    print(load(name=f"ndr_fake_cuda_{digest}", sources=[sys.argv[1]], is_python_module=False))
"""


def build() -> str | None:
    """The path of the built library, or `None` with a CUDA build of PyTorch (nothing to build)."""
    done = subprocess.run([sys.executable, "-c", BUILD, SOURCE], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"building {SOURCE} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else None


def load() -> None:
    """Load the library into this process (before torch is imported) if this PyTorch has no CUDA of its own."""
    if "torch" in sys.modules:
        raise RuntimeError("preload must run before torch is imported: PyTorch reads its CUDA hooks once, on import")
    path = build()
    if path is None:
        return
    import importlib.util

    torch_lib = os.path.join(os.path.dirname(importlib.util.find_spec("torch").origin), "lib")
    for name in ("libc10.so", "libtorch_cpu.so"):  # what the library links against, found where torch keeps them
        ctypes.CDLL(glob.glob(os.path.join(torch_lib, name))[0], mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


load()
