"""Bad input gives a clear error that names what is wrong (or a correct finite result), never silent garbage."""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scripts import load_script
from tiny import tiny_config

from modeling_ndr import (
    NDRForSequenceClassification,
    NDRModel,
    build_tokenizer,
    load_task,
    task_tokenizer,
    training,
)


REPO = Path(__file__).resolve().parents[2]


def batch(size=2, length=5):
    input_ids = torch.randint(4, 12, (size, length), generator=torch.Generator().manual_seed(0))
    return input_ids, torch.ones_like(input_ids)


# ------------------------------------------------------------------------------------------------------- config


@pytest.fixture
def saved_model(tmp_path):
    NDRForSequenceClassification(tiny_config()).save_pretrained(tmp_path / "saved")
    return tmp_path / "saved"


@pytest.mark.parametrize("field, value", [("hidden_size", -3), ("readout", "bogus"), ("gate_dropout", 1.5)])
def test_from_pretrained_checks_config_overrides(saved_model, field, value):
    with pytest.raises(ValueError, match=f"NDRConfig.{field}="):
        NDRForSequenceClassification.from_pretrained(saved_model, **{field: value})


@pytest.mark.parametrize("field, value", [("readout", "middle"), ("hidden_size", 0), ("num_hidden_layers", True)])
def test_a_config_changed_after_construction_is_checked_at_once(field, value):
    config = tiny_config()
    with pytest.raises(ValueError, match=f"NDRConfig.{field}="):
        setattr(config, field, value)


def test_rules_between_fields_are_checked_when_a_model_is_built_and_when_saved(tmp_path):
    config = tiny_config()
    config.num_attention_heads = 3  # a valid value alone, but 16 is not divisible by 3
    with pytest.raises(ValueError, match="NDRConfig.hidden_size=16.*num_attention_heads=3"):
        NDRModel(config)
    with pytest.raises(ValueError, match="num_attention_heads=3"):
        config.save_pretrained(tmp_path / "config")
    assert not (tmp_path / "config" / "config.json").exists(), "an invalid config must not be written"


@pytest.mark.parametrize(
    "field, value",
    [
        ("layer_norm_eps", math.nan),
        ("gate_bias_init", math.nan),
        ("gate_bias_init", math.inf),
        ("initializer_range", -0.1),
        ("initializer_range", math.nan),
        ("num_labels", 0),
        ("num_labels", -2),
    ],
)
def test_values_that_would_give_wrong_results_are_refused(field, value):
    with pytest.raises(ValueError, match=f"NDRConfig.{field}="):
        tiny_config(**{field: value})


def test_numpy_and_torch_scalars_are_accepted_and_stored_as_python_numbers():
    config = tiny_config(
        hidden_size=np.int64(32), hidden_dropout_prob=np.float32(0.25), num_hidden_layers=torch.tensor(3),
        copy_gate=np.bool_(True),
    )  # fmt: skip
    assert type(config.hidden_size) is int and config.hidden_size == 32
    assert type(config.hidden_dropout_prob) is float and config.hidden_dropout_prob == 0.25
    assert type(config.num_hidden_layers) is int and type(config.copy_gate) is bool
    assert '"hidden_size": 32' in config.to_json_string(), "the config stays JSON-serialisable"
    model = NDRModel(config).eval()
    input_ids, mask = batch()
    out = model(input_ids, attention_mask=mask, num_steps=np.int64(4), output_hidden_states=True)
    assert len(out.hidden_states) == 5, "a numpy integer is a valid step count"


def test_num_steps_must_be_a_positive_integer_not_a_bool():
    model = NDRModel(tiny_config()).eval()
    input_ids, mask = batch()
    for bad in (True, 0, 2.5):
        with pytest.raises(ValueError, match="num_steps="):
            model(input_ids, attention_mask=mask, num_steps=bad)


# ------------------------------------------------------------------------------------------------------- inputs


def test_first_readout_with_an_all_padding_row_names_the_row():
    model = NDRForSequenceClassification(tiny_config(readout="first")).eval()
    input_ids, mask = batch(3)
    mask[1] = 0
    with pytest.raises(ValueError, match=r"rows \[1\] hold no token"):
        model(input_ids, attention_mask=mask)


def test_sequence_length_zero_is_refused():
    model = NDRForSequenceClassification(tiny_config()).eval()
    with pytest.raises(ValueError, match="sequence length 0"):
        model(torch.zeros(2, 0, dtype=torch.long))


