"""Adaptive steps chosen at export for CTL models (`training/adaptive_study.py`, handed to `export_model` as its
`study`; the card's part in `modeling_ndr.training.adaptive`): the selection rule, what the export writes (config,
results as loaded and with fixed steps, run record, card), and `evaluate_model.py --depths / --adaptive_steps`, the
documented command that measures the same numbers again."""

import json
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from scripts import load_script

import adaptive_study
from adaptive_study import (
    DEEPER_DEPTHS,
    DEEPER_SPLIT,
    IID_CHECK_SPLIT,
    THRESHOLDS,
    applies,
    choose_threshold,
    evaluation_rows,
    export_study,
    export_summary,
    fixed_steps_win,
    recorded_choice,
)
from modeling_ndr import NDRConfig, task_label_names
from modeling_ndr.training import Predictions, UsageError, export_model
from modeling_ndr.training.adaptive import comparison_table
from ndr_training.checkpoints import new_model


N_EVAL = 40
TASK = {"task": "ctl", "direction": "backward", "task_seed": 3, "n_eval": N_EVAL}


def test_choose_threshold_takes_the_best_ood_valid_accuracy_then_the_fewest_steps():
    grid = {
        "0.05": {"accuracy": 1.0, "mean_steps": 23.6},
        "0.1": {"accuracy": 1.0, "mean_steps": 16.1},
        "0.2": {"accuracy": 0.998, "mean_steps": 12.4},
    }
    assert choose_threshold(grid) == 0.1, "the best accuracy first, then the fewest steps"
    grid["0.15"] = {"accuracy": 1.0, "mean_steps": 16.1}
    assert choose_threshold(grid) == 0.15, "equal steps: the larger threshold"
    assert choose_threshold({0.3: {"accuracy": 0.5, "mean_steps": 3.0}}) == 0.3, "numbers as keys work too"
    with pytest.raises(ValueError, match="at least one threshold"):
        choose_threshold({})


def test_a_loss_on_the_training_distribution_weighs_as_much_as_a_gain_on_ood_valid():
    """The iid check: each threshold's accuracy on fresh samples of iid_test's depths is added to its ood_valid
    accuracy, so a threshold that gains 0.01 on ood_valid and loses 0.005 of the training distribution still wins,
    and one that loses more than it gains does not; fixed steps win where they do better on ood_valid or on the sum."""
    grid = {"0.1": {"accuracy": 0.99, "mean_steps": 16.1}, "0.2": {"accuracy": 1.0, "mean_steps": 12.4}}
    assert choose_threshold(grid) == 0.2
    assert choose_threshold(grid, {"0.1": 1.0, "0.2": 0.995}) == 0.2, "+0.01 on ood_valid against -0.005"
    assert choose_threshold(grid, {"0.1": 1.0, "0.2": 0.985}) == 0.1, "-0.015 outweighs +0.01"
    assert choose_threshold(grid, {"0.1": 1.0, "0.2": 0.99}) == 0.2, "an equal sum: the fewer steps"
    selection = {"grid": grid, "fixed_accuracy": 0.95,
                 IID_CHECK_SPLIT: {"grid": {"0.1": 1.0, "0.2": 0.985}, "fixed_accuracy": 1.0}}  # fmt: skip
    assert recorded_choice(selection) == 0.1 and recorded_choice({"grid": grid}) == 0.2, "records without the check"
    assert fixed_steps_win(selection) is None, "0.99 + 1.0 against the fixed steps' 0.95 + 1.0"
    selection[IID_CHECK_SPLIT]["grid"]["0.1"], selection["fixed_accuracy"] = 0.95, 0.99
    assert recorded_choice(selection) == 0.2, "0.99 + 0.95 against 1.0 + 0.985"
    assert fixed_steps_win(selection) == (
        "on ood_valid and iid_check (fresh samples of iid_test's depths) they score 0.9900 + 1.0000, the chosen "
        "threshold 1.0000 + 0.9850"
    ), "better on ood_valid, but the fixed steps' sum is larger"
    worse = {"grid": {"0.2": {"accuracy": 0.9, "mean_steps": 12.4}}, "fixed_accuracy": 0.95}
    assert fixed_steps_win(worse) == "on ood_valid they score 0.9500, the best adaptive threshold 0.9000"


