"""`make gpu-release` end to end on the CPU, with a tiny preset in place of the GPU one and temporary folders in place
of outputs/ and hub_cards/models/: each call continues the release's GPU line for MINUTES (a time box of 1e-9
minutes stops after one step with a checkpoint), so two calls add up to the run; the release's card names the
machine, the training time, the command, the precision and the compute the line spent."""

import json
import os
import subprocess
from pathlib import Path

import torch
from huggingface_hub import ModelCard
from transformers import AutoModelForSequenceClassification

import modeling_ndr  # noqa: F401  (registers the NDR auto classes)


REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "hub_cards" / "models"


def snapshot(folder: Path) -> dict[str, float]:
    return {str(path): path.stat().st_mtime for path in folder.rglob("*")} if folder.is_dir() else {}


def make_gpu_release(tmp_path: Path) -> str:
    args = f"--preset tiny_gpu_release_test --outputs_dir {tmp_path / 'outputs'} --models_dir {tmp_path / 'models'}"
    result = subprocess.run(
        # -o: the virtual environment counts as set up (make would reinstall it if pyproject.toml is newer)
        ["make", "-o", ".venv/.installed", "gpu-release", "TASK=ctl-forward", "MINUTES=1e-9",
         f"GPU_RELEASE_ARGS={args}"],
        cwd=REPO, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return output


def test_make_gpu_release_continues_the_line_and_writes_the_release_with_its_card(tmp_path, native_bf16):
    released_before = snapshot(MODELS)
    first = make_gpu_release(tmp_path)
    assert "ndr-ctl-forward: line at step 1" in first, first[-3000:]
    release = tmp_path / "models" / "ndr-ctl-forward"
    assert json.loads((release / "last-checkpoint" / "trainer_state.json").read_text())["global_step"] == 1
    second = make_gpu_release(tmp_path)  # resumes step 1; step 2 is the preset's last
    assert "ndr-ctl-forward: line at step 2" in second and "the line reached its horizon" in second, second[-3000:]

    record = json.loads((release / "run_config.json").read_text())
    compute = record["continuation"]
    assert compute["samples"] == 16 * compute["steps"], "the tiny preset's total batch of 16 per step"
    card = (release / "README.md").read_text()
    assert record["machine"] in card, "the card names the machine"
    assert "--preset tiny_gpu_release_test" in card and "--max_wall_minutes" in card, "and the command"
    assert f"of {record['machine']}, {record['precision']}" in card, "and the precision"
    if not torch.cuda.is_available():
        assert record["precision"] == ("bf16 autocast" if native_bf16 else "fp32"), "what the CPU trained in"
    assert "make gpu-release TASK=ctl-forward" in card and f"| {compute['samples']:,} |" in card, "and the compute"
    ModelCard.load(release / "README.md")
    model = AutoModelForSequenceClassification.from_pretrained(release)
    assert model.config.model_type == "ndr"
    assert snapshot(MODELS) == released_before, "the released models in hub_cards/models/ are untouched"
