"""Your own task with train.py: data files, tokenizer and label adaptation when fine-tuning, the `evaluate` metric,
evaluate_model.py, and one-line errors for bad data. Tiny models and tens of samples, so the whole file runs in
about a minute on a CPU."""

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard
from scripts import load_script
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline, set_seed

import modeling_ndr
import ndr_training
from modeling_ndr import NDRForSequenceClassification, training
from modeling_ndr.metrics import DEPTH_ACCURACY
from modeling_ndr.training.evaluation import predict


REPO = Path(__file__).resolve().parents[2]
TINY_MODEL = [
    "--hidden_size", "16", "--intermediate_size", "16", "--num_attention_heads", "1", "--num_hidden_layers", "2",
    "--per_device_train_batch_size", "16", "--per_device_eval_batch_size", "64", "--learning_rate", "3e-3",
    "--use_cpu", "true", "--disable_tqdm", "true", "--report_to", "none", "--seed", "1",
]  # fmt: skip
SPLITS = ("iid_test", "ood_valid", "ood_test")


@pytest.fixture(scope="module")
def train():
    return load_script("training/train.py", "ndr_train_own_data")


@pytest.fixture(scope="module")
def lookup_data(tmp_path_factory):
    """The worked example's task, small: train depths 1-5 (~150 rows), 20 rows per evaluation split, as jsonl."""
    lookup = load_script("training/examples/lookup_task.py", "ndr_lookup_task")
    tables = lookup.task_tables(seed=3, n_new=9, extend_demo=False)
    splits = lookup.make_splits(tables, seed=3, n_train_per_depth=20, n_iid_per_depth=5, n_ood=20)
    folder = tmp_path_factory.mktemp("lookup")
    for split, rows in splits.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder, splits


def data_flags(folder: Path, depth: bool = True) -> list[str]:
    flags = ["--train_file", str(folder / "train.jsonl"), "--eval_files"]
    flags += [f"{split}={folder / split}.jsonl" for split in SPLITS]
    return flags + (["--depth_column", "depth"] if depth else [])


@pytest.fixture(scope="module")
def jsonl_run(train, lookup_data, tmp_path_factory):
    """From scratch on jsonl files with a depth column; evaluation every 3 steps, selection on ood_valid."""
    folder, _ = lookup_data
    output_dir = tmp_path_factory.mktemp("jsonl") / "run"
    argv = data_flags(folder) + TINY_MODEL + [
        "--max_steps", "6", "--eval_strategy", "steps", "--eval_steps", "3", "--save_steps", "3",
        "--load_best_model_at_end", "true", "--metric_for_best_model", "ood_valid_accuracy",
        "--balance_depths", "true", "--output_dir", str(output_dir),
    ]  # fmt: skip
    return output_dir, train.main(argv)


# ------------------------------------------------------------------------------------------ training on your files


def test_every_extra_split_is_reported_by_the_depths_in_its_file(jsonl_run, lookup_data):
    output_dir, results = jsonl_run
    _, splits = lookup_data
    assert list(results) == list(SPLITS), "each --eval_files split is evaluated, in the order given"
    assert json.loads((output_dir / "eval_results.json").read_text()) == results
    for split in SPLITS:
        depths = {str(row["depth"]) for row in splits[split]}
        assert set(results[split]["by_depth"]) == depths, f"{split}: one accuracy per depth of its file"


def test_checkpoint_selection_uses_the_split_named_on_the_command_line(jsonl_run):
    output_dir, results = jsonl_run
    state = json.loads((output_dir / "checkpoint-6" / "trainer_state.json").read_text())
    evaluations = [e["eval_ood_valid_accuracy"] for e in state["log_history"] if "eval_ood_valid_accuracy" in e]
    assert len(evaluations) == 2 and state["best_metric"] == max(evaluations), "selected on ood_valid_accuracy"
    assert results["ood_valid"]["accuracy"] == pytest.approx(max(evaluations)), "the best checkpoint is reported"


