"""Word-level tokenizers for the tasks: one id per space-separated token, wrapped as `[BOS] ... [EOS]`.

`build_tokenizer` fixes the ids of the special tokens (`[PAD]` 0, `[UNK]` 1, `[BOS]` 2, `[EOS]` 3) so that every
tokenizer it makes agrees with the model config's default `pad_token_id` / `bos_token_id` / `eos_token_id`;
`word_level_tokenizer` takes every id from a vocabulary (a converted official model keeps its own). The tokenizer is a
`tokenizers` `WordLevel` model with a `WhitespaceSplit` pre-tokenizer and a `TemplateProcessing` post-processor,
wrapped as a `PreTrainedTokenizerFast` that saves and loads with `save_pretrained` / `AutoTokenizer`. It returns
only `input_ids` and `attention_mask` (no `token_type_ids`), which is what the model's `forward` takes.
"""

import json
import os
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast


PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN = "[PAD]", "[UNK]", "[BOS]", "[EOS]"
PAD_TOKEN_ID, UNK_TOKEN_ID, BOS_TOKEN_ID, EOS_TOKEN_ID = 0, 1, 2, 3
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN)
# The model has no length limit of its own (no position table); attention memory grows with the square of the length,
# and inputs up to this length are tested. `truncation=True` cuts here.
DEFAULT_MODEL_MAX_LENGTH = 512


class NDRTokenizerFast(PreTrainedTokenizerFast):
    """A `PreTrainedTokenizerFast` whose `save_pretrained` names the class `PreTrainedTokenizerFast`.

    transformers 5 writes its backend's class name (`TokenizersBackend`) into `tokenizer_config.json`, which older
    versions cannot load; every version's `AutoTokenizer` knows `PreTrainedTokenizerFast`. Nothing else changes: the
    saved folder loads with `AutoTokenizer.from_pretrained(folder)` and needs no code from this package.
    """

    def save_pretrained(self, save_directory, *args, **kwargs):
        files = super().save_pretrained(save_directory, *args, **kwargs)
        config_file = os.path.join(save_directory, "tokenizer_config.json")
        with open(config_file, encoding="utf-8") as f:
            config = json.load(f)
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        with open(config_file, "w", encoding="utf-8") as f:
            f.write(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        return files


def build_tokenizer(
    texts: Iterable[str] | None = None,
    vocabulary: Iterable[str] | None = None,
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
) -> PreTrainedTokenizerFast:
    """A word-level tokenizer for your own task.

    Args:
        texts (`Iterable[str]`, *optional*): lines of space-separated tokens (e.g. a dataset's `text` column); every
            token in them gets an id.
        vocabulary (`Iterable[str]`, *optional*): tokens to include in this order (e.g. `task_vocabulary(name)`).
        model_max_length (`int`, *optional*, defaults to 512): the length (special tokens included) at which
            `truncation=True` cuts.

    Returns:
        `PreTrainedTokenizerFast` with ids `[PAD]`=0, `[UNK]`=1, `[BOS]`=2, `[EOS]`=3, then `vocabulary` in its order,
        then the other tokens of `texts` sorted, so the same data always gives the same ids. Unknown tokens map to
        `[UNK]`; every encoding is `[BOS] tokens... [EOS]`.
    """
    if texts is None and vocabulary is None:
        raise ValueError("build_tokenizer needs texts, a vocabulary, or both")
    for argument, value in (("texts", texts), ("vocabulary", vocabulary)):
        if isinstance(value, (str, bytes)):
            raise ValueError(
                f"{argument} must be an iterable of {'lines' if argument == 'texts' else 'tokens'}, "
                f"not one string: {value[:40]!r}"
            )
    if isinstance(model_max_length, bool) or not isinstance(model_max_length, int) or model_max_length < 3:
        raise ValueError(
            f"model_max_length must be an integer >= 3 ([BOS], one token, [EOS]), got {model_max_length!r}"
        )
    vocabulary = list(vocabulary or ())
    _check_strings("vocabulary", vocabulary)
    tokens = list(dict.fromkeys(token for token in vocabulary if token not in SPECIAL_TOKENS))
    if texts is not None:
        texts = list(texts)
        _check_strings("texts", texts)
        known = set(tokens) | set(SPECIAL_TOKENS)
        tokens += sorted({token for text in texts for token in text.split()} - known)
    for token in tokens:
        if not token or any(character.isspace() for character in token):
            raise ValueError(f"vocabulary tokens must be non-empty and contain no whitespace, got {token!r}")
    vocab = {token: index for index, token in enumerate((*SPECIAL_TOKENS, *tokens))}
    return word_level_tokenizer(vocab, model_max_length)


def word_level_tokenizer(
    vocab: dict[str, int],
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
    split_punctuation: bool = False,
    add_bos: bool = True,
    add_eos: bool = True,
) -> PreTrainedTokenizerFast:
    """A word-level tokenizer with the ids of `vocab` (`build_tokenizer` chooses them for you).

    Args:
        vocab (`dict[str, int]`): every token and its id, `[PAD]`, `[UNK]`, `[BOS]` and `[EOS]` included, anywhere
            (a model converted from the official code keeps its ids: `training/convert_official_checkpoint.py`).
        model_max_length (`int`, *optional*, defaults to 512): the length at which `truncation=True` cuts.
        split_punctuation (`bool`, *optional*, defaults to `False`): also split words at punctuation, as the
            official code's vocabulary does (`\\w+|[^\\w\\s]`: `(3+4)` is five tokens); by default only at whitespace.
        add_bos (`bool`, *optional*, defaults to `True`): start every encoding with `[BOS]`.
        add_eos (`bool`, *optional*, defaults to `True`): end every encoding (and each part of a pair) with `[EOS]`.

    Returns:
        `PreTrainedTokenizerFast`; unknown tokens map to `[UNK]`.
    """
    if missing := [token for token in SPECIAL_TOKENS if token not in vocab]:
        raise ValueError(f"vocab needs the special tokens {SPECIAL_TOKENS}; {missing} are missing")
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if split_punctuation:
        words = pre_tokenizers.Split(Regex(r"\w+|[^\w\s]"), behavior="isolated")
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), words])
    bos, eos = (f"{BOS_TOKEN} " if add_bos else ""), (f" {EOS_TOKEN}" if add_eos else "")
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos}$A{eos}",
        pair=f"{bos}$A{eos} $B:1{eos}:1",
        special_tokens=[(BOS_TOKEN, vocab[BOS_TOKEN]), (EOS_TOKEN, vocab[EOS_TOKEN])],
    )
    return NDRTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        model_input_names=["input_ids", "attention_mask"],
        model_max_length=model_max_length,
    )