def test_adaptive_steps_are_chosen_only_for_the_generated_ctl_task_without_act():
    config = NDRConfig()
    assert applies(config, {"task": TASK})
    assert applies(config, {"task": {"task": "ctl"}}), "CTL is forward with task seed 0 unless the record says else"
    assert not applies(config, {"task": {"task": "arithmetic"}})
    assert not applies(config, {"task": {"task": "ctl", "train_file": "data/train.jsonl"}}), "own data"
    assert not applies(config, {}), "a run without a record"
    assert not applies(NDRConfig(halting="act"), {"task": TASK}), "ACT chooses its own steps"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny untrained CTL model saved as a checkpoint with its run record, and its export."""
    root = tmp_path_factory.mktemp("adaptive")
    values = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 3}
    tokenizer, model = new_model("ctl", values, task_label_names("ctl"), [])
    checkpoint = root / "checkpoint"
    model.save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    trainer_results = {"ood_test": {"accuracy": 0.5, "by_depth": {"9": 0.5}}}  # replaced by the export's measurement
    (checkpoint / "eval_results.json").write_text(json.dumps(trainer_results))
    run_config = {"task": TASK, "example": {"text": "b a 101", "label": "000"}}
    (checkpoint / "run_config.json").write_text(json.dumps(run_config))
    export_model(str(checkpoint), str(root / "export"), repo_id="org/ndr-ctl-tiny", study=export_study)
    return checkpoint, root / "export"


def read(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


def test_export_turns_adaptive_steps_on_with_the_threshold_the_rule_picks(exported):
    checkpoint, export = exported
    config = read(export, "config.json")
    selection = read(export, "run_config.json")["adaptive_steps"]
    assert config["adaptive_steps"] is True and config["max_adaptive_steps"] == 2 * 3
    assert selection["split"] == "ood_valid" and selection["n_samples"] == N_EVAL
    assert [float(t) for t in selection["grid"]] == list(THRESHOLDS)
    assert config["adaptive_threshold"] == recorded_choice(selection) == selection["adaptive_threshold"]
    check = selection[IID_CHECK_SPLIT]
    assert check["depths"] == [2, 3, 4, 5] and check["n_samples"] == N_EVAL and check["sample_seed"] == 2
    assert [float(t) for t in check["grid"]] == list(THRESHOLDS) and 0 <= check["fixed_accuracy"] <= 1
    assert read(export, "tokenizer.json")["padding"] == read(checkpoint, "tokenizer.json")["padding"]
    assert load_file(export / "model.safetensors").keys() == load_file(checkpoint / "model.safetensors").keys()
    for name, tensor in load_file(export / "model.safetensors").items():
        assert tensor.equal(load_file(checkpoint / "model.safetensors")[name]), "the weights are not changed"


def test_export_reports_every_split_as_loaded_and_with_fixed_steps(exported):
    _, export = exported
    results = read(export, "eval_results.json")
    assert list(results) == ["iid_test", "ood_valid", "ood_test", DEEPER_SPLIT]
    assert set(results[DEEPER_SPLIT]["by_depth"]) == {str(d) for d in DEEPER_DEPTHS}
    for values in results.values():
        assert values["fixed_steps"]["num_steps"] == 3 and set(values["fixed_steps"]["by_depth"]) == set(
            values["by_depth"]
        )
        assert 1 <= values["mean_steps"] <= 6 and set(values["mean_steps_by_depth"]) == set(values["by_depth"])

    card = ModelCard.load(export / "README.md")
    main = {r.dataset_split: r.metric_value for r in card.data.eval_results if r.metric_config is None}
    fixed = {r.dataset_split: r.metric_value for r in card.data.eval_results if r.metric_config == "fixed_steps=3"}
    assert main == pytest.approx({split: values["accuracy"] for split, values in results.items()}), "as loaded"
    assert fixed == pytest.approx({split: values["fixed_steps"]["accuracy"] for split, values in results.items()})
    assert comparison_table(results) in card.text, "the card's per-depth table, fixed against adaptive"
    command = "training/evaluate_model.py org/ndr-ctl-tiny --task ctl --direction backward --task_seed 3 --n_eval 40"
    assert f"{command} --depths 11 12 --adaptive_steps false" in card.text
    assert "This is a variant" not in card.text, "adaptive steps chosen by the export do not make a variant"
    assert f"with {N_EVAL} fresh samples of `iid_test`'s depths, the sum of the two accuracies" in card.text
    summary = export_summary(str(export))
    assert summary.startswith("The export runs adaptive steps as loaded") and comparison_table(results) in summary


def test_evaluate_model_measures_the_exported_numbers_again(exported):
    """The card's command (`--depths`, `--adaptive_steps false`) gives the export's numbers, as loaded and fixed."""
    _, export = exported
    results = read(export, "eval_results.json")
    evaluate_model = load_script("training/evaluate_model.py")
    arguments = [str(export), "--task", "ctl", "--direction", "backward", "--task_seed", "3", "--n_eval", str(N_EVAL),
                 "--depths", *map(str, DEEPER_DEPTHS)]  # fmt: skip
    as_loaded = evaluate_model.main(arguments)
    fixed = evaluate_model.main([*arguments, "--adaptive_steps", "false"])
    assert list(as_loaded) == list(results)
    for split, values in results.items():
        assert as_loaded[split]["by_depth"] == pytest.approx(values["by_depth"])
        assert as_loaded[split]["mean_steps_by_depth"] == pytest.approx(values["mean_steps_by_depth"])
        assert fixed[split]["by_depth"] == pytest.approx(values["fixed_steps"]["by_depth"])
        assert "mean_steps" not in fixed[split], "fixed steps report no steps"


def test_evaluate_model_depths_need_the_ctl_task(exported, capsys):
    evaluate_model = load_script("training/evaluate_model.py")
    with pytest.raises(SystemExit) as exit_info:
        evaluate_model.main([str(exported[1]), "--task", "arithmetic", "--depths", "11"])
    assert exit_info.value.code == 2 and "--depths goes with --task ctl" in capsys.readouterr().err
    with pytest.raises(UsageError, match="--depths: depth 1 has only 72 distinct samples"):
        evaluate_model.main([str(exported[1]), "--task", "ctl", "--n_eval", "100", "--depths", "1"])


def test_re_exporting_an_export_gives_the_same_folder(exported, tmp_path):
    """make_model_repos --refresh exports a released folder again: the same choice and the same numbers."""
    _, export = exported
    export_model(str(export), str(tmp_path / "again"), repo_id="org/ndr-ctl-tiny", study=export_study)
    for name in ("config.json", "eval_results.json", "run_config.json", "README.md"):
        assert (tmp_path / "again" / name).read_text() == (export / name).read_text(), name


def test_an_export_without_the_study_keeps_the_config_as_it_is(exported, tmp_path):
    """The library's `export_model` (and `python -m modeling_ndr.training export`) runs no study of its own."""
    checkpoint, _ = exported
    export_model(str(checkpoint), str(tmp_path / "fixed"))
    assert read(tmp_path / "fixed", "config.json")["adaptive_steps"] is False
    assert read(tmp_path / "fixed", "eval_results.json") == read(checkpoint, "eval_results.json")
    assert "adaptive_steps" not in read(tmp_path / "fixed", "run_config.json")
    assert export_summary(str(tmp_path / "fixed")) is None


