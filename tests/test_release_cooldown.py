"""Cooldown branches of a release line (`hub_cards/release_cooldown.py`, `make release-cooldown`): on the tiny
arithmetic line of tests/test_release_continuation.py (one process, temporary folders), a branch from the line's step
4 gives the weights of one uninterrupted `warmup_stable_decay` run, releases its best checkpoint only when `ood_valid`
is at least the release's, never changes the line's checkpoint, and records itself in the line's record."""

import json
import os
import shutil
import subprocess

import pytest
import release_line as line
import torch
from release_cooldown import cooldown_arguments
from safetensors.torch import load_file
from test_release_continuation import COMMAND, NAME, PRESET, REPO, continue_tiny, repos, snapshot

from modeling_ndr.training import UsageError


ENV = dict(os.environ, OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def line_at_4(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cooldown")
    assert continue_tiny(tmp, chunk_steps=4)["step"] == 4
    return tmp


def branch(tmp, steps=4, **kwargs) -> dict:
    return repos.cpu_cooldown("arithmetic", steps, outputs_dir=str(tmp / "out"), models_dir=str(tmp / "models"),
                              command=COMMAND, processes=1, env=ENV, **kwargs)  # fmt: skip


def set_release_ood_valid(release, value):
    results = json.loads((release / "eval_results.json").read_text())
    results["ood_valid"]["accuracy"] = value
    (release / "eval_results.json").write_text(json.dumps(results))


def test_a_branch_is_one_warmup_stable_decay_run_and_leaves_the_line_as_it_was(line_at_4, tmp_path):
    shutil.copytree(line_at_4 / "models", tmp_path / "models")
    release = tmp_path / "models" / NAME
    set_release_ood_valid(release, 0.0)  # any evaluation of the branch is at least as good
    last = snapshot(release / "last-checkpoint")
    summary = branch(tmp_path)
    assert (summary["start_step"], summary["step"], summary["released"]) == (4, 8, True), summary

    whole = subprocess.run(
        COMMAND + ["--preset", PRESET, "--output_dir", str(tmp_path / "whole"), "--disable_tqdm", "true",
                   *cooldown_arguments({"lr_scheduler_type": "constant"}, 4, 4)],
        cwd=REPO, capture_output=True, text=True, env=ENV,
    )  # fmt: skip
    assert whole.returncode == 0, whole.stderr[-3000:]
    branched = load_file(tmp_path / "out" / "release" / f"{NAME}-cooldown" / "checkpoint-8" / "model.safetensors")
    uninterrupted = load_file(tmp_path / "whole" / "checkpoint-8" / "model.safetensors")
    for key in uninterrupted:
        assert torch.equal(branched[key], uninterrupted[key]), f"{key}: the branch differs from the one-run schedule"

    state = json.loads((tmp_path / "whole" / "checkpoint-8" / "trainer_state.json").read_text())
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
