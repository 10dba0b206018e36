"""Cooldown branches of a release line (`hub_cards/release_cooldown.py`, `make release-cooldown`): on the tiny
arithmetic line of tests/e2e/test_release_continuation.py (one process, temporary folders), a branch from the line's
step 4 gives the weights of one uninterrupted `warmup_stable_decay` run, releases its best checkpoint only when
`ood_valid` is at least the release's, never changes the line's checkpoint, and records itself in the line's record. A
branch cut before its last step keeps its state in `cooldown-checkpoint/`, and resumed from there (`make
release-cooldown-resume`) it gives the same weights as the uninterrupted run; resuming what is not there, with
another length or shape, or of a line since replaced is refused in one line; a new branch replaces an unfinished
one."""

import json
import os
import shutil
import subprocess

import pytest
import torch
from safetensors.torch import load_file
from test_release_continuation import COMMAND, NAME, PRESET, REPO, continue_tiny, repos, snapshot

import release_line as line
from modeling_ndr.training import UsageError
from release_cooldown import cooldown_arguments


ENV = dict(os.environ, OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def line_at_4(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cooldown")
    assert continue_tiny(tmp, chunk_steps=4)["step"] == 4
    return tmp


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The one train.py run whose schedule a branch of 4 steps from step 4 reproduces: its checkpoint-8 folder."""
    tmp = tmp_path_factory.mktemp("whole")
    whole = subprocess.run(
        COMMAND + ["--preset", PRESET, "--output_dir", str(tmp / "whole"), "--disable_tqdm", "true",
                   *cooldown_arguments({"lr_scheduler_type": "constant"}, 4, 4)],
        cwd=REPO, capture_output=True, text=True, env=ENV,
    )  # fmt: skip
    assert whole.returncode == 0, whole.stderr[-3000:]
    return tmp / "whole" / "checkpoint-8"


def assert_same_weights(checkpoint, reference, what):
    ours, theirs = load_file(checkpoint / "model.safetensors"), load_file(reference / "model.safetensors")
    for key in theirs:
        assert torch.equal(ours[key], theirs[key]), f"{key}: {what} differs from the one-run schedule"


def branch(tmp, steps=4, check_samples=0, **kwargs) -> dict:
    """A cooldown branch of the tiny line; without the release check unless `check_samples` asks for it."""
    return repos.cpu_cooldown("arithmetic", steps, outputs_dir=str(tmp / "out"), models_dir=str(tmp / "models"),
                              command=COMMAND, processes=1, env=ENV, check_samples=check_samples,
                              **kwargs)  # fmt: skip


def set_release_ood_valid(release, value):
    results = json.loads((release / "eval_results.json").read_text())
    results["ood_valid"]["accuracy"] = value
    (release / "eval_results.json").write_text(json.dumps(results))


def test_a_branch_is_one_warmup_stable_decay_run_and_leaves_the_line_as_it_was(line_at_4, uninterrupted, tmp_path):
    shutil.copytree(line_at_4 / "models", tmp_path / "models")
    release = tmp_path / "models" / NAME
    set_release_ood_valid(release, 0.0)  # any evaluation of the branch is at least as good
    last = snapshot(release / "last-checkpoint")
    summary = branch(tmp_path)
    assert (summary["start_step"], summary["step"], summary["released"]) == (4, 8, True), summary
    assert summary["finished"] and not (release / "cooldown-checkpoint").exists(), "nothing is left to resume"
    work = tmp_path / "out" / "release" / f"{NAME}-cooldown"
    assert_same_weights(work / "checkpoint-8", uninterrupted, "the branch")

    state = json.loads((uninterrupted / "trainer_state.json").read_text())
    rates = [entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry]
    # the rate each step trained with: the line's for steps 1-5 (the decay's first step is at progress 0), then down
    assert rates == pytest.approx([1e-3] * 5 + [7.5e-4, 5e-4, 2.5e-4]), rates

    after = snapshot(release / "last-checkpoint")
    assert {k: v for k, v in after.items() if k != line.CONTINUATION_FILE} == {
        k: v for k, v in last.items() if k != line.CONTINUATION_FILE
    }, "the line's checkpoint is the same"
    record = json.loads((release / "last-checkpoint" / line.CONTINUATION_FILE).read_text())
    assert [(c["start_step"], c["end_step"]) for c in record["chunks"]] == [(0, 4)], "the line did not move"
    (recorded,) = record["branches"]
    assert (recorded["start_step"], recorded["end_step"], recorded["decay_steps"]) == (4, 8, 4)
    assert recorded["released_step"] == summary_step(release), "the record names the released step"

    run_config = json.loads((release / "run_config.json").read_text())
    assert run_config["cooldown"] == {"start_step": 4, "decay_steps": 4, "decay_type": "linear"}
    assert run_config["continuation"]["steps"] == recorded["released_step"], "the branch's steps are counted"
    assert "cooldown branch of the line" in (release / "README.md").read_text()


def summary_step(release) -> int:
    return json.loads((release / "run_config.json").read_text())["continuation"]["line_step"]


def test_a_branch_worse_than_the_release_keeps_it(line_at_4, tmp_path):
    shutil.copytree(line_at_4 / "models", tmp_path / "models")
    release = tmp_path / "models" / NAME
    set_release_ood_valid(release, 1.01)  # no checkpoint can beat it
    before = {k: v for k, v in snapshot(release).items() if not k.startswith("last-checkpoint")}
    summary = branch(tmp_path, steps=3)  # its last step, 7, is no evaluation step (eval_steps 2): evaluated too
    assert summary["step"] == 7 and not summary["released"], summary
    assert {k: v for k, v in snapshot(release).items() if not k.startswith("last-checkpoint")} == before
    record = json.loads((release / "last-checkpoint" / line.CONTINUATION_FILE).read_text())
    assert record["branches"][0]["released_step"] is None and record["branches"][0]["decay_steps"] == 3
    assert record["branches"][0]["best"]["step"] == 7, "Trainer evaluates a branch's last step"


def test_a_line_whose_rate_decays_already_is_refused_in_one_line():
    with pytest.raises(UsageError, match="lr_scheduler_type is 'linear', which decays already"):
        cooldown_arguments({"lr_scheduler_type": "linear"}, 100, 10)


def test_constant_with_warmup_keeps_the_line_s_warmup_in_the_branch_schedule():
    arguments = cooldown_arguments({"lr_scheduler_type": "constant_with_warmup", "warmup_steps": 50}, 1000, 200)
    assert arguments[arguments.index("--warmup_steps") + 1] == "50"
    assert arguments[arguments.index("--max_steps") + 1] == "1200"
    assert json.loads(arguments[arguments.index("--lr_scheduler_kwargs") + 1])["num_decay_steps"] == 200


def test_a_release_without_a_line_is_refused_in_one_line(tmp_path):
    with pytest.raises(UsageError, match="no line to branch from") as error:
        branch(tmp_path)
    assert "\n" not in str(error.value)


@pytest.fixture(scope="module")
def cut_branch(line_at_4, tmp_path_factory):
    """The line at step 4 with a branch of 4 steps cut after 2 (as a time box would cut it): step 6 of 8."""
    tmp = tmp_path_factory.mktemp("cut")
    shutil.copytree(line_at_4 / "models", tmp / "models")
    set_release_ood_valid(tmp / "models" / NAME, 0.0)
    summary = branch(tmp, steps=4, chunk_steps=2)
    assert (summary["start_step"], summary["step"], summary["end_step"]) == (4, 6, 8), summary
    assert not summary["finished"] and summary["released"], summary
    return tmp


def test_a_cut_branch_resumed_is_the_uninterrupted_run(cut_branch, uninterrupted, tmp_path):
    shutil.copytree(cut_branch / "models", tmp_path / "models")
    release = tmp_path / "models" / NAME
    pending = release / "cooldown-checkpoint"
    record = json.loads((pending / line.CONTINUATION_FILE).read_text())
    assert record["branch"] == {"start_step": 4, "decay_steps": 4, "decay_type": "linear"}
    assert [(c["start_step"], c["end_step"]) for c in record["chunks"]] == [(4, 6)]
    assert json.loads((pending / "trainer_state.json").read_text())["global_step"] == 6
    assert json.loads((release / "run_config.json").read_text())["continuation"]["line_step"] == 6, "released 6"

    summary = branch(tmp_path, steps=None, resume_branch=True)  # the branch's own length and shape
    assert (summary["start_step"], summary["step"], summary["finished"]) == (4, 8, True), summary
    assert not pending.exists(), "a finished branch leaves nothing to resume"
    assert_same_weights(tmp_path / "out" / "release" / f"{NAME}-cooldown" / "checkpoint-8", uninterrupted,
                        "the branch resumed after its cut")  # fmt: skip

    branches = json.loads((release / "last-checkpoint" / line.CONTINUATION_FILE).read_text())["branches"]
    assert [(b["branch_start_step"], b["start_step"], b["end_step"]) for b in branches] == [(4, 4, 6), (4, 6, 8)]
    run_config = json.loads((release / "run_config.json").read_text())
    assert run_config["cooldown"] == {"start_step": 4, "decay_steps": 4, "decay_type": "linear"}
    released = run_config["continuation"]["line_step"]
    assert released == (branches[1]["released_step"] or 6), "the second segment's best, or still the first's (6)"
    # the compute record counts the line's 4 steps and both segments up to the released step, nothing twice
    assert run_config["continuation"]["steps"] == released
    assert run_config["continuation"]["samples"] == released * branches[0]["total_batch"]


def test_resuming_what_is_not_there_or_another_branch_is_refused_in_one_line(line_at_4, cut_branch, tmp_path):
    with pytest.raises(UsageError, match="no unfinished cooldown branch to resume") as error:
        branch(line_at_4, steps=None, resume_branch=True)
    assert "\n" not in str(error.value)
    before = snapshot(cut_branch / "models")
    with pytest.raises(UsageError, match="--steps 3: the unfinished branch of ndr-arithmetic .from step 4. has 4"):
        branch(cut_branch, steps=3, resume_branch=True)
    with pytest.raises(UsageError, match="--decay_type cosine: the unfinished branch"):
        branch(cut_branch, steps=None, decay_type="cosine", resume_branch=True)
    assert snapshot(cut_branch / "models") == before, "nothing was changed"

    shutil.copytree(cut_branch / "models", tmp_path / "models")  # a new line (--switch_recipe) since the cut
    record_path = tmp_path / "models" / NAME / "last-checkpoint" / line.CONTINUATION_FILE
    record_path.write_text(json.dumps({**json.loads(record_path.read_text()), "line_id": "another line"}))
    with pytest.raises(UsageError, match="the release's line is now another line; make release-cooldown starts"):
        branch(tmp_path, steps=None, resume_branch=True)


def test_a_new_branch_replaces_an_unfinished_one(cut_branch, tmp_path, caplog):
    shutil.copytree(cut_branch / "models", tmp_path / "models")
    release = tmp_path / "models" / NAME
    summary = branch(tmp_path, steps=2)  # from the line's step 4 again, not from the cut branch's 6
    assert (summary["start_step"], summary["step"], summary["finished"]) == (4, 6, True), summary
    assert not (release / "cooldown-checkpoint").exists()
    assert "replaces the unfinished one from step 4 (2 of 4 steps trained)" in caplog.text
