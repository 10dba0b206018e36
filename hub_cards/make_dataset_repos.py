"""Build the paper's three tasks as Hugging Face dataset repositories: parquet splits plus a dataset card.

    python hub_cards/make_dataset_repos.py [--tasks ctl arithmetic listops] [--out hub_cards/datasets]
                                           [--namespace org] [--seed 0] [--cache-dir DIR]

For each task, `<out>/ndr-<task>/` becomes exactly what the Hub repository holds:

- one parquet file per split and config, written by `Dataset.to_parquet` from `modeling_ndr.load_task(task, seed)`
  at the paper's sizes: `data/<split>.parquet`, and for CTL `data/forward/<split>.parquet` and
  `data/backward/<split>.parquet`;
- `README.md`, a dataset card rendered from `hub_cards/dataset_card_template.md` (`DatasetCard.from_template`), whose
  YAML header declares the configs, each split's data file and the features (`configs:` / `dataset_info:`), so
  `datasets.load_dataset("org/ndr-ctl", "backward")` needs no loading script. Its tables (rows, depth and label
  histograms, examples, CTL's function tables) are computed from the data.

A rerun writes the same bytes (with the same pyarrow), so it does not churn git. The `ndr` git repository holds every
file except ListOps' 1,000,000-row train split (`NOT_COMMITTED`, git-ignored): this command writes it, in about two
and a half minutes on two CPU cores. `load_task` caches what it generates in the `datasets` cache (or `--cache-dir`),
so a second run takes seconds. Upload a folder with
`hf upload org/ndr-ctl hub_cards/datasets/ndr-ctl --repo-type dataset`.

`--n-train` / `--n-eval` write smaller repos (into another `--out`) for a quick dry run.
"""

import argparse
import collections
import os

from datasets.info import DatasetInfosDict
from huggingface_hub import DatasetCard, DatasetCardData

import datasets
from modeling_ndr import ctl_tables, load_task, task_label_names, task_readout
from modeling_ndr.tables import markdown_table
from modeling_ndr.tasks import GENERATOR_VERSION, SPLIT_NAMES
from modeling_ndr.training.atomic import atomic_folder
from modeling_ndr.training.errors import exit_on_usage_error


HUB_CARDS = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HUB_CARDS, "datasets")
TEMPLATE = os.path.join(HUB_CARDS, "dataset_card_template.md")
# what a repository folder holds; an existing folder with other files (a clone of the Hub repository) is not replaced
REPO_FILES = ("README.md", "data/*.parquet")

# task -> config name -> load_task options. The first config is the default one.
CONFIGS = {
    "ctl": {"forward": {"direction": "forward"}, "backward": {"direction": "backward"}},
    "arithmetic": {"default": {}},
    "listops": {"default": {}},
}
# Files of the Hub repositories that the ndr git repository does not hold (too large; see .gitignore): this command
# writes them. Everything else in hub_cards/datasets/ is committed.
NOT_COMMITTED = {"listops": ("data/train.parquet",)}
EVALUATION_SPLITS = tuple(split for split in SPLIT_NAMES if split != "train")

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
            "**Forward** (`forward` config, the default): the argument first, then the functions in order of "
            "application: `101 d a b` = b(a(d(101))). **Backward** (`backward` config): the same sample written "
            "fully reversed, `b a d 101`. Both configs hold the same samples in the same order."
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


def repo_name(task: str) -> str:
    return f"ndr-{task}"


def data_file(config: str, split: str) -> str:
    """Path of one split's parquet file inside the repo (a single-config repo has no config folder)."""
    return f"data/{split}.parquet" if config == "default" else f"data/{config}/{split}.parquet"


