"""Checkpoints of the paper's official code (github.com/RobertCsordas/ndr, commit da20530) as ndr models.

The official code's `Saver` writes `model-<iteration>.pth`: a `torch.save`d dict with `model` (the state dict),
`optimizer`, `scaler`, `state` (a `framework.data_structures.dotdict.DotDict` holding `iter`) and `run_invariants`
(`args`: the run's arguments, flat, with dotted names such as `transformer.variant`; flags as 0/1). It is read with
`torch.load(weights_only=True)`, which unpickles no code (the `DotDict` is read as a plain dict).

`convert_official_checkpoint` writes a hub-ready folder: `config.json` (with `auto_map`), `model.safetensors`, the
modeling code, a tokenizer whose ids are those of the official dataset's vocabulary (its words sorted, then the
model's `[EOS]` and `[BOS]`; `[PAD]` and `[UNK]` come after them, with zero embeddings), a model card naming the
source, and `conversion.json` (the source file, its sha256, the iteration and the run's arguments).

Which official variants ndr has is `OFFICIAL_VARIANTS` (`ndr_geometric` is the NDR, `geometric_transformer`
`geom_att`, `universal` `transformer`, `relative_universal` `rel`, and the `act_*` ones these with ACT halting);
`NOT_CONVERTIBLE` says why the others are refused. The weights keep their values and change their names
(`ndr_weights`):

- the layer (`trafo.layer.` → `ndr.layer.`): `nmerge`, `p1`, `p2`, `no`, `g1`, `g2` → `attention_layer_norm`,
  `update.fc_in` / `fc_out` / `layer_norm`, `copy_gate.fc_in` / `fc_out`; without the copy gate `norm1`, `linear1`,
  `linear2`, `norm2` → `attention_layer_norm`, `feed_forward.fc_in` / `fc_out` / `layer_norm`;
- the attention (`att.` or `self_attn.` → `attention.`): `data_to_q` → `q_proj.weight`, `global_content_bias`
  (h, e) → `q_proj.bias` (zero without it); `data_to_kv`'s rows viewed as (h, 2, e, d), [:, 0] → `k_proj`, [:, 1] →
  `v_proj`; `data_to_qp` ([left, right] per head) → `direction_proj`; `multi_head_merge` → `o_proj`; `scale`,
  `scale_pos`, `s_bias` → `scale`, `direction_scale`, `logit_bias`; `pos_to_pq`, `global_pos_bias` →
  `relative_proj`, `relative_position_bias`;
- `embedding` / `output_map` / `trafo.p_map` (ACT) → `ndr.embeddings` / `classifier` / `ndr.halting.proj`.

The geometric attention's `pos_to_pq`, relative attention's `s_bias` and the `pos_encoding` / `int_seq` / `pos.pe`
buffers are unused by the official forward and not converted.
"""

import hashlib
import json
import os

import torch
from huggingface_hub import ModelCard, ModelCardData

from modeling_ndr.configuration_ndr import NDRConfig
from modeling_ndr.modeling_ndr import NDRForSequenceClassification
from modeling_ndr.tokenization_ndr import BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, UNK_TOKEN, word_level_tokenizer
from modeling_ndr.training.atomic import atomic_folder, check_replaceable
from modeling_ndr.training.errors import UsageError, first_line
from modeling_ndr.training.export import EXPORT_FILES, VARIANT_FIELDS, variant_description
from modeling_ndr.training.presets import read_variant


OFFICIAL_REPOSITORY = "https://github.com/RobertCsordas/ndr"
CARD_TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "official_model_card_template.md")
# `state` of a checkpoint is this class, a dict subclass: read as a dict, nothing of it is imported
DOTDICT = "framework.data_structures.dotdict.DotDict"

# official transformer.variant -> (the ndr variant in configuration/variants/, with ACT halting)
OFFICIAL_VARIANTS = {
    "ndr_geometric": ("ndr", False),
    "geometric_transformer": ("geom_att", False),
    "universal": ("transformer", False),
    "relative_universal": ("rel", False),
    "act_universal": ("transformer", True),
    "act_relative_universal": ("rel", True),
    "act_relative_universal_geometric": ("geom_att", True),
}
# official variants ndr computes differently, and how
NOT_CONVERTIBLE = {
    "ndr_residual": "its update is tanh(W2 relu(W1 m)) without a layer norm (ndr's absrel_gate has the NDR's update)",
    "relative": "its layers do not share weights (ndr applies one shared layer)",
}
# the official ACTTransformerEncoder: threshold 0.99 (fixed in its create_model), halted columns keep being updated,
# its ponder cost (the mean remainder)
ACT_FIELDS = {"halting": "act", "act_threshold": 0.99, "act_update_halted": True, "act_ponder_cost": "official"}

