"""Checkpoints of the paper's official code (github.com/RobertCsordas/ndr) convert into ndr models that compute what
they computed (`training/convert_official_checkpoint.py`, `modeling_ndr.training.official`).

The default tests write checkpoints in the official format from ndr models (`official_helpers.official_weights`) and
check the round trip, the tokenizer's ids and every refusal. The `official` test (opt in: `-m official`, with
`NDR_OFFICIAL_DIR` pointing at a checkout of the official code) builds the official models themselves on the CPU and
compares their float64 logits with the converted models'.
"""

import json
import os
import random
import re
import types

import pytest
import torch
from official_helpers import (
    build_official_model,
    normalized_row_sums,
    official_arguments,
    official_weights,
    save_official_checkpoint,
)
from scripts import load_script
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from modeling_ndr import NDRForSequenceClassification
from modeling_ndr.training.errors import exit_on_usage_error
from official import OFFICIAL_VARIANTS, official_config, official_tokenizer, official_vocabulary


CTL_TEXTS = ["101 c b a", "000 k", "111 a b c d e f g h", "010 j"]  # the official format: ctl.reversed=1


@pytest.fixture(scope="module")
def converter():
    return load_script("training/convert_official_checkpoint.py", "ndr_convert_official_checkpoint")


def convert(converter, checkpoint, out_dir) -> str:
    return exit_on_usage_error(lambda: converter.main([str(checkpoint), str(out_dir)]))


