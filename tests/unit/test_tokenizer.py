"""Word-level tokenizers: fixed special ids, [BOS] ... [EOS], [UNK], padding, save / AutoTokenizer round trip."""

import inspect
import json

import pytest
from transformers import AutoTokenizer, DataCollatorWithPadding

from modeling_ndr import TASK_NAMES, NDRForSequenceClassification, build_tokenizer, task_tokenizer, task_vocabulary
from modeling_ndr.tokenization_ndr import (
    BOS_TOKEN_ID,
    EOS_TOKEN_ID,
    PAD_TOKEN_ID,
    UNK_TOKEN_ID,
    NDRTokenizerFast,
    UnknownWordsError,
)


EXAMPLES = {
    "ctl": ["101 d a b", "b a d 101", "000 i"],
    "arithmetic": ["( ( 4 * 7 ) + 2 )", "( 1 + 2 )"],
    "listops": ["[MED 4 8 5 [MAX 8 4 9 ] ]", "[SM 1 2 ]"],
    "ctlpp": ["C b 5", "a F z q 0", "7 A a"],
}


@pytest.mark.parametrize("task", TASK_NAMES)
def test_special_tokens_have_the_ids_the_model_config_uses(task):
    tokenizer = task_tokenizer(task)
    assert (
        (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
        == (
            PAD_TOKEN_ID,
            UNK_TOKEN_ID,
            BOS_TOKEN_ID,
            EOS_TOKEN_ID,
        )
        == (0, 1, 2, 3)
    ), "pad 0 / unk 1 / bos 2 / eos 3 match NDRConfig's defaults"
    assert len(tokenizer) == 4 + len(task_vocabulary(task)), "four special tokens plus the task's symbols"


@pytest.mark.parametrize("task", TASK_NAMES)
def test_encodings_start_with_bos_and_end_with_eos_with_one_id_per_word(task):
    tokenizer = task_tokenizer(task)
    for text in EXAMPLES[task]:
        ids = tokenizer(text)["input_ids"]
        assert ids[0] == BOS_TOKEN_ID and ids[-1] == EOS_TOKEN_ID, f"{text!r} is wrapped as [BOS] ... [EOS]"
        assert tokenizer.convert_ids_to_tokens(ids[1:-1]) == text.split(" "), f"{text!r}: one id per word"
        assert UNK_TOKEN_ID not in ids, f"{text!r}: every task token is in the vocabulary"


def test_a_text_with_unknown_words_is_one_error_naming_them():
    """A word-level model has nothing to read an unknown word with: the tokenizer says so instead of a silent [UNK]."""
    tokenizer = task_tokenizer("arithmetic")
    with pytest.raises(UnknownWordsError, match=r"^2 words not in this model's vocabulary: '-', '%' \(words"):
        tokenizer("( 1 - 2 % 3 - 4 )")
    with pytest.raises(UnknownWordsError, match=r"'x'"):
        tokenizer(["( 1 + 2 )", "( x + 2 )"])  # any text of a batch
    with pytest.raises(UnknownWordsError, match=r"'x'"):
        tokenizer([["(", "x", ")"]], is_split_into_words=True)
    assert tokenizer("( 1 + 2 )")["input_ids"][0] == BOS_TOKEN_ID, "known words encode as before"


def test_unknown_words_unk_reads_them_as_unk():
    tokenizer = task_tokenizer("arithmetic")
    tokenizer.unknown_words = "unk"
    ids = tokenizer("( 1 - 2 )")["input_ids"]
    assert ids[3] == UNK_TOKEN_ID, "'-' is not an arithmetic token, so it becomes [UNK]"
    assert tokenizer.convert_ids_to_tokens(ids)[3] == "[UNK]"
    strict = task_tokenizer("arithmetic")
    with strict.reading_unknown_words():
        assert strict("( 1 - 2 )")["input_ids"] == ids
    with pytest.raises(UnknownWordsError):
        strict("( 1 - 2 )")  # the block's setting does not outlive it
    with pytest.raises(ValueError, match="unknown_words='maybe'"):
        strict.unknown_words = "maybe"


def test_the_error_quotes_the_input_example_saved_with_the_tokenizer(tmp_path):
    tokenizer = build_tokenizer(texts=["00 56 78"])
    tokenizer.init_kwargs["input_example"] = "00 56 78"
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    with pytest.raises(UnknownWordsError, match=r"'5', '7', '\+', '6', '8'; it reads texts like '00 56 78'"):
        loaded("5 7 + 6 8")
    assert AutoTokenizer.from_pretrained(tmp_path, unknown_words="unk")("5 7")["input_ids"] == [2, 1, 1, 3]


def test_listops_brackets_stay_whole_words():
    tokenizer = task_tokenizer("listops")
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("[MAX 8 4 ]")["input_ids"])
    assert tokens == ["[BOS]", "[MAX", "8", "4", "]", "[EOS]"], "WhitespaceSplit keeps '[MAX' and ']' as words"


