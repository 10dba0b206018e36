"""Small public facts about the tasks, from which a model and its tokenizer are set up: vocabulary, label names and
the column the classifier reads. Nothing here imports `datasets`."""

from ..tokenization_ndr import build_tokenizer
from .arithmetic import ARITHMETIC_OPERATORS
from .common import DIGITS, TASK_NAMES, check_task_name
from .ctl import CTL_FUNCTIONS, CTL_SYMBOLS
from .ctlpp import CTLPP_FUNCTIONS, CTLPP_SYMBOLS
from .listops import LISTOPS_OPERATIONS
from .token_tasks import (
    BLANK,
    EQUALS,
    PLUS,
    TOKEN_LABEL_NAMES,
    TOKEN_TASK_NAMES,
    check_token_task_name,
    token_task_max_tokens,
)


def task_vocabulary(name: str) -> list[str]:
    """The task's fixed symbols (no special tokens), in a readable order (a token task's: `token_task_vocabulary`)."""
    if name in TOKEN_TASK_NAMES:
        return token_task_vocabulary(name)
    check_task_name(name)
    if name == "ctl":
        return list(CTL_SYMBOLS + CTL_FUNCTIONS)
    if name == "ctlpp":
        return list(CTLPP_SYMBOLS + CTLPP_FUNCTIONS)
    if name == "arithmetic":
        return ["(", ")", *ARITHMETIC_OPERATORS, *DIGITS]
    return [*LISTOPS_OPERATIONS, "]", *DIGITS]


def task_label_names(name: str) -> list[str]:
    """Name of each class id: CTL's 3-bit symbols `000`-`111`, CTL++'s symbols `0`-`7`, the digits `0`-`9` otherwise
    (a token task's labels too)."""
    if name in TOKEN_TASK_NAMES:
        return token_task_label_names(name)
    check_task_name(name)
    return list(CTL_SYMBOLS) if name == "ctl" else list(CTLPP_SYMBOLS) if name == "ctlpp" else list(DIGITS)


def task_readout(name: str) -> str:
    """Which column the classifier reads: `"first"` ([BOS]) for ListOps and CTL++ (written backward, its last
    function stands first; CTL++'s release reads the first column), `"last"` ([EOS]) otherwise (as in the paper's
    release)."""
    check_task_name(name)
    return "first" if name in ("listops", "ctlpp") else "last"


def task_tokenizer(name: str):
    """The word-level tokenizer of one of the paper's tasks (`"ctl"`, `"arithmetic"`, `"listops"`), from its fixed
    symbols: `[PAD]`=0 `[UNK]`=1 `[BOS]`=2 `[EOS]`=3, then `task_vocabulary(name)` in order; a token task's is
    `token_task_tokenizer(name)`."""
    if name in TOKEN_TASK_NAMES:
        return token_task_tokenizer(name)
    return build_tokenizer(vocabulary=task_vocabulary(name))


def token_task_vocabulary(name: str) -> list[str]:
    """A token task's symbols (no special tokens): the digits, then `+` (addition), `=` and the blank `_`; the carry
    task's hundred digit pairs `00`-`99`."""
    check_token_task_name(name)
    if name == "carry":
        return [a + b for a in DIGITS for b in DIGITS]
    return [*DIGITS, *([PLUS] if name == "addition" else []), EQUALS, BLANK]


def token_task_label_names(name: str) -> list[str]:
    """Name of each label id of a token task: the digits `0`-`9` (every task)."""
    check_token_task_name(name)
    return list(TOKEN_LABEL_NAMES)


def token_task_tokenizer(name: str):
    """The word-level tokenizer of a token task (`"copy"`, `"reverse"`, `"addition"`, `"carry"`), made as
    `task_tokenizer` makes the paper's: `[PAD]`=0 `[UNK]`=1 `[BOS]`=2 `[EOS]`=3, then `token_task_vocabulary(name)`
    in order; `model_max_length` fits the longest evaluation row."""
    return build_tokenizer(vocabulary=token_task_vocabulary(name), model_max_length=token_task_max_tokens(name) + 2)


__all__ = [
    "TASK_NAMES",
    "task_vocabulary",
    "task_label_names",
    "task_readout",
    "task_tokenizer",
    "token_task_vocabulary",
    "token_task_label_names",
    "token_task_tokenizer",
]
