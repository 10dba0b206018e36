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


def test_the_precision_benchmark_leaves_a_run_s_start_out_of_its_steady_train_py_throughput(monkeypatch):
    """A run that spends 3 s before its steps and 0.25 s a step of 64 samples: the Trainer's figure over 40 steps is
    dragged down by the start (64 * 40 / 13 s), the steady figure is the steps' own (256 samples/s)."""
    monkeypatch.syspath_prepend(str(REPO / "training"))
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import precision

    runs = []

    def fake_run(preset, precision_name, steps):
        runs.append(steps)
        return 64.0 * steps, 3.0 + 0.25 * steps

    monkeypatch.setattr(precision, "train_run", fake_run)
    result = precision.train_throughput("arithmetic_cpu", "bf16", 40)
    assert runs == [40, 10]
    assert result["reported"] == pytest.approx(64 * 40 / 13.0)
    assert result["steady"] == pytest.approx(256.0) and result["start_seconds"] == pytest.approx(3.0)


def test_the_precision_benchmark_s_json_keeps_the_step_rows_beside_train_py_s(monkeypatch, tmp_path, capsys):
    monkeypatch.syspath_prepend(str(REPO / "training"))
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import precision

    step_rows = [{"preset": p, "step_fp32_ms": 2.0, "step_bf16_ms": 1.0, "step_speedup": 2.0,
                  "eval_fp32_samples_s": 1.0, "eval_bf16_samples_s": 2.0, "eval_speedup": 2.0}
                 for p in precision.PRESETS]  # fmt: skip
    monkeypatch.setattr(precision, "model_rows", lambda repeats, native: step_rows)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(precision, "train_run", lambda preset, name, steps: (64.0 * steps, 1.0 + 0.5 * steps))
    result = precision.main(["--train_steps", "8", "--json", str(tmp_path / "precision.json")])
    saved = json.loads((tmp_path / "precision.json").read_text())
    assert saved["model"] == step_rows and result["model"] == step_rows, "the step rows are what the JSON keeps"
    assert [t["preset"] for t in saved["train"]] == list(precision.PRESETS)
    assert saved["train"][0]["fp32"]["steady"] == pytest.approx(128.0) and saved["train"][0]["steady_speedup"] == 1.0
    assert "what the last 6 steps took beyond a run of 2" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        precision.main(["--train_steps", "1"])
