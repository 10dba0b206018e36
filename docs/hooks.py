"""MkDocs hooks of the documentation site (`mkdocs.yml`: `hooks: [docs/hooks.py]`).

- The routing and comparison figures live in `hub_cards/images/` (the README and the model cards show them too); they
  are added to the site as `images/<name>` instead of being copied into `docs/`.
- A results page may hold a table rendered from a JSON file of `docs/results/` (`{row: {column: value}}`, e.g.
  `compare_ctl_forward.json`, which `make compare` writes), between the markers

      <!-- table: compare_ctl_forward.json -->
      ...
      <!-- end table -->

  What stands between the markers in the Markdown is replaced by the table at build time when the file exists, so the
  page can never disagree with the data (`tests/e2e/test_docs.py` checks the rendering).
- `<!-- released models -->` is replaced by a table of the released models in `hub_cards/models/`, read from each
  folder's `eval_results.json` and `run_config.json` (the files its model card is rendered from).
"""

import json
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

from modeling_ndr.tables import markdown_table, per_token_results


REPOSITORY = Path(__file__).resolve().parents[1]
SHARED_IMAGES = REPOSITORY / "hub_cards" / "images"
RELEASED = REPOSITORY / "hub_cards" / "models"
SPLITS = ("iid_test", "ood_valid", "ood_test")
RESULTS = Path(__file__).resolve().parent / "results"
TABLE = re.compile(r"<!-- table: (?P<name>[\w.-]+\.json) -->\n(?P<body>.*?)<!-- end table -->", re.DOTALL)


def on_files(files, config):
    for image in sorted(SHARED_IMAGES.glob("*.png")):
        files.append(File.generated(config, f"images/{image.name}", abs_src_path=str(image)))
    for curve in released_curves():
        files.append(File.generated(config, f"images/{curve.parent.name}_{curve.name}", abs_src_path=str(curve)))
    return files


def released_curves(models: Path = RELEASED) -> list[Path]:
    """The learning curves of the releases that keep training (`hub_cards/models/<name>/training_curve.png`)."""
    return sorted(models.glob("*/training_curve.png"))