def test_tokenizer_is_built_from_the_training_texts_and_saved_with_the_model(jsonl_run, lookup_data):
    output_dir, _ = jsonl_run
    _, splits = lookup_data
    tokenizer = AutoTokenizer.from_pretrained(output_dir / "export")
    words = {word for row in splits["train"] for word in row["text"].split()}
    assert words <= set(tokenizer.get_vocab()), "every training word has its own id"
    assert len(tokenizer) == len(words) + 4, "the training words and [PAD] [UNK] [BOS] [EOS], nothing else"


def test_export_reloads_through_a_pipeline_with_the_data_labels(jsonl_run, lookup_data):
    output_dir, _ = jsonl_run
    _, splits = lookup_data
    config = json.loads((output_dir / "export" / "config.json").read_text())
    labels = sorted({row["label"] for row in splits["train"]})
    assert list(config["id2label"].values()) == labels, "labels are the data's, sorted"
    classify = pipeline("text-classification", model=str(output_dir / "export"))
    assert classify(splits["ood_test"][0]["text"])[0]["label"] in labels
    card = ModelCard.load(output_dir / "export" / "README.md")
    assert {r.dataset_split for r in card.data.eval_results} == set(SPLITS), "the card reports every split"


@pytest.mark.parametrize("with_depth", [True, False])
def test_trains_from_csv_with_own_column_names_and_numeric_labels(train, tmp_path, with_depth):
    rows = [("x y", 2, 1), ("y x", 10, 1), ("x x y", 2, 2), ("y y x", 10, 2)] * 6
    header = "sentence,answer" + (",level" if with_depth else "")
    for split, part in (("train", rows), ("deep", rows[:8])):
        lines = [f"{t},{a}" + (f",{d + 1}" if with_depth else "") for t, a, d in part]
        (tmp_path / f"{split}.csv").write_text("\n".join([header, *lines]) + "\n")
    argv = ["--train_file", str(tmp_path / "train.csv"), "--eval_files", f"deep={tmp_path / 'deep.csv'}",
            "--text_column", "sentence", "--label_column", "answer", "--max_steps", "2",
            "--output_dir", str(tmp_path / "run")] + TINY_MODEL  # fmt: skip
    argv += ["--depth_column", "level"] if with_depth else []
    results = train.main(argv)
    expected = {"2": 1.0, "3": 1.0} if with_depth else {}
    assert set(results["deep"]["by_depth"]) == set(expected), "per-depth accuracy exactly when a depth column is given"
    config = json.loads((tmp_path / "run" / "export" / "config.json").read_text())
    assert list(config["id2label"].values()) == ["2", "10"], "numeric labels sort as numbers, not as text"
    classify = pipeline("text-classification", model=str(tmp_path / "run" / "export"))
    assert classify("x y")[0]["label"] in ("2", "10")
    assert "| deep |" in (tmp_path / "run" / "export" / "README.md").read_text(), "the card has the split's row"


