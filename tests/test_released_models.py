"""The released models (`hub_cards/models/ndr-*`, built by `make release`): each loads as a hub id from the offline
HF cache with `AutoModel` and `AutoModelForSequenceClassification`, and its accuracy on freshly generated `ood_test`
samples agrees with what its model card claims, within sampling error."""

import json
import math
import os
from pathlib import Path

import pytest
import torch
from hub_cache import install_in_hub_cache
from huggingface_hub import ModelCard
from scripts import load_script
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

from modeling_ndr import NDRForSequenceClassification, NDRModel, load_task, task_label_names
from modeling_ndr.tasks import ctl_compositions, split_depths


REPO = Path(__file__).resolve().parents[1]
MODELS = sorted(path for path in (REPO / "hub_cards" / "models").glob("ndr-*") if (path / "config.json").is_file())
ORG = "ndr-org"
N_FRESH = 300
FRESH_SEED = 2026  # not a seed any split of the training data was drawn from


def test_at_least_one_model_is_released():
    assert MODELS, "hub_cards/models/ holds no released model (make release)"


def test_every_release_is_built():
    module = load_script("hub_cards/make_model_repos.py")
    assert sorted(module.RELEASES) == [path.name for path in MODELS], "make release builds every folder in RELEASES"


def card_accuracy(folder: Path, split: str) -> float:
    card = ModelCard.load(folder / "README.md")
    values = [r.metric_value for r in card.data.eval_results if r.dataset_split == split and r.metric_config is None]
    assert len(values) == 1, f"the card's model-index has one {split} result"
    return values[0]


def fresh_ood_test(task: dict) -> tuple[list[str], list[str]]:
    """N_FRESH new `ood_test` samples of the released model's task: (texts, label names)."""
    name = task["task"]
    if name == "ctl":  # same function tables (the training data's seed), new samples
        depths = split_depths("ctl")["ood_test"]
        rows = ctl_compositions(depths, N_FRESH // len(depths), seed=task.get("task_seed") or 0,
                                direction=task.get("direction") or "forward", sample_seed=FRESH_SEED)  # fmt: skip
    else:
        # a small train split (arithmetic needs its 200 single operations in it); only ood_test is read
        rows = load_task(name, seed=FRESH_SEED, n_train=500, n_eval=N_FRESH)["ood_test"]
    names = task_label_names(name)
    return [row["text"] for row in rows], [names[row["label"]] if isinstance(row["label"], int) else row["label"]
                                           for row in rows]  # fmt: skip


@pytest.mark.parametrize("folder", MODELS, ids=[path.name for path in MODELS])
def test_released_model_loads_as_a_hub_id_and_matches_its_card_on_fresh_data(folder, hf_home, tmp_path, monkeypatch):
    files = set(os.listdir(folder))
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md", "run_config.json"} <= files
    assert not any(name.endswith(".py") for name in files), "the modeling code is added at push time, not committed"
    assert sum((folder / name).stat().st_size for name in files) < 3 * 2**20, "each release stays under 3 MB"
    config = json.loads((folder / "config.json").read_text())
    assert "AutoModelForSequenceClassification" in config["auto_map"] and config["id2label"]

    repo_id = f"{ORG}/{folder.name}"
    install_in_hub_cache(str(folder), repo_id, hf_home)
    monkeypatch.chdir(tmp_path)  # no local folder named like the repo id
    assert isinstance(AutoModel.from_pretrained(repo_id), NDRModel)
    model = AutoModelForSequenceClassification.from_pretrained(repo_id).eval()
    assert isinstance(model, NDRForSequenceClassification)
    tokenizer = AutoTokenizer.from_pretrained(repo_id)

    task = json.loads((folder / "run_config.json").read_text())["task"]
    texts, labels = fresh_ood_test(task)
    collate = DataCollatorWithPadding(tokenizer)
    correct = 0
    with torch.no_grad():
        for start in range(0, len(texts), 100):
            batch = collate([tokenizer(text) for text in texts[start : start + 100]])
            predictions = model(**batch).logits.argmax(-1).tolist()
            correct += sum(model.config.id2label[p] == label for p, label in zip(predictions, labels[start:]))
    accuracy = correct / len(texts)
    claimed = card_accuracy(folder, "ood_test")
    n_card = 1000  # train.py's evaluation splits
    sigma = math.sqrt(max(claimed * (1 - claimed), 0.01) * (1 / len(texts) + 1 / n_card))
    assert abs(accuracy - claimed) <= 4 * sigma, f"fresh ood_test {accuracy:.3f} vs the card's {claimed:.3f}"


@pytest.mark.parametrize("folder", MODELS, ids=[path.name for path in MODELS])
def test_released_weights_match_todays_model_key_for_key(folder):
    """Released weights must keep loading after later changes: every key and shape of the file is a parameter of the
    model built from its config today, and nothing is missing (`from_pretrained` would only warn)."""
    from safetensors import safe_open

    from modeling_ndr import NDRConfig

    model = NDRForSequenceClassification(NDRConfig.from_pretrained(folder))
    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    with safe_open(folder / "model.safetensors", "pt") as f:
        saved = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    assert saved == expected


def test_the_push_stage_adds_the_modeling_code_and_loads_without_the_package(tmp_path):
    """What `make push-release` uploads: the released files plus the modeling code, loadable with
    `trust_remote_code=True` in a Python where `modeling_ndr` cannot be imported."""
    import subprocess
    import sys
    import textwrap

    folder = MODELS[0]
    done = subprocess.run(
        [sys.executable, str(REPO / "hub_cards" / "make_model_repos.py"), "--stage", str(tmp_path / "stage"),
         "--names", folder.name],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    staged = tmp_path / "stage" / folder.name
    assert (staged / "modeling_ndr.py").is_file() and (staged / "configuration_ndr.py").is_file()
    assert (staged / "README.md").read_bytes() == (folder / "README.md").read_bytes(), "the released card, unchanged"
    script = textwrap.dedent(
        """
        import sys
        sys.modules["modeling_ndr"] = None  # the package is not importable here
        from transformers import AutoModelForSequenceClassification
        model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], trust_remote_code=True)
        print(type(model).__module__)
        """
    )
    (tmp_path / "load.py").write_text(script)
    loaded = subprocess.run([sys.executable, "load.py", str(staged)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert "transformers_modules" in loaded.stdout, "the model class came from the repository's own code"