def render_lines(models: Path = RELEASED) -> str:
    """`<!-- release lines -->`: for each release that keeps training, one row per chunk of its line and per cooldown
    branch (read from `last-checkpoint/continuation.json` and the evaluations in its `trainer_state.json`): when,
    which commit, on what, the steps, the samples seen at its end, its best `ood_valid` (with that evaluation's
    `ood_test`) and what it released."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub_cards"))  # release tooling: not in the package
    from line_records import evaluation_history, samples_seen, warm_seconds  # (train.py's reader of a run's history)

    blocks = []
    for record in sorted(models.glob("*/last-checkpoint/continuation.json")):
        line = json.loads(record.read_text())
        state = json.loads((record.parent / "trainer_state.json").read_text())
        history = evaluation_history(state)
        rows = []
        if warm := line.get("warm_start"):
            # from a release's own run or from one a line made (warm_seconds: per device; older records: one number)
            results, seconds = warm.get("results", {}), warm_seconds(warm)
            made_by = (
                f"the release's {warm['chunks']} chunks" if warm.get("chunks", 1) > 1 else "the release's own run"
            )
            rows.append(["start", "–", warm.get("commit") or "–", ", ".join(map(machine_name, seconds)) or "–",
                         f"{warm['steps']:,} ({made_by})", f"{warm['samples'] / 1e6:.2f}M",
                         f"{sum(seconds.values()) / 60:.0f}", format_value(results.get("ood_valid")),
                         format_value(results.get("ood_test")), "the release it started from"])  # fmt: skip
        for number, chunk in enumerate(line["chunks"], 1):
            inside = [e for e in history if chunk["start_step"] < e["step"] <= chunk["end_step"] and "ood_valid" in e]
            best = max(inside, key=lambda e: (e["ood_valid"]["accuracy"], e["step"]), default=None)
            released = chunk.get("released_step")
            rows.append([
                str(number), chunk["finished"][:16].replace("T", " "), chunk.get("commit") or "–",
                machine_name(chunk["device"], chunk.get("precision")),
                f"{chunk['start_step']:,} → {chunk['end_step']:,}",
                f"{samples_seen(line, chunk['end_step']) / 1e6:.2f}M", f"{chunk['seconds'] / 60:.0f}",
                f"{best['ood_valid']['accuracy']:.3f} (step {best['step']:,})" if best else "–",
                format_value(best["ood_test"]["accuracy"]) if best and "ood_test" in best else "–",
                f"step {released:,}" if released is not None else "kept",
            ])  # fmt: skip
        for number, branch in enumerate(line.get("branches", []), 1):  # make release-cooldown
            best, released = branch.get("best") or {}, branch.get("released_step")
            # a segment of a branch that a time box cut (make release-cooldown-resume) names where the branch began
            begun = branch.get("branch_start_step", branch["start_step"])
            samples = samples_seen(line, begun) + (branch["end_step"] - begun) * branch["total_batch"]
            resumed = f"; resumed, the branch from {begun:,}" if begun != branch["start_step"] else ""
            rows.append([
                f"cooldown {number}", branch["finished"][:16].replace("T", " "), branch.get("commit") or "–",
                machine_name(branch["device"], branch.get("precision")),
                f"{branch['start_step']:,} → {branch['end_step']:,} (rate to 0){resumed}", f"{samples / 1e6:.2f}M",
                f"{branch['seconds'] / 60:.0f}",
                f"{best['ood_valid']:.3f} (step {best['step']:,})" if "ood_valid" in best else "–",
                format_value(best.get("ood_test")), f"step {released:,}" if released is not None else "kept",
            ])  # fmt: skip
        columns = ["chunk", "finished", "commit", "device", "steps", "samples seen", "minutes",
                   "best ood_valid", "its ood_test", "release"]  # fmt: skip
        recipe = line["recipe"]["preset"]
        blocks.append(f"`{record.parent.parent.name}` (recipe `{recipe}`)\n\n" + markdown_table(rows, columns) + "\n")
    return "\n".join(blocks) or "No release keeps training yet.\n"


def render_curves(models: Path = RELEASED) -> str:
    """`<!-- release curves -->`: each curve, under its release's name."""
    blocks = [f"`{curve.parent.name}`\n\n![{curve.parent.name}: accuracy against training samples seen]"
              f"(images/{curve.parent.name}_{curve.name})\n" for curve in released_curves(models)]  # fmt: skip
    return "\n".join(blocks) or "No release keeps training yet.\n"


def machine_name(device: str, precision: str | None = None) -> str:
    """A recorded device without its torch build (that is on the card), and the precision it trained in if given."""
    return device.split(", torch")[0] + (f", {precision}" if precision else "")


def format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "–" if value is None else str(value)  # None: not measured


def render_table(data: dict, first_column: str = "variant") -> str:
    """`{row: {column: value}}` as a Markdown table: rows in the file's order, columns in order of first appearance
    (nested values are left out), missing cells empty."""
    columns = []
    for values in data.values():
        for column, value in values.items():
            if column not in columns and not isinstance(value, dict | list):
                columns.append(column)
    rows = [
        [f"`{row}`", *(format_value(values[column]) if column in values else "" for column in columns)]
        for row, values in data.items()
    ]
    return markdown_table(rows, [first_column, *columns]) + "\n"


def render_tables(markdown: str, results: Path = RESULTS) -> str:
    """Replace each marked block whose JSON file exists with the table rendered from it."""

    def replace(match):
        path = results / match["name"]
        if not path.is_file():
            return match.group(0)
        table = render_table(json.loads(path.read_text()))
        return f"<!-- table: {match['name']} -->\n{table}<!-- end table -->"

    return TABLE.sub(replace, markdown)


# The paper's NDR on each task's ood_test (Csordás et al. 2022, mean of 5 seeds, its GPU recipe)
PAPER_OOD_TEST = {"ctl forward": "1.00", "ctl backward": "1.00", "arithmetic": "0.98 ± 0.01", "listops": "0.99 ± 0.01"}


def fixed_steps_accuracy(result: dict) -> float:
    """A split's accuracy with the fixed step count of training (the same as loaded for models without adaptive
    steps, whose results have no `fixed_steps` entry)."""
    return result.get("fixed_steps", result)["accuracy"]


