"""CTL++ through train.py and evaluate_model.py: the preset trains on a variant's splits, exports a card that says its
input and the checkpoint it reports, and the CTL++ flags refuse what they do not fit."""

import json

import pytest
from huggingface_hub import ModelCard
from scripts import load_script
from task_reference import evaluate_ctlpp

from modeling_ndr.tasks import ctlpp_split_names, ctlpp_tables
from modeling_ndr.tasks.ctlpp import CTLPP_FUNCTIONS
from modeling_ndr.training.errors import UsageError


SMALL = ["--n_train", "1500", "--n_eval", "20", "--hidden_size", "16", "--intermediate_size", "16",
         "--num_attention_heads", "2", "--num_hidden_layers", "2", "--eval_num_hidden_layers", "3", "--max_steps", "2",
         "--per_device_train_batch_size", "8", "--eval_steps", "2", "--save_steps", "2", "--use_cpu", "true",
         "--disable_tqdm", "true", "--report_to", "none", "--task_seed", "5"]  # fmt: skip
VARIANT = ["--task_variant", "parallel_branch_2stage", "--function_overlap", "4", "--symbol_overlap", "3"]


@pytest.fixture(scope="module")
def ctlpp_run(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("run") / "ctlpp"
    train = load_script("training/train.py")
    results = train.main(["--preset", "ctlpp_cpu", *SMALL, *VARIANT, "--output_dir", str(output_dir)])
    return output_dir, results


def test_the_preset_trains_on_the_variant_s_splits_and_exports(ctlpp_run):
    output_dir, results = ctlpp_run
    assert list(results) == ctlpp_split_names("parallel_branch_2stage", 4, 3)[1:]
    config = json.loads((output_dir / "export" / "config.json").read_text())
    assert config["readout"] == "first" and config["id2label"]["7"] == "7"
    assert (config["num_hidden_layers"], config["eval_num_hidden_layers"]) == (2, 3)
    record = json.loads((output_dir / "run_config.json").read_text())["task"]
    assert (record["task_variant"], record["function_overlap"], record["symbol_overlap"]) == (
        "parallel_branch_2stage", 4, 3
    )  # fmt: skip


def test_the_headline_is_the_variant_s_split_of_never_seen_orders(ctlpp_run, tmp_path):
    _, results = ctlpp_run
    train = load_script("training/train.py")
    line = train.headline(str(tmp_path), results, 3, "fp32", "ctlpp")
    assert line.startswith("test_group_alternate accuracy of the exported model as loaded")


def test_the_card_says_its_input_with_right_answers_and_that_it_reports_the_last_checkpoint(ctlpp_run):
    output_dir, _ = ctlpp_run
    card = ModelCard.load(output_dir / "export" / "README.md").text
    assert "the last checkpoint (no CTL++ split is held out for choosing one)" in card
    assert "load_task('ctlpp', direction='backward', variant='parallel_branch_2stage', function_overlap=4, " in card
    tables = dict(zip(CTLPP_FUNCTIONS, ctlpp_tables(5)))
    section = card.split("## Input and output")[1].split("## Usage")[0]
    rows = [line.split("`")[1::2] for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == 3
    for text, answer in rows:
        assert str(evaluate_ctlpp(text, tables)[0]) == answer, text


def test_evaluate_model_reads_the_same_splits(ctlpp_run, capsys):
    output_dir, results = ctlpp_run
    evaluate = load_script("training/evaluate_model.py")
    report = output_dir / "evaluated.json"
    evaluate.main([str(output_dir / "export"), "--task", "ctlpp", "--task_seed", "5", "--n_eval", "20",
                   "--num_steps", "3", *VARIANT, "--output_json", str(report)])  # fmt: skip
    evaluated = json.loads(report.read_text())
    assert set(evaluated) >= set(results)
    assert evaluated["test_unseen_pairs"]["accuracy"] == pytest.approx(results["test_unseen_pairs"]["accuracy"])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--task", "ctl", "--task_variant", "alternate"], "--task_variant is an option of --task ctlpp, not of ctl"),
        (["--preset", "ctlpp_cpu", "--function_overlap", "40"], "--task ctlpp: function_overlap must be an int"),
        (["--preset", "ctlpp_cpu", "--task_variant", "alternate", "--function_overlap", "2"],
         "alternate has no overlap group"),
    ],
)  # fmt: skip
def test_ctlpp_flags_that_do_not_fit_are_refused_in_one_line(flags, message, tmp_path):
    train = load_script("training/train.py")
    with pytest.raises(UsageError, match=message):
        train.main([*flags, "--max_steps", "1", "--output_dir", str(tmp_path / "run")])


def test_a_run_without_direction_trains_and_describes_the_backward_text(tmp_path):
    """CTL++'s default direction is backward (its authors' runs): the data and the card agree without --direction."""
    train = load_script("training/train.py")
    train.main(["--task", "ctlpp", *SMALL, "--n_train", "4200", "--output_dir", str(tmp_path / "run")])
    card = ModelCard.load(tmp_path / "run" / "export" / "README.md").text
    assert "The text is written backwards" in card and "The symbol comes first" not in card
    tables = dict(zip(CTLPP_FUNCTIONS, ctlpp_tables(5)))
    section = card.split("## Input and output")[1].split("## Usage")[0]
    for line in section.splitlines():
        if line.startswith("| `"):
            text, answer = line.split("`")[1::2]
            assert text.split(" ")[-1].isdigit() and str(evaluate_ctlpp(text, tables)[0]) == answer