# the official code's defaults (main.py, the task mixins) for arguments a checkpoint might lack
OFFICIAL_DEFAULTS = {
    "state_size": 128,
    "transformer.n_heads": 4,
    "transformer.encoder_n_layers": 3,
    "transformer.ff_multiplier": 2.0,
    "transformer.attention_dropout": 0.0,
    "dropout": 0.0,
    "eos": True,
    "sos": True,
    "n_test_layers": "none",
    "transformer_classifier.result_column": "first",
    "transformer_classifier.autoregressive": False,
    "trafo_classifier.out_mode": "linear",
    "trafo_classifier.norm_att": True,
    "ndr.scalar_gate": False,
    "ndr.drop_gate": 0.0,
    "ndr.gate_size_multiplier": 1,
    "act.loss_weight": 0.001,
    "act.ut_variant": False,
    "embedding_init": "auto",
    "ctl.reversed": True,
    "simple_arithmetics.nnums": 10,
    "listops.variant": "big",
}
# the layer's weights (official name after `trafo.layer.` -> ndr's after `ndr.layer.`), with and without the copy gate
LAYER_NAMES = {
    True: {"nmerge": "attention_layer_norm", "p1": "update.fc_in", "p2": "update.fc_out", "no": "update.layer_norm",
           "g1": "copy_gate.fc_in", "g2": "copy_gate.fc_out"},
    False: {"norm1": "attention_layer_norm", "linear1": "feed_forward.fc_in", "linear2": "feed_forward.fc_out",
            "norm2": "feed_forward.layer_norm"},
}  # fmt: skip
# the attention's position weights per NDRConfig.position_encoding (absolute: none, and the fixed scale 1/sqrt(e))
POSITION_NAMES = {
    "direction": {"scale": "scale", "scale_pos": "direction_scale", "s_bias": "logit_bias",
                  "data_to_qp.weight": "direction_proj.weight", "data_to_qp.bias": "direction_proj.bias"},
    "relative": {"scale": "scale", "global_pos_bias": "relative_position_bias",
                 "pos_to_pq.weight": "relative_proj.weight"},
    "absolute": {},
}  # fmt: skip
# weights the official forward never reads: buffers, the geometric attention's pos_to_pq, relative attention's s_bias
UNUSED_BUFFERS = ("int_seq", "pos.pe")
UNUSED_ATTENTION_WEIGHTS = {"direction": "pos_to_pq.weight", "relative": "s_bias"}


# ------------------------------------------------------------------------------------------------ reading a file


def read_official_checkpoint(path: str) -> dict:
    """The checkpoint at `path` as a dict (`model`, `run_invariants`, `state`, ...), read without unpickling code;
    a one-line `UsageError` if it is not a checkpoint of the official code."""
    if not os.path.isfile(path):
        raise UsageError(f"{path}: no such file")
    try:
        with torch.serialization.safe_globals([(dict, DOTDICT)]):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 (the unpickler fails on other files in many ways: KeyError for text)
        lines = str(error).splitlines()
        reason = next((line.strip() for line in lines if "GLOBAL" in line), first_line(error))  # the refused code
        raise UsageError(f"{path}: not a checkpoint of the official code ({reason[:160]})") from None
    arguments = checkpoint.get("run_invariants", {}).get("args") if isinstance(checkpoint, dict) else None
    weights = checkpoint.get("model") if isinstance(checkpoint, dict) else None
    if not isinstance(arguments, dict) or not isinstance(weights, dict) or "transformer.variant" not in arguments:
        raise UsageError(
            f"{path}: not a checkpoint of the official code (expected a dict with `model` and "
            "`run_invariants.args` holding `transformer.variant`, as its Saver writes model-<iteration>.pth)"
        )
    return checkpoint


def argument(arguments: dict, name: str):
    """A run argument, or the official code's default for it."""
    return arguments.get(name, OFFICIAL_DEFAULTS.get(name))


def flag(arguments: dict, name: str) -> bool:
    """A flag (the official parser stores them as 0/1)."""
    value = argument(arguments, name)
    if isinstance(value, str) and value.lower() in ("0", "1", "true", "false"):
        value = value.lower() in ("1", "true")
    if value not in (0, 1):  # True and False too
        raise UsageError(f"run argument {name}={value!r} is not a flag (0 or 1)")
    return bool(value)


