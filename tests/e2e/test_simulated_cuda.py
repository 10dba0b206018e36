"""The simulated-CUDA tests (tests/fake_cuda/: every variant's training step, inference, ACT and adaptive steps on
fake CUDA tensors) in a process of their own. A CPU-only torch knows a CUDA device only if a do-nothing one is loaded
before torch is imported (tests/fake_cuda/fake_cuda_preload.py), which this session, where torch is imported, cannot
do. With a CUDA build of torch, tests/conftest.py collects them into this session instead."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch


REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "tests" / "fake_cuda"


@pytest.mark.skipif(torch.backends.cuda.is_built(), reason="a CUDA build of torch runs tests/fake_cuda/ in-session")
def test_the_simulated_cuda_tests_pass_in_a_process_that_knows_a_cuda_device():
    path = [str(FOLDER), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    command = [sys.executable, "-m", "pytest", "-p", "fake_cuda_preload", "-p", "no:cacheprovider", "-q", str(FOLDER)]
    done = subprocess.run(command, cwd=REPO, env=dict(os.environ, PYTHONPATH=os.pathsep.join(path)),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, f"tests/fake_cuda failed:\n{done.stdout[-8000:]}\n{done.stderr[-2000:]}"
    assert " passed" in done.stdout and " skipped" not in done.stdout, done.stdout[-2000:]
