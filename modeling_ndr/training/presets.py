"""Presets and model variants: named sets of `train.py` flags in `configuration/NAME.yaml` (a preset with
`base: OTHER` starts from preset OTHER's values), NDRConfig fields in `configuration/variants/NAME.yaml`, and the
`--config_overrides "field=value,..."` string (train.py's `ndr_training.flags.config_values` layers them into the
NDRConfig fields of a run). A preset file marked `internal: true` (a test fixture) loads by name but is not offered to
users.

A variant may also carry its own recipe: a `tasks:` section (`{task: {flag: value}}`, the paper's values for that
variant on that task) and a `presets:` section (`{preset: {flag: value}}`, what changes under that preset, e.g. what
was scaled for the CPU budget of `ctl_cpu`; only the section of the preset named applies, not its `base`'s, whose
values the preset may have changed). Both hold `train.py` flags (learning rate, steps, batch, ...) and NDRConfig
fields. Precedence, later wins:

1. the preset (`--preset`, with its `base` chain);
2. the variant's NDRConfig fields (its top level);
3. the variant's `tasks: {TASK: ...}` section for the run's task (none for your own data);
4. the variant's `presets: {PRESET: ...}` section for the run's preset;
5. flags on the command line;
6. `--config_overrides`.

train.py's `variant_flags` gives the flags of 3 and 4 (they become parser defaults, over the preset's); `read_variant`
gives the NDRConfig fields of 2 to 4 (`config_values` puts the command line and the overrides over them)."""

import importlib.resources
import os

import yaml

from ..configuration_ndr import NDRConfig
from .errors import UsageError, first_line


# the checkout holding this package, if it is one (paths on a card are written relative to it)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the presets travel with the package (package data: in the checkout `modeling_ndr/configuration` is a link to the
# top-level `configuration/`), so an installed copy finds them outside the checkout too
CONFIGURATION_DIR = str(importlib.resources.files("modeling_ndr") / "configuration")
VARIANT_DIR = os.path.join(CONFIGURATION_DIR, "variants")
# train.py's data flags that are `load_task` options, and the option each one sets
LOAD_TASK_KEYWORDS = {"direction": "direction", "task_variant": "variant", "function_overlap": "function_overlap",
                      "symbol_overlap": "symbol_overlap"}  # fmt: skip


def preset_path(name: str) -> str:
    """The file of a preset.

    Args:
        name: a preset name (`configuration/NAME.yaml`, `.yml` or `.json`) or the path of a preset file.

    Returns:
        The path of the file; a `UsageError` listing the available presets if there is none.
    """
    candidates = [name] + [os.path.join(CONFIGURATION_DIR, name + ext) for ext in (".yaml", ".yml", ".json")]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return candidate
    raise UsageError(f"--preset {name!r} not found; available presets: {available_presets()}")


def available_presets() -> list[str]:
    """The presets of `configuration/` a user may pick: every file but those marked `internal: true` (test fixtures,
    which still load by name)."""
    names = sorted(os.path.splitext(f)[0] for f in os.listdir(CONFIGURATION_DIR) if f.endswith((".yaml", ".json")))
    return [
        name
        for name in names
        if not read_mapping("--preset", preset_path(name), "flag names to values").get("internal")
    ]


def read_preset(name: str, known: set[str] | None = None, _children: tuple[str, ...] = ()) -> dict:
    """A preset's values; `base: OTHER` starts from preset OTHER's values, which the file's own ones override.

    Args:
        name: a preset name or file (see `preset_path`).
        known: the flag names a preset may set; others are a `UsageError` (None: not checked).

    Returns:
        `{flag name: value}`, with the values of its `base` chain merged in.
    """
    path = preset_path(name)
    if path in _children:
        raise UsageError(f"--preset {path}: its `base` chain loops back to it")
    values = read_mapping("--preset", path, "flag names to values")
    values.pop("internal", None)  # a test fixture's mark (see `available_presets`), not a flag
    if "base" in values:
        values = {**read_preset(values.pop("base"), None, _children + (path,)), **values}
    if known is not None and (unknown := sorted(set(values) - known)):
        raise UsageError(f"preset {name!r} has unknown fields {unknown}; use the names of train.py's flags")
    return values


