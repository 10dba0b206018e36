"""Checkpoints in the official code's format (github.com/RobertCsordas/ndr, da20530), and its models on the CPU.

- `official_arguments`, `save_official_checkpoint`: the dict its `Saver` writes (`model`, `optimizer`, `scaler`,
  `state` as its `DotDict`, `run_invariants.args` flat, with flags as 0/1), from weights and run arguments.
- `official_weights`: an ndr model's weights under the official names (the converter's mapping run backwards, written
  out here on its own so that the round trip checks it).
- `load_official_code`, `build_official_model`: the official models themselves, built by its own
  `TransformerClassifierMixin.create_model` from a checkout (`NDR_OFFICIAL_DIR`), with its CUDA kernels (log-sigmoid
  and window sum of the geometric attention) replaced by the PyTorch functions below, which compute the same math.
  Nothing is fetched and nothing of that code is in this repository.
"""

import contextlib
import sys
import types

import torch
from torch.nn import functional as F


DOTDICT_MODULE = "framework.data_structures.dotdict"
# the official arguments that are flags (its parser stores them as 0/1 and reads them as bools)
FLAGS = ("eos", "sos", "transformer_classifier.autoregressive", "trafo_classifier.norm_att", "ndr.scalar_gate",
         "ndr.abs_gate", "ndr.global_content_bias", "act.ut_variant", "ctl.reversed")  # fmt: skip


# ------------------------------------------------------------------------------------------------- the file format


def official_arguments(variant: str, task: str = "ctl_trafo_classifier", **overrides) -> dict:
    """`run_invariants["args"]` of an official run as its ArgumentParser stores them (raw values: flags 0/1,
    `n_test_layers` a string); `overrides` use `__` for the dots of the names (`ndr__drop_gate=0.1`)."""
    arguments = {
        "task": task,
        "transformer.variant": variant,
        "state_size": 16,
        "transformer.n_heads": 2,
        "transformer.encoder_n_layers": 3,
        "transformer.ff_multiplier": 2.0,
        "transformer.attention_dropout": 0.0,
        "dropout": 0.0,
        "eos": 1,
        "sos": 1,
        "n_test_layers": "none",
        "embedding_init": "auto",
        "transformer_classifier.result_column": "last",
        "transformer_classifier.autoregressive": 0,
        "trafo_classifier.out_mode": "linear",
        "trafo_classifier.norm_att": 0,
        "ndr.scalar_gate": 0,
        "ndr.abs_gate": 1,
        "ndr.drop_gate": 0.0,
        "ndr.gate_size_multiplier": 1,
        "ndr.global_content_bias": 1,
        "act.loss_weight": 0.001,
        "act.ut_variant": 0,
        "ctl.reversed": 1,
        "simple_arithmetics.nnums": 10,
        "listops.variant": "big",
        "lr": 1.5e-4,
    }
    arguments.update({name.replace("__", "."): value for name, value in overrides.items()})
    return arguments


def parsed_arguments(arguments: dict) -> dict:
    """What the official parser makes of the raw values (flags as bools, `n_test_layers` None or an int)."""
    parsed = {name: bool(value) if name in FLAGS else value for name, value in arguments.items()}
    parsed["n_test_layers"] = (
        None if str(arguments["n_test_layers"]).lower() == "none" else int(arguments["n_test_layers"])
    )
    return parsed


@contextlib.contextmanager
def dotdict_class():
    """The official `DotDict` (a dict subclass) if its code is imported, else a stand-in pickled under its name."""
    if DOTDICT_MODULE in sys.modules:
        yield sys.modules[DOTDICT_MODULE].DotDict
        return
    modules = {name: types.ModuleType(name) for name in ("framework", "framework.data_structures", DOTDICT_MODULE)}
    DotDict = type("DotDict", (dict,), {"__module__": DOTDICT_MODULE})
    modules[DOTDICT_MODULE].DotDict = DotDict
    sys.modules.update(modules)
    try:
        yield DotDict
    finally:
        for name in modules:
            del sys.modules[name]


def save_official_checkpoint(path, weights: dict, arguments: dict, iteration: int = 30000) -> None:
    """Write `model-<iteration>.pth` as the official `Saver` does."""
    with dotdict_class() as DotDict:
        state = DotDict(iter=iteration, best_losses={"valid": {"iter": 1000, "loss": 0.5, "accuracy": 0.9}})
        checkpoint = {
            "model": dict(weights),
            "optimizer": {"state": {}, "param_groups": [{"lr": 1.5e-4, "betas": (0.9, 0.999), "params": [0]}]},
            "scaler": {},
            "state": state,
            "run_invariants": {"wandb_id": None, "args": dict(arguments)},
        }
        torch.save(checkpoint, path)