def test_a_dataset_folder_trains_on_train_and_evaluates_its_other_splits(train, lookup_data, tmp_path):
    folder, splits = lookup_data
    dataset = tmp_path / "my_task"
    dataset.mkdir()
    for split in ("train", "test"):  # the names `datasets.load_dataset` recognises in a folder
        rows = splits["train" if split == "train" else "ood_test"]
        (dataset / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    argv = ["--dataset_name", str(dataset), "--depth_column", "depth", "--max_steps", "1",
            "--output_dir", str(tmp_path / "run")] + TINY_MODEL  # fmt: skip
    results = train.main(argv)
    assert list(results) == ["test"] and set(results["test"]["by_depth"]) == {"9", "10"}
    evaluate_model = load_script("training/evaluate_model.py", "ndr_evaluate_model")
    scores = evaluate_model.main([str(tmp_path / "run" / "export"), "--dataset_name", str(dataset),
                                  "--split", "test", "--depth_column", "depth"])  # fmt: skip
    assert scores["test"]["accuracy"] == pytest.approx(results["test"]["accuracy"]), "the same split, the same model"


@pytest.mark.parametrize(
    "flags, readout",
    [([], "last"), (["--readout", "first"], "first"), (["--task", "listops"], "first"), (["--task", "ctl"], "last")],
)
def test_readout_defaults_to_last_for_own_data_and_to_the_task_s(train, lookup_data, flags, readout, tmp_path):
    folder, _ = lookup_data
    data = [] if "--task" in flags else ["--train_file", str(folder / "train.jsonl")]
    argv = data + flags + ["--output_dir", str(tmp_path)]
    data_args, model_args, *_ = ndr_training.parse_arguments(argv)
    ndr_training.check_data_arguments(data_args, ndr_training.flags_on_command_line(argv), {})
    _, model = ndr_training.build_tokenizer_and_model(data_args, model_args, ["0", "1"], ["101 j"])
    assert model.config.readout == readout


# ------------------------------------------------------------------------------------------------- fine-tuning


def fine_tune_data(folder: Path, rows: list[tuple[str, str]]) -> Path:
    path = folder / "new.jsonl"
    path.write_text("".join(json.dumps({"text": text, "label": label}) + "\n" for text, label in rows))
    return path


def test_fine_tuning_adds_new_words_and_keeps_the_old_embedding_rows(train, jsonl_run, tmp_path, caplog):
    checkpoint = jsonl_run[0] / "export"
    old_tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    old_embeddings = NDRForSequenceClassification.from_pretrained(checkpoint).get_input_embeddings().weight
    path = fine_tune_data(tmp_path, [("101 s j t", "000"), ("110 u k", "011")])
    argv = ["--model_name_or_path", str(checkpoint), "--train_file", str(path), "--output_dir", str(tmp_path / "o")]
    data_args, model_args, *_ = ndr_training.parse_arguments(argv)
    ndr_training.check_data_arguments(data_args, ndr_training.flags_on_command_line(argv), {})
    with caplog.at_level(logging.WARNING, logger="modeling_ndr.training"):
        tokenizer, model = ndr_training.build_tokenizer_and_model(
            data_args, model_args, ["000", "011"], ["101 s j t", "110 u k"]
        )
    assert len(tokenizer) == len(old_tokenizer) + 3 and model.config.vocab_size == len(tokenizer), "s, t, u added"
    assert {w: tokenizer.convert_tokens_to_ids(w) for w in old_tokenizer.get_vocab()} == old_tokenizer.get_vocab()
    rows = model.get_input_embeddings().weight
    assert torch.equal(rows[: len(old_tokenizer)], old_embeddings), "old ids keep their embedding rows unchanged"
    assert torch.cdist(rows[-3:], rows[-3:]).triu(1).sum() > 0, "new rows differ from each other (not one mean row)"
    assert "3 words of the data are new to the checkpoint's tokenizer (s t u)" in caplog.text


def test_fine_tuning_trains_the_new_embedding_rows(train, jsonl_run, tmp_path):
    checkpoint = jsonl_run[0] / "export"
    path = fine_tune_data(tmp_path, [("101 s j t", "000"), ("110 u k", "011")] * 8)
    argv = ["--model_name_or_path", str(checkpoint), "--train_file", str(path), "--max_steps", "3",
            "--weight_decay", "0", "--output_dir", str(tmp_path / "run")] + TINY_MODEL  # fmt: skip

    def initial_rows():  # what train.main builds before training: same seed, same calls
        data_args, model_args, _, training_args, _ = ndr_training.parse_arguments(argv)
        ndr_training.check_data_arguments(data_args, ndr_training.flags_on_command_line(argv), {})
        set_seed(training_args.seed)
        _, model = ndr_training.build_tokenizer_and_model(
            data_args, model_args, ["000", "011"], ["101 s j t", "110 u k"]
        )
        return model.get_input_embeddings().weight[-3:].detach().clone()

    before = initial_rows()
    assert torch.equal(before, initial_rows()), "the start of the new rows is reproducible from the seed"
    train.main(argv)
    after = NDRForSequenceClassification.from_pretrained(tmp_path / "run" / "export").get_input_embeddings().weight
    assert not torch.allclose(after[-3:], before), "the new words' rows are trained (weight decay is off)"


def build_for_labels(train, checkpoint: Path, labels: list[str], tmp_path: Path):
    path = fine_tune_data(tmp_path, [("101 j", label) for label in labels])
    argv = ["--model_name_or_path", str(checkpoint), "--train_file", str(path), "--output_dir", str(tmp_path / "o")]
    data_args, model_args, *_ = ndr_training.parse_arguments(argv)
    ndr_training.check_data_arguments(data_args, ndr_training.flags_on_command_line(argv), {})
    return ndr_training.build_tokenizer_and_model(data_args, model_args, labels, ["101 j"])[1]


def test_a_different_label_count_gets_a_new_head_and_says_so(train, jsonl_run, tmp_path, caplog):
    checkpoint = jsonl_run[0] / "export"
    with caplog.at_level(logging.WARNING, logger="modeling_ndr.training"):
        model = build_for_labels(train, checkpoint, ["even", "odd", "zero"], tmp_path)
    assert model.config.num_labels == 3 and model.config.id2label == {0: "even", 1: "odd", 2: "zero"}
    assert model.classifier.weight.shape[0] == 3
    assert "labels ['000'" in caplog.text and "the classification head is new" in caplog.text, caplog.text


def test_the_head_is_kept_only_for_the_same_label_set(train, jsonl_run, tmp_path):
    checkpoint = jsonl_run[0] / "export"
    old_head = NDRForSequenceClassification.from_pretrained(checkpoint).classifier.weight
    same = build_for_labels(train, checkpoint, [f"{v:03b}" for v in range(8)][::-1], tmp_path)
    assert torch.equal(same.classifier.weight, old_head), "the same labels (in any order) keep the trained head"
    assert same.config.id2label[0] == "000", "and the checkpoint's label ids"
    renamed = build_for_labels(train, checkpoint, [f"s{v}" for v in range(8)], tmp_path)
    assert not torch.equal(renamed.classifier.weight, old_head), "8 other labels: a new head of the same shape"


def test_fine_tuning_the_built_in_task_adapts_a_checkpoint_with_other_labels_and_words(train, jsonl_run, tmp_path):
    argv = ["--preset", "arithmetic_cpu", "--model_name_or_path", str(jsonl_run[0] / "export"), "--n_train", "300",
            "--n_eval", "8", "--max_steps", "1", "--eval_steps", "1", "--save_steps", "1",
            "--output_dir", str(tmp_path / "run")] + TINY_MODEL  # fmt: skip
    results = train.main(argv)
    config = json.loads((tmp_path / "run" / "export" / "config.json").read_text())
    assert list(config["id2label"].values()) == [str(d) for d in range(10)], "arithmetic's labels replace CTL's"
    assert "+" in AutoTokenizer.from_pretrained(tmp_path / "run" / "export").get_vocab(), "its symbols are added"
    assert set(results) == set(SPLITS)


# --------------------------------------------------------------------------------------------- the evaluate metric


def test_depth_accuracy_loads_offline_and_matches_a_direct_computation():
    import evaluate

    rng = np.random.default_rng(0)
    predictions, references, depths = rng.integers(0, 3, 200), rng.integers(0, 3, 200), rng.integers(1, 5, 200)
    result = evaluate.load(DEPTH_ACCURACY).compute(predictions=predictions, references=references, depths=depths)
    correct = predictions == references
    assert result["accuracy"] == pytest.approx(correct.mean())
    assert result["by_depth"] == pytest.approx({d: correct[depths == d].mean() for d in range(1, 5)})
    assert result["count_by_depth"] == {d: int((depths == d).sum()) for d in range(1, 5)}
    plain = evaluate.load(DEPTH_ACCURACY).compute(predictions=predictions, references=references)
    assert plain["accuracy"] == result["accuracy"] and plain["by_depth"] == {}, "depths are optional"


def test_depth_accuracy_needs_no_hub_even_where_the_hub_is_unreachable(tmp_path):
    script = (
        "import evaluate\nfrom modeling_ndr.metrics import DEPTH_ACCURACY\n"
        "print(evaluate.load(DEPTH_ACCURACY).compute(predictions=[1, 2], references=[1, 1], depths=[3, 4]))\n"
    )
    env = dict(os.environ, HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))
    env.pop("HF_HUB_OFFLINE", None)  # not offline mode: an attempt to reach the Hub would fail or hang here
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "'by_depth': {3: 1.0, 4: 0.0}" in result.stdout


