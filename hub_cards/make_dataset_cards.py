"""Generate every task at full size and write a Hugging Face dataset card for each from the actual data.

    python hub_cards/make_dataset_cards.py [--seed 0] [--out hub_cards/datasets] [--cache-dir DIR]

Writes `<out>/ctl.md` (configs `forward` and `backward`), `<out>/arithmetic.md` and `<out>/listops.md`: YAML front
matter (license, task category, tags, size category, pretty name, configs) and a body with the format, example
lines, how labels and depths are computed, rows and depth histograms per split, the seed, CTL's function tables, and
how long generation took here. Without `--cache-dir` every task is generated into a fresh temporary cache, so the
reported times are generation times, not cache loads.
"""

import argparse
import collections
import os
import platform
import sys
import tempfile
import time

from huggingface_hub import DatasetCardData


try:
    import modeling_ndr  # noqa: F401  (is the package importable?)
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from modeling_ndr import ctl_tables, load_task, task_label_names, task_readout
from modeling_ndr.tasks import GENERATOR_VERSION, SPLIT_NAMES


SPLIT_PURPOSE = {
    "train": "training",
    "iid_test": "held-out samples from train's distribution",
    "ood_valid": "deeper than train; used to select checkpoints",
    "ood_test": 'deeper still; the paper\'s generalisation ("longer") number',
}

TASK_TEXT = {
    "ctl": {
        "pretty_name": "NDR compositional table lookup (CTL)",
        "summary": (
            "Compositional table lookup from *The Neural Data Router: Adaptive Control Flow in Transformers Improves "
            "Systematic Generalization* (Csordás, Irie & Schmidhuber, ICLR 2022). Nine random bijections `a`-`i` "
            "on the eight 3-bit symbols `000`-`111` are applied in sequence to a symbol; the model must output the "
            "resulting symbol. Trained on up to 5 functions, tested on 6-10."
        ),
        "format": (
            "**Forward** (`forward` config): the argument first, then the functions in order of application: "
            "`101 d a b` = b(a(d(101))). **Backward** (`backward` config): the same sample written fully reversed, "
            "`b a d 101`. Both configs hold the same samples in the same order."
        ),
        "label": "The resulting symbol as an integer, `000` -> 0 ... `111` -> 7 (class names `000`-`111`).",
        "depth": "The number of functions applied.",
        "sampling": (
            "All 72 single-function samples (every function on every symbol) are in `train`. Each deeper length has "
            "its own random stream of distinct compositions, uniform over functions and symbols; `iid_test` takes "
            "the first samples of the streams for lengths 2-5 and `train` the following ones, so they are disjoint "
            "and identically distributed. Sizes are split evenly over lengths, except that `iid_test` takes at most "
            "a quarter of a length's distinct samples and `train` holds what remains of lengths 2 (648 in all) and "
            "3 (5,832 in all); lengths 4 and 5 share the rest equally."
        ),
    },
    "arithmetic": {
        "pretty_name": "NDR simple arithmetic mod 10",
        "summary": (
            "Simple arithmetic from *The Neural Data Router* (Csordás, Irie & Schmidhuber, ICLR 2022): fully "
            "bracketed expressions over the digits 0-9 with `+` and `*`, evaluated mod 10. Trained on 1-5 nested "
            "levels, tested on 6-8."
        ),
        "format": "`( ( 4 * 7 ) + 2 )` -> 0: every operation is bracketed; tokens are separated by single spaces.",
        "label": "The value of the expression mod 10 (class names `0`-`9`).",
        "depth": "The number of nested levels of operations (a digit is 0; the example has depth 2).",
        "sampling": (
            "All 200 single operations are in `train`. For each deeper depth `D` an expression is grown with each "
            "operand becoming a sub-operation with probability 0.2 (0.3 in `ood_valid` / `ood_test`) up to `D` "
            "levels; while shallower than `D` it is wrapped as one operand of a new operation whose other operand "
            "is grown the same way. Expressions over 50 tokens and duplicates are rejected. `iid_test` takes the "
            "first samples of each depth's stream (depths 2-5) and `train` the following ones."
        ),
    },
    "listops": {
        "pretty_name": "NDR ListOps (dependency-depth balanced)",
        "summary": (
            "The depth-controlled ListOps variant of *The Neural Data Router* (Csordás, Irie & Schmidhuber, ICLR "
            "2022): nested lists of `MIN`, `MAX`, `MED` (median) and `SM` (sum mod 10) over digits, balanced by "
            "dependency depth. Trained on dependency depths 1-5, tested on 6-8."
        ),
        "format": "`[MED 4 8 5 [MAX 8 4 9 ] ]` -> 6: operations take 2-5 arguments, each a digit or a sub-list.",
        "label": (
            "The value of the list (class names `0`-`9`): MIN / MAX (ties: the leftmost argument), MED the middle "
            "value of a stable sort (floor of the mean of the two middle values for an even count), SM the sum mod "
            "10."
        ),
        "depth": (
            "Dependency depth: keep only the arguments an operation uses (MIN/MAX the selected one, MED the middle "
            "one(s), SM all) and count the nested levels of what is left (a digit is 0)."
        ),
        "sampling": (
            "For each dependency depth `D` a random list is grown (2-5 arguments, each a sub-list with probability "
            "0.3, nested at most as deep as the split's deepest depth); while its dependency depth is below `D` it "
            "is inserted at a random position of a new random operation, retried until that operation uses it "
            "without overshooting `D`. Lists over 50 tokens, of another depth, or seen before are rejected. "
            "`iid_test` takes the first samples of each depth's stream and `train` the following ones."
        ),
    },
}

