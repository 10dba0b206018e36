"""The training subpackage `modeling_ndr.training` on its own: what `import modeling_ndr` leaves out, and the reusable
pieces (presets, samplers, per-depth metrics, own-file reading, checkpoint adaptation) without a training run."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from modeling_ndr import build_tokenizer
from modeling_ndr.training import UsageError, adapted_checkpoint, parse_config_overrides, read_variant
from ndr_training import DataArguments, config_values, encode, flags_on_command_line, parse_arguments, prepare_own_data
from ndr_training.checkpoints import new_model


REPO = Path(__file__).resolve().parents[2]


def imported_modules(code: str) -> set[str]:
    """The modules a fresh interpreter has imported after running `code`."""
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def test_import_modeling_ndr_stays_light():
    """`import modeling_ndr` imports neither the training subpackage nor datasets / evaluate, and no accelerate
    module beyond those transformers' own model classes import."""
    transformers_alone = imported_modules("from transformers import AutoModel, PreTrainedModel")
    package = imported_modules("import modeling_ndr")
    heavy = {"modeling_ndr.training", "datasets", "evaluate"}
    assert not heavy & package, f"import modeling_ndr imported {sorted(heavy & package)}"
    accelerate = {name for name in package - transformers_alone if name.split(".")[0] == "accelerate"}
    assert not accelerate, f"import modeling_ndr imported {sorted(accelerate)[:5]} beyond what transformers does"
    assert "datasets" in imported_modules("import modeling_ndr.training"), "the check above can fail"


# ------------------------------------------------------------------------------------------------------ presets


# ------------------------------------------------------------------------------------------ maintainer habits


def test_pre_commit_runs_the_ruff_version_of_the_test_extra():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    with open(REPO / "pyproject.toml", "rb") as f:
        test_extra = tomllib.load(f)["project"]["optional-dependencies"]["test"]
    pinned = next(re.fullmatch(r"ruff==(\S+)", item).group(1) for item in test_extra if item.startswith("ruff"))
    hooks = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())["repos"]
    ruff = next(hook for hook in hooks if hook["repo"].endswith("/ruff-pre-commit"))
    assert ruff["rev"] == f"v{pinned}", "make lint and the pre-commit hook must run one ruff version"
    assert {hook["id"] for hook in ruff["hooks"]} == {"ruff-check", "ruff-format"}


def test_flags_on_command_line_finds_flags_however_they_are_spelled():
    """A preset's value gives way only to a flag really given: `--n-train=5`, an abbreviation argparse accepts
    (`--n_tr 5`) and a boolean without a value count; values that look like flags do not."""
    argv = ["--preset", "ctl_cpu", "--n-train=5", "--n_ev", "3", "--balance_depths", "--eval_files", "a=b", "c=d",
            "--learning_rate", "1e-3", "--no_remove_unused_columns", "--readout", "first"]  # fmt: skip
    assert flags_on_command_line(argv) == {
        "preset", "n_train", "n_eval", "balance_depths", "eval_files", "learning_rate", "remove_unused_columns",
        "readout",
    }  # fmt: skip
    assert flags_on_command_line([]) == set()


def test_an_abbreviated_model_flag_wins_over_the_variant(tmp_path):
    """The order of `config_values`: preset < variant < flags on the command line < --config_overrides."""
    preset = tmp_path / "preset.yaml"
    preset.write_text("task: ctl\nhidden_size: 64\ncopy_gate: true\ngate_dropout: 0.3\n")
    argv = ["--preset", str(preset), "--variant", "transformer", "--hidden_si", "32", "--gate_dropout", "0.2",
            "--config_overrides", "gate_dropout=0.1,eval_num_hidden_layers=null",
            "--output_dir", str(tmp_path)]  # fmt: skip
    _, model_args, run_args, _, _ = parse_arguments(argv)
    values = config_values(model_args, read_variant(run_args.variant), flags_on_command_line(argv))
    assert values["hidden_size"] == 32, "an abbreviated flag (--hidden_si) is a flag on the command line"
    assert values["copy_gate"] is False, "the variant wins over the preset"
    assert values["gate_dropout"] == 0.1 and values["eval_num_hidden_layers"] is None, "--config_overrides wins"


def test_config_overrides_are_read_as_yaml_and_checked():
    assert parse_config_overrides("hidden_size=64, copy_gate=false,readout=first,gate_bias_init=-3") == {
        "hidden_size": 64, "copy_gate": False, "readout": "first", "gate_bias_init": -3
    }  # fmt: skip
    with pytest.raises(UsageError, match=r"\['hiden_size'\] are not NDRConfig fields"):
        parse_config_overrides("hiden_size=3")