def stand_in_predict(wrong_adaptive: set[str]):
    """`predict` answering every text right, except the adaptive answers of the splits named."""
    label_ids = {name: i for i, name in enumerate(task_label_names("ctl"))}  # new_model's label2id
    rows = evaluation_rows(TASK)
    truth = {row["text"]: label_ids[task_label_names("ctl")[row["label"]]] for split in rows for row in rows[split]}
    wrong = {row["text"] for split in wrong_adaptive for row in rows[split]}

    def predict(model, tokenizer, texts, batch_size, adaptive_steps=None, adaptive_threshold=None):
        if adaptive_steps:
            labels = np.array([-1 if text in wrong else truth[text] for text in texts])
            return Predictions(labels, np.ones(len(texts), dtype=int), model_chose_steps=True)
        return Predictions(np.array([truth[text] for text in texts]), np.full(len(texts), 3), model_chose_steps=False)

    return predict


@pytest.mark.parametrize(
    "wrong, message",
    [
        ({"ood_valid"}, "The export keeps fixed steps: on ood_valid they score 1.0000, the best adaptive threshold "
                        "0.0000."),
        ({IID_CHECK_SPLIT}, "The export keeps fixed steps: on ood_valid and iid_check (fresh samples of iid_test's "
                            "depths) they score 1.0000 + 1.0000, the chosen threshold 1.0000 + 0.0000."),
    ],
)  # fmt: skip
def test_the_export_keeps_fixed_steps_where_they_do_better(exported, tmp_path, monkeypatch, wrong, message):
    """A model whose adaptive steps are worse than its fixed step count on ood_valid, or on the training
    distribution's fresh samples (here: every adaptive prediction there wrong, every fixed one right), is exported as
    it was trained, and the record says why."""
    checkpoint, _ = exported
    monkeypatch.setattr(adaptive_study, "predict", stand_in_predict(wrong))
    export_model(str(checkpoint), str(tmp_path / "kept"), repo_id="org/ndr-ctl-tiny", study=export_study)
    config, selection = read(tmp_path / "kept", "config.json"), read(tmp_path / "kept", "run_config.json")
    assert config["adaptive_steps"] is False and config["max_adaptive_steps"] is None
    assert (
        selection["adaptive_steps"]["fixed_accuracy"] == 1.0
        and selection["adaptive_steps"]["adaptive_threshold"] is None
    )
    assert read(tmp_path / "kept", "eval_results.json") == read(checkpoint, "eval_results.json"), "the run's results"
    assert export_summary(str(tmp_path / "kept")) == message
    assert "adaptive steps" not in ModelCard.load(tmp_path / "kept" / "README.md").text.lower()