def ndr_model(official_variant: str, **arguments) -> tuple[NDRForSequenceClassification, dict]:
    """A small ndr model of an official variant with every weight moved off its initial value (so that a zero bias
    or a unit scale cannot hide a wrong mapping), and the run arguments of its official twin."""
    arguments = official_arguments(official_variant, **arguments)
    config, _ = official_config(arguments)
    torch.manual_seed(0)
    model = NDRForSequenceClassification(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
        model.ndr.embeddings.weight[-2:] = 0  # [PAD] and [UNK]: the official model has no such rows
        if config.position_encoding == "absolute":  # the official softmax attention has no content bias
            model.ndr.layer.attention.q_proj.bias.zero_()
    return model, arguments


def write_checkpoint(path, drop: str | None = None, claimed: dict | None = None, **arguments) -> None:
    """An official checkpoint of a small `ndr_geometric` with `arguments`, without the weight `drop`, whose saved
    arguments claim `claimed` on top (other than those its weights were made with)."""
    model, arguments = ndr_model("ndr_geometric", **arguments)
    weights = official_weights(model, "ndr_geometric", len(official_vocabulary(arguments)[0]))
    weights.pop(drop, None)
    save_official_checkpoint(path, weights, {**arguments, **(claimed or {})})


# ---------------------------------------------------------------------------------------------------- conversion


# every variant, and the run arguments that change what the model computes: ACT's Universal-Transformer variant; the
# L1-normalised NDR reading the first column without [BOS], with more steps at evaluation than in training
ROUND_TRIPS = {
    **{variant: (variant, {}) for variant in OFFICIAL_VARIANTS},
    "act_universal/ut_variant": ("act_universal", {"act__ut_variant": 1}),
    "ndr_geometric/options": ("ndr_geometric", {"trafo_classifier__norm_att": 1, "sos": 0, "n_test_layers": "5",
                                                "transformer_classifier__result_column": "first"}),
}  # fmt: skip


@pytest.mark.parametrize("case", ROUND_TRIPS)
def test_a_converted_checkpoint_gives_the_logits_of_the_model_it_was_written_from(case, converter, tmp_path):
    official_variant, arguments = ROUND_TRIPS[case]
    model, arguments = ndr_model(official_variant, **arguments)
    weights = official_weights(model, official_variant, len(official_vocabulary(arguments)[0]))
    save_official_checkpoint(tmp_path / "model-30000.pth", weights, arguments)
    out = convert(converter, tmp_path / "model-30000.pth", tmp_path / "converted")
    converted = AutoModelForSequenceClassification.from_pretrained(out).eval()
    inputs = AutoTokenizer.from_pretrained(out)(CTL_TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected, got = model(**inputs).logits, converted(**inputs).logits
    difference = (expected - got).abs().max().item()
    assert difference <= 1e-6, f"{case}: the converted model's logits differ by {difference:.2e}"


def test_the_converted_folder_is_hub_ready_and_names_its_source(converter, tmp_path):
    write_checkpoint(tmp_path / "model-30000.pth")
    out = tmp_path / "converted"
    convert(converter, tmp_path / "model-30000.pth", out)
    config = json.loads((out / "config.json").read_text())
    assert {"AutoConfig", "AutoModel", "AutoModelForSequenceClassification"} <= set(config["auto_map"])
    assert {"model.safetensors", "tokenizer.json", "modeling_ndr.py", "README.md"} <= {p.name for p in out.iterdir()}
    record = json.loads((out / "conversion.json").read_text())
    assert record["iteration"] == 30000 and len(record["sha256"]) == 64, record
    card = (out / "README.md").read_text()
    assert "RobertCsordas/ndr" in card and "model-30000.pth" in card and record["sha256"] in card, card[:800]
    assert config["id2label"]["7"] == "111", "the classes are the official output vocabulary's, in its order"


def test_the_tokenizer_has_the_ids_of_the_official_vocabulary():
    # CTL: 000-111 are 0-7, a-k 8-18 (sorted), then the model's [EOS] 19 and [BOS] 20
    ctl = official_tokenizer(official_arguments("ndr_geometric"))
    assert ctl("101 c b a").input_ids == [20, 5, 10, 9, 8, 19]
    assert (ctl.pad_token_id, ctl.unk_token_id) == (21, 22), "[PAD] and [UNK] come after the official ids"
    # arithmetic: ( ) * + 0-9 sorted; words are split at punctuation as the official vocabulary splits them
    arithmetic = official_tokenizer(official_arguments("ndr_geometric", task="simple_arithmetic_trafo"))
    assert arithmetic("((3+4)*5)").input_ids == arithmetic("( ( 3 + 4 ) * 5 )").input_ids
    assert arithmetic("((3+4)*5)").input_ids == [15, 0, 0, 7, 3, 8, 1, 2, 9, 1, 14]
    # ListOps: 0-9, [MAX [MED [MIN [SM ] sorted, split at spaces; without sos there is no [BOS]
    listops = official_tokenizer(official_arguments("ndr_geometric", task="listops_trafo", sos=0))
    assert listops("[MAX 2 9 ]").input_ids == [10, 2, 9, 14, 15]


def test_the_run_arguments_become_the_config():
    config, variant = official_config(
        official_arguments(
            "ndr_geometric",
            state_size=256,
            transformer__n_heads=1,
            transformer__encoder_n_layers=14,
            n_test_layers="20",
            trafo_classifier__norm_att=1,
            ndr__drop_gate=0.1,
            dropout=0.5,
            transformer_classifier__result_column="first",
        )  # fmt: skip
    )
    assert variant == "ndr" and (config.attention_type, config.position_encoding, config.copy_gate) == (
        "geometric", "direction", True
    )  # fmt: skip
    assert (config.hidden_size, config.intermediate_size, config.num_attention_heads) == (256, 512, 1)
    assert (config.num_hidden_layers, config.eval_num_hidden_layers, config.readout) == (14, 20, "first")
    assert config.normalize_attention and (config.gate_dropout, config.hidden_dropout_prob) == (0.1, 0.5)
    assert (config.vocab_size, config.eos_token_id, config.bos_token_id, config.pad_token_id) == (23, 19, 20, 21)
    act, variant = official_config(official_arguments("act_universal", transformer__encoder_n_layers=14))
    assert variant == "transformer_act" and (act.halting, act.act_update_halted, act.act_threshold) == (
        "act",
        True,
        0.99,
    )
    assert act.eval_num_hidden_layers is None, "the official ACT evaluates with at most its training steps"
    assert (act.act_ponder_cost, act.act_ut_variant, act.embedding_dropout) == ("official", False, 0.1)
    ut, _ = official_config(official_arguments("act_relative_universal", act__ut_variant=1))
    assert ut.act_ut_variant and ut.embedding_init == "xavier", "the official relative variants start Xavier"


# ---------------------------------------------------------------------------------------------------- bad input


class RunsCode:
    """Pickled as a call of `os.makedirs`: loading it with full unpickling would create the folder."""

    def __init__(self, folder):
        self.folder = folder

    def __reduce__(self):
        return os.makedirs, (str(self.folder),)


BAD_CHECKPOINTS = {
    "text": (lambda path: path.write_text("not a checkpoint"), "not a checkpoint of the official code"),
    "a line of text": (lambda path: path.write_text("hello\n"), "not a checkpoint of the official code"),  # KeyError
    "a tensor": (lambda path: torch.save(torch.zeros(3), path), "expected a dict with `model` and `run_invariants"),
    "code": (
        lambda path: torch.save({"model": RunsCode(path.parent / "ran")}, path),
        "(?i)unsupported global os.makedirs",
    ),
    "ndr_residual": (
        lambda path: write_checkpoint(path, claimed={"transformer.variant": "ndr_residual"}),
        "transformer.variant=ndr_residual cannot be converted: its update is tanh",
    ),
    "relative": (
        lambda path: write_checkpoint(path, claimed={"transformer.variant": "relative"}),
        "do not share weights",
    ),
    "unknown variant": (
        lambda path: write_checkpoint(path, claimed={"transformer.variant": "lstm"}),
        "transformer.variant='lstm' is not a variant ndr has",
    ),
    "scalar gate": (
        lambda path: write_checkpoint(path, claimed={"ndr.scalar_gate": 1}),
        "ndr.scalar_gate=1 is not something",
    ),
    "unknown task": (
        lambda path: write_checkpoint(path, claimed={"task": "scan_trafo"}),
        "no vocabulary known for the run's task 'scan_trafo'",
    ),
    "official ListOps": (
        lambda path: write_checkpoint(path, claimed={"task": "listops_trafo", "listops.variant": "official"}),
        r"no vocabulary known for the run's task 'listops_trafo' \(listops.variant=official\)",
    ),
    "missing weight": (
        lambda path: write_checkpoint(path, drop="trafo.layer.g2.bias"),
        "the checkpoint has no weight 'trafo.layer.g2.bias'",
    ),
    "other sizes": (
        lambda path: write_checkpoint(path, claimed={"transformer.ff_multiplier": 4.0}),
        "the weights do not fit the run's arguments",
    ),
}


@pytest.mark.parametrize("case", BAD_CHECKPOINTS)
def test_a_bad_checkpoint_is_one_line_and_exit_2_and_writes_nothing(case, converter, tmp_path, capsys):
    make, message = BAD_CHECKPOINTS[case]
    checkpoint = tmp_path / "model-100.pth"
    make(checkpoint)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_status:
        convert(converter, checkpoint, tmp_path / "out")
    error = capsys.readouterr().err
    assert exit_status.value.code == 2 and error.strip().count("\n") == 0, error
    assert re.search(message, error), f"{case}: {error}"
    assert not (tmp_path / "out").exists() and not (tmp_path / "ran").exists(), "a refused checkpoint writes nothing"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")], "no staging folder is left behind"


# ------------------------------------------------------------------------------------------ the official code itself

OFFICIAL_DIR = os.environ.get("NDR_OFFICIAL_DIR")
# each variant at the size of the official CTL sweeps (ctl_ndr_geometric, ctl_baselines_transformer_geometric,
# ctl_baselines_transformer_11, ctl_act), and the NDR on arithmetic and ListOps at the paper's sizes
BASELINE = dict(state_size=128, transformer__n_heads=4, transformer__encoder_n_layers=11)
ACT = dict(state_size=128, transformer__n_heads=4, transformer__encoder_n_layers=14, act__loss_weight=0.03)
OFFICIAL_CASES = {
    "ndr_geometric": dict(state_size=256, transformer__n_heads=1, transformer__encoder_n_layers=14),
    "geometric_transformer": BASELINE,
    "universal": BASELINE,
    "relative_universal": BASELINE,
    "act_universal": ACT,
    "act_relative_universal": ACT,
    "act_relative_universal_geometric": ACT,
    "act_universal/ut_variant": {**ACT, "act__ut_variant": 1},
    "ndr_geometric/arithmetic": dict(task="simple_arithmetic_trafo", state_size=256, transformer__n_heads=4,
                                     transformer__encoder_n_layers=15, transformer__ff_multiplier=4.0),
    "ndr_geometric/listops": dict(task="listops_trafo", state_size=512, transformer__n_heads=16,
                                  transformer__encoder_n_layers=20, n_test_layers="24",
                                  transformer_classifier__result_column="first"),
}  # fmt: skip


def official_texts(task: str, rng: random.Random, count: int = 16) -> list[str]:
    """Inputs in the official datasets' formats, of several lengths."""
    texts = []
    for _ in range(count):
        if task == "ctl_trafo_classifier":  # symbol, then functions in the order they apply (ctl.reversed=1)
            texts.append(" ".join([f"{rng.randrange(8):03b}", *rng.choices("abcdefghijk", k=rng.randint(1, 8))]))
        elif task == "simple_arithmetic_trafo":
            text = str(rng.randrange(10))
            for _ in range(rng.randint(1, 4)):
                text = f"({text}{rng.choice('+*')}{rng.randrange(10)})"
            texts.append(text)
        else:
            inner = f"[{rng.choice(['MIN', 'MAX', 'MED', 'SM'])} {rng.randrange(10)} {rng.randrange(10)} ]"
            texts.append(f"[MAX {rng.randrange(10)} {inner} {rng.randrange(10)} ]")
    return texts


def official_input_vocabulary(task: str):
    """The official dataset's input vocabulary, built by its own code."""
    import dataset
    from framework.data_structures.vocabulary import WordVocabulary

    if task == "ctl_trafo_classifier":  # CompositionalTableLookup.generate_data with 3 bits and 11 tables
        return WordVocabulary([f"{value:08b}"[-3:] for value in range(8)] + list("abcdefghijk"))
    if task == "simple_arithmetic_trafo":
        owner = types.SimpleNamespace(in_vocabulary=None, maxval=10, OPS=dataset.SimpleArithmetics.OPS)
        dataset.SimpleArithmetics.construct_vocab(owner)
        return dataset.SimpleArithmetics.in_vocabulary
    dataset.ListOps.construct_vocab(types.SimpleNamespace(in_vocabulary=None, OPS=dataset.ListOps.OPS))
    return dataset.ListOps.in_vocabulary


def float64_throughout(monkeypatch):
    """ndr computes the copy gate, ACT's halting probability and softmax weights in float32 on purpose (`.float()`,
    whatever the model's dtype); lifted here, so that a float64 model computes them in float64 as the official one
    does. (Both codes keep ACT's cumulative halting sums in float32.)"""
    to_float = torch.Tensor.float
    monkeypatch.setattr(torch.Tensor, "float", lambda self: self if self.dtype == torch.float64 else to_float(self))


@pytest.mark.official
@pytest.mark.skipif(not OFFICIAL_DIR, reason="NDR_OFFICIAL_DIR is not set to a checkout of RobertCsordas/ndr")
@pytest.mark.parametrize("case", OFFICIAL_CASES)
def test_the_converted_model_computes_what_the_official_code_computes(case, converter, tmp_path, monkeypatch):
    official_variant = case.split("/")[0]
    arguments = official_arguments(official_variant, **OFFICIAL_CASES[case])
    words, labels, _ = official_vocabulary(arguments)
    torch.manual_seed(0)
    official = build_official_model(OFFICIAL_DIR, arguments, len(words), len(labels))
    with torch.no_grad():  # the official initialisation, moved so that zero biases and unit scales are tested too
        for parameter in official.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    save_official_checkpoint(tmp_path / "model-30000.pth", official.state_dict(), arguments)
    out = convert(converter, tmp_path / "model-30000.pth", tmp_path / "converted")
    converted = AutoModelForSequenceClassification.from_pretrained(out).double().eval()
    tokenizer = AutoTokenizer.from_pretrained(out)

    # the same texts: token ids from the official dataset's vocabulary for the official model, the tokenizer for ndr
    texts = official_texts(arguments["task"], random.Random(0))
    ids = [official_input_vocabulary(arguments["task"])(text) for text in texts]
    source = torch.tensor([row + [0] * (max(map(len, ids)) - len(row)) for row in ids])
    inputs = tokenizer(texts, padding=True, return_tensors="pt")
    real = inputs["attention_mask"].bool()
    official = official.double().eval()
    official_states = {}
    official.trafo.register_forward_hook(lambda module, args, output: official_states.update(last=output))
    normalized_row_sums.clear()
    differences = {}
    with torch.no_grad():
        expected = official(source, torch.tensor([len(row) for row in ids]))
        for kind in ("as shipped", "float64 throughout"):
            if kind == "float64 throughout":
                float64_throughout(monkeypatch)
            logits = (expected - converted(**inputs).logits).abs().max().item()
            hidden = (official_states["last"] - converted.ndr(**inputs).last_hidden_state).abs()[real].max().item()
            differences[kind] = logits, hidden
    monkeypatch.undo()
    report = "; ".join(f"{kind}: max |Δ logits| {logits:.1e}, max |Δ hidden| {hidden:.1e}"
                       for kind, (logits, hidden) in differences.items())  # fmt: skip
    if normalized_row_sums:  # ndr floors the L1 normalisation's row sum at 1e-6 (the official code at 1e-12)
        report += f"; smallest normalised row sum {min(normalized_row_sums):.1e}"
    print(f"\n{case} (float64): {report}")
    exact = 1e-6 if official_variant.startswith("act_") else 1e-12  # ACT: the float32 halting sums of both codes
    assert differences["float64 throughout"][0] <= exact, f"{case}: the computations differ: {report}"
    # as shipped; the ListOps NDR (d=512, 24 steps) collects 1.0e-6 from the float32 copy gate (docs/model.md)
    shipped = 1e-5 if case == "ndr_geometric/listops" else 1e-6
    assert differences["as shipped"][0] <= shipped, f"{case}: {report}"
