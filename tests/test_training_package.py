"""The training subpackage `modeling_ndr.training` on its own: what `import modeling_ndr` leaves out, and the reusable
pieces (presets, samplers, per-depth metrics, own-file reading, checkpoint adaptation) without a training run."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from modeling_ndr.training import parse_arguments, read_preset
from modeling_ndr.training.presets import RENAMED_PRESETS


REPO = Path(__file__).resolve().parents[1]


def imported_modules(code: str) -> set[str]:
    """The modules a fresh interpreter has imported after running `code`."""
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def test_import_modeling_ndr_stays_light():
    """`import modeling_ndr` imports neither the training subpackage nor datasets / evaluate, and no accelerate
    module beyond those transformers' own model classes import."""
    transformers_alone = imported_modules("from transformers import AutoModel, PreTrainedModel")
    package = imported_modules("import modeling_ndr")
    heavy = {"modeling_ndr.training", "datasets", "evaluate"}
    assert not heavy & package, f"import modeling_ndr imported {sorted(heavy & package)}"
    accelerate = {name for name in package - transformers_alone if name.split(".")[0] == "accelerate"}
    assert not accelerate, f"import modeling_ndr imported {sorted(accelerate)[:5]} beyond what transformers does"
    assert "datasets" in imported_modules("import modeling_ndr.training"), "the check above can fail"


# ------------------------------------------------------------------------------------------------------ presets


def test_renamed_presets_keep_working_with_a_deprecation_warning(tmp_path):
    for old, new in RENAMED_PRESETS.items():
        with pytest.warns(FutureWarning, match=f"--preset {old} is deprecated: it is called {new} now"):
            assert read_preset(old) == read_preset(new)
        with pytest.warns(FutureWarning):
            data_args, *_, preset = parse_arguments(["--preset", old, "--output_dir", str(tmp_path)])
        assert preset == read_preset(new) and data_args.task == "ctl"


# ------------------------------------------------------------------------------------------ maintainer habits


def test_pre_commit_runs_the_ruff_version_of_the_test_extra():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    with open(REPO / "pyproject.toml", "rb") as f:
        test_extra = tomllib.load(f)["project"]["optional-dependencies"]["test"]
    pinned = next(re.fullmatch(r"ruff==(\S+)", item).group(1) for item in test_extra if item.startswith("ruff"))
    hooks = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())["repos"]
    ruff = next(hook for hook in hooks if hook["repo"].endswith("/ruff-pre-commit"))
    assert ruff["rev"] == f"v{pinned}", "make lint and the pre-commit hook must run one ruff version"
    assert {hook["id"] for hook in ruff["hooks"]} == {"ruff-check", "ruff-format"}