# ------------------------------------------------------------------------------------------------ own data files


def write_rows(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".csv":
        path.write_text("\n".join([",".join(rows[0])] + [",".join(str(v) for v in row.values()) for row in rows]))
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_own_files_are_read_checked_and_encoded_by_label_name(tmp_path):
    rows = [{"sentence": "x y", "answer": 10, "level": 1}, {"sentence": "y x", "answer": 2, "level": 2}] * 3
    data_args = DataArguments(
        train_file=str(write_rows(tmp_path / "train.csv", rows)),
        eval_files=[f"deep={write_rows(tmp_path / 'deep.jsonl', rows[:2])}"],
        text_column="sentence", label_column="answer", depth_column="level",
    )  # fmt: skip
    data, sources, label_names = prepare_own_data(data_args)
    assert list(data) == ["train", "deep"] and sources["deep"].startswith("--eval_files ")
    assert label_names == ["2", "10"], "numeric labels sort as numbers (class_encode_column sorts '10' before '2')"
    assert data["deep"].column_names == ["text", "label", "depth"] and data["deep"][0]["text"] == "x y"
    tokenizer = build_tokenizer(texts=["x y"])
    encoded = encode(data, tokenizer, {"10": 0, "2": 1})  # a checkpoint's own order of the same labels
    assert encoded["deep"]["labels"] == [0, 1] and encoded["deep"]["depth"] == [1, 2]


def test_labels_differing_only_in_case_stay_apart(tmp_path):
    """`Dataset.align_labels_with_mapping` lowercases label names (`A` and `a` would become one class), so labels
    are looked up by their exact names."""
    path = write_rows(tmp_path / "train.jsonl", [{"text": "x", "label": "A"}, {"text": "y", "label": "a"}])
    data, _, label_names = prepare_own_data(DataArguments(train_file=str(path)))
    assert label_names == ["A", "a"]
    assert encode(data, build_tokenizer(texts=["x y"]), {"A": 0, "a": 1})["train"]["labels"] == [0, 1]


@pytest.mark.parametrize(
    "content, message",
    [("", "the file is empty"), ('{"text": "x"}\n', "no column 'label' \\(--label_column\\)"),
     ('{"text": "x", "label": null}\n', "label")],
)  # fmt: skip
def test_a_bad_own_file_is_one_line_naming_it(tmp_path, content, message):
    (tmp_path / "train.jsonl").write_text(content)
    with pytest.raises(UsageError, match=message) as error:
        prepare_own_data(DataArguments(train_file=str(tmp_path / "train.jsonl")))
    assert "train.jsonl" in str(error.value) and "\n" not in str(error.value)


# ------------------------------------------------------------------------------------------ checkpoint adaptation


def test_a_checkpoint_is_adapted_to_new_words_and_new_labels(tmp_path):
    values = {"hidden_size": 8, "intermediate_size": 8, "num_attention_heads": 1, "num_hidden_layers": 1}
    tokenizer, model = new_model(None, values, ["no", "yes"], ["a b c"])
    model.save_pretrained(tmp_path / "old")
    tokenizer.save_pretrained(tmp_path / "old")
    same_tokenizer, same = adapted_checkpoint(str(tmp_path / "old"), None, {}, ["yes", "no"], ["a b"])
    assert len(same_tokenizer) == len(tokenizer) and same.config.id2label == {0: "no", 1: "yes"}, "ids kept"
    assert torch.equal(same.classifier.weight, model.classifier.weight), "the same labels keep the head"
    grown_tokenizer, grown = adapted_checkpoint(str(tmp_path / "old"), None, {}, ["x", "y", "z"], ["a d e"])
    assert len(grown_tokenizer) == len(tokenizer) + 2 == grown.config.vocab_size, "d and e are added"
    embeddings = grown.get_input_embeddings().weight
    assert torch.equal(embeddings[: len(tokenizer)], model.get_input_embeddings().weight), "old rows kept"
    assert grown.classifier.weight.shape[0] == 3, "three labels: a new head"
    with pytest.raises(UsageError, match="hidden_size=16 \\(the checkpoint has 8\\)"):
        adapted_checkpoint(str(tmp_path / "old"), None, {"hidden_size": 16}, ["no", "yes"], ["a"])
