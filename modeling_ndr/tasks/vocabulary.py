"""Small public facts about the tasks, from which a model and its tokenizer are set up: vocabulary, label names and
the column the classifier reads. Nothing here imports `datasets`."""

from ..tokenization_ndr import build_tokenizer
from .arithmetic import ARITHMETIC_OPERATORS
from .common import DIGITS, TASK_NAMES, check_task_name
from .ctl import CTL_FUNCTIONS, CTL_SYMBOLS
from .listops import LISTOPS_OPERATIONS


def task_vocabulary(name: str) -> list[str]:
    """The task's fixed symbols (no special tokens), in a readable order."""
    check_task_name(name)
    if name == "ctl":
        return list(CTL_SYMBOLS + CTL_FUNCTIONS)
    if name == "arithmetic":
        return ["(", ")", *ARITHMETIC_OPERATORS, *DIGITS]
    return [*LISTOPS_OPERATIONS, "]", *DIGITS]


def task_label_names(name: str) -> list[str]:
    """Name of each class id: CTL's 3-bit symbols `000`-`111`, the digits `0`-`9` otherwise."""
    check_task_name(name)
    return list(CTL_SYMBOLS) if name == "ctl" else list(DIGITS)


def task_readout(name: str) -> str:
    """Which column the classifier reads: `"first"` ([BOS]) for ListOps, `"last"` ([EOS]) otherwise (as in the
    paper's release)."""
    check_task_name(name)
    return "first" if name == "listops" else "last"


def task_tokenizer(name: str):
    """The word-level tokenizer of one of the paper's tasks (`"ctl"`, `"arithmetic"`, `"listops"`), from its fixed
    symbols: `[PAD]`=0 `[UNK]`=1 `[BOS]`=2 `[EOS]`=3, then `task_vocabulary(name)` in order."""
    return build_tokenizer(vocabulary=task_vocabulary(name))


__all__ = ["TASK_NAMES", "task_vocabulary", "task_label_names", "task_readout", "task_tokenizer"]