@pytest.mark.parametrize("task", TASK_NAMES)
def test_output_holds_only_what_the_model_forward_accepts(task):
    encoding = task_tokenizer(task)(EXAMPLES[task])
    assert set(encoding) == {"input_ids", "attention_mask"}, "no token_type_ids: the model has no segment embedding"
    accepted = inspect.signature(NDRForSequenceClassification.forward).parameters
    assert set(encoding) <= set(accepted), f"forward accepts {list(accepted)}"


@pytest.mark.parametrize("task", TASK_NAMES)
def test_round_trip_through_save_pretrained_and_auto_tokenizer(task, tmp_path):
    tokenizer = task_tokenizer(task)
    tokenizer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "NDRTokenizerFast"
    assert config["auto_map"] == {"AutoTokenizer": [None, "tokenization_ndr.NDRTokenizerFast"]}, "remote code finds it"
    assert (tmp_path / "tokenization_ndr.py").is_file(), "the class travels with the folder"
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert type(loaded) is NDRTokenizerFast
    assert loaded.get_vocab() == tokenizer.get_vocab(), "the vocabulary survives the round trip"
    batch = EXAMPLES[task] + ["unknown words here"]
    with loaded.reading_unknown_words(), tokenizer.reading_unknown_words():
        assert loaded(batch)["input_ids"] == tokenizer(batch)["input_ids"], "the loaded tokenizer encodes the same ids"
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id) == (0, 2, 3), "special tokens survive"
    assert loaded.model_input_names == ["input_ids", "attention_mask"], "still no token_type_ids after loading"


def test_data_collator_pads_a_mixed_length_batch():
    tokenizer = task_tokenizer("arithmetic")
    features = [tokenizer(text) for text in ["( 1 + 2 )", "( ( 4 * 7 ) + 2 )", "( ( ( 1 + 1 ) * 2 ) + 3 )"]]
    batch = DataCollatorWithPadding(tokenizer, return_tensors="pt")(features)
    longest = max(len(feature["input_ids"]) for feature in features)
    assert tuple(batch["input_ids"].shape) == (3, longest), "padded to the longest sequence"
    for row, feature in enumerate(features):
        length = len(feature["input_ids"])
        assert batch["input_ids"][row, length:].eq(PAD_TOKEN_ID).all(), "padding is [PAD] (id 0) on the right"
        assert batch["attention_mask"][row].tolist() == [1] * length + [0] * (longest - length), "mask hides padding"


def test_build_tokenizer_makes_a_deterministic_vocabulary_from_texts():
    texts = ["x y z", "z w", "y  x"]
    first, second = build_tokenizer(texts), build_tokenizer(list(reversed(texts)))
    assert first.get_vocab() == second.get_vocab(), "the same tokens give the same ids whatever the order of texts"
    assert first.convert_ids_to_tokens(list(range(8))) == ["[PAD]", "[UNK]", "[BOS]", "[EOS]", "w", "x", "y", "z"], (
        "specials first, then the words sorted"
    )
    with first.reading_unknown_words():
        assert first("w q")["input_ids"] == [BOS_TOKEN_ID, 4, UNK_TOKEN_ID, EOS_TOKEN_ID]


def test_build_tokenizer_keeps_a_given_vocabulary_order_and_adds_words_from_texts():
    tokenizer = build_tokenizer(texts=["b extra"], vocabulary=["c", "b", "a"])
    assert tokenizer.convert_ids_to_tokens(list(range(4, 8))) == ["c", "b", "a", "extra"]


def test_build_tokenizer_rejects_unusable_input():
    with pytest.raises(ValueError, match="texts"):
        build_tokenizer()
    with pytest.raises(ValueError, match="iterable of lines"):
        build_tokenizer("a single string")
    with pytest.raises(ValueError, match="whitespace"):
        build_tokenizer(vocabulary=["two words"])


def test_unknown_words_are_found_in_every_output_form_and_the_word_unk_itself_is_known():
    tokenizer = task_tokenizer("arithmetic")
    for kwargs in ({}, {"return_tensors": "pt"}, {"return_tensors": "np"}, {"padding": True}):
        with pytest.raises(UnknownWordsError, match="'-'"):
            tokenizer(["( 1 + 2 )", "( 1 - 2 )"], **kwargs)
    assert tokenizer("( 1 + [UNK] )")["input_ids"][4] == UNK_TOKEN_ID, "the vocabulary's own [UNK] is a known word"


def test_unknown_words_are_the_words_as_the_tokenizer_splits_them():
    """A converted official model's tokenizer splits at punctuation: `(3+4)` is five known words, not one unknown."""
    import datasets
    from modeling_ndr.tokenization_ndr import word_level_tokenizer
    from modeling_ndr.training import UsageError
    from ndr_training import warn_unknown_words

    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[BOS]", "[EOS]", "(", ")", "+", "3", "4"])}
    tokenizer = word_level_tokenizer(vocab, split_punctuation=True)
    assert tokenizer.unknown_words_in(["(3+4)", "(3*4)"]) == ["*"]
    data = datasets.DatasetDict({"test": datasets.Dataset.from_dict({"text": ["(3+4)", "(3*4)"]})})
    with pytest.raises(UsageError, match=r"test: 1 words are not in the model's tokenizer: \['\*'\]"):
        warn_unknown_words(data, tokenizer, "error")
