"""`NDRForTokenClassification`: one label per input token, as `BertForTokenClassification` beside
`BertForSequenceClassification` — the same encoder, a head on every column, labels -100 not scored. It loads through
`AutoModelForTokenClassification`, runs in `pipeline("token-classification")` and as remote code, takes a sequence
classifier's encoder with a new head, and works with every variant, ACT halting and adaptive steps."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.nn import functional as F
from transformers import AutoModelForTokenClassification, pipeline

import modeling_ndr  # noqa: F401  (registers the NDR auto classes)
from modeling_ndr import NDRConfig, NDRForSequenceClassification, NDRForTokenClassification, build_tokenizer
from modeling_ndr.configuration_ndr import AUTO_MAP


DIGITS = [str(d) for d in range(10)]


def tiny(**overrides) -> NDRConfig:
    values = dict(vocab_size=16, hidden_size=16, intermediate_size=32, num_attention_heads=2, num_hidden_layers=3,
                  hidden_dropout_prob=0.0, attention_dropout=0.0, gate_dropout=0.0, num_labels=4)  # fmt: skip
    return NDRConfig(**{**values, **overrides})


def batch(seed: int = 0, batch_size: int = 3, seq: int = 7):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, 16, (batch_size, seq), generator=generator)
    labels = torch.randint(0, 4, (batch_size, seq), generator=generator)
    labels[:, 0] = labels[:, -1] = -100  # [BOS], [EOS]: not scored
    return input_ids, labels


def test_every_token_gets_logits_and_the_loss_scores_only_labelled_tokens():
    torch.manual_seed(0)
    model = NDRForTokenClassification(tiny()).eval()
    input_ids, labels = batch()
    output = model(input_ids, labels=labels)
    assert output.logits.shape == (3, 7, 4), "one score per token and label"
    scored = labels != -100
    expected = F.cross_entropy(output.logits[scored], labels[scored])
    torch.testing.assert_close(output.loss, expected)
    flipped = labels.clone()
    flipped[:, 0] = -100  # already not scored
    torch.testing.assert_close(model(input_ids, labels=flipped).loss, expected)


def test_a_token_label_out_of_range_is_one_error_naming_it():
    model = NDRForTokenClassification(tiny()).eval()
    input_ids, labels = batch()
    labels[1, 3] = 9
    with pytest.raises(ValueError, match=r"labels \[9\] are out of range: this model has num_labels=4"):
        model(input_ids, labels=labels)


@pytest.mark.parametrize(
    "variant",
    [{}, {"attention_type": "softmax", "position_encoding": "relative", "copy_gate": False},
     {"halting": "act"}, {"adaptive_steps": True, "max_adaptive_steps": 6}],
    ids=["ndr", "transformer_rel", "act", "adaptive_steps"],
)  # fmt: skip
def test_variants_act_and_adaptive_steps_classify_every_token(variant):
    torch.manual_seed(0)
    model = NDRForTokenClassification(tiny(**variant))
    input_ids, labels = batch()
    output = model(input_ids, labels=labels, output_gates=True)
    output.loss.backward()
    assert output.logits.shape == (3, 7, 4) and torch.isfinite(output.loss)
    assert model.classifier.weight.grad is not None and model.ndr.embeddings.weight.grad is not None
    if variant.get("halting") == "act":
        assert output.ponder_cost is not None and output.halting_steps.shape == (3, 7)


def test_the_auto_class_saves_and_loads_it_and_the_auto_map_names_it(tmp_path):
    model = NDRForTokenClassification(tiny()).eval()
    model.save_pretrained(tmp_path)
    assert AUTO_MAP["AutoModelForTokenClassification"] == "modeling_ndr.NDRForTokenClassification"
    loaded = AutoModelForTokenClassification.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, NDRForTokenClassification)
    input_ids, _ = batch()
    torch.testing.assert_close(loaded(input_ids).logits, model(input_ids).logits)


def test_a_sequence_classifier_s_encoder_loads_with_a_new_token_head(tmp_path):
    """Fine-tuning a released sequence classifier on a token task: the encoder is kept, the head of another size is
    new (`ignore_mismatched_sizes`), started as transformers starts one."""
    trained = NDRForSequenceClassification(tiny(num_labels=8))
    trained.save_pretrained(tmp_path)
    model = NDRForTokenClassification.from_pretrained(tmp_path, num_labels=3, ignore_mismatched_sizes=True)
    for name, weight in trained.ndr.state_dict().items():
        assert torch.equal(model.ndr.state_dict()[name], weight), f"{name}: the encoder is the trained one"
    assert model.classifier.weight.shape == (3, 16) and torch.equal(model.classifier.bias, torch.zeros(3))


def test_the_token_classification_pipeline_labels_each_word_of_an_export(tmp_path):
    texts = ["3 1 4 = _ _ _", "5 9 = _ _"]
    tokenizer = build_tokenizer(texts)
    config = tiny(vocab_size=len(tokenizer), num_labels=10, id2label=dict(enumerate(DIGITS)),
                  label2id={d: i for i, d in enumerate(DIGITS)})  # fmt: skip
    model = NDRForTokenClassification(config).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    tag = pipeline("token-classification", model=str(tmp_path), ignore_labels=[])
    words = tag("3 1 4 = _ _ _")
    assert [entry["word"] for entry in words] == "3 1 4 = _ _ _".split(), "one entry per word, no [BOS]/[EOS]"
    assert all(entry["entity"] in DIGITS for entry in words)
    with torch.no_grad():
        encoded = tokenizer("3 1 4 = _ _ _", return_tensors="pt")
        expected = model(**encoded).logits[0, 1:-1].argmax(-1).tolist()
    assert [int(entry["entity"]) for entry in words] == expected, "the pipeline reads the model's own answers"


REMOTE_CODE = textwrap.dedent(
    """
    import sys
    sys.modules["modeling_ndr"] = None  # this Python cannot import the package
    sys.modules["triton"] = None
    import torch
    from transformers import AutoModelForTokenClassification
    model = AutoModelForTokenClassification.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
    print(type(model).__name__, repr(model(torch.load(sys.argv[2])).logits.tolist()))
    """
)


def test_remote_code_loads_it_without_the_package(tmp_path):
    model = NDRForTokenClassification(tiny()).eval()
    model.save_pretrained(tmp_path / "saved")
    input_ids, _ = batch()
    torch.save(input_ids, tmp_path / "ids.pt")
    (tmp_path / "load.py").write_text(REMOTE_CODE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "load.py", str(tmp_path / "saved"), str(tmp_path / "ids.pt")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    name, logits = result.stdout.strip().splitlines()[-1].split(" ", 1)
    assert name == "NDRForTokenClassification"
    torch.testing.assert_close(torch.tensor(eval(logits)), model(input_ids).logits.detach())