def test_the_metric_script_ships_with_the_package():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    with open(REPO / "pyproject.toml", "rb") as f:
        patterns = tomllib.load(f)["tool"]["setuptools"]["package-data"]["modeling_ndr.metrics"]
    shipped = {p.relative_to(Path(DEPTH_ACCURACY).parent).as_posix() for pat in patterns
               for p in Path(DEPTH_ACCURACY).parent.glob(pat)}  # fmt: skip
    assert "depth_accuracy/depth_accuracy.py" in shipped, "package_data must include the metric's script"


# ------------------------------------------------------------------------------------------------ evaluate_model.py


def test_evaluate_model_gives_train_py_numbers_for_a_file(jsonl_run, lookup_data, tmp_path, capsys):
    output_dir, results = jsonl_run
    folder, _ = lookup_data
    evaluate_model = load_script("training/evaluate_model.py", "ndr_evaluate_model")
    scores = evaluate_model.main([str(output_dir / "export"), "--file", f"ood_test={folder / 'ood_test.jsonl'}",
                                  "--depth_column", "depth", "--output_json", str(tmp_path / "r.json")])  # fmt: skip
    for key in ("accuracy", "by_depth"):
        assert scores["ood_test"][key] == pytest.approx(results["ood_test"][key]), "train.py's numbers, same model"
    assert json.loads((tmp_path / "r.json").read_text()) == scores
    assert "| ood_test |" in capsys.readouterr().out, "the per-depth table is printed"


