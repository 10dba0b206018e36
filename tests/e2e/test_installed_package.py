"""The installed package stands on its own: its wheel, installed into a fresh virtual environment, works from a folder
outside the checkout. It loads a released model through `pipeline`, resolves a preset and writes a model card — the
presets and card templates travel as package data, not as files of the checkout — and the checkout's `train.py`
trains a preset and fine-tunes on a user's file with it."""

import os
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]

SNIPPET = textwrap.dedent(
    """
    import json, os, sys
    import modeling_ndr
    from transformers import pipeline
    from modeling_ndr.training import export_model, read_preset
    from modeling_ndr.training.presets import available_presets

    checkout = sys.argv[1]
    assert not modeling_ndr.__file__.startswith(checkout), modeling_ndr.__file__
    classify = pipeline("text-classification", model=os.path.join(checkout, "hub_cards", "models", "ndr-ctl-forward"))
    print("prediction", classify("101 d a b i")[0]["label"])
    print("preset", read_preset("listops_cpu")["task"], "ctl_cpu" in available_presets())
    export_model(os.path.join(checkout, "hub_cards", "models", "ndr-ctl-forward"), "card")
    print("card", open(os.path.join("card", "README.md")).read().count("ndr"))
    """
)


# train.py run by the venv's Python with the installed package (never the checkout's): argv[1] is the checkout
RUN_TRAIN_PY = textwrap.dedent(
    """
    import os, runpy, sys
    import modeling_ndr

    checkout = sys.argv[1]
    assert not modeling_ndr.__file__.startswith(checkout), modeling_ndr.__file__
    script = os.path.join(checkout, "training", "train.py")
    sys.path.insert(0, os.path.dirname(script))  # as `python training/train.py` puts its folder first
    sys.argv = [script, *sys.argv[2:]]
    runpy.run_path(script, run_name="__main__")
    """
)
# a user's own file for fine-tuning the CTL model: texts in its words, one class per text
USER_ROWS = [("101 a b", "0"), ("110 c", "1"), ("011 a c d", "2"), ("100 b", "3")] * 4


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(out)], check=True, capture_output=True, timeout=300)  # fmt: skip
    return next(out.glob("ndr-*.whl"))


def test_the_wheel_holds_the_presets_and_the_card_templates(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for name in ("modeling_ndr/configuration/ctl_cpu.yaml", "modeling_ndr/configuration/variants/ndr.yaml",
                 "modeling_ndr/templates/model_card_template.md", "modeling_ndr/geometric_ndr_cpu.cpp",
                 "modeling_ndr/metrics/depth_accuracy/depth_accuracy.py"):  # fmt: skip
        assert name in names, f"{name} is not in the wheel"


def test_the_wheel_holds_no_release_tooling_and_no_module_over_450_lines(wheel):
    """How we build, continue and compare our releases stays in the checkout (hub_cards/, training/); the library
    keeps to the house's module size (the modeling file aside, as transformers keeps one per model)."""
    archive = zipfile.ZipFile(wheel)
    modules = [name for name in archive.namelist() if name.endswith(".py")]
    for tooling in ("continuation", "cooldown", "comparison", "gpu_session", "release_line", "file_parts"):
        assert not [name for name in modules if tooling in name], f"{tooling} is release tooling, not the library"
    for name in modules:
        lines = archive.read(name).decode().count("\n")
        assert name == "modeling_ndr/modeling_ndr.py" or lines <= 450, f"{name} has {lines} lines (at most 450)"


def test_the_wheel_in_a_fresh_venv_loads_a_release_writes_a_card_trains_a_preset_and_fine_tunes(wheel, tmp_path):
    """A new venv gets the wheel; its dependencies (torch, transformers, ...) come from this environment's
    site-packages through a `.pth` line, which does not bring the checkout's editable install along."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, str(wheel)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([python, "-c", SNIPPET, str(REPO)], cwd=elsewhere, capture_output=True, text=True,
                            env=dict(env, OMP_NUM_THREADS="1"), timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert lines["preset"] == "listops True", result.stdout
    assert int(lines["card"]) > 0 and "prediction" in lines, result.stdout

    # the checkout's train.py (a script, as transformers' examples are), run by the installed package from elsewhere:
    # a preset trained for a few steps, then fine-tuned on a file of the user's, each exported with its card
    (elsewhere / "mine.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in USER_ROWS))
    tiny = ["--direction", "backward", "--n_train", "256", "--n_eval", "32", "--hidden_size", "32",
            "--intermediate_size", "64", "--num_hidden_layers", "3", "--per_device_train_batch_size", "32",
            "--per_device_eval_batch_size", "64", "--disable_tqdm", "true"]  # fmt: skip
    runs = {
        "preset": ["--preset", "ctl_cpu", *tiny, "--max_steps", "4", "--output_dir", "preset_run"],
        "finetune": ["--model_name_or_path", "preset_run/export", "--train_file", "mine.csv", "--max_steps", "3",
                     "--per_device_train_batch_size", "4", "--disable_tqdm", "true", "--output_dir", "own_run"],
    }  # fmt: skip
    for name, argv in runs.items():
        result = subprocess.run([python, "-c", RUN_TRAIN_PY, str(REPO), *argv], cwd=elsewhere, capture_output=True,
                                text=True, env=dict(env, OMP_NUM_THREADS="1"), timeout=600)  # fmt: skip
        assert result.returncode == 0, f"{name}: {result.stderr[-3000:]}"
        export = elsewhere / argv[argv.index("--output_dir") + 1] / "export"
        assert (export / "model.safetensors").is_file() and "ndr" in (export / "README.md").read_text(), name
