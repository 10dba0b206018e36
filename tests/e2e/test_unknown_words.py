"""Words the model has never seen, end to end: train.py refuses evaluation data with words its training data never
shows, and evaluate_model.py data with words the model's tokenizer lacks, each in one line naming them (exit status
2), unless `--unknown_words unk` asks for [UNK]. (The tokenizer's own error: tests/unit/test_tokenizer.py; the
pipeline on a released model: tests/e2e/test_released_models.py.)"""

import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]


def run_script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "training" / name), *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO)  # fmt: skip


def test_evaluation_words_the_training_data_never_shows_stop_train_py_in_one_line(tmp_path):
    rows = "".join(f'{{"text": "{t}", "label": "{label}"}}\n' for t, label in [("a b", "x"), ("b a", "y")] * 3)
    (tmp_path / "train.jsonl").write_text(rows)
    (tmp_path / "test.jsonl").write_text('{"text": "a q", "label": "x"}\n{"text": "r b", "label": "y"}\n')
    common = ["--train_file", str(tmp_path / "train.jsonl"), "--test_file", str(tmp_path / "test.jsonl"),
              "--max_steps", "1", "--report_to", "none", "--use_cpu"]  # fmt: skip
    refused = run_script("train.py", *common, "--output_dir", str(tmp_path / "refused"))
    last = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 2 and refused.stderr.count("error:") == 1, refused.stderr[-2000:]
    assert last.startswith("train.py: error: test: 2 words are not in the model's tokenizer: ['q', 'r']; --unknown_w")
    assert not (tmp_path / "refused" / "checkpoint-1").exists(), "refused before training"


def test_evaluate_model_names_the_words_a_released_model_does_not_know(tmp_path):
    (tmp_path / "deeper.jsonl").write_text('{"text": "101 a z", "label": "000", "depth": 2}\n')
    model = str(REPO / "hub_cards" / "models" / "ndr-ctl-forward")
    refused = run_script("evaluate_model.py", model, "--file", str(tmp_path / "deeper.jsonl"))
    last = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 2 and refused.stderr.count("error:") == 1, refused.stderr[-2000:]
    assert last == (
        "evaluate_model.py: error: deeper: 1 words are not in the model's tokenizer: ['z']; --unknown_words unk reads "
        "them as [UNK]"
    )
    read = run_script("evaluate_model.py", model, "--file", str(tmp_path / "deeper.jsonl"), "--unknown_words", "unk")
    assert read.returncode == 0, read.stderr[-2000:]
