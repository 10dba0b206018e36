"""A token task from your own files (`train.py --train_file` with one label per word): it trains
`NDRForTokenClassification`, evaluates sequence and character accuracy per length, exports a folder that loads through
the token-classification pipeline, fine-tunes (from its own export and from a sequence classifier's), and each bad
row of the issue gets one line naming the file and line."""

import csv
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scripts import load_script
from tiny import tiny_train_args
from transformers import AutoModelForTokenClassification, pipeline

import modeling_ndr  # noqa: F401  (registers the NDR auto classes)
from modeling_ndr.training import UsageError


REPO = Path(__file__).resolve().parents[2]
TINY = tiny_train_args(
    preset=None, direction=None, n_train=None, n_eval=None, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
    per_device_train_batch_size=16, per_device_eval_batch_size=None, max_steps=12, eval_steps=6, save_steps=6,
    seed=3, report_to="none",
)  # fmt: skip


def reverse_row(generator: random.Random, length: int) -> dict:
    """`3 1 4 = _ _ _` -> the blanks answer `4 1 3`; the input and `=` are not scored."""
    digits = [str(generator.randint(0, 9)) for _ in range(length)]
    return {"text": " ".join([*digits, "=", *["_"] * length]), "label": [None] * (length + 1) + digits[::-1]}


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    folder, generator = tmp_path_factory.mktemp("token-task"), random.Random(0)
    return {
        "train": write_jsonl(folder / "train.jsonl", [reverse_row(generator, generator.randint(1, 4))
                                                      for _ in range(200)]),
        "iid": write_jsonl(folder / "iid.jsonl", [reverse_row(generator, generator.randint(1, 4)) for _ in range(24)]),
        "long": write_jsonl(folder / "long.jsonl", [reverse_row(generator, 6) for _ in range(16)]),
    }  # fmt: skip


def train(argv: list[str]) -> dict:
    return load_script("training/train.py", "ndr_train_token_task").main(argv)


@pytest.fixture(scope="module")
def trained(files, tmp_path_factory) -> tuple[Path, dict]:
    output_dir = tmp_path_factory.mktemp("run") / "reverse"
    results = train(["--train_file", files["train"], "--eval_files", f"iid={files['iid']}", f"long={files['long']}",
                     "--output_dir", str(output_dir), "--metric_for_best_model", "long_accuracy", *TINY])  # fmt: skip
    return output_dir, results


def test_a_token_task_from_files_evaluates_sequence_and_character_accuracy_per_length(trained):
    _, results = trained
    assert set(results) == {"iid", "long"}, results
    long = results["long"]
    assert set(long["by_length"]) == {"13"}, "the long rows have 13 words (6 digits, =, 6 blanks)"
    assert 0 <= long["accuracy"] <= long["character_accuracy"] <= 1, "a row is right only if every scored word is"
    assert len(results["iid"]["by_length"]) > 1, "the iid rows have several lengths, each reported"


def test_the_export_of_a_token_task_loads_as_a_token_classifier_and_its_pipeline_labels_each_word(trained):
    output_dir, _ = trained
    export = output_dir / "export"
    model = AutoModelForTokenClassification.from_pretrained(export)
    assert type(model).__name__ == "NDRForTokenClassification"
    assert "pipeline_tag: token-classification" in (export / "README.md").read_text(), "the card says what it does"
    tagged = pipeline("token-classification", model=str(export))("3 1 4 = _ _ _")
    assert [entity["word"] for entity in tagged] == ["3", "1", "4", "=", "_", "_", "_"], "a label for every word"
    assert {entity["entity"] for entity in tagged} <= set(model.config.label2id), "labels of the data"


def test_a_token_task_fine_tunes_its_own_export(trained, files, tmp_path):
    output_dir, _ = trained
    again = str(tmp_path / "again")
    results = train(["--model_name_or_path", str(output_dir / "export"), "--train_file", files["train"],
                     "--eval_files", f"long={files['long']}", "--output_dir", again, *TINY])  # fmt: skip
    assert "character_accuracy" in results["long"], results


def test_a_sequence_classifier_fine_tunes_on_a_token_task_with_a_new_head(files, tmp_path):
    texts = tmp_path / "sequence.jsonl"
    write_jsonl(texts, [{"text": f"{a} {b}", "label": str((a + b) % 3)} for a in range(10) for b in range(10)])
    train(["--train_file", str(texts), "--output_dir", str(tmp_path / "sequence"), *TINY])
    sequence = str(tmp_path / "sequence" / "export")
    token = str(tmp_path / "token")
    results = train(["--model_name_or_path", sequence, "--train_file", files["train"],
                     "--eval_files", f"long={files['long']}", "--output_dir", token, *TINY])  # fmt: skip
    assert "by_length" in results["long"], "the encoder of a sequence classifier trains on the token task"