def test_evaluate_model_runs_on_a_split_of_a_built_in_task(jsonl_run, capsys):
    evaluate_model = load_script("training/evaluate_model.py", "ndr_evaluate_model")
    # the toy model never saw CTL's words: --unknown_words unk reads them as [UNK] (the default refuses them)
    scores = evaluate_model.main([str(jsonl_run[0] / "export"), "--task", "ctl", "--split", "ood_test",
                                  "--n_eval", "10", "--unknown_words", "unk"])  # fmt: skip
    assert list(scores) == ["ood_test"] and set(scores["ood_test"]["by_depth"]) == {"9", "10"}


RELEASED_LISTOPS = REPO / "hub_cards" / "models" / "ndr-listops"


@pytest.fixture(scope="module")
def listops_model(tmp_path_factory) -> str:
    """The released ListOps model's config and tokenizer with untrained weights (seed 0): a model that gets some rows
    right and most wrong whatever the release has learned by now (a well-trained release once got all 40 right)."""
    folder = tmp_path_factory.mktemp("untrained_listops")
    config = NDRForSequenceClassification.config_class.from_pretrained(RELEASED_LISTOPS)
    with torch.random.fork_rng():  # seeds the weights without reseeding the tests that run after this fixture
        torch.manual_seed(0)
        NDRForSequenceClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(RELEASED_LISTOPS).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def listops_by_first_token(tmp_path_factory, listops_model):
    """`--task listops --split iid_test --n_eval 40 --by_first_token` on `listops_model`: (rows, scores, printed
    output, the --output_json file's contents)."""
    evaluate_model = load_script("training/evaluate_model.py", "ndr_evaluate_model")
    output_json = tmp_path_factory.mktemp("by_first_token") / "r.json"
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        scores = evaluate_model.main([listops_model, "--task", "listops", "--split", "iid_test", "--n_eval", "40",
                                      "--by_first_token", "--output_json", str(output_json)])  # fmt: skip
    rows = modeling_ndr.load_task("listops", n_train=1, n_eval=40)["iid_test"]
    return rows, scores, output.getvalue(), json.loads(output_json.read_text())


def hand_count_by_operator_and_depth(rows, model_path) -> dict[tuple[str, int], list[bool]]:
    """Whether the ListOps model gets each row right (from `predict`), grouped by (first word, depth)."""
    model = AutoModelForSequenceClassification.from_pretrained(model_path).eval()
    predicted = predict(model, AutoTokenizer.from_pretrained(model_path), rows["text"]).label_ids
    name = rows.features["label"].int2str
    hits = defaultdict(list)
    for text, label, depth, label_id in zip(rows["text"], rows["label"], rows["depth"], predicted, strict=True):
        hits[text.split()[0], depth].append(model.config.id2label[int(label_id)] == name(label))
    return hits


