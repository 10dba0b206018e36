"""Load the repository's scripts (`training/*.py`, `hub_cards/*.py`) as modules: they are not part of the package."""

import importlib.util
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]


def load_script(path: str, name: str | None = None):
    """Execute the script at `path` (relative to the repository root) as a module named `name` (default
    `ndr_<file name>`) and return it."""
    spec = importlib.util.spec_from_file_location(name or f"ndr_{Path(path).stem}", REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
