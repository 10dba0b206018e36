"""train.py end to end with model options whose outputs or wrapping differ from the plain NDR's: ACT halting (its
per-column outputs must not reach compute_metrics) and `--torch_compile` (the export holds the plain model)."""

import json
import os
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]


def test_train_py_trains_and_evaluates_an_act_model(tmp_path):
    """Trainer's evaluation gathers every output but the loss; the ACT outputs (per-column halting steps of varying
    sequence length) must not reach compute_metrics as predictions."""
    repo = REPO
    command = [sys.executable, str(repo / "training" / "train.py"), "--preset", "ctl_cpu", "--variant", "ndr_act",
               "--output_dir", str(tmp_path / "run"), "--n_train", "200", "--n_eval", "16", "--hidden_size", "16",
               "--intermediate_size", "16", "--num_hidden_layers", "3", "--max_steps", "2",
               "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "5", "--eval_steps", "2",
               "--save_steps", "2", "--report_to", "none", "--disable_tqdm", "true"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=repo,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    with open(tmp_path / "run" / "eval_results.json") as f:
        assert set(json.load(f)) == {"iid_test", "ood_valid", "ood_test"}
    with open(tmp_path / "run" / "export" / "config.json") as f:
        assert json.load(f)["halting"] == "act"


def test_train_py_with_torch_compile_trains_and_exports(tmp_path):
    command = [sys.executable, str(REPO / "training" / "train.py"), "--preset", "ctl_cpu", "--torch_compile", "true",
               "--output_dir", str(tmp_path / "run"), "--n_train", "200", "--n_eval", "16", "--hidden_size", "16",
               "--intermediate_size", "16", "--num_hidden_layers", "2", "--max_steps", "3",
               "--per_device_train_batch_size", "8", "--eval_steps", "3", "--save_steps", "3", "--report_to", "none",
               "--disable_tqdm", "true"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=REPO,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    with open(tmp_path / "run" / "eval_results.json") as f:
        assert set(json.load(f)) >= {"iid_test", "ood_valid", "ood_test"}
    with open(tmp_path / "run" / "export" / "config.json") as f:
        assert json.load(f)["model_type"] == "ndr", "the export holds the plain model, not the compiled wrapper"
    assert "torch.compile on a CPU: make bench measured the compiled step at 0.62-0.84x" in done.stdout, "the log says"
