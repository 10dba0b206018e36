"""Releases that keep training (`hub_cards/release_line.py`, `make release-continue`, `make gpu-release`):
a tiny arithmetic line (configuration/tiny_release_line_test.yaml) in one process on the CPU, with temporary folders
in place of outputs/ and hub_cards/models/. Two continuations add up to the weights of one uninterrupted run; `make
gpu-release` continues a line a CPU started (and a worse `ood_valid` keeps the release); a line of another recipe, a
corrupt `last-checkpoint/`, a busy work folder and a second continuation at once are refused in one line with nothing
changed; `--switch_recipe` starts a new line without adopting the old one's chunk, carrying its curve up to the
released weights; a continuation interrupted after training is adopted by the next one; `make release` leaves a
release with a line to its line."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from scripts import load_script
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import file_parts
import modeling_ndr  # noqa: F401  (registers the NDR auto classes)
import release_line as line
from modeling_ndr.training import UsageError, read_preset
from ndr_training.locking import OutputDirLock, lock_output_dir


REPO = Path(__file__).resolve().parents[2]
PRESET = "tiny_release_line_test"
NAME = "ndr-arithmetic"
COMMAND = [sys.executable, "training/train.py"]
repos = load_script("hub_cards/make_model_repos.py")


def continue_tiny(tmp: Path, chunk_steps: int | None, preset: str = PRESET, name: str = NAME,
                  release_preset: str = PRESET, warm_start: bool = False, check_samples: int = 0,
                  **kwargs) -> dict:  # fmt: skip
    """A chunk of the tiny line; without the release check unless `check_samples` asks for it (its own tests)."""
    release = repos.Release(release_preset, "line")
    return repos.continue_line(name, release, None, COMMAND, processes=1, preset=preset, outputs_dir=str(tmp / "out"),
                               models_dir=str(tmp / "models"), warm_start=warm_start, chunk_steps=chunk_steps,
                               env=dict(os.environ, OMP_NUM_THREADS="1"), check_samples=check_samples,
                               **kwargs)  # fmt: skip


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


def uninterrupted_weights(preset: str, output_dir: Path) -> dict:
    """The weights after step 8 of one uninterrupted run of `preset` (train.py, as a line's chunks run it)."""
    whole = subprocess.run(
        COMMAND + ["--preset", str(preset), "--output_dir", str(output_dir), "--disable_tqdm", "true"],
        cwd=REPO, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )  # fmt: skip
    assert whole.returncode == 0, whole.stderr[-3000:]
    return load_file(output_dir / "checkpoint-8" / "model.safetensors")


def copy_line(first_chunk: Path, tmp_path: Path) -> Path:
    shutil.copytree(first_chunk / "models", tmp_path / "models")
    return tmp_path


def test_two_continuations_add_up_to_one_uninterrupted_run(first_chunk, tmp_path):
    tmp = copy_line(first_chunk, tmp_path)
    summary = continue_tiny(tmp, chunk_steps=None)  # to the line's horizon, max_steps 8
    assert summary["step"] == 8 and summary["finished"], summary
    chunked = load_file(tmp / "models" / NAME / "last-checkpoint" / "model.safetensors")
    uninterrupted = uninterrupted_weights(PRESET, tmp / "whole")
    assert chunked.keys() == uninterrupted.keys()
    for key in chunked:
        assert torch.equal(chunked[key], uninterrupted[key]), f"{key}: 4 + 4 steps differ from 8 steps in one run"

    record = json.loads((tmp / "models" / NAME / "last-checkpoint" / line.CONTINUATION_FILE).read_text())
    assert [(c["start_step"], c["end_step"]) for c in record["chunks"]] == [(0, 4), (4, 8)], "one record per chunk"
    assert record["finished"], "the line reached max_steps"
    with pytest.raises(UsageError, match="reached its horizon"):
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


def test_gpu_release_continues_the_line_a_cpu_started_and_a_worse_ood_valid_keeps_the_release(
    first_chunk, tmp_path, native_bf16
):
    tmp = copy_line(first_chunk, tmp_path)
    release = tmp / "models" / NAME
    results = json.loads((release / "eval_results.json").read_text())
    results["ood_valid"]["accuracy"] = 1.01  # no checkpoint can beat it
    (release / "eval_results.json").write_text(json.dumps(results))
    released = {k: v for k, v in snapshot(release).items() if not k.startswith("last-checkpoint")}
    before = json.loads((release / "last-checkpoint" / line.CONTINUATION_FILE).read_text())
    summary = repos.gpu_release("arithmetic", None, processes=1, outputs_dir=str(tmp / "out"),
                                models_dir=str(tmp / "models"), chunk_steps=2)  # fmt: skip
    assert summary["step"] == 6 and not summary["released"], summary
    assert {k: v for k, v in snapshot(release).items() if not k.startswith("last-checkpoint")} == released
    after = json.loads((release / "last-checkpoint" / line.CONTINUATION_FILE).read_text())
    assert after["line_id"] == before["line_id"] and after["recipe"] == before["recipe"], "the same line, continued"
    assert [(c["start_step"], c["end_step"]) for c in after["chunks"]] == [(0, 4), (4, 6)]
    assert after["chunks"][1]["released_step"] is None, "the record says the release stayed"


def test_make_release_leaves_a_release_with_a_line_to_its_line(first_chunk, tmp_path, monkeypatch, capsys):
    tmp = copy_line(first_chunk, tmp_path)
    monkeypatch.setattr(repos, "MODELS_DIR", str(tmp / "models"))
    before = snapshot(tmp / "models")
    assert repos.build(NAME, "ndr-org", train=True) == str(tmp / "models" / NAME)  # would train arithmetic_cpu
    assert "keeps training" in capsys.readouterr().out and snapshot(tmp / "models") == before


def test_make_release_finishes_a_cut_replacement_of_the_line_before_it_decides(first_chunk, tmp_path, monkeypatch):
    """Killed between the two renames that replace last-checkpoint/, the release holds its line only as hidden
    siblings (.last-checkpoint.old-PID, .tmp-PID): make release must not take it for a release without a line, and
    rebuild it without them."""
    tmp = copy_line(first_chunk, tmp_path)
    release = tmp / "models" / NAME
    ended = subprocess.Popen(["true"])
    ended.wait()  # the pid of a process that is no longer running
    shutil.copytree(release / "last-checkpoint", release / f".last-checkpoint.tmp-{ended.pid}")
    (release / "last-checkpoint").rename(release / f".last-checkpoint.old-{ended.pid}")
    monkeypatch.setattr(repos, "MODELS_DIR", str(tmp / "models"))

    def rebuilt(*args, **kwargs):
        raise AssertionError("make release rebuilt the release as one without a line")

    monkeypatch.setattr(repos, "_copy_release", rebuilt)
    assert repos.build(NAME, "ndr-org", train=False) == str(release), "a release with a line is left to its line"
    assert line.checkpoint_problem(str(release / "last-checkpoint")) is None, "the cut replacement was finished"


def test_make_release_writes_into_the_models_folder_it_looked_at(first_chunk, tmp_path, monkeypatch):
    """build() reads MODELS_DIR when it runs; the folder it replaces must be that one, not the one of import time (a
    test that patches MODELS_DIR would otherwise replace the real hub_cards/models/ndr-<task>/)."""
    tmp = copy_line(first_chunk, tmp_path)
    shutil.rmtree(tmp / "models" / NAME / "last-checkpoint")  # a release without a line: --refresh re-renders it
    monkeypatch.setattr(repos, "MODELS_DIR", str(tmp / "models"))
    locked = []

    def lock(folder):  # the lock is taken before anything is written: stop there
        locked.append(folder)
        raise UsageError("stopped before writing")

    monkeypatch.setattr(repos, "release_lock", lock)
    with pytest.raises(UsageError, match="stopped before writing"):
        repos.build(NAME, "ndr-org", train=False, refresh=True)
    assert locked == [os.path.join(str(tmp / "models"), NAME)], f"it would have replaced {locked}"


def test_a_line_of_another_recipe_is_refused_in_one_line_and_nothing_changes(first_chunk, tmp_path):
    tmp = copy_line(first_chunk, tmp_path)
    before = snapshot(tmp / "models")
    stored = json.loads((tmp / "models" / NAME / "last-checkpoint" / line.CONTINUATION_FILE).read_text())["recipe"]
    asked = {**stored, "values": {**stored["values"], "learning_rate": 3e-4}}
    with pytest.raises(UsageError, match=r"learning_rate=0.001 in the line's recipe, 0.0003") as error:
        line.continue_release(str(tmp / "models" / NAME), str(tmp / "out"), ["false"], 1, asked, publish=None)
    assert "\n" not in str(error.value) and "nothing was changed" in str(error.value)
    assert snapshot(tmp / "models") == before


@pytest.mark.parametrize(
    "damage, message",
    [
        ("optimizer.pt", "optimizer.pt cannot be read.*left as they are"),  # cut short, as by a full disk
        ("trainer_state.json", "trainer_state.json cannot be read.*left as they are"),
        ("rng_state.pth", "rng_state.pth cannot be read.*left as they are"),  # Trainer would fail on it, after setup
        ("continuation.json", "continuation.json cannot be read.*nothing was changed"),
    ],
)
def test_a_corrupt_last_checkpoint_is_refused_and_left_as_it_is(first_chunk, tmp_path, damage, message):
    tmp = copy_line(first_chunk, tmp_path)
    damaged = tmp / "models" / NAME / "last-checkpoint" / damage
    damaged.write_bytes(damaged.read_bytes()[:100])
    (tmp / "out" / "line" / "checkpoint-9").mkdir(parents=True)  # the work folder holds something
    before, work = snapshot(tmp / "models"), sorted(os.listdir(tmp / "out" / "line"))
    with pytest.raises(UsageError, match=message) as error:
        continue_tiny(tmp, chunk_steps=2)
    assert "\n" not in str(error.value)
    assert snapshot(tmp / "models") == before and sorted(os.listdir(tmp / "out" / "line")) == work, "nothing changed"
    assert sorted(os.listdir(tmp / "out")) == ["line"], "no copy of the checkpoint is left beside the work folder"


@pytest.mark.parametrize("lost", ["rng_state.pth", "optimizer.pt.part-001"])
def test_a_last_checkpoint_that_lost_a_file_is_refused_and_left_as_it_is(first_chunk, tmp_path, lost):
    """Without its RNG state Trainer resumes, but not exactly; without one of its parts a file is joined into an
    archive whose directory still opens."""
    tmp = copy_line(first_chunk, tmp_path)
    last = tmp / "models" / NAME / "last-checkpoint"
    if file_parts.PART in lost:
        file_parts.split_large_files(str(last), max_bytes=10_000)  # as a larger model's are kept
    (last / lost).unlink()
    before = snapshot(tmp / "models")
    with pytest.raises(UsageError, match=f"{re.escape(lost)} is missing.*left as they are") as error:
        continue_tiny(tmp, chunk_steps=2)
    assert "\n" not in str(error.value)
    assert snapshot(tmp / "models") == before, "nothing changed"


def test_a_work_folder_that_a_training_still_holds_is_refused(first_chunk, tmp_path):
    tmp = copy_line(first_chunk, tmp_path)
    before = snapshot(tmp / "models")
    with lock_output_dir(str(tmp / "out" / "line")):  # train.py of a continuation that was killed, still running
        with pytest.raises(UsageError, match="work folder.*is in use.*nothing was changed"):
            continue_tiny(tmp, chunk_steps=2)
    assert snapshot(tmp / "models") == before


def test_switch_recipe_starts_a_new_line_and_does_not_adopt_the_old_one_s_chunk(first_chunk, tmp_path):
    tmp = copy_line(first_chunk, tmp_path)
    old = json.loads((tmp / "models" / NAME / "last-checkpoint" / line.CONTINUATION_FILE).read_text())
    # a chunk of the old line, left in the work folder by a continuation that was killed after training
    pending = {**old, "pending": {"start_step": 4, "start_seconds": 0.0, "commit": None}}
    shutil.copytree(tmp / "models" / NAME / "last-checkpoint", tmp / "out" / "line" / "checkpoint-4")
    state = json.loads((tmp / "out" / "line" / "checkpoint-4" / "trainer_state.json").read_text())
    state["global_step"] = 6
    (tmp / "out" / "line" / "checkpoint-4").rename(tmp / "out" / "line" / "checkpoint-6")
    (tmp / "out" / "line" / "checkpoint-6" / "trainer_state.json").write_text(json.dumps(state))
    (tmp / "out" / "line" / line.CONTINUATION_FILE).write_text(json.dumps(pending))
    (tmp / "out" / "line" / "run_config.json").write_text(json.dumps({"preset": PRESET}))
    other = tmp / "slower.yaml"
    other.write_text(f"base: {PRESET}\nlearning_rate: 3.0e-4\n")
    with pytest.raises(UsageError, match="another recipe"):
        continue_tiny(tmp, chunk_steps=2, preset=str(other))
    summary = continue_tiny(tmp, chunk_steps=2, preset=str(other), switch_recipe=True)
    assert summary["step"] == 2, "a new line from step 0, not the old line's step 6"
    new = json.loads((tmp / "models" / NAME / "last-checkpoint" / line.CONTINUATION_FILE).read_text())
    assert new["line_id"] != old["line_id"] and new["recipe"]["values"]["learning_rate"] == 3e-4
    assert [(c["start_step"], c["end_step"]) for c in new["chunks"]] == [(0, 2)]


def test_a_new_line_from_the_release_carries_the_curve_that_led_to_it(first_chunk, tmp_path):
    tmp = copy_line(first_chunk, tmp_path)
    release = tmp / "models" / NAME
    old = json.loads((release / "last-checkpoint" / line.CONTINUATION_FILE).read_text())
    old_state = json.loads((release / "last-checkpoint" / "trainer_state.json").read_text())
    made = json.loads((release / "run_config.json").read_text())["continuation"]
    before = line.curve_points(old, old_state)
    other = tmp / "slower.yaml"
    other.write_text(f"base: {PRESET}\nlearning_rate: 3.0e-4\n")
    continue_tiny(tmp, chunk_steps=2, preset=str(other), switch_recipe=True, warm_start=True)

    new = json.loads((release / "last-checkpoint" / line.CONTINUATION_FILE).read_text())
    carried = new["warm_start"]["curve"]
    assert carried and carried == [p for p in before if p["step"] <= made["line_step"]], "up to the released step"
    assert all(p["line"] == old["line_id"] for p in carried)
    state = json.loads((release / "last-checkpoint" / "trainer_state.json").read_text())
    points = line.curve_points(new, state)
    assert points[: len(carried)] == [{**p, "step": None} for p in carried], "the old line's points come first"
    warm = new["warm_start"]["samples"]
    assert warm == made["samples"] and points[len(carried)] == {"samples": warm, "step": 0, "line": new["line_id"],
                                                                **new["warm_start"]["results"]}  # fmt: skip
    assert [p["samples"] for p in points[len(carried) + 1 :]] == [warm + 2 * 8], "the new line's step 2, 8 a batch"

    from line_records import plot_training_curve

    figure = plot_training_curve(points, released_step=2)
    switch = [ln for ln in figure.axes[0].lines if ln.get_label() == "a new line from the release"]
    assert len(switch) == 1 and switch[0].get_xdata()[0] == warm / 1e6, "the switch is marked at the warm start"


def test_the_curve_carried_ends_where_the_released_weights_were_trained():
    import line_records

    state = {"log_history": [{"step": step, "eval_ood_valid_accuracy": step / 10} for step in (2, 4, 6)]}
    old = {"line_id": "a", "warm_start": None, "chunks": [{"start_step": 0, "end_step": 6, "total_batch": 8}]}
    made = {"continuation": {"line_id": "a", "line_step": 4}}
    assert [p["step"] for p in line_records.earlier_curve(old, state, made)] == [2, 4]
    assert [p["step"] for p in line_records.earlier_curve(old, state, {**made, "cooldown": {"start_step": 2}})] == [2]
    other = {"continuation": {"line_id": "b", "line_step": 4}}
    assert line_records.earlier_curve(old, state, other) == [], "the release's last-checkpoint/ is another line's"
    assert line_records.earlier_curve(None, None, made) == [], "no line left in the release"


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


def test_a_chunk_killed_after_its_release_is_released_and_recorded_again_when_adopted(
    first_chunk, tmp_path, monkeypatch
):
    """Killed between the release and last-checkpoint/: the adopted chunk releases the same checkpoint again (the
    latest on ties) and its record says so, with the release check it passed (not one against itself)."""
    tmp = copy_line(first_chunk, tmp_path)
    release = tmp / "models" / NAME
    results = json.loads((release / "eval_results.json").read_text())
    results["ood_valid"]["accuracy"] = 0.0  # any checkpoint of the chunk beats it
    (release / "eval_results.json").write_text(json.dumps(results))
    state_file = release / "last-checkpoint" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["best_metric"] = -1.0  # and the line's best so far: the chunk's evaluation becomes Trainer's best
    state_file.write_text(json.dumps(state))

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    checked = []

    def checker(samples):
        def check(candidate, release_dir, values, split):
            checked.append(Path(candidate).name)
            return {"split": split, "samples": samples, "seed": 1000, "candidate": 0.7, "release": 0.6,
                    "only_candidate": 10, "only_release": 0, "passed": True}  # fmt: skip

        return check

    monkeypatch.setattr(repos, "release_checker", checker)
    with monkeypatch.context() as patch:
        patch.setattr(line, "write_last_checkpoint", killed)
        with pytest.raises(KeyboardInterrupt):
            continue_tiny(tmp, chunk_steps=2, check_samples=50)
    record = json.loads((release / "run_config.json").read_text())["continuation"]
    released_step = record["line_step"]
    assert released_step == 6, "the chunk released its checkpoint before it was killed"
    assert checked == ["checkpoint-6"] and record["release_check"]["candidate"] == 0.7, "after its check"
    continue_tiny(tmp, chunk_steps=2, check_samples=50)
    assert checked.count("checkpoint-6") == 1, "the adopted release is not checked against itself"
    chunks = json.loads((release / "last-checkpoint" / line.CONTINUATION_FILE).read_text())["chunks"]
    assert [(c["start_step"], c["end_step"]) for c in chunks][:2] == [(0, 4), (4, 6)]
    assert chunks[1]["released_step"] == released_step, "the adopted chunk's record names what it released"
    assert chunks[1]["release_check"] == {"step": 6, **record["release_check"]}, "and the check it passed"


def trained_to_the_horizon_and_killed(first_chunk, tmp_path, monkeypatch) -> Path:
    """A copy of the line whose continuation trained to the horizon (max_steps 8) and was killed before it released
    or kept anything: the adoption that follows launches no other chunk."""
    tmp = copy_line(first_chunk, tmp_path)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(line, "write_last_checkpoint", killed)
        patch.setattr(line, "write_release", killed)
        with pytest.raises(KeyboardInterrupt):
            continue_tiny(tmp, chunk_steps=None)
    return tmp


def test_an_adopted_chunk_keeps_the_branch_records_made_while_it_waited(first_chunk, tmp_path, monkeypatch):
    """make release-cooldown, run between a killed continuation and the next, records its branch in
    last-checkpoint/'s continuation.json; the chunk adopted next started before that record."""
    tmp = trained_to_the_horizon_and_killed(first_chunk, tmp_path, monkeypatch)
    path = tmp / "models" / NAME / "last-checkpoint" / line.CONTINUATION_FILE
    branch = {"start_step": 4, "end_step": 6, "decay_steps": 2, "released_step": None}
    path.write_text(json.dumps({**json.loads(path.read_text()), "branches": [branch]}))  # as a cooldown records it
    continue_tiny(tmp, chunk_steps=2)
    record = json.loads(path.read_text())
    assert [(c["start_step"], c["end_step"]) for c in record["chunks"]] == [(0, 4), (4, 8)], "the chunk was adopted"
    assert record.get("branches") == [branch], "the branch's record survives the adoption"


def test_an_adopted_chunk_that_reached_the_horizon_ends_the_line_without_another_step(
    first_chunk, tmp_path, monkeypatch
):
    tmp = trained_to_the_horizon_and_killed(first_chunk, tmp_path, monkeypatch)
    summary = continue_tiny(tmp, chunk_steps=2)
    assert summary["step"] == 8 and summary["finished"], f"the adopted chunk ends the line at max_steps: {summary}"
    record = json.loads((tmp / "models" / NAME / "last-checkpoint" / line.CONTINUATION_FILE).read_text())
    assert [(c["start_step"], c["end_step"]) for c in record["chunks"]] == [(0, 4), (4, 8)], "no step past max_steps"


def test_files_over_the_limit_are_kept_in_parts_and_joined_again(tmp_path):
    data = os.urandom(2500)
    (tmp_path / "optimizer.pt").write_bytes(data)
    (tmp_path / "small.json").write_text("{}")
    assert file_parts.split_large_files(str(tmp_path), max_bytes=1000) == ["optimizer.pt"]
    assert sorted(os.listdir(tmp_path)) == ["optimizer.pt.part-000", "optimizer.pt.part-001", "optimizer.pt.part-002",
                                           "small.json"]  # fmt: skip
    assert file_parts.join_split_files(str(tmp_path)) == ["optimizer.pt"]
    assert (tmp_path / "optimizer.pt").read_bytes() == data and sorted(os.listdir(tmp_path)) == [
        "optimizer.pt",
        "small.json",
    ]


def test_a_bad_time_box_is_one_line_with_exit_2():
    script = str(REPO / "hub_cards" / "make_model_repos.py")
    result = subprocess.run([sys.executable, script, "--continue", "arithmetic"], capture_output=True, text=True,
                            cwd=REPO)  # fmt: skip
    assert result.returncode == 2 and "--minutes M" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    with pytest.raises(UsageError, match="--minutes M"):
        repos.main(["--gpu", "listops", "--minutes", "0"])


def test_a_continuation_signalled_to_stop_passes_the_signal_to_its_chunk_and_waits_for_it(tmp_path):
    ready = tmp_path / "ready"
    chunk = (
        "import signal, sys, time\n"
        "stop = []\n"
        "signal.signal(signal.SIGTERM, lambda *_: stop.append(1))\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "deadline = time.monotonic() + 60\n"  # never an orphan that outlives a failed test
        "while not stop and time.monotonic() < deadline: time.sleep(0.05)\n"
        "sys.exit(75 if stop else 1)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(REPO / 'training')!r}); "
         "from processes import run_process; "
         f"print('chunk exit', run_process([sys.executable, '-c', {chunk!r}], forward_signals=True).returncode)"],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    for _ in range(600):
        if ready.exists() or parent.poll() is not None:
            break
        time.sleep(0.05)
    assert ready.exists(), "the chunk started"
    parent.send_signal(signal.SIGTERM)  # the continuation only, as a session's time limit may send it
    out, _ = parent.communicate(timeout=60)
    assert parent.returncode == 0 and "chunk exit 75" in out, (
        f"the continuation waits for the chunk's checkpoint and goes on (exit {parent.returncode}, {out!r})"
    )


def test_two_continuations_of_a_listops_line_add_up_to_one_run_and_its_recipe_is_kept(tmp_path):
    """The ListOps line's recipe (flat [SM lists at a quarter of the draws, accuracy per root operator), tiny: 4 + 4
    steps in two continuations give the weights of 8 steps in one run, the curves per operator are in the line's
    state, and a continuation whose preset changes the recipe (another share of [SM lists) is one line naming the
    field, nothing changed."""
    preset = tmp_path / "listops_line.yaml"  # the line's preset, edited between two continuations below
    preset.write_text("base: tiny_listops_line_test\n")
    preset = str(preset)

    def continue_listops(chunk_steps):
        return continue_tiny(tmp_path, chunk_steps, preset=preset, name="ndr-listops", release_preset=preset)

    assert continue_listops(4)["step"] == 4
    Path(preset).write_text("base: tiny_listops_line_test\nsample_shares: ['[SM:1=0.5']\n")  # the recipe changed
    before = snapshot(tmp_path / "models")
    with pytest.raises(UsageError, match=r"sample_shares=.*in the line's recipe, \['\[SM:1=0.5'\] in preset"):
        continue_listops(2)
    assert snapshot(tmp_path / "models") == before, "a refused continuation changes nothing"
    Path(preset).write_text("base: tiny_listops_line_test\n")
    summary = continue_listops(None)
    assert summary["step"] == 8 and summary["finished"], summary
    last = tmp_path / "models" / "ndr-listops" / "last-checkpoint"
    chunked, uninterrupted = load_file(last / "model.safetensors"), uninterrupted_weights(preset, tmp_path / "whole")
    for key in chunked:
        assert torch.equal(chunked[key], uninterrupted[key]), f"{key}: 4 + 4 steps differ from 8 steps in one run"
    state = json.loads((last / "trainer_state.json").read_text())
    logged = {key for entry in state["log_history"] for key in entry}
    assert {"eval_iid_test_accuracy_first_SM", "eval_iid_test_accuracy_first_SM_depth_1"} <= logged, sorted(logged)


@pytest.mark.parametrize("passed", [False, True])
def test_a_checkpoint_that_wins_ood_valid_is_released_only_if_the_release_check_agrees(
    first_chunk, tmp_path, monkeypatch, capsys, passed
):
    """The line's best wins the selection (the release's ood_valid set to 0); the release check (a stand-in here: its
    own tests are below) decides, and its record is in the chunk's record and the `[release]` line."""
    tmp = copy_line(first_chunk, tmp_path)
    release = tmp / "models" / NAME
    shutil.rmtree(release / "last-checkpoint")  # a new line: its best is in its first chunk
    results = json.loads((release / "eval_results.json").read_text())
    results["ood_valid"]["accuracy"] = 0.0
    (release / "eval_results.json").write_text(json.dumps(results))
    released_files = {k: v for k, v in snapshot(release).items() if not k.startswith("last-checkpoint")}
    calls = []

    def checker(samples):
        def check(candidate, release_dir, values, split):
            calls.append((samples, Path(candidate).parent.name, Path(release_dir), values["task"], split))
            return {"split": split, "samples": samples, "seed": 1000, "candidate": 0.5, "release": 0.6,
                    "only_candidate": 1, "only_release": 6, "passed": passed}  # fmt: skip

        return check

    monkeypatch.setattr(repos, "release_checker", checker)
    summary = continue_tiny(tmp, chunk_steps=2, check_samples=50)
    assert calls == [(50, "line", release, "arithmetic", "ood_valid")], "one check: the chunk's best, the release"
    record = json.loads((release / "last-checkpoint" / line.CONTINUATION_FILE).read_text())["chunks"][-1]
    check = record["release_check"]
    assert check["passed"] is passed and check["samples"] == 50 and check["step"] in (1, 2), record
    assert summary["released"] is passed and summary["release_check"] == check, summary
    assert record["released_step"] == (check["step"] if passed else None), record
    unchanged = {k: v for k, v in snapshot(release).items() if not k.startswith("last-checkpoint")} == released_files
    assert unchanged is not passed, "the release is replaced only when the check passes"
    shown = f"release check of step {check['step']}: 0.5000 vs the release's 0.6000 on 50 fresh"
    assert shown in capsys.readouterr().out
    card = (release / "README.md").read_text()
    carded = "after a check on 50 fresh `ood_valid` samples (data seed 1000): 0.5000 against the release's 0.6000"
    assert (carded in card) is passed, "a release the check let in says so on its card"


def test_checkpoints_that_tie_the_best_are_each_checked_and_the_best_checked_one_is_released(
    first_chunk, tmp_path, monkeypatch
):
    """At a learning rate of 0 every evaluation of a new line ties (steps 2, 4, 6, 8): train.py --keep_tied_best (the
    line's command) keeps the earlier three, each is checked against the release (a stand-in scoring them by step),
    and the one the check scores highest is released (the latest on equal scores), not the latest of the tie."""
    tmp = copy_line(first_chunk, tmp_path)
    release = tmp / "models" / NAME
    shutil.rmtree(release / "last-checkpoint")  # a new line: every tied checkpoint is in its first chunk
    results = json.loads((release / "eval_results.json").read_text())
    results["ood_valid"]["accuracy"] = 0.0
    (release / "eval_results.json").write_text(json.dumps(results))
    scores = {8: (0.50, False), 6: (0.61, True), 4: (0.65, True), 2: (0.65, True)}
    checked = []

    def checker(samples):
        def check(candidate, release_dir, values, split):
            step = int(Path(candidate).name.split("-")[-1])
            checked.append((step, Path(candidate).parent.name))
            accuracy, passed = scores[step]
            return {"split": split, "samples": samples, "seed": 1000, "candidate": accuracy, "release": 0.6,
                    "only_candidate": 1, "only_release": 1, "passed": passed}  # fmt: skip

        return check

    monkeypatch.setattr(repos, "release_checker", checker)
    monkeypatch.setattr(sys.modules[__name__], "COMMAND", COMMAND + ["--learning_rate", "0"])
    summary = continue_tiny(tmp, chunk_steps=None, check_samples=50)
    assert checked == [(8, "line"), (6, "tied-best"), (4, "tied-best"), (2, "tied-best")], checked
    record = json.loads((release / "last-checkpoint" / line.CONTINUATION_FILE).read_text())["chunks"][-1]
    assert record["released_step"] == 4 and summary["released"], record
    assert [candidate["step"] for candidate in record["tied_candidates"]] == [8, 6, 4, 2], record
    assert record["release_check"]["candidate"] == 0.65, record
    assert json.loads((release / "run_config.json").read_text())["training"]["steps"] == 4, "step 4's files"


def test_the_release_check_scores_both_models_on_the_same_fresh_samples(first_chunk, tmp_path):
    """The real check on the tiny line's release: against itself a tie (passed), against a copy whose class ids are
    permuted (the same answers by name) a tie too, against a perturbed copy the counts of rows only one model answers
    right make up the difference of their accuracies."""
    import release_check

    release = first_chunk / "models" / NAME
    values = read_preset(PRESET)
    model = AutoModelForSequenceClassification.from_pretrained(release)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter, generator=torch.Generator().manual_seed(0)) * 0.5)
    other = tmp_path / "other"
    model.save_pretrained(other)
    AutoTokenizer.from_pretrained(release).save_pretrained(other)

    permuted = AutoModelForSequenceClassification.from_pretrained(release)
    order = list(reversed(range(permuted.config.num_labels)))  # new id j answers what old id order[j] answered
    with torch.no_grad():
        permuted.classifier.weight.copy_(permuted.classifier.weight[order])
        permuted.classifier.bias.copy_(permuted.classifier.bias[order])
    names = {j: permuted.config.id2label[old] for j, old in enumerate(order)}
    permuted.config.id2label, permuted.config.label2id = names, {name: j for j, name in names.items()}
    permuted.save_pretrained(tmp_path / "permuted")
    AutoTokenizer.from_pretrained(release).save_pretrained(tmp_path / "permuted")

    check = release_check.release_checker(300)
    relabelled = check(str(tmp_path / "permuted"), str(release), values, "ood_valid")
    assert relabelled["only_candidate"] == relabelled["only_release"] == 0, "labels are matched by name, not id"
    same = check(str(release), str(release), values, "ood_valid")
    assert same["candidate"] == same["release"] and same["only_candidate"] == same["only_release"] == 0, same
    assert same["passed"] and same["samples"] == 300 and same["seed"] == release_check.CHECK_SEED_OFFSET, same
    record = check(str(other), str(release), values, "ood_valid")
    difference = (record["only_candidate"] - record["only_release"]) / 300
    assert record["candidate"] - record["release"] == pytest.approx(difference), record
    assert record["only_candidate"] + record["only_release"] > 0, "the perturbed model answers differently"
    assert record["passed"] == (record["candidate"] >= record["release"]) and record["release"] == same["release"]


