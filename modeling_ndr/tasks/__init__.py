"""The paper's three algorithmic tasks as `datasets.DatasetDict`s: CTL, simple arithmetic and ListOps; and the token
tasks, which answer with one label per token (the Universal Transformer's copy, reverse and addition, and addition as
a carry task; at the end).

Every sample is one line of tokens separated by single spaces, one integer label and one depth:

| task         | example                       | label | depth                                        |
|--------------|-------------------------------|-------|----------------------------------------------|
| `ctl`        | `101 d a b` (= b(a(d(101))))  | 0-7   | number of functions applied                  |
| `arithmetic` | `( ( 4 * 7 ) + 2 )`           | 0-9   | nesting levels of operations (a digit is 0)  |
| `listops`    | `[MED 4 8 5 [MAX 8 4 9 ] ]`   | 0-9   | dependency depth (unused branches pruned)    |

Each task has four splits: `train`, `iid_test` (train's distribution, held out), `ood_valid` (deeper; used to pick
checkpoints) and `ood_test` (deeper still; the paper's "longer" number). Depths per split:

| task         | train (default size)  | iid_test      | ood_valid        | ood_test         |
|--------------|-----------------------|---------------|------------------|------------------|
| `ctl`        | 1-5 (53,700)          | 2-5 (1,000)   | 6-8 (1,000)      | 9-10 (1,000)     |
| `arithmetic` | 1-5 (100,000)         | 2-5 (1,000)   | 6 (1,000)        | 7-8 (1,000)      |
| `listops`    | 1-5 (1,000,000)       | 1-5 (1,000)   | 6 (1,000)        | 7-8 (1,000)      |

How the data is made (one stream of distinct samples per (task, seed, split family, depth)):

- Each depth has its own random stream, seeded arithmetically from `(seed, task, family, depth)` with a
  `random.Random` instance; nothing reads Python's `hash` or a global random state, so a call gives the same data
  in any process on any machine. Within a stream every text appears at most once.
- Sizes are split evenly over a split's depths ("balanced per depth"). A depth that has fewer distinct samples than
  its share keeps what it has and the rest moves to the other depths (counts of the uncapped depths differ by at
  most one).
- Depth 1 of CTL (9 functions x 8 symbols = 72 samples) and of arithmetic (2 operations x 10 x 10 digits = 200
  samples) is enumerated in full into `train`: every single function on every symbol and every single operation is
  seen in training. `iid_test` of these two tasks therefore covers depths 2-5.
- `iid_test` and `train` read the same per-depth streams: `iid_test` takes the first samples of each stream and
  `train` the samples after them, so the two are disjoint and identically distributed. `iid_test` takes at most a
  quarter of a depth's distinct samples (CTL depth 2 has only 648: 162 go to `iid_test`, 486 to `train`). Changing
  `n_eval` therefore shifts which samples land in `train`.
- `ood_valid` / `ood_test` have depths that `train` lacks, so they cannot leak into it.

Task details:

- CTL: 8 symbols `000`-`111` and 9 random bijections `a`-`i` drawn from the seed (`ctl_tables(seed)`; all distinct,
  none the identity). Forward `101 d a b` = b(a(d(101))); backward writes the same sample fully reversed,
  `b a d 101`. Compositions are uniform over functions and symbols at each depth.
- Arithmetic: operators `+` and `*` on digits, fully bracketed, result mod 10. For a target depth `D`, an expression
  is grown with each operand becoming a sub-operation with probability `p` (0.2 in train/iid_test, 0.3 in the ood
  splits, at most `D` levels); while it is shallower than `D` it is wrapped as one operand of a new operation
  whose other operand is grown the same way (at most `D - 1` levels), as the paper's release does. Expressions of
  more than 50 tokens are rejected.
- ListOps: `[MIN`, `[MAX`, `[MED`, `[SM` with 2-5 arguments, each a digit or (p = 0.3) a sub-list, closing `]`.
  MIN/MAX break ties toward the leftmost argument, MED is the middle value of a stable sort (floor of the mean of
  the two middle values for an even count), SM is the sum mod 10. Dependency depth keeps only the arguments an
  operation uses (MIN/MAX the selected one, MED the middle one(s), SM all) and counts nested levels (a digit is 0).
  For a target depth `D`, a random list is grown (sub-lists nested at most as deep as the split's deepest depth);
  while its dependency depth is below `D` it is inserted at a random position of a new random operation, retried
  (at most 20 times) until the new operation uses it without overshooting `D`. Lists over 50 tokens or of another
  depth are rejected. (The paper's release grows lists to a structural depth and rejects whole lists by dependency
  depth; retrying only the wrapping step makes deep lists cheap, even for the full 1M-sample train set.)

Token tasks (`load_token_task`): columns `text`, `labels` (one per token: a digit where the answer is read, `None`
elsewhere) and `length`; copy, reverse and addition are read at the blanks `_` after `=`, carry at every token:

| task       | example text          | labels at the scored tokens   | `length` counts                    |
|------------|-----------------------|-------------------------------|------------------------------------|
| `copy`     | `3 1 4 = _ _ _`       | `3 1 4`                       | input symbols (digits)             |
| `reverse`  | `3 1 4 = _ _ _`       | `4 1 3`                       | input symbols (digits)             |
| `addition` | `5 7 + 6 8 = _ _ _`   | `1 2 5` (one digit more)      | digits of the longer operand       |
| `carry`    | `00 56 78` (57 + 68)  | `1 2 5`                       | digit positions (`00` excluded)    |

| task       | train (default size)  | evaluation splits (500 rows each by default)                        |
|------------|-----------------------|---------------------------------------------------------------------|
| `copy`     | 1-40 (100,000)        | `test_40` (iid), `test_100`, `test_200`, `test_400`; `valid_400`    |
| `reverse`  | 1-40 (100,000)        | `test_40` (iid), `test_100`, `test_200`, `test_400`; `valid_400`    |
| `addition` | 1-20 (100,000)        | `test_20` (iid), `test_50`, `test_100`, `test_200`; `valid_200`     |
| `carry`    | 1-40 (100,000)        | `test_<n>` and `long_chains_<n>` for n = 40 (iid), 100, 400, 1000   |

`valid_<n>` holds other rows of the longest length, for choosing a checkpoint there (as `ood_valid` in the paper's
tasks) without reading `test_<n>`.

A quarter of the carry task's `train` rows, and every `long_chains_<n>` row, carries through at least half of its
positions in one chain (like `999...9 + 000...1`), which random operands almost never do. Addition's evaluation rows
have two operands of `length` digits; in `train` the other operand has 1 to `length` digits. How the rows are made is
in `token_tasks.py` (formats) and `token_generation.py` (splits).
"""