def read_mapping(flag: str, path: str, what: str) -> dict:
    """A YAML (or JSON) file holding a mapping.

    Args:
        flag: the flag that named the file (for the error message).
        path: the file.
        what: what the mapping maps, for the error message (`flag names to values`).

    Returns:
        The mapping (empty for an empty file); a one-line `UsageError` naming the file if it cannot be read or holds
        something else.
    """
    try:
        with open(path) as f:
            values = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as error:
        raise UsageError(f"{flag} {path}: cannot read it ({first_line(error)})") from None
    if not isinstance(values, dict):
        raise UsageError(f"{flag} {path}: expected a mapping of {what}, got {type(values).__name__}")
    return values


def config_field_names() -> set[str]:
    """The names `--config_overrides` and variants may set: every NDRConfig field."""
    return set(NDRConfig().to_dict())


def parse_config_overrides(text: str | None) -> dict:
    """`"a=1,b=false,c=null,d=text"` → `{"a": 1, "b": False, "c": None, "d": "text"}` (values read as YAML).

    Args:
        text: the value of `--config_overrides`, or None.

    Returns:
        The NDRConfig fields it sets; a `UsageError` for a malformed item or a name that is not an NDRConfig field.
    """
    if not text:
        return {}
    values = {}
    for item in text.split(","):
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise UsageError(f"--config_overrides: {item!r} is not of the form field=value")
        values[name.strip()] = yaml.safe_load(value.strip()) if value.strip() else None
    unknown = sorted(set(values) - config_field_names())
    if unknown:
        raise UsageError(f"--config_overrides: {unknown} are not NDRConfig fields")
    return values


# the sections of a variant file that hold a recipe rather than NDRConfig fields
VARIANT_SECTIONS = ("tasks", "presets")


def variant_path(name: str) -> str:
    """The file of a variant: `configuration/variants/NAME.yaml`, or `name` itself if it is a file; a `UsageError`
    listing the variants if there is none such."""
    path = name if os.path.isfile(name) else os.path.join(VARIANT_DIR, name + ".yaml")
    if not os.path.isfile(path):
        available = sorted(os.path.splitext(f)[0] for f in os.listdir(VARIANT_DIR) if f.endswith(".yaml"))
        raise UsageError(f"--variant {name!r} not found; available variants: {available}")
    return path


def variant_sections(name: str, task: str | None, preset: str | None) -> tuple[str, dict, list[dict]]:
    """A variant file's top level and the recipe sections that apply to a run, in the order they apply.

    Returns:
        `(path, top level without the sections, [tasks[task], presets[preset]])`; a `UsageError` naming the file if
        a section is not a mapping of mappings.
    """
    path = variant_path(name)
    values = read_mapping("--variant", path, "NDRConfig fields to values")
    sections = {key: values.pop(key) for key in VARIANT_SECTIONS if key in values}
    for key, section in sections.items():
        if not isinstance(section, dict) or not all(isinstance(v, dict) for v in section.values()):
            raise UsageError(f"--variant {path}: `{key}:` must map names to mappings of flags to values")
    applying = [sections.get("tasks", {}).get(task, {})] if task else []
    if preset:  # the section of the preset named, not of its `base` (whose values the preset may have changed)
        name = os.path.splitext(os.path.basename(preset))[0]
        applying.append(sections.get("presets", {}).get(name, {}))
    return path, values, applying


def read_variant(name: str | None, task: str | None = None, preset: str | None = None) -> dict:
    """The NDRConfig fields of a model variant for a run.

    Args:
        name: a variant of `configuration/variants/` (`transformer`, `rel_gate`, ...), a YAML file, or None.
        task: the run's task (`ctl`, ...): the variant's `tasks: {task: ...}` section applies; None for own data.
        preset: the run's preset (a name or a file): the variant's `presets: {NAME: ...}` section for it applies.

    Returns:
        `{NDRConfig field: value}`: the top level, then the NDRConfig fields of the sections that apply (empty for
        None); a `UsageError` listing the variants if there is none such.
    """
    if not name:
        return {}
    path, values, applying = variant_sections(name, task, preset)
    if unknown := sorted(set(values) - config_field_names()):
        raise UsageError(f"--variant {path}: expected NDRConfig fields, got {unknown}")
    for section in applying:
        values.update({field: value for field, value in section.items() if field in config_field_names()})
    return values