def trained_with(run: dict) -> str:
    """What a release's run (or its line) spent."""
    minutes = run.get("training", {}).get("seconds", 0) / 60
    machine = machine_name(run["machine"])
    trained = f"`{run['preset']}`: {minutes:.1f} min, {run.get('processes', 1)} process(es) on {machine}"
    if compute := run.get("continuation"):  # a release that keeps training: what its line spent
        hours = sum(compute["seconds"].values()) / 3600
        trained = (f"`{compute['recipe']}` line: {compute['samples'] / 1e6:.2f}M samples, {compute['chunks']} "
                   f"chunk(s), {hours:.1f} h")  # fmt: skip
    return trained


def render_released(models: Path = RELEASED) -> str:
    """One row per released folder of the paper's tasks: task, accuracy per split as loaded, ood_test (and CTL's
    deeper compositions) with the fixed steps of training, the paper's ood_test, and the training run; then, where
    there are any, one row per token release (one label per token): sequence (character) accuracy per split."""
    rows, token_rows, token_splits, ctlpp_rows = [], [], [], []
    for folder in sorted(path for path in models.iterdir() if (path / "eval_results.json").is_file()):
        results = json.loads((folder / "eval_results.json").read_text())
        run = json.loads((folder / "run_config.json").read_text())
        if per_token_results(results):  # one label per token
            token_splits += [split for split in results if split not in token_splits]
            cells = {split: f"{v['accuracy']:.3f} ({v['character_accuracy']:.3f})" for split, v in results.items()}
            token_rows.append((f"`{folder.name}`", run["task"]["task"], cells, trained_with(run)))
            continue
        if run["task"]["task"] == "ctlpp":  # systematicity: the training lengths, orders training never shows
            never_seen, test_all = list(results)[1], results.get("test_all", {}).get("accuracy")
            ctlpp_rows.append([f"`{folder.name}`", run["task"].get("task_variant") or "parallel_branch",
                               format_value(results["iid_test"]["accuracy"]),
                               f"`{never_seen}` {format_value(results[never_seen]['accuracy'])}",
                               format_value(test_all), trained_with(run)])  # fmt: skip
            continue
        task = run["task"]["task"] + (f" {run['task']['direction']}" if run["task"].get("direction") else "")
        scores = [format_value(results[split]["accuracy"]) if split in results else "" for split in SPLITS]
        fixed = format_value(fixed_steps_accuracy(results["ood_test"])) if "ood_test" in results else ""
        deeper = results.get("deeper")
        deeper = f"{deeper['accuracy']:.3f} / {fixed_steps_accuracy(deeper):.3f}" if deeper else ""
        rows.append(
            [f"`{folder.name}`", task, *scores, fixed, deeper, PAPER_OOD_TEST.get(task, ""), trained_with(run)]
        )
    columns = ["repository", "task", *SPLITS, "ood_test, fixed steps", "11–12 functions: as loaded / fixed steps",
               "the paper's ood_test", "trained"]  # fmt: skip
    table = markdown_table(rows, columns) + "\n"
    if token_rows:
        table += (
            "\nOne label per token (sequence accuracy, character accuracy in brackets; `test_<n>` and "
            "`long_chains_<n>` hold rows of `n` positions):\n\n"
        )
        body = [[name, task, *(cells.get(split, "") for split in token_splits), trained]
                for name, task, cells, trained in token_rows]  # fmt: skip
        table += markdown_table(body, ["repository", "task", *token_splits, "trained"]) + "\n"
    if ctlpp_rows:
        table += "\n[CTL++](ctlpp.md) (the training lengths; orders of the function groups training never shows):\n\n"
        columns = ["repository", "variant", "iid_test", "never-seen orders", "test_all", "trained"]
        table += markdown_table(ctlpp_rows, columns) + "\n"
    return table


def on_page_markdown(markdown, page, config, files):
    markdown = render_tables(markdown)
    if "<!-- released models -->" in markdown:
        markdown = markdown.replace("<!-- released models -->", render_released())
    if "<!-- release lines -->" in markdown:
        markdown = markdown.replace("<!-- release lines -->", render_lines())
    if "<!-- release curves -->" in markdown:
        markdown = markdown.replace("<!-- release curves -->", render_curves())
    return markdown
