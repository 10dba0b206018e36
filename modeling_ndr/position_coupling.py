"""Position coupling computed inside the model, from the token ids (`NDRConfig.position_coupling`).

The token tasks' `train.py --position_coupling` gives each row position ids in which a symbol and the blank that
answers it share one id (Cho et al., 2024; `modeling_ndr.tasks.coupled_positions` defines them word by word). A model
trained so needs the same ids at inference; `pipeline("token-classification")` and the tokenizer give none. With
`config.position_coupling` set (train.py sets it), `NDRModel.forward` computes them from `input_ids` wherever
`position_ids` is not given, as RoBERTa computes its positions from the padding, so a loaded release answers
correctly through the Auto classes, the pipeline and remote code.

The rule is `coupled_positions`' own, on rows as the tokenizer writes them (`[BOS]`, the words, `[EOS]`, padding on
either side): `[BOS]` 0, the words as there, `[EOS]` one past the highest. `tests/unit/test_position_coupling.py`
checks it against the word-level definition on every task's rows, padded on both sides.
"""

from __future__ import annotations

import torch


COUPLED_TASKS = ("copy", "reverse", "addition")  # as `modeling_ndr.tasks.COUPLED_TASKS`
COUPLING_WORDS = {"copy": ("=",), "reverse": ("=",), "addition": ("+", "=")}  # the words whose ids the rule needs
BLANK = "_"  # the answer blank: its id (optional in the config) lets `check_coupled_rows` check the blanks too


def coupled_position_ids(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, task: str, token_ids: dict
) -> torch.Tensor:
    """The coupled position ids of rows `[BOS] words [EOS]`: (b, n) int64, 0 at padding.

    Args:
        input_ids: (b, n) token ids.
        attention_mask: (b, n), 0 at padding (either side); None: no padding.
        task: `copy`, `reverse` or `addition`.
        token_ids: the ids of the words `COUPLING_WORDS[task]` (`=`; addition also `+`).

    The rows are not checked here (no host sync): `check_coupled_rows` does that.
    """
    real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask != 0
    index = (real.long().cumsum(-1) - 1).clamp(min=0)  # each token's index among its row's real tokens ([BOS]: 0)
    last = real.long().sum(-1, keepdim=True) - 1  # [EOS]'s index

    def where(word: str) -> torch.Tensor:  # (b, 1): the index of the row's `word`
        return (index * ((input_ids == token_ids[word]) & real)).amax(-1, keepdim=True)

    equals = where("=")
    if task in ("copy", "reverse"):  # symbols 1..n, `=` n + 1 (its own index), blanks answer 1..n or n..1
        blank = (index > equals) & (index < last)
        answer = index - equals if task == "copy" else 2 * equals - index
        ids = torch.where(blank, answer, index)
        ids = torch.where(index == last, equals + 1, ids)
    elif task == "addition":  # every digit its place value + 1, counted from the right end of its number
        plus = where("+")
        top = torch.maximum(torch.maximum(plus - 1, equals - plus - 1), last - equals - 1) + 1
        ids = torch.where(index < plus, plus - index, equals - index)
        ids = torch.where(index > equals, last - index, ids)
        ids = torch.where((index == plus) | (index == equals), top, ids)
        ids = torch.where(index == 0, torch.zeros_like(ids), ids)
        ids = torch.where(index == last, top + 1, ids)
    else:
        raise ValueError(f"position coupling is defined for {', '.join(COUPLED_TASKS)}, not {task!r}")
    return torch.where(real, ids, torch.zeros_like(ids))


def check_coupled_rows(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, task: str, token_ids: dict, bos: int, eos: int
) -> None:
    """Raise a `ValueError` naming the first row that is not `[BOS] words [EOS]` of `task` (copy, reverse: symbols,
    `=`, one blank per symbol; addition: operands, `+`, operands, `=`, blanks). Where `token_ids` holds the blank's
    (`_`), the blanks are checked to be blanks and the symbols not to be. Reads the values (a host sync)."""
    real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask != 0
    blank = token_ids.get(BLANK)
    for row, (ids, mask) in enumerate(zip(input_ids.tolist(), real.tolist())):
        tokens = [token for token, keep in zip(ids, mask) if keep]
        words = tokens[1:-1]
        problem = None
        equals = words.index(token_ids["="]) if token_ids["="] in words else -1
        if len(tokens) < 2 or tokens[0] != bos or tokens[-1] != eos:
            problem = f"it does not start with [BOS] (id {bos}) and end with [EOS] (id {eos}) as the tokenizer writes"
        elif words.count(token_ids["="]) != 1:
            problem = f"it holds {words.count(token_ids['='])} `=` (id {token_ids['=']}), not one"
        elif task in ("copy", "reverse") and len(words) != 2 * equals + 1:
            problem = "it does not hold as many words after `=` as before it (one blank per symbol)"
        elif task == "addition":
            plus = [position for position, token in enumerate(words) if token == token_ids["+"]]
            if len(plus) != 1 or not 0 < plus[0] < equals - 1 or equals == len(words) - 1:
                problem = "it is not digits, one `+`, digits, `=`, blanks"
        if not problem and blank is not None:
            if set(words[equals + 1 :]) != {blank}:
                problem = f"a word after `=` is not the blank `_` (id {blank})"
            elif blank in words[:equals]:
                problem = f"the blank `_` (id {blank}) stands before `=`"
        if problem:
            raise ValueError(
                f"NDRConfig.position_coupling={task!r} computes position ids from input_ids, but row {row} is not a "
                f"{task} row: {problem}. Give position_ids yourself, or rows the task's tokenizer wrote. (A text "
                "that came through pipeline() is cut at its tokenizer's model_max_length: for longer rows load the "
                "tokenizer with a larger one, AutoTokenizer.from_pretrained(..., model_max_length=N).)"
            )


__all__ = ["BLANK", "COUPLED_TASKS", "COUPLING_WORDS", "check_coupled_rows", "coupled_position_ids"]
