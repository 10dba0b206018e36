"""training/average_checkpoints.py: the uniform mean of several checkpoints' weights, as a folder that loads."""

import pytest
import torch

from average_checkpoints import average_checkpoints, average_state_dicts
from modeling_ndr import NDRConfig, NDRForSequenceClassification
from modeling_ndr.training import UsageError


def tiny(seed: int, **fields) -> NDRForSequenceClassification:
    torch.manual_seed(seed)
    values = dict(vocab_size=12, hidden_size=8, intermediate_size=8, num_attention_heads=2, num_hidden_layers=2)
    return NDRForSequenceClassification(NDRConfig(num_labels=3, **{**values, **fields}))


def test_the_average_is_the_mean_of_every_weight_and_loads_with_the_last_folders_config(tmp_path):
    folders = []
    for seed in range(3):
        folders.append(tmp_path / f"checkpoint-{seed}")
        tiny(seed, num_hidden_layers=2 + seed).save_pretrained(folders[-1])  # the config differs, not the weights
    average_checkpoints([str(folder) for folder in folders], str(tmp_path / "averaged"))
    averaged = NDRForSequenceClassification.from_pretrained(tmp_path / "averaged")
    assert averaged.config.num_hidden_layers == 4, "the configuration of the last input"
    models = [NDRForSequenceClassification.from_pretrained(folder) for folder in folders]
    for name, weight in averaged.state_dict().items():
        expected = sum(model.state_dict()[name].double() for model in models) / 3
        torch.testing.assert_close(weight.double(), expected, atol=1e-7, rtol=0, msg=name)
    assert not torch.equal(averaged.state_dict()["classifier.weight"], models[0].state_dict()["classifier.weight"])


def test_checkpoints_of_other_shapes_are_one_error_naming_the_folder_and_the_tensor():
    small, wide = tiny(0).state_dict(), tiny(0, hidden_size=12).state_dict()
    with pytest.raises(UsageError, match=r"^wide: tensor '.*' has shape \(\d+(, \d+)*\), small \("):
        average_state_dicts([small, wide], ["small", "wide"])
    fewer = {key: value for key, value in small.items() if not key.startswith("classifier")}
    with pytest.raises(UsageError, match=r"^fewer: tensor 'classifier\.(bias|weight)' is in only one of it and small"):
        average_state_dicts([small, fewer], ["small", "fewer"])


def test_a_folder_without_weights_or_an_output_among_the_inputs_is_refused(tmp_path):
    tiny(0).save_pretrained(tmp_path / "a")
    with pytest.raises(UsageError, match=r"empty: no model\.safetensors"):
        average_checkpoints([str(tmp_path / "a"), str(tmp_path / "empty")], str(tmp_path / "out"))
    with pytest.raises(UsageError, match=r"--output_dir .* is one of the inputs"):
        average_checkpoints([str(tmp_path / "a")], str(tmp_path / "a"))
