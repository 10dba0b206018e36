"""`make_model_repos.py --other_seeds`: what other training seeds of a release's recipe gave is recorded in its
`run_config.json` and said in its card (the weights and results unchanged); a run of another recipe, of other steps
or of the release's own seed is refused, naming what differs."""

import json
import shutil
from pathlib import Path

import pytest
from scripts import load_script

from modeling_ndr.training.errors import UsageError


REPO = Path(__file__).resolve().parents[2]
RELEASE = REPO / "hub_cards" / "models" / "ndr-ctl-backward"  # a small release (60k parameters) of one seed


@pytest.fixture(scope="module")
def repos():
    return load_script("hub_cards/make_model_repos.py")


def a_run(folder: Path, seed: int, ood_test: float, **changes) -> Path:
    """A run folder as train.py leaves it (`export/` with the two records) of the release's recipe, `seed`, and an
    `ood_test` of `ood_test` (its fixed steps 0.1 below); `changes` replace fields of its run record."""
    export = folder / "export"
    export.mkdir(parents=True)
    config = json.loads((RELEASE / "run_config.json").read_text())
    config.update(seed=seed, machine="a test machine", precision="fp32", **changes)
    results = json.loads((RELEASE / "eval_results.json").read_text())
    results["ood_test"] = {**results["ood_test"], "accuracy": ood_test, "fixed_steps": {"accuracy": ood_test - 0.1}}
    (export / "run_config.json").write_text(json.dumps(config))
    (export / "eval_results.json").write_text(json.dumps(results))
    return folder


def test_other_seeds_are_recorded_and_the_card_gives_them_and_the_range(repos, tmp_path):
    models = tmp_path / "models"
    shutil.copytree(RELEASE, models / RELEASE.name)
    runs = [a_run(tmp_path / "seed7", 7, 0.25), a_run(tmp_path / "seed8", 8, 0.98)]
    repos.record_other_seeds(RELEASE.name, [str(run) for run in runs], models_dir=str(models))

    released = models / RELEASE.name
    record = json.loads((released / "run_config.json").read_text())["other_seeds"]
    assert [(run["seed"], run["accuracy"]["ood_test"], run["fixed"]["ood_test"]) for run in record] == [
        (7, 0.25, pytest.approx(0.15)),
        (8, 0.98, pytest.approx(0.88)),
    ]
    assert record[0]["machine"] == "a test machine, fp32"
    card = " ".join((released / "README.md").read_text().split())  # the card's lines, unwrapped
    assert "gave `ood_test`: seed 7 0.250 (0.150), seed 8 0.980 (0.880) (a test machine, fp32)" in card
    ours = json.loads((RELEASE / "eval_results.json").read_text())["ood_test"]["accuracy"]
    close = sum(score >= ours - 0.05 for score in (0.25, 0.98))
    assert f"{close} of these 2 came within 0.05 of this model" in card
    assert f"its recipe gave 0.250 to {max(ours, 0.98):.3f} on `ood_test`" in card
    # the release itself is as it was: the same weights and results
    assert (released / "model.safetensors").read_bytes() == (RELEASE / "model.safetensors").read_bytes()
    assert json.loads((released / "eval_results.json").read_text()) == json.loads(
        (RELEASE / "eval_results.json").read_text()
    )

    # a second call replaces the list: it holds exactly the runs given
    repos.record_other_seeds(RELEASE.name, [str(runs[1])], models_dir=str(models))
    assert [run["seed"] for run in json.loads((released / "run_config.json").read_text())["other_seeds"]] == [8]


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"preset": "ctl_cpu"}, "its preset"),
        ({"seed": 42}, "seed 42 is already"),
        ({"training": {"steps": 500, "seconds": 10.0}}, "trained 500 steps"),
    ],
    ids=["another preset", "the release's seed", "other steps"],
)
def test_a_run_of_another_recipe_or_the_release_s_seed_is_refused_naming_it(repos, tmp_path, changes, named):
    models = tmp_path / "models"
    shutil.copytree(RELEASE, models / RELEASE.name)
    before = (models / RELEASE.name / "run_config.json").read_text()
    run = a_run(tmp_path / "run", changes.pop("seed", 7), 0.5, **changes)
    with pytest.raises(UsageError, match=named):
        repos.record_other_seeds(RELEASE.name, [str(run)], models_dir=str(models))
    assert (models / RELEASE.name / "run_config.json").read_text() == before  # nothing written


def test_a_changed_learning_rate_is_refused_naming_the_field(repos, tmp_path):
    models = tmp_path / "models"
    shutil.copytree(RELEASE, models / RELEASE.name)
    values = json.loads((RELEASE / "run_config.json").read_text())["preset_values"]
    run = a_run(tmp_path / "run", 7, 0.5, preset_values={**values, "learning_rate": 3e-4})
    with pytest.raises(UsageError, match="--other_seeds .*run: its preset_values"):
        repos.record_other_seeds(RELEASE.name, [str(run)], models_dir=str(models))


def test_the_cli_needs_the_one_release_the_runs_belong_to(repos):
    with pytest.raises(UsageError, match="--names"):
        repos.main(["--other_seeds", "outputs/somewhere"])