def optional_int(arguments: dict, name: str) -> int | None:
    value = argument(arguments, name)
    return None if value is None or str(value).lower() == "none" else int(value)


# ------------------------------------------------------------------------------------------- vocabulary and config


def official_vocabulary(arguments: dict) -> tuple[list[str], list[str], bool]:
    """(input words in id order, class names in id order, whether words are split at punctuation) of the official
    dataset of the run's task: its `WordVocabulary`, which sorts the words."""
    task = argument(arguments, "task")
    if task == "ctl_trafo_classifier":  # 3 bits, 11 tables a-k (tasks/simple/ctl_data_mixin.py)
        symbols = [f"{value:03b}" for value in range(8)]
        return sorted(symbols + list("abcdefghijk")), sorted(symbols), True
    if task == "simple_arithmetic_trafo":  # one digit of base nnums (dataset/simple_arithmetic.py)
        digits = [str(value) for value in range(int(argument(arguments, "simple_arithmetics.nnums")))]
        return sorted(["(", ")", "+", "*", *digits]), sorted(digits), True
    if task == "listops_trafo" and argument(arguments, "listops.variant") == "big":  # dataset/listops.py
        digits = [str(value) for value in range(10)]
        return sorted(["]", "[MIN", "[MAX", "[MED", "[SM", *digits]), sorted(digits), False
    known = "ctl_trafo_classifier, simple_arithmetic_trafo, listops_trafo (listops.variant=big)"
    variant = f" (listops.variant={argument(arguments, 'listops.variant')})" if task == "listops_trafo" else ""
    raise UsageError(f"no vocabulary known for the run's task {task!r}{variant}; known: {known}")


def official_tokenizer(arguments: dict):
    """The tokenizer of the run's task: the official ids (words sorted, then [EOS], [BOS]), then [PAD] and [UNK]."""
    words, _, split_punctuation = official_vocabulary(arguments)
    specials = (EOS_TOKEN, BOS_TOKEN, PAD_TOKEN, UNK_TOKEN)
    vocab = {token: index for index, token in enumerate((*words, *specials))}
    return word_level_tokenizer(
        vocab,
        split_punctuation=split_punctuation,
        add_bos=flag(arguments, "sos"),
        add_eos=flag(arguments, "eos"),
    )


def official_config(arguments: dict) -> tuple[NDRConfig, str]:
    """The NDRConfig of the run and the name of its ndr variant; a `UsageError` naming what ndr does not have."""
    official = argument(arguments, "transformer.variant")
    if official in NOT_CONVERTIBLE:
        raise UsageError(f"transformer.variant={official} cannot be converted: {NOT_CONVERTIBLE[official]}")
    if official not in OFFICIAL_VARIANTS:
        raise UsageError(
            f"transformer.variant={official!r} is not a variant ndr has; it has {list(OFFICIAL_VARIANTS)}"
        )
    unsupported = {
        "trafo_classifier.out_mode": argument(arguments, "trafo_classifier.out_mode") != "linear",
        "transformer_classifier.autoregressive": flag(arguments, "transformer_classifier.autoregressive"),
        "ndr.scalar_gate": official == "ndr_geometric" and flag(arguments, "ndr.scalar_gate"),
        "ndr.gate_size_multiplier": official == "ndr_geometric"
        and int(argument(arguments, "ndr.gate_size_multiplier")) != 1,
    }
    for name, refused in unsupported.items():
        if refused:
            raise UsageError(f"run argument {name}={argument(arguments, name)!r} is not something ndr has")
    variant, act = OFFICIAL_VARIANTS[official]
    words, labels, _ = official_vocabulary(arguments)
    hidden_size = int(argument(arguments, "state_size"))
    fields = {
        **{field: value for field, value in read_variant(variant).items() if field in VARIANT_FIELDS},
        **(ACT_FIELDS if act else {}),
        "vocab_size": len(words) + 4,
        "hidden_size": hidden_size,
        "intermediate_size": int(float(argument(arguments, "transformer.ff_multiplier")) * hidden_size),
        "num_attention_heads": int(argument(arguments, "transformer.n_heads")),
        "num_hidden_layers": int(argument(arguments, "transformer.encoder_n_layers")),
        "hidden_dropout_prob": float(argument(arguments, "dropout")),
        "attention_dropout": float(argument(arguments, "transformer.attention_dropout")),
        "gate_dropout": 0.0,
        "readout": argument(arguments, "transformer_classifier.result_column"),
        "eos_token_id": len(words),
        "bos_token_id": len(words) + 1,
        "pad_token_id": len(words) + 2,
        "id2label": dict(enumerate(labels)),
        "label2id": {label: index for index, label in enumerate(labels)},
        "init_style": "official",  # a re-initialised part (a new head) starts as the official code starts it
        **official_embeddings(official, arguments),
    }
    if official == "ndr_geometric":  # n_test_layers and the gate dropout are read by this variant only
        fields.update(
            eval_num_hidden_layers=optional_int(arguments, "n_test_layers"),
            normalize_attention=flag(arguments, "trafo_classifier.norm_att"),
            gate_dropout=float(argument(arguments, "ndr.drop_gate")),
        )
    if act:
        fields.update(
            act_ponder_weight=float(argument(arguments, "act.loss_weight")),
            act_ut_variant=flag(arguments, "act.ut_variant"),
        )
    try:
        config = NDRConfig(**fields)
    except ValueError as error:
        raise UsageError(f"the run's arguments give no valid NDRConfig: {first_line(error)}") from None
    return config, ("transformer_act" if (variant, act) == ("transformer", True) else variant + " with ACT" * act)