@pytest.mark.parametrize(
    "mask_shape", [(3, 5), (2, 4), (2, 1, 5), (2, 1, 5, 5)], ids=["batch", "length", "3-D", "4-D"]
)
def test_attention_mask_of_the_wrong_shape_is_refused(mask_shape):
    model = NDRForSequenceClassification(tiny_config()).eval()
    input_ids, _ = batch(2, 5)
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(batch, seq\) = \(2, 5\)"):
        model(input_ids, attention_mask=torch.ones(mask_shape, dtype=torch.long))


def test_attention_mask_values_other_than_zero_and_one_are_refused():
    model = NDRModel(tiny_config()).eval()
    input_ids, mask = batch()
    mask[0, 0] = 2
    with pytest.raises(ValueError, match=r"only 0 \(padding\) and 1 \(token\); found \[2\]"):
        model(input_ids, attention_mask=mask)


def test_a_misspelt_forward_keyword_raises():
    model = NDRForSequenceClassification(tiny_config()).eval()
    input_ids, mask = batch()
    with pytest.raises(TypeError, match="atention_mask"):
        model(input_ids, atention_mask=mask)
    with pytest.raises(TypeError, match="depth"):
        model.ndr(input_ids, attention_mask=mask, depth=torch.zeros(2))


def test_labels_out_of_range_name_the_label_count():
    model = NDRForSequenceClassification(tiny_config()).eval()
    input_ids, mask = batch()
    with pytest.raises(ValueError, match=r"labels \[9\] are out of range: this model has num_labels=3"):
        model(input_ids, attention_mask=mask, labels=torch.tensor([0, 9]))


def test_a_training_forward_on_the_cpu_still_checks_input_values():
    """Only a training forward on a GPU leaves the value checks to the data pipeline (tests/fake_cuda/ checks that
    it reads nothing); on the CPU a read waits for nothing, so training mode checks as inference does."""
    model = NDRForSequenceClassification(tiny_config()).train()
    input_ids, mask = batch()
    with pytest.raises(ValueError, match=r"labels \[9\] are out of range"):
        model(input_ids, attention_mask=mask, labels=torch.tensor([0, 9]))


@pytest.mark.parametrize(
    "column, values, message",
    [
        ("input_ids", [[2, 5, 3], [2, 12, 3]], r"row 1: column 'input_ids' holds 12, outside the model's vocab_size"),
        ("attention_mask", [[1, 1, 1], [1, 2, 0]], r"row 1: column 'attention_mask' holds 2, outside 0 \(padding\)"),
        ("attention_mask", [[1, 1, 1], [0, 0, 0]], r"row 1: column 'attention_mask' holds no token"),
        ("labels", [0, 3], r"row 1: column 'labels' holds 3, outside the model's num_labels=3 classes"),
    ],
    ids=["token-id", "mask-value", "mask-without-token", "label"],
)
def test_encoded_data_is_checked_before_training(column, values, message):
    """What the model does not check in a training step on a GPU, train.py checks on the whole data first."""
    import datasets
    from ndr_training.data import check_encoded

    columns = {"input_ids": [[2, 5, 3], [2, 6, 3]], "attention_mask": [[1, 1, 1], [1, 1, 0]], "labels": [0, 2]}
    check_encoded(datasets.DatasetDict({"train": datasets.Dataset.from_dict(columns)}), tiny_config())  # passes
    columns[column] = values
    with pytest.raises(training.UsageError, match=f"^train {message}"):
        check_encoded(datasets.DatasetDict({"train": datasets.Dataset.from_dict(columns)}), tiny_config())


# ---------------------------------------------------------------------------------------- tokenizers and tasks


def test_build_tokenizer_refuses_non_strings_and_a_single_string_vocabulary():
    with pytest.raises(ValueError, match=r"texts\[0\] is 1 \(int\)"):
        build_tokenizer([1, 2])
    with pytest.raises(ValueError, match="vocabulary must be an iterable of tokens, not one string"):
        build_tokenizer(vocabulary="abc")


def test_task_tokenizer_truncation_cuts_at_its_max_length():
    tokenizer = task_tokenizer("ctl")
    assert tokenizer.model_max_length == 512
    ids = tokenizer(" ".join(["a"] * 600), truncation=True)["input_ids"]
    assert len(ids) == 512 and ids[-1] == tokenizer.eos_token_id, "truncation keeps [EOS] and cuts at 512"


