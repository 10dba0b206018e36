"""Word-level tokenizers for the tasks: one id per space-separated token, wrapped as `[BOS] ... [EOS]`.

`build_tokenizer` fixes the ids of the special tokens (`[PAD]` 0, `[UNK]` 1, `[BOS]` 2, `[EOS]` 3) so that every
tokenizer it makes agrees with the model config's default `pad_token_id` / `bos_token_id` / `eos_token_id`;
`word_level_tokenizer` takes every id from a vocabulary (a converted official model keeps its own). The tokenizer is a
`tokenizers` `WordLevel` model with a `WhitespaceSplit` pre-tokenizer and a `TemplateProcessing` post-processor,
wrapped as a `PreTrainedTokenizerFast` that saves and loads with `save_pretrained` / `AutoTokenizer`. It returns
only `input_ids` and `attention_mask` (no `token_type_ids`), which is what the model's `forward` takes.
"""

import contextlib
import json
import os
import shutil
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast


PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN = "[PAD]", "[UNK]", "[BOS]", "[EOS]"
PAD_TOKEN_ID, UNK_TOKEN_ID, BOS_TOKEN_ID, EOS_TOKEN_ID = 0, 1, 2, 3
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN)
# The model has no length limit of its own (no position table); attention memory grows with the square of the length,
# and inputs up to this length are tested. `truncation=True` cuts here.
DEFAULT_MODEL_MAX_LENGTH = 512


class UnknownWordsError(ValueError):
    """A text holds words the tokenizer's vocabulary lacks (each would be read as `[UNK]`)."""


UNKNOWN_WORDS_CHOICES = ("error", "unk")


class NDRTokenizerFast(PreTrainedTokenizerFast):
    """The word-level tokenizer of an NDR model: a `PreTrainedTokenizerFast` that knows its whole vocabulary.

    A word-level model has no sub-words to fall back on: a word outside its vocabulary reaches the model as `[UNK]`,
    and the model answers something without a word of warning. So calling the tokenizer (which `pipeline`, `Trainer`
    data preparation and `train.py` all do) on a text with unknown words raises `UnknownWordsError`, one line naming
    them and, where the tokenizer was saved with one, an example of what the model reads (`input_example`). Pass
    `unknown_words="unk"` (to `from_pretrained` or when building it) to read them as `[UNK]` as other tokenizers do.

    Saved folders name this class in `tokenizer_config.json` (`tokenizer_class: NDRTokenizerFast`) with an `auto_map`
    and a copy of this file, so `AutoTokenizer` loads it with the package imported, or without the package with
    `trust_remote_code=True`.

    It takes `PreTrainedTokenizerFast`'s arguments and two of its own, kept in `init_kwargs` (and so in
    `tokenizer_config.json`): `unknown_words` (`"error"`, the default, or `"unk"`: see above) and `input_example` (a
    text the model reads, quoted in the error).
    """

    # No `__init__` of its own: transformers loads `tokenizer.json` as it is only into classes without one (others it
    # rebuilds from the vocabulary); `unknown_words` and `input_example` travel in `init_kwargs`.

    @property
    def unknown_words(self) -> str:
        """`"error"` (the default) or `"unk"`: what calling the tokenizer does with a word outside the vocabulary."""
        return _checked_unknown_words(self.init_kwargs.get("unknown_words") or "error")

    @unknown_words.setter
    def unknown_words(self, value: str):
        self.init_kwargs["unknown_words"] = _checked_unknown_words(value)

    @contextlib.contextmanager
    def reading_unknown_words(self):
        """Within this block, calls read unknown words as `[UNK]` whatever `unknown_words` says (train.py's
        `--unknown_words unk`); the setting that is saved with the tokenizer does not change."""
        kept = self.init_kwargs.get("unknown_words")
        self.init_kwargs["unknown_words"] = "unk"
        try:
            yield self
        finally:
            if kept is None:
                self.init_kwargs.pop("unknown_words", None)
            else:
                self.init_kwargs["unknown_words"] = kept

    @property
    def input_example(self) -> str | None:
        """A text the model reads (quoted when a text holds unknown words), or None."""
        return self.init_kwargs.get("input_example")

    def __call__(self, text=None, text_pair=None, *args, **kwargs):
        encoded = super().__call__(text, text_pair, *args, **kwargs)
        if self.unknown_words == "error" and _holds(encoded.get("input_ids"), self.unk_token_id):
            # (the words are looked up only where an [UNK] came out: a text may also hold the word "[UNK]" itself)
            for part in (text, text_pair, kwargs.get("text_target"), kwargs.get("text_pair_target")):
                self.check_words(part, kwargs.get("is_split_into_words", False))
        return encoded

    def unknown_words_in(self, texts) -> list[str]:
        """The words of `texts` (a string or a list of them) that the vocabulary lacks, in order of appearance."""
        vocabulary, unknown = self.get_vocab(), {}
        pre_tokenizer = self.backend_tokenizer.pre_tokenizer  # the words exactly as the model's vocabulary sees them
        split = (
            pre_tokenizer.pre_tokenize_str if pre_tokenizer is not None else lambda t: [(w, None) for w in t.split()]
        )
        for text in [texts] if isinstance(texts, str) else texts:
            for word, _ in split(text) if isinstance(text, str) else ():
                if word not in vocabulary:
                    unknown.setdefault(word)
        return list(unknown)

    def check_words(self, texts, is_split_into_words: bool = False) -> None:
        """Raise `UnknownWordsError` if `texts` (what `__call__` takes) hold a word outside the vocabulary."""
        if texts is None:
            return
        if is_split_into_words:  # a list of words, or a batch of such lists
            batch = [texts] if texts and isinstance(texts[0], str) else texts
            texts = [" ".join(words) for words in batch]
        if unknown := self.unknown_words_in(texts):
            shown = ", ".join(repr(word) for word in unknown[:10]) + (", ..." if len(unknown) > 10 else "")
            example = f"; it reads texts like {self.input_example!r}" if self.input_example else ""
            raise UnknownWordsError(
                f"{len(unknown)} word{'s' if len(unknown) > 1 else ''} not in this model's vocabulary: {shown}"
                f"{example} (words separated by spaces; unknown_words='unk' reads them as [UNK])"
            )

    def save_pretrained(self, save_directory, *args, **kwargs):
        files = super().save_pretrained(save_directory, *args, **kwargs)
        config_file = os.path.join(save_directory, "tokenizer_config.json")
        with open(config_file, encoding="utf-8") as f:
            config = json.load(f)
        # transformers 5 writes its backend's class name (TokenizersBackend); name this class, and where to find it
        config["tokenizer_class"] = "NDRTokenizerFast"
        config["auto_map"] = {"AutoTokenizer": [None, "tokenization_ndr.NDRTokenizerFast"]}
        with open(config_file, "w", encoding="utf-8") as f:
            f.write(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        shutil.copyfile(os.path.abspath(__file__), os.path.join(save_directory, "tokenization_ndr.py"))
        return files


def _checked_unknown_words(value: str) -> str:
    if value not in UNKNOWN_WORDS_CHOICES:
        raise ValueError(f"unknown_words={value!r}: expected one of {UNKNOWN_WORDS_CHOICES}")
    return value


def _holds(input_ids, token_id: int | None) -> bool:
    """Whether `input_ids` (one row or a batch: lists, a tensor or an array) hold `token_id`."""
    if input_ids is None or token_id is None:
        return False
    rows = input_ids.tolist() if hasattr(input_ids, "tolist") else input_ids
    rows = [rows] if rows and isinstance(rows[0], int) else rows
    return any(token_id in row for row in rows)


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
