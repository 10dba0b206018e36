"""The training subpackage `modeling_ndr.training` on its own: what `import modeling_ndr` leaves out, and the reusable
pieces (presets, samplers, per-depth metrics, own-file reading, checkpoint adaptation) without a training run."""

import json
import subprocess
import sys


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