def test_the_release_check_draws_fresh_rows_of_the_split_the_same_on_every_run():
    """ListOps and arithmetic: another seed of the split's distribution, the same rows each time, hardly any of the
    line's own; CTL: the line's function tables in its direction (backward: the input last), the split's depths; a
    line on files has none (released on ood_valid alone)."""
    import release_check

    values = {"task": "arithmetic", "task_seed": 0}
    rows = release_check.check_rows(values, "ood_valid", 300)
    assert rows["text"] == release_check.check_rows(values, "ood_valid", 300)["text"], "deterministic"
    own = set(modeling_ndr.load_task("arithmetic", seed=0, n_train=200, n_eval=300)["ood_valid"]["text"])
    assert len(own & set(rows["text"])) < 30, "not the line's own ood_valid"
    assert set(rows["label"]) <= set(modeling_ndr.tasks.task_label_names("arithmetic")), "label names"
    ctl = release_check.check_rows({"task": "ctl", "task_seed": 3, "direction": "backward"}, "ood_valid", 31)
    assert len(ctl) == 31 and sorted(len(text.split()) for text in ctl["text"]) == [7] * 11 + [8] * 10 + [9] * 10, (
        "31 rows, depths 6-8 evenly"
    )
    tables = modeling_ndr.tasks.ctl_tables(3)
    for text, label in zip(ctl["text"], ctl["label"]):
        *functions, symbol = text.split()  # backward: the input last, the first function applied next to it
        value = modeling_ndr.tasks.CTL_SYMBOLS.index(symbol)
        for function in reversed(functions):
            value = tables[function][value]
        assert label == modeling_ndr.tasks.CTL_SYMBOLS[value], f"{text}: the line's tables (seed 3) give the label"
    assert release_check.check_rows({"train_file": "my.csv"}, "ood_valid", 30) is None


def test_a_negative_check_sample_size_is_one_line():
    with pytest.raises(UsageError, match="--check_samples -1"):
        repos.main(["--continue", "listops", "--minutes", "1", "--check_samples", "-1"])