def test_by_first_token_counts_what_predict_gets_right_per_operator_and_depth(listops_by_first_token, listops_model):
    rows, scores, _, written = listops_by_first_token
    hits = hand_count_by_operator_and_depth(rows, listops_model)
    by_token = scores["iid_test"]["by_first_token"]
    assert set(by_token) == {token for token, _ in hits}, "one entry per root operator of the rows"
    assert len({token for token, _ in hits}) > 1 and 0 < scores["iid_test"]["accuracy"] < 1, "a table that can differ"
    for (token, depth), correct in hits.items():
        assert by_token[token]["count_by_depth"][str(depth)] == len(correct), f"{token} depth {depth}: sample count"
        assert by_token[token]["by_depth"][str(depth)] == pytest.approx(np.mean(correct)), f"{token} depth {depth}"
    for token, entry in by_token.items():
        correct = [hit for (t, _), row_hits in hits.items() if t == token for hit in row_hits]
        assert (entry["accuracy"], entry["count"]) == (pytest.approx(np.mean(correct)), len(correct)), token
    assert written == scores, "--output_json holds the same by_first_token entries"


def test_by_first_token_prints_one_row_per_split_and_first_token(listops_by_first_token):
    _, scores, output, _ = listops_by_first_token
    table = output.split("per first token of the text (ListOps: the root operator) and depth:")[1]
    for token, entry in scores["iid_test"]["by_first_token"].items():
        depth, accuracy = next(iter(entry["by_depth"].items()))
        count = entry["count_by_depth"][depth]
        row = next((line for line in table.splitlines() if line.startswith(f"| iid_test | {token} |")), "")
        assert f"| {entry['accuracy']:.3f} ({entry['count']}) |" in row, f"{token}: accuracy (samples), all depths"
        assert f"{accuracy:.3f} ({count})" in row, f"{token}: accuracy (samples) at depth {depth}"


@pytest.mark.parametrize("source", ["--file", "--dataset_name"])
def test_by_first_token_gives_a_file_or_dataset_the_numbers_of_the_same_task_rows(
    listops_by_first_token, listops_model, source, tmp_path
):
    rows, scores, _, _ = listops_by_first_token
    name = rows.features["label"].int2str
    records = [{**row, "label": name(row["label"])} for row in rows]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    evaluate_model = load_script("training/evaluate_model.py", "ndr_evaluate_model")
    data = [source, str(tmp_path / "test.jsonl" if source == "--file" else tmp_path)]
    from_data = evaluate_model.main([listops_model, *data, "--depth_column", "depth", "--by_first_token"])
    assert from_data["test"]["by_first_token"] == scores["iid_test"]["by_first_token"], "same rows, same table"


def test_by_first_token_without_depths_reports_each_first_token_over_all_depths(
    listops_by_first_token, listops_model, tmp_path
):
    rows, scores, _, _ = listops_by_first_token
    name = rows.features["label"].int2str
    lines = [json.dumps({"text": row["text"], "label": name(row["label"])}) + "\n" for row in rows]
    (tmp_path / "flat.jsonl").write_text("".join(lines))
    evaluate_model = load_script("training/evaluate_model.py", "ndr_evaluate_model")
    by_token = evaluate_model.main([listops_model, "--file", str(tmp_path / "flat.jsonl"), "--by_first_token"])
    expected = {
        token: (entry["accuracy"], entry["count"]) for token, entry in scores["iid_test"]["by_first_token"].items()
    }
    assert {t: (e["accuracy"], e["count"]) for t, e in by_token["flat"]["by_first_token"].items()} == expected
    assert all(e["by_depth"] == {} for e in by_token["flat"]["by_first_token"].values()), "no depth column, no depths"


# ---------------------------------------------------------------------------------------------- bad input, one line


