"""`make gpu-release` end to end on the CPU, with a tiny preset in place of the GPU one and temporary folders in place
of outputs/ and hub_cards/models/: the run trains in chunks (the first stops at its wall-clock limit with exit 75
and a checkpoint, the next resumes and finishes), is evaluated, and its released folder has a card that names the
machine, the training time and the command."""

import json
import os
import re
import subprocess
from pathlib import Path

from huggingface_hub import ModelCard
from transformers import AutoModelForSequenceClassification

import modeling_ndr  # noqa: F401  (registers the NDR auto classes)


REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "hub_cards" / "models"


def snapshot(folder: Path) -> dict[str, float]:
    return {str(path): path.stat().st_mtime for path in folder.rglob("*")} if folder.is_dir() else {}


def test_make_gpu_release_trains_in_chunks_and_writes_the_release_with_its_card(tmp_path):
    released_before = snapshot(MODELS)
    args = f"--preset tiny_gpu_release_test --outputs_dir {tmp_path / 'outputs'} --models_dir {tmp_path / 'models'}"
    result = subprocess.run(
        # -o: the virtual environment counts as set up (make would reinstall it if pyproject.toml is newer)
        ["make", "-o", ".venv/.installed", "gpu-release", "TASK=ctl-forward", "CHUNK_MINUTES=1e-9",
         f"GPU_RELEASE_ARGS={args}"],
        cwd=REPO, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    # a limit of 1e-9 minutes stops each chunk after its first step; the second chunk reaches max_steps (2) and ends
    assert "chunk 1 stopped at step 1 (max_wall_minutes" in output, output[-4000:]
    assert "chunk 2 finished the run" in output
    run = tmp_path / "outputs" / "ctl_forward_gpu"
    assert (run / "checkpoint-1" / "trainer_state.json").is_file(), "the first chunk's checkpoint"
    assert not (run / "stopped.json").exists()

    release = tmp_path / "models" / "ndr-ctl-forward"
    record = json.loads((release / "run_config.json").read_text())
    assert record["training"]["chunks"] == 2 and record["training"]["steps"] == 2
    card = (release / "README.md").read_text()
    assert record["machine"] in card, "the card names the machine"
    assert f"{record['training']['seconds'] / 60:.1f} minutes" in card, "and the training time of both chunks"
    assert "--preset tiny_gpu_release_test" in card and "--max_wall_minutes" in card, "and the command"
    assert re.search(r"minutes in\s+2 resumed chunks", card), "and that it trained in two chunks"
    assert f"on {record['machine']}, {record['precision']}" in card, "and the precision"
    ModelCard.load(release / "README.md")
    model = AutoModelForSequenceClassification.from_pretrained(release)
    assert model.config.model_type == "ndr"
    assert snapshot(MODELS) == released_before, "the released models in hub_cards/models/ are untouched"