def size_category(n_rows: int) -> str:
    for limit, name in [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")]:
        if n_rows < limit:
            return name
    return "1M<n<10M"


def file_size(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:.1f} MB" if n_bytes >= 1e6 else f"{round(n_bytes / 1e3)} KB"


def histogram(values) -> str:
    counts = collections.Counter(values)
    return ", ".join(f"{key}: {count:,}" for key, count in sorted(counts.items()))


def split_table(dataset) -> str:
    rows = []
    for split in SPLIT_NAMES:
        data = dataset[split]
        rows.append([f"`{split}`", SPLIT_PURPOSE[split], f"{len(data):,}", histogram(data["depth"]),
                     histogram(data["label"])])  # fmt: skip
    return markdown_table(rows, ["split", "purpose", "rows", "depth: rows", "label: rows"])


def example_table(dataset, label_names, n_per_split: int = 3) -> str:
    rows = [
        [f"`{split}`", f"`{row['text']}`", label_names[row["label"]], row["depth"]]
        for split in SPLIT_NAMES
        for row in dataset[split].select(range(min(n_per_split, len(dataset[split]))))
    ]
    return markdown_table(rows, ["split", "text", "label", "depth"])


def ctl_function_table(seed: int) -> str:
    symbols = task_label_names("ctl")
    rows = [[f"`{function}`", *(symbols[value] for value in table)] for function, table in ctl_tables(seed).items()]
    return markdown_table(rows, ["function", *(f"f({symbol})" for symbol in symbols)])


def card_data(task: str, variants: dict) -> DatasetCardData:
    """The YAML header: metadata, one `configs` entry per config (what `load_dataset` reads instead of a script) and
    `dataset_info` (features, so `label` is a ClassLabel however the files are read; rows per split, which
    `load_dataset` checks)."""
    first_config = next(iter(variants))
    configs = [
        {
            "config_name": config,
            "data_files": [{"split": split, "path": data_file(config, split)} for split in SPLIT_NAMES],
            **({"default": True} if config == first_config and config != "default" else {}),
        }
        for config in variants
    ]
    data = DatasetCardData(
        license="mit",
        task_categories=["text-classification"],
        language=["en"],
        tags=["synthetic", "algorithmic-reasoning", "systematic-generalization", "neural-data-router", task],
        size_categories=[size_category(sum(len(split) for split in variants[first_config].values()))],
        pretty_name=TASK_TEXT[task]["pretty_name"],
        configs=configs,
    )
    infos = {}
    for config, dataset in variants.items():
        splits = datasets.SplitDict()
        for split in SPLIT_NAMES:
            splits.add(
                datasets.SplitInfo(split, num_bytes=dataset[split].data.nbytes, num_examples=len(dataset[split]))
            )
        infos[config] = datasets.DatasetInfo(features=dataset["train"].features, splits=splits)
    DatasetInfosDict(infos).to_dataset_card_data(data)
    return data


def files_table(variants: dict, file_sizes: dict, not_committed: tuple[str, ...]) -> str:
    rows = []
    for config in variants:
        for split in SPLIT_NAMES:
            path = data_file(config, split)
            status = "not committed; written by the command below" if path in not_committed else "committed"
            rows.append([f"`{path}`", f"{len(variants[config][split]):,}", file_size(file_sizes[path]), status])
    return markdown_table(rows, ["file", "rows", "size", "in the `ndr` git repository"])


def write_card(task: str, seed: int, variants: dict, file_sizes: dict, repo_dir: str, namespace: str) -> str:
    """Render `dataset_card_template.md` (`DatasetCard.from_template`) into `repo_dir/README.md`. variants: config
    name -> DatasetDict. Returns the card's path."""
    dataset = variants[next(iter(variants))]
    # the snippets load CTL's backward config, to show how a config is named
    config = "backward" if task == "ctl" else None
    first_row = variants[config or "default"]["ood_test"][0]
    readout = task_readout(task)
    card = DatasetCard.from_template(
        card_data(task, variants),
        template_path=TEMPLATE,
        **TASK_TEXT[task],
        task=task,
        seed=seed,
        generator_version=GENERATOR_VERSION,
        repo_id=f"{namespace}/{repo_name(task)}",
        repo_name=repo_name(task),
        config_argument=f', "{config}"' if config else "",
        direction_argument=f', direction="{config}"' if config else "",
        default_config="forward" if task == "ctl" else None,
        first_row=first_row,
        first_label=task_label_names(task)[first_row["label"]],
        files_table=files_table(variants, file_sizes, NOT_COMMITTED.get(task, ())),
        not_committed=NOT_COMMITTED.get(task, ()),
        readout=readout,
        readout_token="[BOS]" if readout == "first" else "[EOS]",
        example_config=", forward config" if task == "ctl" else "",
        example_table=example_table(dataset, task_label_names(task)),
        split_table=split_table(dataset),
        function_table=ctl_function_table(seed) if task == "ctl" else None,
        citation=CITATION,
    )
    path = os.path.join(repo_dir, "README.md")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(f"{card}\n")  # Jinja drops the template's last newline
    return path


def write_repo(
    task: str,
    out: str = DEFAULT_OUT,
    seed: int = 0,
    n_train: int | None = None,
    n_eval: int | None = None,
    namespace: str = "org",
    cache_dir: str | None = None,
) -> str:
    """Generate one task (every config) and write its repository folder `<out>/ndr-<task>/`; returns the folder."""
    repo_dir = os.path.join(out, repo_name(task))
    variants, file_sizes = {}, {}
    # written into a hidden sibling and renamed into place (atomic_folder): an interrupted build leaves the previous
    # repository whole, never a mix of old and new splits
    with atomic_folder(repo_dir, REPO_FILES) as staging:
        for config, options in CONFIGS[task].items():
            dataset = load_task(task, seed=seed, n_train=n_train, n_eval=n_eval, cache_dir=cache_dir, **options)
            for split in SPLIT_NAMES:
                path = data_file(config, split)
                os.makedirs(os.path.dirname(os.path.join(staging, path)), exist_ok=True)
                dataset[split].to_parquet(os.path.join(staging, path))
                file_sizes[path] = os.path.getsize(os.path.join(staging, path))
            variants[config] = dataset
        write_card(task, seed, variants, file_sizes, staging, namespace)
    return repo_dir


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--out", default=DEFAULT_OUT, help="where the ndr-<task>/ folders go")
    parser.add_argument("--namespace", default="org", help="the Hub namespace the cards' snippets use")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=None, help="datasets cache for load_task (default: datasets' own)")
    parser.add_argument("--n-train", type=int, default=None, help="smaller train splits, for a quick dry run")
    parser.add_argument("--n-eval", type=int, default=None, help="smaller evaluation splits, for a quick dry run")
    args = parser.parse_args()
    for task in args.tasks:
        repo_dir = write_repo(task, args.out, args.seed, args.n_train, args.n_eval, args.namespace, args.cache_dir)
        print(f"wrote {repo_dir}:", flush=True)
        for root, _, files in sorted(os.walk(repo_dir)):
            for name in sorted(files):
                path = os.path.join(root, name)
                print(f"  {os.path.relpath(path, repo_dir):32s} {file_size(os.path.getsize(path)):>8s}", flush=True)


if __name__ == "__main__":
    exit_on_usage_error(main)  # a folder it must not replace: one line, exit status 2
