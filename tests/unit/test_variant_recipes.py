"""A variant's own recipe (`tasks:` and `presets:` sections of `configuration/variants/NAME.yaml`) and where it sits
in the precedence: preset < variant top level < variant's task section < variant's section for the preset named <
command line < --config_overrides (the docstring of `modeling_ndr.training.presets`)."""

import os
from dataclasses import fields

import pytest
import yaml

import ndr_training
from modeling_ndr import NDRConfig, training
from modeling_ndr.training.presets import VARIANT_DIR, read_variant
from ndr_training.arguments import ARGUMENT_CLASSES
from ndr_training.flags import variant_flags


def write(path, values) -> str:
    path.write_text(yaml.safe_dump(values))
    return str(path)


@pytest.fixture
def recipe(tmp_path):
    """A preset with a base, and a variant whose every layer sets something the layer below it also sets."""
    base = write(tmp_path / "base_p.yaml", {"task": "ctl", "learning_rate": 1.0, "hidden_size": 8, "max_steps": 10})
    child = write(tmp_path / "child_p.yaml", {"base": base, "weight_decay": 0.1})
    variant = write(
        tmp_path / "v.yaml",
        {
            "attention_type": "softmax",
            "hidden_size": 16,
            "num_hidden_layers": 3,
            "tasks": {
                "ctl": {"hidden_size": 24, "learning_rate": 0.2, "max_steps": 20, "num_attention_heads": 2},
                "listops": {"max_steps": 30},
            },
            "presets": {
                "base_p": {"learning_rate": 0.3, "weight_decay": 0.5},
                "child_p": {"weight_decay": 0.6, "num_attention_heads": 4},
            },
        },
    )
    return child, variant, tmp_path


def resolve(argv):
    """What train.py makes of a command line: (training arguments, NDRConfig fields)."""
    data_args, model_args, run_args, training_args, preset = ndr_training.parse_arguments(argv)
    given = ndr_training.flags_on_command_line(argv)
    ndr_training.check_data_arguments(data_args, given, preset)
    variant = read_variant(run_args.variant, data_args.task, run_args.preset)
    return training_args, ndr_training.config_values(model_args, variant, given)


def test_each_layer_wins_over_the_one_below(recipe):
    child, variant, tmp_path = recipe
    argv = ["--preset", child, "--variant", variant, "--output_dir", str(tmp_path / "out")]
    args, values = resolve(argv)
    assert args.max_steps == 20, "the task section wins over the preset"
    assert args.weight_decay == 0.6, "the preset's section wins over the preset"
    assert args.learning_rate == 0.2, "only the section of the preset named applies, not its base's"
    assert values["hidden_size"] == 24, "task section > variant top level > preset"
    assert values["num_attention_heads"] == 4, "a preset section's NDRConfig fields win over the task section's"
    assert (values["num_hidden_layers"], values["attention_type"]) == (3, "softmax"), "the top level applies"

    base_args, _ = resolve(["--preset", str(tmp_path / "base_p.yaml"), "--variant", variant, "--output_dir", "x"])
    assert (base_args.learning_rate, base_args.weight_decay) == (0.3, 0.5), "the base's section, under the base"
    args, values = resolve(argv + ["--learning_rate", "0.05", "--hidden_size", "40"])
    assert (args.learning_rate, values["hidden_size"]) == (0.05, 40), "the command line wins over the recipe"
    _, values = resolve(argv + ["--hidden_size", "40", "--config_overrides", "hidden_size=48"])
    assert values["hidden_size"] == 48, "--config_overrides wins over everything"


def test_the_task_section_follows_the_run_s_task(recipe, tmp_path):
    child, variant, _ = recipe
    argv = ["--preset", child, "--variant", variant, "--output_dir", str(tmp_path / "out")]
    args, values = resolve(argv + ["--task", "listops"])
    assert args.max_steps == 30 and values["hidden_size"] == 16, "listops' section, not ctl's"
    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "a b", "label": "x"}\n{"text": "b a", "label": "y"}\n')
    args, values = resolve(argv + ["--train_file", str(data)])
    assert args.max_steps == 10 and values["hidden_size"] == 16, "your own data: no task section applies"
    assert args.weight_decay == 0.6, "the preset's section still applies to your own data"


def test_a_recipe_naming_something_unknown_is_one_line_naming_the_file(tmp_path):
    variant = write(tmp_path / "bad.yaml", {"copy_gate": False, "tasks": {"ctl": {"learning_rat": 0.1}}})
    known = {"learning_rate"}
    with pytest.raises(training.UsageError, match=r"bad\.yaml: its recipe sets \['learning_rat'\]"):
        variant_flags(variant, "ctl", None, known)
    variant = write(tmp_path / "bad2.yaml", {"tasks": {"ctl": 3}})
    with pytest.raises(training.UsageError, match=r"bad2\.yaml: `tasks:` must map names to mappings"):
        read_variant(variant, "ctl")


def test_every_shipped_variant_recipe_is_valid():
    """Every section of every shipped variant names train.py flags or NDRConfig fields, and the NDRConfig they give
    (for every task and preset the sections name) builds."""
    known = {f.name for cls in ARGUMENT_CLASSES for f in fields(cls)}
    for file in sorted(os.listdir(VARIANT_DIR)):
        name = os.path.splitext(file)[0]
        sections = yaml.safe_load(open(os.path.join(VARIANT_DIR, file))) or {}
        for task in [None, *sections.get("tasks", {})]:
            for preset in [None, *sections.get("presets", {})]:
                variant_flags(name, task, preset, known)
                NDRConfig(**read_variant(name, task, preset))
