"""transformers' own common model tests (`ModelTesterMixin`), for `tests/unit/test_transformers_common.py`.

transformers' wheel has no tests; its source distribution on the package index has the top-level test modules,
`tests/test_modeling_common.py` among them. `make setup` runs this file once: it downloads the source distribution
of the installed transformers version from the package index (pip, like any other package) and unpacks that module
into the virtual environment, so that the test suite itself never downloads anything:

    python tests/transformers_suite.py            # -> .venv/transformers_common_tests/transformers_tests/

`test_modeling_common.py` imports two modules that the source distribution does not ship: `ExportTesterMixin`
(`tests/exporters/`, the `torch.export` tests) and `GenerationTesterMixin` (`tests/generation/`, the `generate`
tests). They are written as empty mixins, so `ModelTesterMixin` runs without the export tests; an encoder has no
`generate` tests to run (the mixin asserts that a model which cannot generate does not inherit them).
"""

import argparse
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path


FOLDER = "transformers_common_tests"
PACKAGE = "transformers_tests"
MODULES = ("test_modeling_common.py", "test_configuration_common.py")
# the two modules test_modeling_common.py imports that the source distribution lacks, and what stands in for them
MISSING = {
    "exporters/test_export.py": (
        '"""Not in transformers\' source distribution: ModelTesterMixin runs without the torch.export tests."""\n\n\n'
        "class ExportTesterMixin:\n    pass\n"
    ),
    "generation/test_utils.py": (
        '"""Not in transformers\' source distribution; an encoder does not inherit it (it has no generate)."""\n\n\n'
        "class GenerationTesterMixin:\n    pass\n"
    ),
}


def suite_root(prefix: str | None = None) -> Path:
    """The folder to put on `sys.path` to import `transformers_tests.test_modeling_common` (in the interpreter's
    virtual environment)."""
    return Path(prefix or sys.prefix) / FOLDER


def installed_version() -> str:
    import transformers

    return transformers.__version__


def missing_reason() -> str | None:
    """Why the common tests cannot be imported (not unpacked, or unpacked for another transformers version), or
    None."""
    version_file = suite_root() / PACKAGE / "VERSION"
    if not version_file.is_file():
        return f"transformers' common model tests are not unpacked in {suite_root()}"
    unpacked, installed = version_file.read_text().strip(), installed_version()
    if unpacked != installed:
        return f"the common model tests in {suite_root()} are transformers {unpacked}'s; {installed} is installed"
    return None


def prepare(root: Path, version: str, sdist: Path | None = None) -> Path:
    """Unpack transformers `version`'s common model tests into `root/transformers_tests/` (downloading its source
    distribution unless `sdist` is given); returns the package folder."""
    package = root / PACKAGE
    with tempfile.TemporaryDirectory() as download:
        if sdist is None:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                 "--dest", download, f"transformers=={version}"],
                check=True,
            )  # fmt: skip
            sdist = next(Path(download).glob("transformers-*.tar.gz"))
        with tarfile.open(sdist) as archive:
            for module in MODULES:
                try:
                    member = archive.extractfile(f"transformers-{version}/tests/{module}")
                except KeyError:
                    member = None
                if member is None:
                    raise FileNotFoundError(f"{sdist} has no transformers-{version}/tests/{module}")
                package.mkdir(parents=True, exist_ok=True)
                (package / module).write_bytes(member.read())
    (package / "__init__.py").write_text(
        f'"""transformers {version}\'s common model tests (tests/transformers_suite.py)."""\n'
    )
    for module, text in MISSING.items():
        path = package / module
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(text)
    (package / "VERSION").write_text(version + "\n")
    return package


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=suite_root(), help="where to unpack (default: %(default)s)")
    parser.add_argument("--sdist", type=Path, help="a transformers-VERSION.tar.gz already downloaded")
    args = parser.parse_args(argv)
    version = installed_version()
    package = prepare(args.root, version, args.sdist)
    print(f"transformers {version}'s common model tests unpacked in {package}")


if __name__ == "__main__":
    main()
