"""train.py's flags as a run's values: the preset of a command line that names none, the flags a variant's recipe
sets, and the NDRConfig fields of a run (the layers and their precedence: `modeling_ndr.training.presets`)."""

from dataclasses import fields

from modeling_ndr.training.errors import UsageError
from modeling_ndr.training.presets import config_field_names, parse_config_overrides, variant_sections


# what a command line without --preset trains with (`default_preset`): a small NDR and a step budget that learn a toy
# task in minutes on a CPU; fine-tuning takes the training flags only, with a gentler learning rate
OWN_DATA_PRESET, FINE_TUNING_PRESET = "own_data", "own_data_finetune"
# ModelArguments fields that are not NDRConfig fields (the others set the NDRConfig field of their name)
NOT_CONFIG_FIELDS = ("model_name_or_path", "config_overrides", "attn_implementation")


def default_preset(own_data: bool, fine_tuning: bool) -> str | None:
    """The preset of a command line that names none: `own_data` for your own data, `own_data_finetune` for
    fine-tuning (`--model_name_or_path`, on your data or a task: its training flags only, the model is the
    checkpoint's), None for a new model on one of the paper's tasks (each has its presets)."""
    if fine_tuning:
        return FINE_TUNING_PRESET
    return OWN_DATA_PRESET if own_data else None


def variant_flags(name: str | None, task: str | None, preset: str | None, known: set[str]) -> dict:
    """The `train.py` flags (other than NDRConfig fields) that a variant's recipe sets for a run: its `tasks:`
    section for `task`, then its `presets:` section for `preset` (see the module docstring).

    Args:
        name: the variant (see `read_variant`), or None.
        task: the run's task, or None (own data).
        preset: the run's preset, or None.
        known: the names of `train.py`'s flags; a section naming anything else (neither a flag nor an NDRConfig
            field) is a `UsageError` naming the file.

    Returns:
        `{flag: value}`, to be used as defaults over the preset's.
    """
    if not name:
        return {}
    path, _, applying = variant_sections(name, task, preset)
    flags = {}
    for section in applying:
        if unknown := sorted(set(section) - known - config_field_names()):
            raise UsageError(f"--variant {path}: its recipe sets {unknown}, which are not train.py flags")
        flags.update({flag: value for flag, value in section.items() if flag not in config_field_names()})
    return flags


def config_values(model_args, variant: dict | None = None, given: set[str] = frozenset()) -> dict:
    """The NDRConfig fields a run sets, later ones winning: the preset's model flags, the variant, the model flags
    on the command line, then `--config_overrides`.

    Args:
        model_args: the run's `ModelArguments`; its fields other than `model_name_or_path` and `config_overrides`
            are NDRConfig fields (None: not set).
        variant: the variant's fields (`read_variant`).
        given: the flags given on the command line (`given_flags`), to tell them from a preset's values.

    Returns:
        `{NDRConfig field: value}`.
    """
    flags = {f.name: getattr(model_args, f.name) for f in fields(model_args) if f.name not in NOT_CONFIG_FIELDS}
    flags = {name: value for name, value in flags.items() if value is not None}
    values = {name: value for name, value in flags.items() if name not in given}
    values.update(variant or {})
    values.update({name: value for name, value in flags.items() if name in given})
    values.update(parse_config_overrides(model_args.config_overrides))
    return values