from .common import GENERATOR_VERSION, MAX_TOKENS, SPLIT_NAMES, TASK_NAMES
from .ctl import CTL_DIRECTIONS, CTL_FUNCTIONS, CTL_SYMBOLS, ctl_compositions, ctl_tables
from .ctlpp import CTLPP_VARIANTS, ctlpp_split_names, ctlpp_tables, ctlpp_world
from .generation import SMALLEST_N_TRAIN, load_task, split_depths, split_description
from .token_generation import encode_token_rows, load_token_task
from .token_tasks import (
    COUPLED_TASKS,
    TOKEN_LABEL_NAMES,
    TOKEN_SPLIT_NAMES,
    TOKEN_TASK_NAMES,
    coupled_positions,
    longest_carry_chain,
    token_split_lengths,
)
from .vocabulary import (
    task_label_names,
    task_readout,
    task_tokenizer,
    task_vocabulary,
    token_task_label_names,
    token_task_tokenizer,
    token_task_vocabulary,
)


__all__ = [
    "TASK_NAMES",
    "SPLIT_NAMES",
    "MAX_TOKENS",
    "GENERATOR_VERSION",
    "CTL_SYMBOLS",
    "CTL_FUNCTIONS",
    "CTL_DIRECTIONS",
    "ctl_tables",
    "ctl_compositions",
    "CTLPP_VARIANTS",
    "ctlpp_tables",
    "ctlpp_world",
    "ctlpp_split_names",
    "load_task",
    "SMALLEST_N_TRAIN",
    "split_description",
    "split_depths",
    "task_label_names",
    "task_readout",
    "task_tokenizer",
    "task_vocabulary",
    "TOKEN_TASK_NAMES",
    "TOKEN_SPLIT_NAMES",
    "TOKEN_LABEL_NAMES",
    "load_token_task",
    "token_split_lengths",
    "longest_carry_chain",
    "COUPLED_TASKS",
    "coupled_positions",
    "encode_token_rows",
    "token_task_label_names",
    "token_task_tokenizer",
    "token_task_vocabulary",
]
