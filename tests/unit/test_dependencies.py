"""Every third-party package the library imports is declared in pyproject.toml: in `dependencies`, or in the extra
that the feature importing it needs (`plots`: matplotlib; `triton`: the Triton kernels)."""

import ast
import re
import sys
from pathlib import Path

import tomllib


REPO = Path(__file__).resolve().parents[2]
# import name -> distribution name, where they differ
DISTRIBUTIONS = {"yaml": "pyyaml"}
# imported only by an optional feature, declared in that extra
OPTIONAL = {"matplotlib": "plots", "triton": "triton"}


def imported_top_level_names(package: Path) -> set[str]:
    names = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"modeling_ndr", "__future__"}


def declared(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower() for requirement in requirements}


def test_every_third_party_import_of_the_package_is_declared():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    required = declared(project["dependencies"])
    for name in sorted(imported_top_level_names(REPO / "modeling_ndr")):
        if name in OPTIONAL:
            extra = OPTIONAL[name]
            assert name in declared(project["optional-dependencies"][extra]), f"{name}: not in the {extra} extra"
            continue
        assert DISTRIBUTIONS.get(name, name) in required, f"modeling_ndr imports {name}, not in dependencies"