@pytest.fixture
def bad_files(tmp_path, lookup_data):
    folder, _ = lookup_data
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "header.csv").write_text("text,label\n")
    (tmp_path / "broken.jsonl").write_text('{"text": "101 j", "label": "000"}\n{"text": \n')
    (tmp_path / "notes.txt").write_text("101 j\n")
    (tmp_path / "unseen.jsonl").write_text('{"text": "101 j", "label": "999", "depth": 1}\n')
    (tmp_path / "holes.jsonl").write_text('{"text": "101 j", "label": "000"}\n{"text": null, "label": "000"}\n')
    return folder, tmp_path


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--text_column", "sentence"], r"train.jsonl: no column 'sentence' \(--text_column\); its columns are"),
        (["--validation_file", "{bad}/empty.jsonl"], "empty.jsonl: the file is empty"),
        (["--validation_file", "{bad}/header.csv"], "header.csv: the file holds no rows"),
        (["--validation_file", "{bad}/broken.jsonl"], "broken.jsonl line 2, column 10: malformed JSON"),
        (["--validation_file", "{bad}/missing.jsonl"], "missing.jsonl: no such file"),
        (["--validation_file", "{bad}/notes.txt"], "notes.txt: unknown file type '.txt'"),
        (["--validation_file", "{bad}/holes.jsonl"], "holes.jsonl line 2: column 'text' is null"),
        (["--eval_files", "odd={bad}/unseen.jsonl", "--depth_column", "depth"], r"labels \['999'\] never occur"),
        (["--depth_column", "level"], "no column 'level' \\(--depth_column\\)"),
        (
            [
                "--metric_for_best_model",
                "ood_valid_accuracy",
                "--eval_strategy",
                "steps",
                "--load_best_model_at_end",
                "true",
            ],
            "'ood_valid_accuracy' is not reported by this run: it evaluates \\['validation'\\]",
        ),  # fmt: skip
        (["--balance_depths", "true"], "--balance_depths needs --depth_column"),
        (["--task", "ctl"], "--task applies to the paper's tasks"),
        (["--eval_files", "ood"], "expected NAME=FILE"),
    ],
)
def test_bad_data_is_refused_in_one_line_before_training(train, bad_files, flags, message, tmp_path):
    folder, bad = bad_files
    flags = [flag.format(bad=bad) for flag in flags]
    if "--validation_file" not in flags:
        flags += ["--validation_file", str(folder / "iid_test.jsonl")]
    argv = ["--train_file", str(folder / "train.jsonl"), "--output_dir", str(tmp_path / "o")] + flags
    with pytest.raises(training.UsageError, match=message) as error:
        train.main(argv)
    assert "\n" not in str(error.value), "the message is one line"
    assert not (tmp_path / "o" / "run_config.json").exists(), "nothing ran"


def test_the_command_line_prints_a_data_error_as_one_line(lookup_data, tmp_path):
    folder, _ = lookup_data
    result = subprocess.run(
        [sys.executable, str(REPO / "training" / "train.py"), "--train_file", str(folder / "train.jsonl"),
         "--label_column", "answer", "--output_dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith("train.py: error: --train_file ")
    assert "no column 'answer' (--label_column)" in result.stderr and "Traceback" not in result.stderr


def test_evaluate_model_refuses_labels_the_model_does_not_know(jsonl_run, bad_files):
    _, bad = bad_files
    evaluate_model = load_script("training/evaluate_model.py", "ndr_evaluate_model")
    with pytest.raises(evaluate_model.UsageError, match=r"labels \['999'\] are not among the model's labels"):
        evaluate_model.main([str(jsonl_run[0] / "export"), "--file", str(bad / "unseen.jsonl")])


def test_by_first_token_refuses_a_text_without_a_first_token_in_one_line(tmp_path):
    (tmp_path / "blank.jsonl").write_text('{"text": "[SM 1 2 ]", "label": "3"}\n{"text": "  ", "label": "1"}\n')
    evaluate_model = load_script("training/evaluate_model.py", "ndr_evaluate_model")
    with pytest.raises(evaluate_model.UsageError, match=r"blank.jsonl line 2: column 'text' holds an empty text") as e:
        evaluate_model.main([str(RELEASED_LISTOPS), "--file", str(tmp_path / "blank.jsonl"), "--by_first_token"])
    assert "\n" not in str(e.value), "the message is one line"
