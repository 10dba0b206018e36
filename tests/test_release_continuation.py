"""Releases that keep training (`modeling_ndr.training.continuation`, `make release-continue`, `make gpu-release`):
a tiny arithmetic line (configuration/tiny_release_line_test.yaml) in one process on the CPU, with temporary folders
in place of outputs/ and hub_cards/models/. Two continuations add up to the weights of one uninterrupted run; a worse
`ood_valid` keeps the release; a line of another recipe, a corrupt `last-checkpoint/` and a second continuation at
once are refused in one line with nothing changed; a continuation interrupted after training is adopted by the
next one."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from scripts import load_script
from transformers import AutoModelForSequenceClassification

import modeling_ndr  # noqa: F401  (registers the NDR auto classes)
from modeling_ndr.training import UsageError, read_preset
from modeling_ndr.training import continuation as line
from modeling_ndr.training.locking import OutputDirLock


REPO = Path(__file__).resolve().parents[1]
PRESET = "tiny_release_line_test"
NAME = "ndr-arithmetic"
COMMAND = [sys.executable, "training/train.py"]
repos = load_script("hub_cards/make_model_repos.py")


def continue_tiny(tmp: Path, chunk_steps: int | None, **kwargs) -> dict:
    release = repos.Release(PRESET, "line")
    return repos.continue_line(NAME, release, None, COMMAND, processes=1, preset=PRESET, outputs_dir=str(tmp / "out"),
                               models_dir=str(tmp / "models"), warm_start=False, chunk_steps=chunk_steps,
                               env=dict(os.environ, OMP_NUM_THREADS="1"), **kwargs)  # fmt: skip


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` with the hash of its content."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip


@pytest.fixture(scope="module")
def first_chunk(tmp_path_factory) -> Path:
    """A line after one continuation of 4 steps (of its 8): its release and last-checkpoint/."""
    tmp = tmp_path_factory.mktemp("line")
    summary = continue_tiny(tmp, chunk_steps=4)
    assert summary["step"] == 4 and summary["released"], summary
    return tmp


def copy_line(first_chunk: Path, tmp_path: Path) -> Path:
    shutil.copytree(first_chunk / "models", tmp_path / "models")
    return tmp_path


def test_two_continuations_add_up_to_one_uninterrupted_run(first_chunk, tmp_path):
    tmp = copy_line(first_chunk, tmp_path)
    summary = continue_tiny(tmp, chunk_steps=None)  # to the line's horizon, max_steps 8
    assert summary["step"] == 8 and summary["finished"], summary
    whole = subprocess.run(
        COMMAND + ["--preset", PRESET, "--output_dir", str(tmp / "whole"), "--disable_tqdm", "true"],
        cwd=REPO, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )  # fmt: skip
    assert whole.returncode == 0, whole.stderr[-3000:]
    chunked = load_file(tmp / "models" / NAME / "last-checkpoint" / "model.safetensors")
    uninterrupted = load_file(tmp / "whole" / "checkpoint-8" / "model.safetensors")
    assert chunked.keys() == uninterrupted.keys()
    for key in chunked:
        assert torch.equal(chunked[key], uninterrupted[key]), f"{key}: 4 + 4 steps differ from 8 steps in one run"

    record = json.loads((tmp / "models" / NAME / "last-checkpoint" / line.CONTINUATION_FILE).read_text())
    assert [(c["start_step"], c["end_step"]) for c in record["chunks"]] == [(0, 4), (4, 8)], "one record per chunk"
    assert record["finished"], "the line reached max_steps"
    with pytest.raises(UsageError, match="finished its horizon"):
        continue_tiny(tmp, chunk_steps=2)


def test_the_release_carries_its_compute_record_and_curve(first_chunk):
    release = first_chunk / "models" / NAME
    run_config = json.loads((release / "run_config.json").read_text())
    compute = run_config["continuation"]
    batch = read_preset(PRESET)["per_device_train_batch_size"]
    assert compute["samples"] == compute["steps"] * batch and compute["chunks"] == 1, compute
    assert sum(compute["seconds"].values()) > 0 and run_config["machine"] in compute["seconds"], "time per device"
    card = (release / "README.md").read_text()
    assert f"| {compute['samples']:,} | {compute['steps']:,} | 1 |" in card, "the card's compute record"
    assert (
        "![accuracy against training samples seen](training_curve.png)" in card
        and (release / line.CURVE_FILE).is_file()
    )
    ModelCard.load(release / "README.md")
    assert AutoModelForSequenceClassification.from_pretrained(release).config.model_type == "ndr"
    assert line.checkpoint_problem(str(release / "last-checkpoint")) is None, "last-checkpoint/ is a whole checkpoint"


def test_a_worse_ood_valid_keeps_the_release(first_chunk, tmp_path):
    tmp = copy_line(first_chunk, tmp_path)
    release = tmp / "models" / NAME
    results = json.loads((release / "eval_results.json").read_text())
    results["ood_valid"]["accuracy"] = 1.01  # no checkpoint can beat it
    (release / "eval_results.json").write_text(json.dumps(results))
    released = {k: v for k, v in snapshot(release).items() if not k.startswith("last-checkpoint")}
    summary = continue_tiny(tmp, chunk_steps=2)
    assert summary["step"] == 6 and not summary["released"], summary
    assert {k: v for k, v in snapshot(release).items() if not k.startswith("last-checkpoint")} == released
    assert line.checkpoint_step(str(release / "last-checkpoint")) == 6, "last-checkpoint/ is always the newest"


def test_a_line_of_another_recipe_is_refused_in_one_line_and_nothing_changes(first_chunk, tmp_path):
    tmp = copy_line(first_chunk, tmp_path)
    before = snapshot(tmp / "models")
    stored = json.loads((tmp / "models" / NAME / "last-checkpoint" / line.CONTINUATION_FILE).read_text())["recipe"]
    asked = {**stored, "values": {**stored["values"], "learning_rate": 3e-4}}
    with pytest.raises(UsageError, match=r"learning_rate=0.001 in the line's recipe, 0.0003") as error:
        line.continue_release(str(tmp / "models" / NAME), str(tmp / "out"), ["false"], 1, asked, publish=None)
    assert "\n" not in str(error.value) and "nothing was changed" in str(error.value)
    assert snapshot(tmp / "models") == before


def test_a_corrupt_last_checkpoint_is_refused_and_left_as_it_is(first_chunk, tmp_path):
    tmp = copy_line(first_chunk, tmp_path)
    optimizer = tmp / "models" / NAME / "last-checkpoint" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:100])  # cut short, as by a full disk
    before = snapshot(tmp / "models")
    with pytest.raises(UsageError, match="optimizer.pt cannot be read.*left as they are"):
        continue_tiny(tmp, chunk_steps=2)
    assert snapshot(tmp / "models") == before


def test_a_second_continuation_of_the_same_release_is_refused(first_chunk, tmp_path):
    tmp = copy_line(first_chunk, tmp_path)
    held = OutputDirLock(str(tmp / "models" / f".{NAME}.lock")).acquire()  # a continuation in another process
    try:
        with pytest.raises(UsageError, match=f"{NAME} is already being continued"):
            continue_tiny(tmp, chunk_steps=2)
    finally:
        held.release()


def test_a_continuation_interrupted_after_training_is_adopted_by_the_next(first_chunk, tmp_path, monkeypatch):
    tmp = copy_line(first_chunk, tmp_path)
    before = snapshot(tmp / "models")

    def killed(*args, **kwargs):  # the driver dies between training and keeping its result (kill -9)
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(line, "write_last_checkpoint", killed)
        patch.setattr(line, "write_release", killed)
        with pytest.raises(KeyboardInterrupt):
            continue_tiny(tmp, chunk_steps=2)
    assert snapshot(tmp / "models") == before, "the release and its checkpoint are as they were"
    summary = continue_tiny(tmp, chunk_steps=2)  # adopts step 6, then trains 2 more
    assert summary["step"] == 8, summary
    chunks = json.loads((tmp / "models" / NAME / "last-checkpoint" / line.CONTINUATION_FILE).read_text())["chunks"]
    assert [(c["start_step"], c["end_step"]) for c in chunks] == [(0, 4), (4, 6), (6, 8)], "no step counted twice"
    assert chunks[0]["released_step"] == 4 or chunks[0]["released_step"] == 2, "each record says what it released"


def test_files_over_the_limit_are_kept_in_parts_and_joined_again(tmp_path):
    data = os.urandom(2500)
    (tmp_path / "optimizer.pt").write_bytes(data)
    (tmp_path / "small.json").write_text("{}")
    assert line.split_large_files(str(tmp_path), max_bytes=1000) == ["optimizer.pt"]
    assert sorted(os.listdir(tmp_path)) == ["optimizer.pt.part-000", "optimizer.pt.part-001", "optimizer.pt.part-002",
                                           "small.json"]  # fmt: skip
    assert line.join_split_files(str(tmp_path)) == ["optimizer.pt"]
    assert (tmp_path / "optimizer.pt").read_bytes() == data and sorted(os.listdir(tmp_path)) == [
        "optimizer.pt",
        "small.json",
    ]


def test_a_bad_task_or_time_box_is_one_line_with_exit_2():
    script = str(REPO / "hub_cards" / "make_model_repos.py")
    for args, message in ((["--continue", "arithmetic"], "--minutes M"), (["--gpu", "listops", "--minutes", "0"],
                                                                          "--minutes M")):  # fmt: skip
        result = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, cwd=REPO)
        assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1, (
            result.stderr
        )
