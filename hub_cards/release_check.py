"""The release check: a checkpoint that wins the selection (`ood_valid`, 1,000 samples, the latest on ties) replaces
a release only if it is also at least as accurate as the release on a larger fresh sample of the same split.

Why: once a line is near the top of `ood_valid`, a thousand samples no longer separate its checkpoints. ListOps' third
line tied the release at 0.989 three times in four releases, and a one-list win (0.990) released a checkpoint that
10,000 fresh depth-6 lists scored 0.9803 against the release's 0.9866 (discordant 81 / 144). The rule stays the
paper's (the best `ood_valid`); the check only stops a replacement that a sample ten times larger contradicts.

The fresh sample (`check_rows`) is drawn from the selection split's distribution with a seed no preset trains or
evaluates with: `task_seed + CHECK_SEED_OFFSET` for ListOps and arithmetic (`load_task`); CTL keeps the line's
function tables (`task_seed`) and draws new compositions of the split's depths (`ctl_compositions`, stream seed
`CHECK_SEED_OFFSET`). Both models are evaluated with the fixed steps of training, as the line's evaluations are. A
line trained on files has no generator: its checkpoints are released on `ood_valid` alone (a warning says so). A check
that cannot run (a model that does not load, a sample size the generator refuses) keeps the release, and its record
names the error; the line goes on either way.
"""

import logging

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import datasets
from modeling_ndr.tasks import (
    SMALLEST_N_TRAIN,
    TASK_NAMES,
    ctl_compositions,
    load_task,
    split_depths,
    task_label_names,
)
from modeling_ndr.training.errors import UsageError, first_line
from modeling_ndr.training.evaluation import predict


logger = logging.getLogger(__name__)

CHECK_SAMPLES = 10_000
CHECK_SEED_OFFSET = 1_000
BATCH_SIZE = 500


def check_rows(values: dict, split: str, samples: int) -> datasets.Dataset | None:
    """`samples` fresh rows of `split` of the line's task (`values`: its preset values: `task`, `task_seed`,
    `direction`), columns `text` and `label` (the label's name); None if the line's data has no generator (files, a
    hub dataset)."""
    task = values.get("task")
    if task not in TASK_NAMES:
        return None
    seed = int(values.get("task_seed") or 0)
    if task == "ctl":
        depths = split_depths(task)[split]
        direction = values.get("direction") or "forward"
        rows = []
        for index, depth in enumerate(depths):  # exactly `samples`, spread evenly over the depths
            share = samples // len(depths) + (index < samples % len(depths))
            rows += ctl_compositions((depth,), share, seed=seed, direction=direction, sample_seed=CHECK_SEED_OFFSET)
        texts, labels = [row["text"] for row in rows], [row["label"] for row in rows]
    else:
        data = load_task(task, seed=seed + CHECK_SEED_OFFSET, n_train=SMALLEST_N_TRAIN[task], n_eval=samples)[split]
        texts, labels = data["text"], data["label"]
    names = task_label_names(task)
    return datasets.Dataset.from_dict({"text": list(texts), "label": [names[label] for label in labels]})


def correct(model_dir: str, rows: datasets.Dataset) -> np.ndarray:
    """Which rows the model in `model_dir` (a release or a Trainer checkpoint, with its tokenizer) answers right,
    with the fixed steps of evaluation (`eval_num_hidden_layers`), as the line's evaluations count them."""
    try:
        model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError) as error:
        raise UsageError(f"{model_dir}: cannot load the model for the release check ({first_line(error)})") from None
    model.to("cuda" if torch.cuda.is_available() else "cpu")
    label2id = model.config.label2id
    if unknown := sorted(set(rows["label"]) - set(label2id)):
        raise UsageError(f"{model_dir}: the release check's label {unknown[0]!r} is not one of the model's")
    predicted = predict(model, tokenizer, rows["text"], BATCH_SIZE, adaptive_steps=False).label_ids
    return predicted == np.array([label2id[label] for label in rows["label"]])


def release_checker(samples: int = CHECK_SAMPLES):
    """The check `release_line` and `release_cooldown` run before a replacement: `check(candidate_dir, release_dir,
    values, split)` returns its record (`{"split", "samples", "seed", "candidate", "release", "only_candidate",
    "only_release", "passed"}`, and CTL's `sample_seed`; `seed` is `load_task`'s (CTL: its tables'); `passed`: the
    candidate is at least as accurate), or None where the line's data has no generator."""

    def check(candidate_dir: str, release_dir: str, values: dict, split: str) -> dict | None:
        rows = check_rows(values, split, samples)
        if rows is None:
            return None
        logger.warning("release check: %s and the release on %d fresh %s samples", candidate_dir, len(rows), split)
        new, old = correct(candidate_dir, rows), correct(release_dir, rows)
        seed = int(values.get("task_seed") or 0)
        ctl = values.get("task") == "ctl"
        return {
            "split": split,
            "samples": len(rows),
            "seed": seed if ctl else seed + CHECK_SEED_OFFSET,
            **({"sample_seed": CHECK_SEED_OFFSET} if ctl else {}),
            "candidate": float(new.mean()),
            "release": float(old.mean()),
            "only_candidate": int((new & ~old).sum()),
            "only_release": int((old & ~new).sum()),
            "passed": bool(new.mean() >= old.mean()),
        }

    return check


def release_decision(
    best, current, candidate_dir, release_dir, values: dict, split: str, check
) -> tuple[bool, dict | None]:
    """Whether the line's best checkpoint (`best`: its `split` accuracy, in `candidate_dir`) replaces the release
    (`current`, None if there is none), and the check's record (None where none ran).

    The selection's rule first: at least the release's value. Then, where there is a release to compare with and a
    `check` (`release_checker`), the larger fresh sample must agree. A check that fails to run keeps the release:
    its record is `{"split", "error", "passed": False}`."""
    if best is None or (current is not None and best < current):
        return False, None
    if current is None or check is None:
        return True, None
    try:
        record = check(candidate_dir, release_dir, values, split)
    except (UsageError, ValueError, OSError, RuntimeError) as error:
        logger.warning("release check of %s could not run (%s): the release stays", candidate_dir, first_line(error))
        return False, {"split": split, "error": first_line(error), "passed": False}
    if record is None:
        logger.warning("release check: the line's data has no generator; released on %s alone", split)
        return True, None
    outcome = "passed" if record["passed"] else "failed: the release stays"
    logger.warning("release check %s: %.4f (candidate) vs %.4f (release) on %d fresh %s samples, right only in one: "
                   "%d / %d", outcome, record["candidate"], record["release"], record["samples"], split,
                   record["only_candidate"], record["only_release"])  # fmt: skip
    return record["passed"], record