def test_a_csv_of_space_separated_labels_is_a_token_task_with_token_labels(files, tmp_path):
    path = tmp_path / "train.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for line in Path(files["train"]).read_text().splitlines():
            row = json.loads(line)
            writer.writerow([row["text"], " ".join("null" if label is None else label for label in row["label"])])
    results = train(["--train_file", str(path), "--eval_files", f"long={files['long']}", "--token_labels", "true",
                     "--output_dir", str(tmp_path / "csv"), *TINY])  # fmt: skip
    assert "character_accuracy" in results["long"], results


@pytest.mark.parametrize(
    "bad, expected",
    [
        ({"text": "1 2 = _ _", "label": [None, None, None, "2"]}, "line 3: 4 labels for 5 words"),
        ({"text": "1 = _", "label": "1"}, "line 3: column 'label' holds a single label"),
        ({"text": "1 = _", "label": [None, None, None]}, "line 3: every label is null"),
    ],
    ids=["length-differs", "single-label-among-lists", "nothing-scored"],
)
def test_a_bad_row_of_a_token_task_is_one_line_naming_file_and_line(files, tmp_path, bad, expected):
    rows = [json.loads(line) for line in Path(files["train"]).read_text().splitlines()[:2]] + [bad]
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(UsageError, match=re.escape(f"--train_file {path} {expected}")):
        train(["--train_file", path, "--output_dir", str(tmp_path / "out"), *TINY])


def test_an_evaluation_label_never_seen_in_training_names_its_file_and_line(files, tmp_path):
    generator = random.Random(1)
    rows = [reverse_row(generator, 2) for _ in range(3)] + [{"text": "1 = _", "label": [None, None, "x"]}]
    path = write_jsonl(tmp_path / "eval.jsonl", rows)
    with pytest.raises(UsageError, match=re.escape(f"--eval_files {path} line 4: label 'x' never occurs")):
        train(["--train_file", files["train"], "--eval_files", f"long={path}", "--output_dir", str(tmp_path / "o"),
               *TINY])  # fmt: skip


def test_a_bad_token_task_row_is_one_line_and_exit_2_from_the_command_line(files, tmp_path):
    path = write_jsonl(
        tmp_path / "bad.jsonl", [{"text": "1 = _", "label": [None, "1"]}, {"text": "1", "label": ["1"]}]
    )
    result = subprocess.run([sys.executable, str(REPO / "training" / "train.py"), "--train_file", path, "--output_dir",
                             str(tmp_path / "o"), *TINY], capture_output=True, text=True, timeout=300)  # fmt: skip
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert last.startswith("train.py: error: --train_file") and "line 1: 2 labels for 3 words" in last, last


def test_a_generated_token_task_trains_with_task_and_reports_each_evaluation_length(tmp_path):
    output_dir = tmp_path / "carry"
    results = train(["--task", "carry", "--n_train", "400", "--n_eval", "4", "--output_dir", str(output_dir),
                     "--metric_for_best_model", "test_100_accuracy", *TINY])  # fmt: skip
    assert set(results) == {"test_40", "test_100", "test_400", "test_1000", "long_chains_40", "long_chains_100",
                            "long_chains_400", "long_chains_1000"}, results  # fmt: skip
    assert results["test_1000"]["by_length"].keys() == {"1000"}, "the length is the task's: digit positions"
    config = json.loads((output_dir / "export" / "config.json").read_text())
    assert config["architectures"] == ["NDRForTokenClassification"], "exported with the head it trained"
    card = (output_dir / "export" / "README.md").read_text()
    assert "load_token_task('carry'" in card, "the card names the data"
    assert re.search(r"Sequence accuracy \(every scored token of a row right\) of the last checkpoint", card), card
    assert "ood_valid" not in card, "a token task's card speaks of its own splits"
    example = json.loads((output_dir / "run_config.json").read_text())["example"]
    assert len(example["text"].split()) <= 40, f"the card's example is a short training row: {example['text']!r}"


def test_evaluate_model_scores_a_token_export_on_files_as_train_py_did(trained, files):
    output_dir, results = trained
    evaluate_model = load_script("training/evaluate_model.py", "ndr_evaluate_token_task")
    again = evaluate_model.main([str(output_dir / "export"), "--file", f"long={files['long']}"])
    assert again["long"]["character_accuracy"] == pytest.approx(results["long"]["character_accuracy"], abs=1e-6)
    assert again["long"]["by_length"] == pytest.approx(results["long"]["by_length"]), "the same rows, the same model"
    with pytest.raises(UsageError, match="is a token classifier"):
        evaluate_model.main([str(output_dir / "export"), "--task", "ctl"])


def test_a_depth_column_with_a_token_task_is_one_line(files, tmp_path):
    with pytest.raises(UsageError, match="--depth_column is for one label per text"):
        train(["--train_file", files["train"], "--depth_column", "depth", "--output_dir", str(tmp_path / "o"), *TINY])
