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
# imported as the scripts import them, as siblings; the tests' own helpers (tiny.py, hub_cache.py, ...) live here,
# beside the two tiers (tests/unit, tests/e2e)
for _folder in ("hub_cards", "training"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / _folder))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest  # noqa: E402
import torch  # noqa: E402


# `make test` runs the suite in two worker processes (pytest-xdist, `-n 2`): each then computes on one thread, so that
# the two together use the two cores of a CI machine instead of four threads contending for them
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1) // WORKERS))
# tests/fake_cuda/ runs on simulated CUDA, which needs torch to know a CUDA device from its import on: a CUDA build
# does; a CPU-only one does in the process that tests/e2e/test_simulated_cuda.py starts (fake_cuda_preload loaded
# first)
if not (torch.backends.cuda.is_built() or "fake_cuda_preload" in sys.modules):
    collect_ignore = ["fake_cuda"]
# Without a GPU, Triton kernels (modeling_ndr.geometric_ndr_triton) run in Triton's interpreter, on CPU tensors. Triton
# reads this when a kernel is defined, which is when that module is first imported: after this file.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def leaves_the_cpu_kernel_unbuilt(markers: set[str], cuda: bool) -> bool:
    """Whether a test's CPU side takes the PyTorch path of geometric attention (`kernel="auto"` then never builds the
    fused CPU kernel): the CUDA and Triton tests (markers `gpu`, `triton`) on a machine with a GPU, where building it
    would take a minute of the GPU's time (a GPU never runs it; the CPU suite checks it against the PyTorch path)."""
    return cuda and bool(markers & {"gpu", "triton"})


@pytest.fixture(autouse=True)
def _cpu_kernel_unbuilt_beside_a_gpu(request, monkeypatch):
    markers = {marker.name for marker in request.node.iter_markers()}
    if leaves_the_cpu_kernel_unbuilt(markers, torch.cuda.is_available()):
        from modeling_ndr import geometric_ndr

        monkeypatch.setattr(geometric_ndr, "uses_cpu_kernel", lambda tensor, kernel="auto": False)


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


# Two tiers, by folder: tests/unit (one behaviour at a time, in-process: `make test-fast`, a few minutes) and
# tests/e2e (what trains, launches processes or builds things end to end: train.py, make, accelerate, a wheel, the
# docs site, the Space). A test lands in a tier by where it is written; its tests are marked `e2e` from there, so
# `-m "not e2e"` still selects the unit tier. `make test` and CI run both.
E2E_FOLDER = Path(__file__).resolve().parent / "e2e"


def pytest_collection_modifyitems(config, items):
    """Tests under tests/e2e are marked `e2e`. `gpu` tests skip where CUDA is missing, unless NDR_TEST_DEVICE=cpu runs
    tests/unit/test_gpu.py's checks on the CPU (which keeps the test code itself exercised on machines without a
    GPU)."""
    for item in items:
        if E2E_FOLDER in Path(item.path).resolve().parents:
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
