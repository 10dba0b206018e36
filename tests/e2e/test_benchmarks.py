"""`benchmarks/attention.py` in both precisions, tiny: what `make bench` runs for the attention op on a CPU."""

import json
import subprocess
import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_attention_benchmark_times_both_ops_in_each_precision_and_names_the_cpu_s_flags(dtype, tmp_path):
    out = tmp_path / "attention.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "attention.py"), "--seq", "13", "--batch", "2", "--heads", "1",
         "--head-size", "4", "--repeats", "1", "--no-memory", "--dtype", dtype, "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["setting"].startswith(dtype) and results["rows"][0]["seq"] == 13
    assert results["rows"][0]["geometric / SDPA"].endswith("x"), results["rows"]
    assert isinstance(results["machine"]["cpu_flags"], list), "the CPU's flags the kernels depend on"
