"""Write a compositional lookup task as jsonl files: the kind of data a user brings to `train.py`.

    python training/examples/lookup_task.py outputs/example_finetune/data --extend_demo --new_functions 3
    python training/examples/lookup_task.py DIR   # nine new functions j-r only

CTL made new: the paper's eight symbols `000`-`111` and functions the demo model has never seen, named `j`, `k`, ...,
each a fresh random permutation of the symbols; with `--extend_demo`, beside the demo's own nine functions `a`-`i`
(their tables for seed 0, the ones `make demo` learned). A line

    {"text": "101 b j e", "label": "011", "depth": 3}

means e(j(b(101))) = 011, in the forward order of `make demo`. The depth is the number of functions. Files:

| file | depths | samples (per depth) |
|---|---|---|
| `train.jsonl` | 1-5 | every depth-1 sample; then up to 3,000 per depth (depth 2: what `iid_test` leaves) |
| `iid_test.jsonl` | 2-5 | up to 250 per depth (at most a quarter of the depth), none of them in train |
| `ood_valid.jsonl` | 6-8 | 1,000 in all (selects checkpoints) |
| `ood_test.jsonl` | 9-10 | 1,000 in all |

`tables.json` holds the function tables. Plain Python and its `random` module: the same seed writes the same files.
"""

import argparse
import json
import os
import random


SYMBOLS = [f"{value:03b}" for value in range(8)]
NEW_FUNCTIONS = list("jklmnopqr")  # the paper's CTL (and the demo model) uses a-i


def fresh_tables(rng: random.Random, names: list[str], taken: list[list[int]] = ()) -> dict[str, list[int]]:
    """A distinct permutation of the 8 symbols for each name, none the identity nor one of `taken`."""
    tables: dict[str, list[int]] = {}
    while len(tables) < len(names):
        table = rng.sample(range(len(SYMBOLS)), len(SYMBOLS))
        if table != sorted(table) and table not in tables.values() and table not in taken:
            tables[names[len(tables)]] = table
    return tables


def sample(rng: random.Random, tables: dict[str, list[int]], depth: int) -> dict:
    names = list(tables)
    symbol = rng.randrange(len(SYMBOLS))
    functions = [rng.choice(names) for _ in range(depth)]
    value = symbol
    for function in functions:
        value = tables[function][value]
    return {"text": " ".join([SYMBOLS[symbol], *functions]), "label": SYMBOLS[value], "depth": depth}


def distinct_samples(rng: random.Random, tables, depth: int, count: int) -> list[dict]:
    """`count` different samples of one depth (all of them, in random order, if there are fewer)."""
    count = min(count, len(SYMBOLS) * len(tables) ** depth)
    samples: dict[str, dict] = {}
    while len(samples) < count:
        drawn = sample(rng, tables, depth)
        samples.setdefault(drawn["text"], drawn)
    return list(samples.values())


def make_splits(
    tables: dict[str, list[int]], seed: int = 1, n_train_per_depth=3000, n_iid_per_depth=250, n_ood=1000
) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    splits = {"train": [], "iid_test": [], "ood_valid": [], "ood_test": []}
    for depth in range(1, 6):
        # iid_test takes the first draws (at most a quarter of a depth's samples), train what follows
        available = len(SYMBOLS) * len(tables) ** depth
        n_iid = 0 if depth == 1 else min(n_iid_per_depth, available // 4)
        drawn = distinct_samples(rng, tables, depth, n_iid + n_train_per_depth)
        splits["iid_test"] += drawn[:n_iid]
        splits["train"] += drawn[n_iid:]
    for split, depths in (("ood_valid", (6, 7, 8)), ("ood_test", (9, 10))):
        for index, depth in enumerate(depths):
            share = n_ood // len(depths) + (index < n_ood % len(depths))
            splits[split] += distinct_samples(rng, tables, depth, share)
    for rows in splits.values():
        rng.shuffle(rows)
    return splits


def task_tables(seed: int, n_new: int, extend_demo: bool) -> dict[str, list[int]]:
    """`n_new` new functions with fresh tables; with `extend_demo`, after the demo's own a-i (CTL tables of seed 0)."""
    old = {}
    if extend_demo:
        import modeling_ndr

        old = modeling_ndr.ctl_tables(0)  # the tables `make demo` trained on
    return {**old, **fresh_tables(random.Random(seed), NEW_FUNCTIONS[:n_new], list(old.values()))}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--new_functions", type=int, default=9, help="How many new functions (at most 9: j-r).")
    parser.add_argument(
        "--extend_demo", action="store_true", help="Keep the demo's functions a-i (same tables) beside the new ones."
    )
    args = parser.parse_args()
    tables = task_tables(args.seed, args.new_functions, args.extend_demo)
    splits = make_splits(tables, args.seed)
    os.makedirs(args.output_dir, exist_ok=True)
    for split, rows in splits.items():
        with open(os.path.join(args.output_dir, f"{split}.jsonl"), "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
    with open(os.path.join(args.output_dir, "tables.json"), "w") as f:
        json.dump({name: [SYMBOLS[v] for v in table] for name, table in tables.items()}, f, indent=1)
    print(", ".join(f"{split}: {len(rows)}" for split, rows in splits.items()), "->", args.output_dir)


if __name__ == "__main__":
    main()