def extend_tokenizer(tokenizer: PreTrainedTokenizerFast, texts: Iterable[str]) -> PreTrainedTokenizerFast:
    """A copy of a word-level `tokenizer` that also knows every word of `texts`; the ids it had do not change.

    This is the word-level way of `tokenizer.add_tokens(words)`: added tokens are matched *inside* words before the
    text is split (with `j` added, `ajk` would read as `a`, `j`, `k` instead of `[UNK]`), whereas here the new words
    join the vocabulary itself. The new words get the next ids, in sorted order; then
    `model.resize_token_embeddings(len(new_tokenizer))` gives them embedding rows and keeps the old rows.

    Args:
        tokenizer (`PreTrainedTokenizerFast`): a tokenizer made by `build_tokenizer` or `task_tokenizer`, or loaded
            from a saved NDR model.
        texts (`Iterable[str]`): lines of space-separated tokens (e.g. the new training data).

    Returns:
        `PreTrainedTokenizerFast`: the same tokenizer if every word is known, else a new one with the new words
        appended (`len(new) - len(tokenizer)` of them).
    """
    if isinstance(texts, (str, bytes)):
        raise ValueError(f"texts must be an iterable of lines, not one string: {texts[:40]!r}")
    texts = list(texts)
    _check_strings("texts", texts)
    vocab = tokenizer.get_vocab()
    new_words = sorted({token for text in texts for token in text.split()} - set(vocab))
    if not new_words:
        return tokenizer
    tokens = sorted(vocab, key=vocab.get)
    if (
        type(tokenizer.backend_tokenizer.model).__name__ != "WordLevel"
        or tokens[: len(SPECIAL_TOKENS)] != list(SPECIAL_TOKENS)
        or [vocab[token] for token in tokens] != list(range(len(tokens)))
    ):
        raise ValueError(
            "extend_tokenizer needs a word-level tokenizer made by build_tokenizer ([PAD] [UNK] [BOS] [EOS] at ids "
            "0-3, then one id per word); use tokenizer.add_tokens for other tokenizers"
        )
    return build_tokenizer(
        vocabulary=tokens[len(SPECIAL_TOKENS) :] + new_words, model_max_length=tokenizer.model_max_length
    )


def _check_strings(argument: str, values: list) -> None:
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(f"{argument}[{index}] is {value!r} ({type(value).__name__}); expected a string")
