"""Test-session set-up. The hub variables are read when huggingface_hub is imported, so they are set here, before
any HF import: every hub id resolves from a private offline cache that the tests build themselves."""

import os
import sys
import tempfile
from pathlib import Path


_HF_HOME = tempfile.mkdtemp(prefix="ndr-tests-hf-home-")
os.environ["HF_HOME"] = _HF_HOME
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# `--precision auto` reads the CPU's bf16 support: every test sees the same answer on every machine (no native bf16,
# unless NDR_TEST_CPU_NATIVE_BF16=1), and the tests that depend on it take the `native_bf16` fixture, which runs them
# both ways (also in the processes they start: the variable is inherited)
os.environ["NDR_CPU_NATIVE_BF16"] = os.environ.get("NDR_TEST_CPU_NATIVE_BF16", "0")

# the modules beside the checkout's scripts (release lines, the comparison, the GPU session: not in the package) are
# imported as the scripts import them, as siblings
for _folder in ("hub_cards", "training"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / _folder))

import pytest  # noqa: E402
import torch  # noqa: E402


torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
# tests/fake_cuda/ runs on simulated CUDA, which needs torch to know a CUDA device from its import on: a CUDA build
# does; a CPU-only one does in the process that tests/test_simulated_cuda.py starts (fake_cuda_preload loaded first)
if not (torch.backends.cuda.is_built() or "fake_cuda_preload" in sys.modules):
    collect_ignore = ["fake_cuda"]
# Without a GPU, Triton kernels (modeling_ndr.geometric_ndr_triton) run in Triton's interpreter, on CPU tensors. Triton
# reads this when a kernel is defined, which is when that module is first imported: after this file.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(params=[True, False], ids=["native-bf16-cpu", "no-bf16-cpu"])
def native_bf16(request, monkeypatch) -> bool:
    """Run the test as on a CPU with native bf16 and as on one without (`NDR_CPU_NATIVE_BF16`, which
    `cpu_has_native_bf16` reads, here and in the processes the test starts)."""
    monkeypatch.setenv("NDR_CPU_NATIVE_BF16", "1" if request.param else "0")
    return request.param


@pytest.fixture
def hf_home() -> str:
    """The offline HF home of this test session (`$HF_HOME/hub` is the hub cache)."""
    return _HF_HOME


# the modules whose tests train, launch processes or build things end to end (train.py, make, accelerate, a wheel, the
# docs site, the Space): marked `e2e`, so that `make test-fast` (-m "not e2e") runs the unit tests in a few minutes;
# `make test` and CI run everything
E2E_MODULES = {
    "test_adaptive_export", "test_compare", "test_compare_tokens", "test_dataset_repos", "test_docs",
    "test_gpu_release", "test_gpu_session", "test_gpu_training", "test_hub_push", "test_installed_package",
    "test_own_data", "test_own_data_defaults", "test_own_token_task", "test_preemption", "test_release_continuation",
    "test_release_cooldown", "test_released_models", "test_reliability", "test_simulated_cuda", "test_space",
    "test_training", "test_training_package",
}  # fmt: skip


def pytest_collection_modifyitems(config, items):
    """Tests of `E2E_MODULES` are marked `e2e`. `gpu` tests skip where CUDA is missing, unless NDR_TEST_DEVICE=cpu runs
    tests/test_gpu.py's checks on the CPU (which keeps the test code itself exercised on machines without a GPU)."""
    for item in items:
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in E2E_MODULES:
            item.add_marker(pytest.mark.e2e)
    if torch.cuda.is_available() or os.environ.get("NDR_TEST_DEVICE") == "cpu":
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (make test-gpu on a GPU machine; NDR_TEST_DEVICE=cpu: the CPU)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_logreport(report):
    """With `NDR_TEST_FAILURES_LOG` set (`make gpu-session`'s tests step), each failure's traceback is appended to
    that file as it happens: a run stopped at its time limit never prints the summary that would hold them."""
    path = os.environ.get("NDR_TEST_FAILURES_LOG")
    if path and report.failed:
        with open(path, "a") as f:
            f.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")