def test_huge_task_sizes_are_refused_at_once_with_the_size_asked_for():
    with pytest.raises(ValueError, match="n_eval=1,000,000,000 is too large"):
        load_task("arithmetic", n_eval=10**9)
    with pytest.raises(ValueError, match="n_train=1,000,000,000 is too large"):
        load_task("arithmetic", n_train=10**9)
    with pytest.raises(ValueError, match="n_train=1000000 is more than"):
        load_task("ctl", n_train=10**6)


# ------------------------------------------------------------------------------------------ scripts, one line


def run_script(name: str, *args: str) -> subprocess.CompletedProcess:
    """`training/NAME` with `args`; `export.py` is the package's `python -m modeling_ndr.training export`."""
    program = ["-m", "modeling_ndr.training", "export"] if name == "export.py" else [str(REPO / "training" / name)]
    return subprocess.run([sys.executable, *program, *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO)  # fmt: skip


def load_train():
    return load_script("training/train.py", "ndr_train_bad_inputs")


def test_train_command_line_errors_are_one_line(tmp_path):
    bad_type = run_script("train.py", "--hidden_size", "abc")
    assert bad_type.returncode == 2 and bad_type.stderr.strip().count("\n") == 0, bad_type.stderr
    assert "argument --hidden_size/--hidden-size: invalid int value: 'abc'" in bad_type.stderr
    bad_value = run_script("train.py", "--preset", "ctl_cpu", "--config_overrides", "gate_dropout=1.5",
                           "--output_dir", str(tmp_path / "unused"))  # fmt: skip
    assert bad_value.returncode == 2 and bad_value.stderr.strip().count("\n") == 0, bad_value.stderr
    assert "NDRConfig.gate_dropout=1.5 is invalid" in bad_value.stderr
    assert not (tmp_path / "unused").exists(), "a refused run leaves no folder behind"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--config_overrides", "hiden_size=3"], r"\['hiden_size'\] are not NDRConfig fields"),
        (["--config_overrides", "hidden_size"], "is not of the form field=value"),
        (["--model_name_or_path", "no/such-model"], "no such folder, and no such model"),
        (["--resume_from_checkpoint", "/no/such/checkpoint"], "no such checkpoint folder"),
        (["--task", "sorting"], "--task 'sorting' is not a task"),
        (["--direction", "sideways"], "direction='sideways' is not allowed"),
    ],
)
def test_train_refuses_bad_settings_before_training(argv, message, tmp_path):
    train = load_train()
    with pytest.raises(training.UsageError, match=message):
        train.main(["--preset", "ctl_cpu", "--n_train", "100", "--n_eval", "8", "--output_dir", str(tmp_path)] + argv)


def test_train_names_an_unreadable_checkpoint_file(tmp_path):
    checkpoint = tmp_path / "checkpoint-5"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text("{}")
    (checkpoint / "model.safetensors").write_bytes(b"garbage")
    train = load_train()
    with pytest.raises(training.UsageError, match="checkpoint-5: model.safetensors cannot be read"):
        train.main(["--preset", "ctl_cpu", "--resume_from_checkpoint", str(checkpoint), "--output_dir", str(tmp_path)])


def test_train_checks_overrides_of_a_checkpoint_before_training(saved_model, tmp_path):
    train = load_train()
    common = ["--preset", "arithmetic_cpu", "--n_train", "300", "--n_eval", "8", "--output_dir", str(tmp_path)]
    with pytest.raises(training.UsageError, match="NDRConfig.gate_dropout=1.5"):
        train.main(common + ["--model_name_or_path", str(saved_model), "--gate_dropout", "1.5"])


def test_export_errors_are_one_line(tmp_path):
    missing = run_script("export.py", str(tmp_path / "nothing"), str(tmp_path / "out"))
    assert missing.returncode == 2 and "nothing: no such checkpoint folder" in missing.stderr, missing.stderr
    model_only = tmp_path / "model-only"
    NDRForSequenceClassification(tiny_config()).save_pretrained(model_only)
    no_tokenizer = run_script("export.py", str(model_only), str(tmp_path / "out"))
    assert no_tokenizer.returncode == 2 and "tokenizer.json is missing" in no_tokenizer.stderr, no_tokenizer.stderr
    assert no_tokenizer.stderr.strip().count("\n") == 0