def official_weights(model, official_variant: str, num_words: int) -> dict:
    """`model`'s weights (an `NDRForSequenceClassification` of a converted variant) under the official names."""
    weights = model.state_dict()
    config = model.config
    d, h = config.hidden_size, config.num_attention_heads
    e = d // h
    attention = "trafo.layer." + ("att." if official_variant == "ndr_geometric" else "self_attn.")

    def ndr(name):
        return weights["ndr.layer.attention." + name].clone()

    official = {
        "int_seq": torch.arange(5000),
        "embedding.weight": weights["ndr.embeddings.weight"][: num_words + 2].clone(),
        "output_map.weight": weights["classifier.weight"].clone(),
        "output_map.bias": weights["classifier.bias"].clone(),
        attention + "data_to_q.weight": ndr("q_proj.weight"),
        attention + "multi_head_merge.weight": ndr("o_proj.weight"),
        # per head, its key rows then its value rows
        attention + "data_to_kv.weight": torch.stack(
            [ndr("k_proj.weight").view(h, e, d), ndr("v_proj.weight").view(h, e, d)], dim=1
        ).reshape(2 * d, d),
    }
    if config.position_encoding == "absolute":
        official["pos.pe"] = torch.zeros(1, 5000, d)
    else:
        official[attention + "global_content_bias"] = ndr("q_proj.bias").view(h, e)
        official[attention + "scale"] = ndr("scale")
        official[attention + "pos_encoding"] = torch.zeros(1999, d)
    if config.position_encoding == "direction":
        official[attention + "scale_pos"] = ndr("direction_scale")
        official[attention + "s_bias"] = ndr("logit_bias")
        official[attention + "data_to_qp.weight"] = ndr("direction_proj.weight")
        official[attention + "data_to_qp.bias"] = ndr("direction_proj.bias")
        official[attention + "pos_to_pq.weight"] = torch.randn(d, d)  # unused by the official forward
    if config.position_encoding == "relative":
        official[attention + "global_pos_bias"] = ndr("relative_position_bias")
        official[attention + "pos_to_pq.weight"] = ndr("relative_proj.weight")
        official[attention + "s_bias"] = torch.randn(1)  # unused: softmax does not see a constant
    if config.copy_gate:
        layer = {"nmerge": "attention_layer_norm", "p1": "update.fc_in", "p2": "update.fc_out",
                 "no": "update.layer_norm", "g1": "copy_gate.fc_in", "g2": "copy_gate.fc_out"}  # fmt: skip
    else:
        layer = {"norm1": "attention_layer_norm", "linear1": "feed_forward.fc_in", "linear2": "feed_forward.fc_out",
                 "norm2": "feed_forward.layer_norm"}  # fmt: skip
    modules = {f"trafo.layer.{name}": f"ndr.layer.{ndr_name}" for name, ndr_name in layer.items()}
    if config.halting == "act":
        modules["trafo.p_map"] = "ndr.halting.proj"
    for name, ndr_name in modules.items():
        for kind in ("weight", "bias"):
            official[f"{name}.{kind}"] = weights[f"{ndr_name}.{kind}"].clone()
    return official


# ------------------------------------------------------------------------------- the official code, on the CPU


def log_sigmoid(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The official `cuda_log_sigmoid_forward`: log sigmoid(x) and log(1 - sigmoid(x))."""
    return F.logsigmoid(x), F.logsigmoid(-x)


def window_sum(csum: torch.Tensor, offset: int) -> torch.Tensor:
    """The official `cuda_window_sum_forward`, element by element: for query `i` (row, shifted by `offset`) and key
    `j`, the cumulative sum `csum` taken over the keys closer to `i` than `j` (0 on the diagonal)."""
    n_out, n_in = csum.shape[-2:]
    i = torch.arange(n_out, device=csum.device).unsqueeze(1) + offset  # out_p
    j = torch.arange(n_in, device=csum.device).unsqueeze(0)  # in_p
    distance = (i - j).abs()
    upper = (i + distance - (j > i).long()).clamp(max=n_in - 1)  # p_i
    lower = i - distance  # n_i
    shape = (*csum.shape[:-2], n_out, n_in)
    upper_sum = csum.gather(-1, upper.expand(shape))
    lower_sum = torch.where(lower >= 0, csum.gather(-1, lower.clamp(min=0).expand(shape)), 0.0)
    return torch.where(i == j, 0.0, upper_sum - lower_sum)


# the smallest row sum of each L1-normalised geometric attention the official code computed (ndr floors it at 1e-6)
normalized_row_sums: list[float] = []


def geometric_attention_activation(logits, mask=None, pos_offset: int = 0, normalize: bool = True) -> torch.Tensor:
    """The official `geometric_attention_activation` with the two kernels above in place of its CUDA ones."""
    log_p, log_one_minus_p = log_sigmoid(logits)
    probs = (window_sum(log_one_minus_p.cumsum(-1), pos_offset) + log_p).exp()
    if normalize:
        normalized_row_sums.append(probs.sum(-1).min().item())
    return F.normalize(probs, 1, -1) if normalize else probs


def load_official_code(checkout: str):
    """The official code's `TransformerClassifierMixin` and `DotDict` tree builder, imported from `checkout` with
    the geometric attention's CUDA module replaced (importing it would also create ./cache)."""
    stub = types.ModuleType("layers.transformer.geometric_attention")
    stub.geometric_attention_activation = geometric_attention_activation
    sys.modules["layers.transformer.geometric_attention"] = stub
    if checkout not in sys.path:
        sys.path.insert(0, checkout)
    from framework.data_structures.dotdict import create_recursive_dot_dict
    from tasks.simple.transformer_classifier_mixin import TransformerClassifierMixin

    return TransformerClassifierMixin, create_recursive_dot_dict


def build_official_model(checkout: str, arguments: dict, num_words: int, num_classes: int) -> torch.nn.Module:
    """The official model of a run, made by the official `create_model` from the run's (raw) arguments."""
    mixin, dot_dict = load_official_code(checkout)
    owner = types.SimpleNamespace(
        helper=types.SimpleNamespace(args=dot_dict(parsed_arguments(arguments))),
        train_set=types.SimpleNamespace(in_vocabulary=range(num_words), out_vocabulary=range(num_classes)),
    )
    return mixin.create_model(owner)