def official_embeddings(official: str, arguments: dict) -> dict:
    """`embedding_init` and `embedding_dropout` as the official `create_model` sets them up for a variant."""
    if official in ("universal", "act_universal"):  # its sinusoidal positions (dropout 0.1) and PyTorch's init
        return {"embedding_init": "normal", "embedding_dropout": 0.1}
    chosen = argument(arguments, "embedding_init")  # "auto": Xavier for the relative variants, else PyTorch's
    chosen = ("xavier" if "relative" in official else "pytorch") if chosen == "auto" else chosen
    return {"embedding_init": "normal" if chosen == "pytorch" else chosen, "embedding_dropout": 0.0}


# ---------------------------------------------------------------------------------------------------- the weights


def ndr_weights(weights: dict, arguments: dict, config: NDRConfig) -> dict:
    """The official state dict under ndr's names (the module's table); a `UsageError` for a missing or an unexpected
    weight."""
    official = argument(arguments, "transformer.variant")
    left = dict(weights)

    def take(name: str, default: torch.Tensor | None = None) -> torch.Tensor:
        if name in left:
            return left.pop(name)
        if default is None:
            raise UsageError(f"the checkpoint has no weight {name!r} (transformer.variant={official})")
        return default

    d, h = config.hidden_size, config.num_attention_heads
    prefix = "trafo.layer." + ("att." if official == "ndr_geometric" else "self_attn.")
    attention = "ndr.layer.attention."
    kv = take(prefix + "data_to_kv.weight")
    if tuple(kv.shape) != (2 * d, d):
        raise UsageError(f"{prefix}data_to_kv.weight has shape {tuple(kv.shape)}, expected {(2 * d, d)}")
    kv = kv.view(h, 2, d // h, d)  # (h, key or value, e, d)
    mapped = {
        attention + "k_proj.weight": kv[:, 0].reshape(d, d),
        attention + "v_proj.weight": kv[:, 1].reshape(d, d),
        attention + "q_proj.weight": take(prefix + "data_to_q.weight"),
        attention + "q_proj.bias": take(prefix + "global_content_bias", torch.zeros(d)).reshape(d),
        attention + "o_proj.weight": take(prefix + "multi_head_merge.weight"),
    }
    for name, ndr_name in POSITION_NAMES[config.position_encoding].items():
        mapped[attention + ndr_name] = take(prefix + name)
    modules = {
        f"trafo.layer.{name}": f"ndr.layer.{ndr_name}" for name, ndr_name in LAYER_NAMES[config.copy_gate].items()
    }
    modules["output_map"] = "classifier"
    if config.halting == "act":
        modules["trafo.p_map"] = "ndr.halting.proj"
    for name, ndr_name in modules.items():
        for kind in ("weight", "bias"):
            mapped[f"{ndr_name}.{kind}"] = take(f"{name}.{kind}")
    embedding = take("embedding.weight")  # (words + [EOS] + [BOS], d); [PAD] and [UNK] get zero rows
    mapped["ndr.embeddings.weight"] = torch.cat([embedding, embedding.new_zeros(2, embedding.shape[-1])])

    unused = [name for name in left if name in UNUSED_BUFFERS or name.endswith(".pos_encoding")]
    unused.append(prefix + UNUSED_ATTENTION_WEIGHTS.get(config.position_encoding, ""))
    if unexpected := sorted(set(left) - set(unused)):
        raise UsageError(f"the checkpoint has weights transformer.variant={official} does not have: {unexpected[:4]}")
    return mapped


# ---------------------------------------------------------------------------------------------------- the folder


def convert_official_checkpoint(checkpoint_path: str, out_dir: str, repo_id: str | None = None) -> str:
    """Write the hub-ready folder `out_dir` from the official checkpoint `checkpoint_path`; returns `out_dir`.

    Args:
        checkpoint_path: a `model-<iteration>.pth` written by the official code.
        out_dir: the folder to write (whole or not at all: nothing is written if the checkpoint is refused).
        repo_id: the hub id the card's snippets use (default `your-org/<file name>`).

    Returns:
        `out_dir`; a one-line `UsageError` for a file that is not an official checkpoint, a variant ndr does not have,
        or a task whose vocabulary is not known.
    """
    check_replaceable(out_dir, EXPORT_FILES)
    checkpoint = read_official_checkpoint(checkpoint_path)
    arguments, weights = checkpoint["run_invariants"]["args"], checkpoint["model"]
    name = os.path.basename(checkpoint_path)
    try:
        config, variant = official_config(arguments)
        tokenizer = official_tokenizer(arguments)
        model = NDRForSequenceClassification(config)
        model.load_state_dict(ndr_weights(weights, arguments, config))
    except UsageError as error:
        raise UsageError(f"{name}: {error}") from None
    except RuntimeError as error:  # shapes that disagree with the run's arguments
        message = " ".join(str(error).split())
        raise UsageError(f"{name}: the weights do not fit the run's arguments ({message[:240]})") from None
    sha256 = hashlib.sha256()
    with open(checkpoint_path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha256.update(block)
    state = checkpoint.get("state") if isinstance(checkpoint.get("state"), dict) else {}
    record = {"source": OFFICIAL_REPOSITORY, "checkpoint": name, "sha256": sha256.hexdigest(),
              "iteration": state.get("iter"), "official_variant": arguments["transformer.variant"], "variant": variant,
              "args": arguments}  # fmt: skip
    repo_id = repo_id or f"your-org/ndr-official-{os.path.splitext(name)[0]}"
    with atomic_folder(out_dir, EXPORT_FILES) as staging:
        model.save_pretrained(staging)  # weights, config with auto_map, and the modeling code
        tokenizer.save_pretrained(staging)
        model_card(model, record, repo_id).save(os.path.join(staging, "README.md"))
        with open(os.path.join(staging, "conversion.json"), "w") as f:
            json.dump(record, f, indent=2, default=str)
    return out_dir


EXAMPLES = {"ctl_trafo_classifier": "010 a b", "simple_arithmetic_trafo": "((3+4)*5)",
            "listops_trafo": "[MAX 2 9 [MIN 4 7 ] 0 ]"}  # fmt: skip


def model_card(model, record: dict, repo_id: str) -> ModelCard:
    """The card of a converted model: the source, the variant, the tokenizer's ids and the differences."""
    arguments, config = record["args"], model.config
    card_data = ModelCardData(
        model_name=repo_id.split("/")[-1],
        library_name="transformers",
        pipeline_tag="text-classification",
        tags=["ndr", "neural-data-router", "converted-from-official", f"official-{record['official_variant']}"],
    )
    words, labels, split_punctuation = official_vocabulary(arguments)
    return ModelCard.from_template(
        card_data,
        template_path=CARD_TEMPLATE,
        model_name=card_data.model_name,
        repo_id=repo_id,
        record=record,
        task=arguments["task"],
        ctl_reversed=flag(arguments, "ctl.reversed"),
        variant_sentence=variant_description(config, record["variant"]) or "This is the NDR itself.",
        config=config,
        num_parameters=f"{model.num_parameters():,}",
        num_words=len(words),
        labels=", ".join(labels),
        split_punctuation=split_punctuation,
        example_text=EXAMPLES[arguments["task"]],
    )


__all__ = [
    "OFFICIAL_VARIANTS",
    "NOT_CONVERTIBLE",
    "read_official_checkpoint",
    "official_vocabulary",
    "official_tokenizer",
    "official_config",
    "ndr_weights",
    "convert_official_checkpoint",
]