CITATION = """@inproceedings{csordas2022ndr,
  title     = {The Neural Data Router: Adaptive Control Flow in Transformers Improves Systematic Generalization},
  author    = {R{\\'o}bert Csord{\\'a}s and Kazuki Irie and J{\\"u}rgen Schmidhuber},
  booktitle = {International Conference on Learning Representations (ICLR)},
  year      = {2022}
}"""


def size_category(n_rows: int) -> str:
    for limit, name in [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")]:
        if n_rows < limit:
            return name
    return "1M<n<10M"


def histogram(values) -> str:
    counts = collections.Counter(values)
    return ", ".join(f"{key}: {count:,}" for key, count in sorted(counts.items()))


def generate(task: str, seed: int, cache_dir: str, n_train=None, n_eval=None, **options):
    """The task, the seconds `load_task` took, and its row count."""
    start = time.perf_counter()
    dataset = load_task(task, seed=seed, n_train=n_train, n_eval=n_eval, cache_dir=cache_dir, **options)
    seconds = time.perf_counter() - start
    return dataset, seconds, sum(len(split) for split in dataset.values())


def split_table(dataset) -> list[str]:
    lines = ["| split | purpose | rows | depth: rows | label: rows |", "|---|---|---|---|---|"]
    for split in SPLIT_NAMES:
        rows = dataset[split]
        lines.append(
            f"| `{split}` | {SPLIT_PURPOSE[split]} | {len(rows):,} | {histogram(rows['depth'])} | "
            f"{histogram(rows['label'])} |"
        )
    return lines


def example_lines(dataset, label_names, n_per_split: int = 3) -> list[str]:
    lines = ["| split | text | label | depth |", "|---|---|---|---|"]
    for split in SPLIT_NAMES:
        for row in dataset[split].select(range(n_per_split)):
            lines.append(f"| `{split}` | `{row['text']}` | {label_names[row['label']]} | {row['depth']} |")
    return lines


def ctl_table_lines(seed: int) -> list[str]:
    symbols = task_label_names("ctl")
    lines = ["| function | " + " | ".join(f"f({symbol})" for symbol in symbols) + " |"]
    lines.append("|---" * (len(symbols) + 1) + "|")
    for function, table in ctl_tables(seed).items():
        lines.append(f"| `{function}` | " + " | ".join(symbols[value] for value in table) + " |")
    return lines


def write_card(task: str, seed: int, variants: dict, out_dir: str) -> str:
    """variants: config name -> (DatasetDict, seconds, rows)."""
    text = TASK_TEXT[task]
    first_config, (dataset, _, n_rows) = next(iter(variants.items()))
    configs = []
    for config in variants:
        folder = "data" if config == "default" else config
        configs.append(
            {
                "config_name": config,
                "data_files": [{"split": split, "path": f"{folder}/{split}-*"} for split in SPLIT_NAMES],
                **({"default": True} if config == first_config and config != "default" else {}),
            }
        )
    card_data = DatasetCardData(
        license="mit",
        task_categories=["text-classification"],
        language=["en"],
        tags=["synthetic", "algorithmic-reasoning", "systematic-generalization", "neural-data-router", task],
        size_categories=[size_category(n_rows)],
        pretty_name=text["pretty_name"],
        configs=configs,
    )
    options = ', direction="forward"' if task == "ctl" else ""
    label_names = task_label_names(task)
    body = [
        f"# {text['pretty_name']}",
        "",
        text["summary"],
        "",
        "Generated by the `ndr` package (`modeling_ndr.load_task`); the numbers below were computed from the "
        f"generated data (seed {seed}, generator version {GENERATOR_VERSION}).",
        "",
        "## Loading",
        "",
        "```python",
        "from modeling_ndr import load_task, task_tokenizer",
        "",
        f'dataset = load_task("{task}", seed={seed}{options})  # DatasetDict: train, iid_test, ood_valid, ood_test',
        f'tokenizer = task_tokenizer("{task}")  # word level, [BOS] ... [EOS]',
        "```",
        "",
        "`load_task` regenerates the data deterministically from the seed (the same seed gives the same rows in "
        "any process on any machine) and caches it with `datasets`. `n_train=` / `n_eval=` make smaller versions.",
        "",
        "## Format",
        "",
        "Columns: `text` (tokens separated by single spaces), `label` (`ClassLabel`), `depth` (int).",
        "",
        text["format"],
        "",
        f"- **Label**: {text['label']}",
        f"- **Depth**: {text['depth']}",
        f"- **Readout**: the paper's models classify from the `{task_readout(task)}` column "
        f"({'[BOS]' if task_readout(task) == 'first' else '[EOS]'}).",
        "",
        "Example lines (the first rows of each split" + (", forward config" if task == "ctl" else "") + "):",
        "",
        *example_lines(dataset, label_names),
        "",
        "## Splits",
        "",
        *split_table(dataset),
        "",
        "No `iid_test`, `ood_valid` or `ood_test` text appears in `train`; every split is balanced per depth as far "
        "as the number of distinct samples allows.",
        "",
        "## How the data is generated",
        "",
        text["sampling"],
        "",
        f"Seed: {seed}. Every depth of every split family has its own `random.Random` stream seeded arithmetically "
        "from the seed (no Python `hash`, no global random state); the rows of each split are then shuffled with "
        "another seeded stream.",
        "",
    ]
    if task == "ctl":
        body += [f"### Function tables (seed {seed})", "", *ctl_table_lines(seed), ""]
    body += [
        "## Generation time and size",
        "",
        f"Measured on {os.cpu_count()} CPU cores ({platform.machine()}, Python {platform.python_version()}), "
        "one process, including writing the Arrow cache:",
        "",
        "| config | rows (all splits) | generation time |",
        "|---|---|---|",
        *(f"| `{config}` | {rows:,} | {seconds:.1f} s |" for config, (_, seconds, rows) in variants.items()),
        "",
        "## Citation",
        "",
        "```bibtex",
        CITATION,
        "```",
        "",
    ]
    card = f"---\n{card_data.to_yaml()}\n---\n\n" + "\n".join(body)
    path = os.path.join(out_dir, f"{task}.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(card)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "datasets"))
    parser.add_argument(
        "--cache-dir",
        default=None,
        help="datasets cache to keep (default: a fresh temporary one per task, so the "
        "times are generation times; with a warm cache they are load times)",
    )
    parser.add_argument("--n-train", type=int, default=None, help="smaller train splits, for a quick dry run")
    parser.add_argument("--n-eval", type=int, default=None, help="smaller evaluation splits, for a quick dry run")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    plan = {
        "ctl": {"forward": {"direction": "forward"}, "backward": {"direction": "backward"}},
        "arithmetic": {"default": {}},
        "listops": {"default": {}},
    }
    summary = []
    with tempfile.TemporaryDirectory() as temporary_root:
        for task, configs in plan.items():
            variants = {}
            for config, options in configs.items():
                cache_dir = args.cache_dir or os.path.join(temporary_root, f"{task}-{config}")
                variants[config] = generate(task, args.seed, cache_dir, args.n_train, args.n_eval, **options)
                _, seconds, rows = variants[config]
                summary.append((task, config, rows, seconds))
                print(f"{task} ({config}): {rows:,} rows in {seconds:.1f} s", flush=True)
            print("wrote", write_card(task, args.seed, variants, args.out), flush=True)

    print("\n| task | config | rows | seconds |\n|---|---|---|---|")
    for task, config, rows, seconds in summary:
        print(f"| {task} | {config} | {rows:,} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
