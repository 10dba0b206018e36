"""The documentation site builds strictly (a broken link, anchor or API object fails) and its code examples run.

Every ```python block of a page in docs/ runs, in page order, in one namespace per page, from a temporary working
directory in which `hub_cards/` is the repository's (so examples load the released folders by their checkout path).
A block that cannot run here is marked on the line before it with `<!-- not run: why -->`.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
BLOCK = re.compile(r"^(?P<marker><!-- not run: [^>]+ -->\n)?```python\n(?P<code>.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """(line number, code) of each runnable python block of `page`."""
    text = page.read_text()
    return [
        (text.count("\n", 0, match.start("code")) + 1, match["code"])
        for match in BLOCK.finditer(text)
        if not match["marker"]
    ]


def load_hooks():
    spec = importlib.util.spec_from_file_location("ndr_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_strictly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )  # fmt: skip
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-4000:]}"
    api = (tmp_path / "site" / "api" / "config" / "index.html").read_text()
    for field in ("hidden_size", "gate_dropout", "adaptive_threshold", "readout"):
        assert f"<code>{field}</code>" in api, f"the API page documents NDRConfig.{field}"
    models = (tmp_path / "site" / "api" / "models" / "index.html").read_text()
    for argument in ("input_ids", "attention_mask", "labels", "output_hidden_states", "num_steps", "output_gates"):
        assert f"<code>{argument}</code>" in models, (
            f"the models page documents forward's {argument} (the standard arguments are written by transformers' "
            "auto_docstring when the module is imported; docs/griffe_hf_docstrings.py reads them from there)"
        )


PAGES = sorted(page for page in DOCS.rglob("*.md") if python_blocks(page)) + [REPO / "README.md"]


def test_the_docs_have_runnable_examples():
    names = {page.name for page in PAGES if python_blocks(page)}
    assert {"model.md", "getting-started.md", "tasks.md", "README.md"} <= names, names


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(REPO)) for page in PAGES])
def test_code_examples_run(page, tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hub_cards").symlink_to(REPO / "hub_cards")
    namespace = {"__name__": "__docs__"}
    for line, code in python_blocks(page):
        # a failing block's traceback names docs/<page>.md and the line of the block
        exec(compile("\n" * (line - 1) + code, str(page), "exec"), namespace)


def test_a_table_is_rendered_from_its_json_file(tmp_path):
    hooks = load_hooks()
    scores = {"ndr": {"iid_test": 1.0, "ood_test": 0.9734}, "rel": {}, "act": {"iid_test": 0.5, "ood_test": None}}
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    page = "before\n<!-- table: scores.json -->\n| stale |\n<!-- end table -->\nafter\n"
    rendered = hooks.render_tables(page, tmp_path)
    assert "| `ndr` | 1.000 | 0.973 |" in rendered and "| `rel` |  |  |" in rendered, rendered
    assert "| `act` | 0.500 | – |" in rendered, "a value not measured (null) is a dash"
    assert "stale" not in rendered and rendered.startswith("before\n") and rendered.endswith("after\n")
    assert hooks.render_tables(page, tmp_path / "missing") == page, "without its file, the block stays as written"


def test_the_comparison_page_shows_the_comparison_file():
    hooks = load_hooks()
    page = (DOCS / "results" / "ctl-comparison.md").read_text()
    assert "<!-- table: compare_ctl_forward.json -->" in page, "the page renders its table from the data"
    data_file = DOCS / "results" / "compare_ctl_forward.json"
    if data_file.is_file():
        data = json.loads(data_file.read_text())
        rendered = hooks.render_tables(page)
        for variant in data:
            assert f"| `{variant}` |" in rendered, f"{variant} is in compare_ctl_forward.json but not on the page"


def test_the_released_models_table_has_a_row_per_folder_with_its_card_s_numbers():
    hooks = load_hooks()
    table = hooks.render_released()
    for folder in sorted((REPO / "hub_cards" / "models").glob("ndr-*")):
        results = json.loads((folder / "eval_results.json").read_text())
        row = next(line for line in table.splitlines() if line.startswith(f"| `{folder.name}` |"))
        if hooks.per_token_results(results):  # one label per token: its own table, every split's two accuracies
            for values in results.values():
                assert f"| {values['accuracy']:.3f} ({values['character_accuracy']:.3f}) |" in row, (folder.name, row)
            continue
        if "ood_test" not in results:  # CTL++: the training lengths; its variant's never-seen orders beside iid_test
            never_seen = list(results)[1]
            assert f"| {results['iid_test']['accuracy']:.3f} |" in row, (folder.name, row)
            assert f"| `{never_seen}` {results[never_seen]['accuracy']:.3f} |" in row, (folder.name, row)
            continue
        assert f"| {results['ood_test']['accuracy']:.3f} |" in row, (folder.name, row)
        fixed = results["ood_test"].get("fixed_steps", results["ood_test"])["accuracy"]
        assert f"| {fixed:.3f} |" in row, f"{folder.name}: ood_test with the fixed steps of training: {row}"


def test_the_lab_record_has_a_row_per_chunk_of_every_release_line_and_the_site_shows_its_curve():
    hooks = load_hooks()
    lines, curves = hooks.render_lines(), hooks.render_curves()
    records = sorted((REPO / "hub_cards" / "models").glob("*/last-checkpoint/continuation.json"))
    for record in records:
        name, line = record.parent.parent.name, json.loads(record.read_text())
        block = lines.split(f"`{name}` (recipe `{line['recipe']['preset']}`)")[1].split("\n\n`ndr-")[0]
        if warm := line.get("warm_start"):  # from a release's own run, or from a release that a line made
            row = next(row for row in block.splitlines() if row.startswith("| start |"))
            assert f"{warm['steps']:,} (the release's " in row and f"{warm['samples'] / 1e6:.2f}M" in row, row
        for number, chunk in enumerate(line["chunks"], 1):
            row = next(row for row in block.splitlines() if row.startswith(f"| {number} |"))
            assert f"{chunk['start_step']:,} → {chunk['end_step']:,}" in row, row
            released = chunk.get("released_step")
            assert (f"step {released:,}" if released is not None else "kept") in row, row
        for number, branch in enumerate(line.get("branches", []), 1):  # make release-cooldown
            row = next(row for row in block.splitlines() if row.startswith(f"| cooldown {number} |"))
            assert f"{branch['start_step']:,} → {branch['end_step']:,} (rate to 0)" in row, row
        if any(chunk.get("released_step") is not None for chunk in line["chunks"]):  # the curve is the release's
            assert f"(images/{name}_training_curve.png)" in curves, f"{name}'s curve is on the released-models page"
    released = (REPO / "docs" / "released-models.md").read_text()
    assert (
        "<!-- release curves -->" in released
        and "<!-- release lines -->" in (REPO / "docs" / "results" / "releases.md").read_text()
    )


def test_the_readme_is_short_and_its_links_lead_somewhere():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 300, "the README is read in five minutes; the details belong in docs/"
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme) + re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    local = [target for target in targets if "://" not in target]
    assert any(target.startswith("docs/") for target in local), "the README links into the docs"
    for target in local:
        assert (REPO / target).exists(), f"README links to {target}, which does not exist"


def test_the_citation_file_names_the_package_s_version_and_the_paper():
    import yaml

    import modeling_ndr

    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert citation["version"] == modeling_ndr.__version__, "CITATION.cff and modeling_ndr.__version__ disagree"
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "MIT"
    assert "Neural Data Router" in citation["preferred-citation"]["title"]
