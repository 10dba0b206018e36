"""The test suite's two tiers are folders: a test file lands in one by where it is written (docs/contributing.md)."""

import subprocess
import sys
from pathlib import Path


TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_is_in_a_tier_folder():
    stray = sorted(path.name for path in TESTS.glob("test_*.py"))
    assert not stray, f"{stray}: put each in tests/unit (in-process, quick) or tests/e2e (trains, launches, builds)"
    assert list((TESTS / "unit").glob("test_*.py")) and list((TESTS / "e2e").glob("test_*.py"))


def test_the_e2e_folder_is_what_the_e2e_marker_selects():
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "e2e", str(TESTS)],
        capture_output=True, text=True, cwd=TESTS.parent, timeout=300,
    )  # fmt: skip
    files = {line.split("::")[0] for line in collected.stdout.splitlines() if "::" in line}
    assert files and all(name.startswith("tests/e2e/") for name in files), sorted(files)[:5]
    expected = {f"tests/e2e/{path.name}" for path in (TESTS / "e2e").glob("test_*.py")}
    assert expected - files <= {"tests/e2e/test_slow_demo.py"}, sorted(expected - files)  # its tests are all `slow`
