"""PyTorch Neural Data Router (NDR).

Csordás, Irie & Schmidhuber, "The Neural Data Router: Adaptive Control Flow in Transformers Improves
Systematic Generalization", ICLR 2022.

The NDR is an encoder whose one layer is applied `num_hidden_layers` times (weights shared across steps, as in the
Universal Transformer of Dehghani et al., 2019). The layer has two ingredients on top of a post-LN Transformer layer:

* **geometric attention** (Sec. 3.2 of the paper): every key gets a sigmoid match probability, and the closest
  matching key wins (`geometric_ndr.geometric_attention_weights`); a per-query directional term tells left from
  right. There is no positional embedding and a column never attends to itself.
* **a copy gate** (Sec. 3.1): each column mixes its update with its old state, so it can skip a step.

The same model also runs the paper's baselines (softmax attention; absolute, relative or gated position terms; no
gate) and metric-tensor attention, chosen by config fields (`attention_ndr`), and can choose its number of steps:
ACT halting per column (Graves, 2016; Universal Transformer) or, at inference, running until the state stops changing.

Reading order: update and gate networks → halting unit → layer → outputs → models (the step loops) → classifier.

Tensor dimensions: b batch, h heads, n sequence positions, d hidden size, e head size (d / h).
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import AttentionInterface, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput, auto_docstring, can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .attention_ndr import (
    ATTENTION_CLASSES,
    METRIC_PARAMETRIZATIONS,
    NDRAttentionBase,
    NDRDotProductAttention,
    NDRMetricAttention,
    attention,
    concatenated_linear,
    linear,
    sinusoidal_encoding,
)
from .attention_ndr import (
    position_ids as default_positions,
)
from .configuration_ndr import NDRConfig, as_python_scalar
from .dropout_ndr import NDRDropout
from .geometric_ndr import ATTENTION_KERNELS, geometric_attention_weights
from .position_coupling import check_coupled_rows, coupled_position_ids


def _attention_function(kernel: str):
    def ndr_attention(module, query, key, value, attention_mask, attention_type="geometric", **kwargs):
        """NDR attention with `kernel`, in transformers' attention-function signature: (b, h, n, e) each →
        ((b, h, n, e), weights); `kwargs` are `attention`'s (left, right, position_logits, normalize)."""
        return attention(query, key, value, attention_mask, attention_type, kernel=kernel, **kwargs)

    return ndr_attention


# the NDR's `attn_implementation`s besides transformers' "eager" (geometric_ndr.ATTENTION_KERNELS), registered so that
# `from_pretrained(..., attn_implementation="ndr_triton")` and `set_attn_implementation("ndr_torch")` accept them
for _name, _kernel in ATTENTION_KERNELS.items():
    if _name != "eager":
        AttentionInterface.register(_name, _attention_function(_kernel))


class NDRUpdate(nn.Module):
    """The candidate new state: `LayerNorm(W_2 dropout(relu(W_1 m)))` — no residual, the copy gate mixes instead."""

    def __init__(self, config: NDRConfig):
        super().__init__()
        self.fc_in = linear(config.hidden_size, config.intermediate_size, "relu_input")
        self.fc_out = linear(config.intermediate_size, config.hidden_size, "update_output")
        self.dropout = NDRDropout(config.hidden_dropout_prob)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, mixed: torch.Tensor, inner: torch.Tensor | None = None) -> torch.Tensor:
        """`mixed` (b, n, d) → (b, n, d). `inner` is `fc_in(mixed)` if the caller has it already (the layer computes
        the first layers of the update and of the gate in one matrix product)."""
        inner = self.fc_in(mixed) if inner is None else inner
        return self.layer_norm(self.fc_out(self.dropout(F.relu(inner))))


class NDRCopyGate(nn.Module):
    """Per column and channel, how much of the update to take: `sigmoid(G_2 dropout(relu(G_1 m)))`, in float32.

    Columns may be forced to copy (gate 0): by gate dropout in training, and where `update_mask` is 0 (padding, a
    column that has halted, a sample that has finished)."""

    def __init__(self, config: NDRConfig):
        super().__init__()
        self.fc_in = linear(config.hidden_size, config.hidden_size, "relu_input")
        self.fc_out = linear(config.hidden_size, config.hidden_size, "gate_output")  # bias starts at gate_bias_init
        self.dropout = NDRDropout(config.hidden_dropout_prob)
        self.gate_dropout = config.gate_dropout

    def forward(
        self, mixed: torch.Tensor, update_mask: torch.Tensor | None = None, inner: torch.Tensor | None = None
    ) -> torch.Tensor:
        """`mixed` (b, n, d) → gates (b, n, d). `inner` is `fc_in(mixed)` if the caller has it already."""
        inner = self.fc_in(mixed) if inner is None else inner
        # the sigmoid in float32: under autocast the product comes out in half precision, which would round the gate
        gate = torch.sigmoid(self.fc_out(self.dropout(F.relu(inner))).float())  # (b, n, d)
        if self.training and self.gate_dropout > 0:
            # force whole columns of some samples to copy, so the model learns to rely on copying
            keep = torch.rand(gate.shape[:-1] + (1,), device=gate.device) >= self.gate_dropout  # (b, n, 1)
            gate = gate * keep
        if update_mask is not None:
            gate = gate * update_mask.unsqueeze(-1).to(gate.dtype)
        return gate


class NDRFeedForward(nn.Module):
    """The plain post-LN Transformer feed-forward block, used when `copy_gate=False`."""

    def __init__(self, config: NDRConfig):
        super().__init__()
        self.fc_in = linear(config.hidden_size, config.intermediate_size, "relu_input")
        self.fc_out = linear(config.intermediate_size, config.hidden_size, "update_output")
        self.dropout = NDRDropout(config.hidden_dropout_prob)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        update = self.fc_out(self.dropout(F.relu(self.fc_in(hidden_states))))
        return self.layer_norm(hidden_states + self.dropout(update))


class NDRHalting(nn.Module):
    """ACT's halting unit: the probability `sigmoid(w . h + b)` that a column stops after this step.

    (b, n, d) → (b, n), float32: the cumulative sum is compared with `act_threshold` (0.99), which half precision
    cannot resolve."""

    def __init__(self, config: NDRConfig):
        super().__init__()
        self.proj = linear(config.hidden_size, 1, "halting")  # its bias starts at act_halting_bias_init

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(hidden_states).float()).squeeze(-1)


class NDRLayer(GradientCheckpointingLayer):
    """One step; the same instance is applied at every step.

    NDR (Sec. 3.1): `m = LN(h + dropout(attention(h)))`, `u = update(m)`, `g = copy_gate(m)`, `h <- g u + (1 - g) h`.
    Without the copy gate, the post-LN Transformer layer: `h <- LN(m + dropout(FFN(m)))`. Columns where `update_mask`
    is 0 keep their state.

    Every child module runs on its own; the layer only computes once per forward what every step reuses
    (`precompute`: concatenated projection weights, the position table), and the model passes it to each step."""

    def __init__(self, config: NDRConfig):
        super().__init__()
        self.attention = ATTENTION_CLASSES[config.attention_scores](config)
        self.attention_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = NDRDropout(config.hidden_dropout_prob)
        if config.copy_gate:
            self.update = NDRUpdate(config)
            self.copy_gate = NDRCopyGate(config)
        else:
            self.feed_forward = NDRFeedForward(config)

    def precompute(self, hidden_states: torch.Tensor, position_ids: torch.Tensor | None = None) -> dict:
        """What every step of one forward reuses, from the first step's `hidden_states` (and the `position_ids` that
        relative keys read): the attention's (`NDRAttentionBase.precompute`) and `W_1` and `G_1` as one layer, so
        that `W_1 m` and `G_1 m` are one matrix product (the weights stay two modules, so checkpoints keep their
        keys)."""
        precomputed = {"attention": self.attention.precompute(hidden_states, position_ids)}
        if hasattr(self, "copy_gate"):
            precomputed["inner"] = concatenated_linear(self.update.fc_in, self.copy_gate.fc_in)
        return precomputed

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        update_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        precomputed: dict | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One step: (b, n, d) → (b, n, d). `precomputed` is `precompute(hidden_states, position_ids)` of this forward
        (computed here if not given: `position_ids` serve only that)."""
        precomputed = self.precompute(hidden_states, position_ids) if precomputed is None else precomputed
        # the weights are recorded by a hook if asked for
        attended, _ = self.attention(hidden_states, attention_mask, need_weights, precomputed["attention"])
        mixed = self.attention_layer_norm(hidden_states + self.dropout(attended))
        if not hasattr(self, "copy_gate"):
            new_states = self.feed_forward(mixed)
            if update_mask is None:
                return new_states
            return torch.where(update_mask.unsqueeze(-1), new_states.to(hidden_states.dtype), hidden_states)
        weight, bias = precomputed["inner"]
        update_inner, gate_inner = F.linear(mixed, weight, bias).split(
            [self.update.fc_in.out_features, self.copy_gate.fc_in.out_features], dim=-1
        )
        update = self.update(mixed, update_inner)
        gate = self.copy_gate(mixed, update_mask, gate_inner)  # (b, n, d) float32; recorded by a hook if asked for
        dtype = hidden_states.dtype  # under autocast the update may come out in lower precision than the state
        return torch.lerp(hidden_states, update.to(dtype), gate.to(dtype))  # g u + (1 - g) h


@dataclass
class NDRModelOutput(ModelOutput):
    r"""
    Outputs of [`NDRModel`].

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch, seq, hidden)`):
            The state of every column after the last step (with ACT: the halting-probability-weighted mix of its
            states).
        hidden_states (`tuple(torch.FloatTensor)`, *optional*, returned with `output_hidden_states=True`):
            The embeddings and the state after every step: one more tensor than steps run, each `(batch, seq,
            hidden)` (the last is `last_hidden_state`).
        attentions (`tuple(torch.FloatTensor)`, *optional*, returned with `output_attentions=True`):
            The attention weights of every step: one tensor of shape `(batch, heads, seq, seq)` per step.
        gates (`tuple(torch.FloatTensor)`, *optional*, returned with `output_gates=True`):
            The copy-gate values of every step (1 = take the update, 0 = copy): one `(batch, seq, hidden)` tensor per
            step; empty for variants without a copy gate.
        ponder_cost (`torch.FloatTensor` of shape `(batch,)`, *optional*, with `halting="act"`):
            ACT's ponder cost N + R per sample, averaged over its real columns.
        halting_steps (`torch.LongTensor` of shape `(batch, seq)`, *optional*, with `halting="act"`):
            The number of steps each column ran before it halted (0 for padding).
        num_steps_taken (`torch.LongTensor` of shape `(batch,)`, *optional*, with adaptive steps):
            The number of steps each sample ran before its state stopped changing (or the cap).
    """

    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    gates: tuple[torch.FloatTensor, ...] | None = None
    ponder_cost: torch.FloatTensor | None = None
    halting_steps: torch.LongTensor | None = None
    num_steps_taken: torch.LongTensor | None = None


# The two heads return the same fields; only the head's name and the shape of `logits` differ. transformers'
# `auto_docstring` reads each output class's own `Args:` section, so each gets the text, filled in for its head.
_CLASSIFIER_OUTPUT_DOC = r"""
    Outputs of [`{head}`].

    Args:
        loss (`torch.FloatTensor` of shape `(1,)`, *optional*, returned when `labels` are given):
            {loss}; with ACT it includes `act_ponder_weight` times the mean ponder cost.
        logits (`torch.FloatTensor` of shape `{shape}`):
            The classifier's scores of {columns} (before the softmax).
        hidden_states (`tuple(torch.FloatTensor)`, *optional*, returned with `output_hidden_states=True`):
            As in [`NDRModelOutput`].
        attentions (`tuple(torch.FloatTensor)`, *optional*, returned with `output_attentions=True`):
            As in [`NDRModelOutput`].
        gates (`tuple(torch.FloatTensor)`, *optional*, returned with `output_gates=True`):
            As in [`NDRModelOutput`].
        ponder_cost (`torch.FloatTensor` of shape `(batch,)`, *optional*, with `halting="act"`):
            As in [`NDRModelOutput`].
        halting_steps (`torch.LongTensor` of shape `(batch, seq)`, *optional*, with `halting="act"`):
            As in [`NDRModelOutput`].
        num_steps_taken (`torch.LongTensor` of shape `(batch,)`, *optional*, with adaptive steps):
            As in [`NDRModelOutput`].
    """


@dataclass
class NDRClassifierOutput(ModelOutput):
    __doc__ = _CLASSIFIER_OUTPUT_DOC.format(
        head="NDRForSequenceClassification`] and [`NDRForTokenClassification", loss="The loss of the head",
        shape="(batch, num_labels)` or `(batch, seq, num_labels)", columns="the readout column or of every column",
    )  # fmt: skip

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    gates: tuple[torch.FloatTensor, ...] | None = None
    ponder_cost: torch.FloatTensor | None = None
    halting_steps: torch.LongTensor | None = None
    num_steps_taken: torch.LongTensor | None = None


@dataclass
class NDRSequenceClassifierOutput(NDRClassifierOutput):
    __doc__ = _CLASSIFIER_OUTPUT_DOC.format(
        head="NDRForSequenceClassification", loss="The loss of `config.problem_type`", shape="(batch, num_labels)",
        columns="the readout column",
    )  # fmt: skip


@dataclass
class NDRTokenClassifierOutput(NDRClassifierOutput):
    __doc__ = _CLASSIFIER_OUTPUT_DOC.format(
        head="NDRForTokenClassification", loss="The cross-entropy over the labelled tokens (label -100: not scored)",
        shape="(batch, seq, num_labels)", columns="every column",
    )  # fmt: skip


class NDRPreTrainedModel(PreTrainedModel):
    config_class = NDRConfig
    base_model_prefix = "ndr"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["NDRLayer"]
    _supports_sdpa = False
    # `get_input_embeddings` / `set_input_embeddings` as transformers' defaults find it: `NDRModel.embeddings`, and in
    # a head the base model's (`self.ndr`)
    _input_embed_layer = "embeddings"
    accepts_loss_kwargs = False
    # Per-step outputs are recorded by forward hooks (transformers' `capture_outputs`): the one shared layer is called
    # once per step, so each hook fires once per step and every tuple has one entry per step.
    _can_record_outputs = {
        "hidden_states": NDRLayer,
        "attentions": OutputRecorder(NDRAttentionBase, index=1),
        "gates": OutputRecorder(NDRCopyGate, index=0),
    }

    def __init__(self, config: NDRConfig, *inputs, **kwargs):
        config.validate()  # the config may have been changed since it was built
        super().__init__(config, *inputs, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """How every weight starts. `config.init_style="ndr"` (the release's init): Xavier-uniform projections (gain
        sqrt 2 into a ReLU, 5/3 for the update's output), biases 0 but the gate's (`gate_bias_init`), the halting unit
        N(0, `initializer_range`) with bias `act_halting_bias_init`, the classifier the transformers default;
        `"official"`: as the official code starts each layer (`_official_projection_init`). Either way alpha =
        1/sqrt(e), beta = 1, gamma = 0, the relative-position bias 0, the relative keys (`relative_key_window`)
        N(0, `initializer_range`), metric tensors the identity, layer norms 1 and 0,
        and the embeddings as `config.embedding_init` says (default N(0, 1)). A head that `from_pretrained` creates
        (new labels, `ignore_mismatched_sizes=True`) starts as transformers starts one, whatever the style."""
        super()._init_weights(module)
        config = self.config
        if isinstance(module, nn.Embedding):
            if config.embedding_init == "kaiming":
                init.kaiming_normal_(module.weight)  # fan_in = hidden_size: std sqrt(2 / d), as the official sweeps'
            elif config.embedding_init == "xavier":
                init.xavier_uniform_(module.weight)
            else:
                init.normal_(module.weight, mean=0.0, std=1.0)
        elif isinstance(module, NDRAttentionBase):
            if isinstance(module.scale if hasattr(module, "scale") else None, nn.Parameter):
                init.constant_(module.scale, 1.0 / math.sqrt(module.head_size))
            if hasattr(module, "direction_scale"):
                init.constant_(module.direction_scale, 1.0)
            if hasattr(module, "logit_bias"):
                init.zeros_(module.logit_bias)
            if hasattr(module, "relative_position_bias"):
                init.zeros_(module.relative_position_bias)
            if hasattr(module, "relative_keys"):
                init.normal_(module.relative_keys, mean=0.0, std=config.initializer_range)
            if isinstance(module, NDRMetricAttention):
                identity = torch.eye(module.head_size, device=module.metric.device).expand(module.num_heads, -1, -1)
                init.copy_(module.metric, identity if module.metric.dim() == 3 else torch.ones_like(module.metric))
        elif isinstance(module, nn.Linear) and hasattr(module, "init_role") and config.init_style == "official":
            self._official_projection_init(module)
        elif isinstance(module, nn.Linear) and hasattr(module, "init_role"):
            # The role is read from the projection itself (`attention_ndr.linear`): transformers skips custom-code
            # modules that own no parameters directly (`NDRCopyGate`, `NDRHalting`, ...), so they cannot set it.
            attention = ("xavier", 1.0, 0.0)
            kind, scale, bias = {
                "relu_input": ("xavier", math.sqrt(2.0), 0.0),  # W_1, G_1 (and the FFN's first layer)
                "update_output": ("xavier", 5.0 / 3.0, 0.0),  # W_2
                "gate_output": ("xavier", 1.0, config.gate_bias_init),  # G_2
                "halting": ("normal", config.initializer_range, config.act_halting_bias_init),
                **dict.fromkeys(ATTENTION_ROLES, attention),
            }[module.init_role]
            if kind == "xavier":
                init.xavier_uniform_(module.weight, gain=scale)
            else:
                init.normal_(module.weight, std=scale)
            if module.bias is not None:
                init.constant_(module.bias, bias)
        elif isinstance(module, nn.Linear) and config.init_style == "official":
            if self._loaded_some_weights():
                return  # a new head on a loaded model: transformers' init above (N(0, initializer_range), bias 0)
            pytorch_default_init(module)  # the classifier: the official code's init of it never runs (see the docs)

    def _loaded_some_weights(self) -> bool:
        """Whether `from_pretrained` filled any of this model's weights from a checkpoint: transformers marks what it
        loaded `_is_hf_initialized` before `_init_weights` starts what the checkpoint lacks. A head initialised while
        the encoder was loaded is a new head (new labels, `ignore_mismatched_sizes=True`); with nothing loaded
        (`NDRForSequenceClassification(config)`, or `from_pretrained` of an empty state dict) the model is new and
        every weight starts as its `init_style` says. tests/unit/test_init_styles.py pins both cases."""
        return any(getattr(parameter, "_is_hf_initialized", False) for parameter in self.parameters())

    def _official_projection_init(self, module: nn.Linear):
        """A projection as the official code (RobertCsordas/ndr at da20530) starts its counterpart, which depends on
        the variant: the layer is `NDRGeometric` (copy gate, geometric attention), `NDRResidual` (copy gate, softmax
        attention) or a Transformer encoder layer (no copy gate); the attention `DirectionSensitiveGeometricAttention
        MyInit` (geometric), `FixedRelativeMultiheadAttention` (relative or gated positions) or `MultiHeadAttention`.
        A Xavier-uniform weight is U(±gain sqrt(6 / (fan_in + fan_out))); every weight and bias not named here keeps
        `nn.Linear`'s own init (`pytorch_default_init`), which the official code does not redo."""
        config, role = self.config, module.init_role
        d, e = config.hidden_size, config.hidden_size // config.num_attention_heads
        geometric = config.attention_type == "geometric"
        fans = (module.in_features, module.out_features)
        xavier = {  # role -> (gain, fan_in, fan_out)
            "relu_input": (math.sqrt(2.0), *fans),  # W_1, G_1, the FFN's first layer: gain("relu")
            "gate_output": (1.0, *fans),  # G_2: gain("sigmoid") = 1
            "relative_position": (1.0, d, d),  # pos_to_pq
            # geometric: xavier_manual_ with the head size e as the fan on the heads' side; softmax: torch's fans,
            # where keys and values are one (2d, d) projection (data_to_kv)
            "query": (1.0, d, e) if geometric else (1.0, d, d),
            "key": (1.0, d, e) if geometric else (1.0, d, 2 * d),
            "value": (1.0, d, e) if geometric else (1.0, d, 2 * d),
        }
        if geometric:
            xavier["attention_output"] = (1.0, e, d)  # the softmax attentions keep multi_head_merge's default
        if not config.copy_gate:
            xavier["update_output"] = (1.0, *fans)  # the FFN's second layer: gain 1
        elif geometric:
            xavier["update_output"] = (5.0 / 3.0, *fans)  # NDRGeometric's p2: gain("tanh"); NDRResidual's: default
        if role in xavier:
            gain, fan_in, fan_out = xavier[role]
            bound = math.sqrt(3.0) * gain * math.sqrt(2.0 / (fan_in + fan_out))
            init.uniform_(module.weight, -bound, bound)
        else:  # direction (data_to_qp), position gate (data_to_absgate), halting (p_map), softmax attention output
            init.kaiming_uniform_(module.weight, a=math.sqrt(5))
        if module.bias is None:
            return
        if role == "gate_output":
            init.constant_(module.bias, config.gate_bias_init)
        elif role == "query":  # the content bias: global_content_bias (zeros), or none in MultiHeadAttention
            init.zeros_(module.bias)
        else:
            bound = 1.0 / math.sqrt(module.in_features)
            init.uniform_(module.bias, -bound, bound)


# The roles (`attention_ndr.linear`) of the attention's projections; the release's init makes each Xavier-uniform.
ATTENTION_ROLES = (
    "query", "key", "value", "attention_output", "direction", "relative_position", "position_gate", "projection",
)  # fmt: skip


def pytorch_default_init(module: nn.Linear):
    """`nn.Linear`'s own init (`reset_parameters`): the weight Kaiming-uniform with a = sqrt 5, which is
    U(±1/sqrt(fan_in)), and the bias U(±1/sqrt(fan_in))."""
    init.kaiming_uniform_(module.weight, a=math.sqrt(5))
    if module.bias is not None:
        bound = 1.0 / math.sqrt(module.in_features)
        init.uniform_(module.bias, -bound, bound)


def check_inputs(input_ids, attention_mask, inputs_embeds) -> tuple[int, int]:
    """Check the shapes of what `forward` was given (no tensor values: see `check_input_values`); returns (batch,
    seq). Errors name the argument and what was expected."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("Pass exactly one of input_ids and inputs_embeds.")
    if input_ids is not None:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must have shape (batch, seq), got {tuple(input_ids.shape)}.")
        batch, seq = input_ids.shape
    else:
        if inputs_embeds.dim() != 3:
            raise ValueError(f"inputs_embeds must have shape (batch, seq, hidden), got {tuple(inputs_embeds.shape)}.")
        batch, seq = inputs_embeds.shape[:2]
    if seq == 0:
        raise ValueError(
            "The inputs have sequence length 0: every sequence needs at least one token ([BOS] ... [EOS])."
        )
    if attention_mask is not None:
        if tuple(attention_mask.shape) != (batch, seq):
            raise ValueError(
                f"attention_mask must have shape (batch, seq) = {(batch, seq)} like the inputs (1 for tokens, 0 for "
                f"padding), got {tuple(attention_mask.shape)}."
            )
    return batch, seq


def check_position_ids(position_ids: torch.Tensor | None, batch: int, seq: int, config: NDRConfig) -> None:
    """`position_ids` (shape and dtype; no values, so no host sync): one integer per token, or one row for the whole
    batch (`(1, seq)`), and a model that reads them. Any integer is a position (the encodings are sinusoids)."""
    if position_ids is None:
        return
    if not config.reads_position_ids:
        raise ValueError(
            f"position_ids are read by position_encoding='absolute' (sinusoidal encodings added to the embeddings) "
            f"and by relative_key_window > 0 (relative position keys); this model has position_encoding="
            f"{config.position_encoding!r} and relative_key_window=0, which read no position ids."
        )
    if position_ids.dim() != 2 or position_ids.shape[1] != seq or position_ids.shape[0] not in (1, batch):
        raise ValueError(
            f"position_ids must have shape (batch, seq) = {(batch, seq)} like the inputs (or (1, {seq})), got "
            f"{tuple(position_ids.shape)}."
        )
    if position_ids.dtype.is_floating_point or position_ids.dtype == torch.bool:
        raise ValueError(f"position_ids must be integers, got {position_ids.dtype}.")


def check_input_values(
    attention_mask: torch.Tensor | None,
    labels: torch.Tensor | None = None,
    config: NDRConfig | None = None,
    need_a_token: bool = False,
    token_labels: bool = False,
) -> None:
    """The checks that read tensor values: `attention_mask` holds only 0 and 1 (a bool mask needs no check) and, with
    `need_a_token`, no row without a token; single-label `labels` (and `token_labels`, -100 aside) are class ids of
    `config`. All of them together cost
    one host sync (on CUDA the CPU waits for the queued work), so `forward` runs them once, and only where
    `may_read_values` allows it; under `torch.compile` they are skipped."""
    if torch.compiler.is_compiling():
        return
    single_label = labels is not None and (token_labels or is_single_label(labels, config))
    if single_label and token_labels:
        labels = labels[labels != -100]  # token labels: -100 is not scored
    bad = []  # one device-side flag per check
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        bad.append(((attention_mask != 0) & (attention_mask != 1)).any())
    if attention_mask is not None and need_a_token:
        bad.append((attention_mask == 0).all(dim=-1).any())
    if single_label:
        bad.append(((labels < 0) | (labels >= config.num_labels)).any())
    if not bad or not torch.stack(bad).any():  # the one host sync
        return
    # something is wrong: say what (more syncs, on the way to an error)
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        values = sorted(set(attention_mask.unique().tolist()) - {0, 1})[:5]
        if values:
            raise ValueError(f"attention_mask must hold only 0 (padding) and 1 (token); found {values}.")
    if attention_mask is not None and need_a_token:
        rows = (attention_mask == 0).all(dim=-1).nonzero().flatten().tolist()[:8]
        if rows:
            raise ValueError(f"attention_mask rows {rows} hold no token: there is no column to classify from.")
    values = sorted(set(labels[(labels < 0) | (labels >= config.num_labels)].tolist()))[:8]
    raise ValueError(
        f"labels {values} are out of range: this model has num_labels={config.num_labels} (ids 0 to "
        f"{config.num_labels - 1}, {dict(list(config.id2label.items())[:10])})."
    )


def may_read_values(training: bool, device: torch.device) -> bool:
    """Whether a forward may read tensor values on the host: at inference (`model.eval()`) and on the CPU, where a read
    waits for nothing. A training forward on a GPU reads none: each read would stall the step until the GPU caught up.
    There the input value checks are left to the data pipeline, which checks the data before the first step
    (`check_encoded` in the checkout's `training/ndr_training/data.py`), and ACT runs every step instead of asking
    whether all columns have halted. Under `torch.compile` nothing is read either."""
    return not torch.compiler.is_compiling() and (not training or device.type == "cpu")


def is_single_label(labels: torch.Tensor, config: NDRConfig) -> bool:
    """Whether `labels` are class ids, as transformers' sequence-classification loss decides it."""
    return config.problem_type == "single_label_classification" or (
        config.problem_type is None and config.num_labels > 1 and labels.dtype in (torch.long, torch.int)
    )


def resolve_num_steps(num_steps, config: NDRConfig, training: bool) -> int:
    """The number of steps to run: `num_steps` if given, else the training or evaluation step count of `config`."""
    if num_steps is None:
        num_steps = config.num_hidden_layers
        if not training and config.eval_num_hidden_layers is not None:
            num_steps = config.eval_num_hidden_layers
    num_steps = as_python_scalar(num_steps)
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps={num_steps!r} is invalid: expected an integer >= 1.")
    return num_steps


def relative_state_change(new: torch.Tensor, old: torch.Tensor, real_columns: torch.Tensor) -> torch.Tensor:
    """Per sample, the largest `||new - old|| / ||old||` over its real columns: (b, n, d) twice → (b,)."""
    change = (new - old).norm(dim=-1) / old.norm(dim=-1).clamp_min(1e-6)  # (b, n)
    return change.masked_fill(~real_columns, 0.0).amax(dim=-1)


# The forward arguments that are the NDR's own; transformers' `auto_docstring` writes the standard ones.
NDR_FORWARD_ARGS = r"""
    num_steps (`int`, *optional*):
        How often to apply the layer (with ACT or adaptive steps: at most); defaults to `config.num_hidden_layers` in
        training and to `config.eval_num_hidden_layers` (if set) otherwise; with adaptive steps to
        `config.max_adaptive_steps` (default twice `num_hidden_layers`).
    adaptive_steps (`bool`, *optional*):
        At inference, run each sample until its state stops changing; defaults to `config.adaptive_steps`. Ignored in
        training.
    output_gates (`bool`, *optional*):
        Whether to return every step's copy gates (1 = take the update, 0 = copy); defaults to `config.output_gates`.
    position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)` or `(1, sequence_length)`, *optional*):
        The position of each token, read by the sinusoidal encodings of `position_encoding="absolute"` and by the
        relative position keys of `relative_key_window > 0` (no other encoding reads them); defaults to each token's
        index among the real tokens, or, with `config.position_coupling`, the coupled positions computed from
        `input_ids`. Tokens may share a position: giving the tokens that belong together one position ("position
        coupling", e.g. the i-th input symbol and the i-th answer blank of a copy task) is what the token tasks'
        `position_coupling` does.
"""


class NDRModel(NDRPreTrainedModel):
    """The NDR encoder: token embeddings (no positional embedding, except for `position_encoding="absolute"`) and one
    shared layer applied step after step: a fixed number of steps, ACT halting, or at inference until done."""

    def __init__(self, config: NDRConfig):
        super().__init__(config)
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embedding_dropout = NDRDropout(config.embedding_dropout)  # after the absolute positions, if any
        self.layer = NDRLayer(config)
        if config.halting == "act":
            self.halting = NDRHalting(config)
        self.post_init()

    @capture_outputs
    @auto_docstring(
        custom_intro="""
        Run the shared layer step after step over the embedded input (`[BOS] ... [EOS]`). `return_dict=False` gives a
        tuple instead of an [`NDRModelOutput`].
        """,
        custom_args=NDR_FORWARD_ARGS,
    )
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        num_steps: int | None = None,
        adaptive_steps: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_gates: bool | None = None,
        position_ids: torch.LongTensor | None = None,
    ) -> NDRModelOutput:
        batch, seq = check_inputs(input_ids, attention_mask, inputs_embeds)
        check_position_ids(position_ids, batch, seq, self.config)
        reads_values = may_read_values(self.training, (input_ids if input_ids is not None else inputs_embeds).device)
        if reads_values:
            check_input_values(attention_mask)
        config = self.config
        if position_ids is None and config.position_coupling is not None:  # the ids the model trained with
            position_ids = self._coupled_position_ids(input_ids, attention_mask, reads_values)
        adaptive = config.adaptive_steps if adaptive_steps is None else bool(adaptive_steps)
        adaptive = adaptive and not self.training
        if adaptive and num_steps is None:
            num_steps = config.max_adaptive_steps or 2 * config.num_hidden_layers
        num_steps = resolve_num_steps(num_steps, config, self.training)
        need_weights = config.output_attentions if output_attentions is None else output_attentions

        hidden_states = self.embeddings(input_ids) if inputs_embeds is None else inputs_embeds  # (b, n, d)
        if config.position_encoding == "absolute":
            positions = (
                position_ids
                if position_ids is not None
                else default_positions(attention_mask, batch, seq, hidden_states.device)
            )
            hidden_states = hidden_states + sinusoidal_encoding(positions, config.hidden_size).to(hidden_states.dtype)
        hidden_states = self.embedding_dropout(hidden_states)
        relative_ids = None  # the ids relative position keys read, one row per sample (None: the token indices)
        if config.relative_key_window and position_ids is not None:
            relative_ids = position_ids.expand(batch, seq)
        elif config.relative_key_window and attention_mask is not None:
            relative_ids = default_positions(attention_mask, batch, seq, hidden_states.device)

        # once per forward, not per step; a checkpointed layer recomputes it in each step (reentrant checkpointing runs
        # a separate backward per step, which could not go through shared tensors twice)
        checkpointed = self.layer.gradient_checkpointing and self.training and torch.is_grad_enabled()
        precomputed = None if checkpointed else self.layer.precompute(hidden_states, relative_ids)
        if config.halting == "act":
            return self._act_steps(hidden_states, attention_mask, num_steps, need_weights, precomputed, relative_ids)
        if adaptive:
            recording = any(
                config_value if value is None else value
                for value, config_value in (
                    (output_attentions, config.output_attentions),
                    (output_hidden_states, config.output_hidden_states),
                    (output_gates, config.output_gates),
                )
            )
            return self._adaptive_steps(
                hidden_states, attention_mask, num_steps, need_weights, precomputed, not recording, relative_ids
            )
        for _ in range(num_steps):
            hidden_states = self.layer(
                hidden_states, attention_mask, need_weights=need_weights, precomputed=precomputed,
                position_ids=relative_ids,
            )  # fmt: skip
        return NDRModelOutput(last_hidden_state=hidden_states)

    def _coupled_position_ids(
        self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, check: bool
    ) -> torch.Tensor:
        """`config.position_coupling`'s position ids, computed from `input_ids` (`position_coupling.py`); `check`: the
        rows are checked first (a host sync, where `may_read_values` allows one)."""
        config = self.config
        if input_ids is None:
            raise ValueError(
                f"NDRConfig.position_coupling={config.position_coupling!r} computes position ids from input_ids; "
                "with inputs_embeds, give position_ids as well."
            )
        task, token_ids = config.position_coupling, config.position_coupling_token_ids
        if check:
            check_coupled_rows(input_ids, attention_mask, task, token_ids, config.bos_token_id, config.eos_token_id)
        return coupled_position_ids(input_ids, attention_mask, task, token_ids)

    def _real_columns(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        if attention_mask is None:
            return torch.ones(hidden_states.shape[:2], dtype=torch.bool, device=hidden_states.device)
        return attention_mask != 0

    def _act_steps(
        self, hidden_states, attention_mask, max_steps: int, need_weights: bool, precomputed: dict | None,
        position_ids: torch.Tensor | None = None,
    ) -> NDRModelOutput:  # fmt: skip
        """Adaptive Computation Time per column (Graves 2016, Sec. 2; Dehghani et al. 2019, Sec. 2.2).

        At step t a running column halts with probability `p_t = sigmoid(w . h_(t-1) + b)`; it stops at the first
        step where its cumulative probability would pass `act_threshold` (or at the last step), and that step gets
        the remainder `R = 1 - sum of its earlier p`. Its output is `sum_t w_t h_t` with `w_t = p_t` before that step
        and `R` at it; afterwards it is copied unchanged, or with `config.act_update_halted` still updated (it goes
        on serving the other columns; its output stays as it was). Ponder cost: `N + R`, N the number of steps it ran,
        averaged over the sample's real columns; with `config.act_ponder_cost="official"` R alone, averaged over all
        of the sample's positions (padding as 0), so that its batch mean is the official code's `remainders.mean()`.
        `config.act_ut_variant` (the Universal Transformer's variant): no column is made to halt at the last step, and
        the output is mixed as `o <- (1 - w_t) o + w_t h_t`.

        The loop stops early once every column has halted. Asking that is a host sync per step, so it is asked only
        where it is free (the CPU) or at inference (`may_read_values`); a CUDA training step (and a compiled one) runs
        all `max_steps`, which changes no result: a halted column copies its state and gets weight 0."""
        running = self._real_columns(hidden_states, attention_mask)  # padding never runs
        real = running.clone()
        halting_sum = hidden_states.new_zeros(running.shape, dtype=torch.float32)  # (b, n)
        remainder = torch.zeros_like(halting_sum)
        steps_run = torch.zeros(running.shape, dtype=torch.long, device=running.device)
        output = torch.zeros_like(hidden_states)
        update_halted, ut_variant = self.config.act_update_halted, self.config.act_ut_variant
        for step in range(max_steps):
            halting_probability = self.halting(hidden_states)  # (b, n), float32
            last = step == max_steps - 1 and not ut_variant
            halts = running & ((halting_sum + halting_probability > self.config.act_threshold) | last)
            continues = running & ~halts
            weight = torch.where(continues, halting_probability, torch.where(halts, 1 - halting_sum, 0.0))
            remainder = torch.where(halts, 1 - halting_sum, remainder)
            halting_sum = halting_sum + torch.where(continues, halting_probability, 0.0)
            steps_run = steps_run + running.long()
            hidden_states = self.layer(
                hidden_states,
                attention_mask,
                update_mask=real if update_halted else running,
                need_weights=need_weights,
                precomputed=precomputed,
                position_ids=position_ids,
            )
            weight = weight.unsqueeze(-1).to(hidden_states.dtype)
            output = (output * (1 - weight) if ut_variant else output) + weight * hidden_states
            running = continues
            if may_read_values(self.training, running.device) and not running.any():
                break
        if self.config.act_ponder_cost == "official":
            ponder = remainder.masked_fill(~real, 0.0).mean(-1)  # (b,)
        else:
            ponder = (steps_run + remainder).masked_fill(~real, 0.0).sum(-1) / real.sum(-1).clamp_min(1)  # (b,)
        return NDRModelOutput(last_hidden_state=output, ponder_cost=ponder, halting_steps=steps_run)

    def _adaptive_steps(
        self,
        hidden_states,
        attention_mask,
        max_steps: int,
        need_weights: bool,
        precomputed: dict | None,
        compact: bool,
        position_ids: torch.Tensor | None = None,
    ):
        """Run each sample until the relative change of every real column's state in one step is below
        `config.adaptive_threshold`, at most `max_steps`; a finished sample keeps its state. With `compact`, finished
        samples leave the batch, so they cost nothing more; otherwise (per-step outputs are being recorded) the whole
        batch runs and finished samples are frozen, so every recorded tensor keeps the full batch. A sample's result
        does not depend on the rest of the batch either way.

        Inference only, and it syncs with the host at every step by design: whether to run another step (and which
        samples) is decided on the CPU from the states the step computed."""
        batch = hidden_states.shape[0]
        real = self._real_columns(hidden_states, attention_mask)
        threshold = self.config.adaptive_threshold
        steps_taken = torch.zeros(batch, dtype=torch.long, device=hidden_states.device)
        if compact:
            # the running samples' states, masks and real columns are kept packed; a sample's final state is written
            # out once, when it finishes (or at the cap)
            final = hidden_states.clone()
            active = torch.arange(batch, device=hidden_states.device)  # samples still running
            state, mask, active_real = hidden_states, attention_mask, real
            for _ in range(max_steps):
                new = self.layer(
                    state, mask, need_weights=need_weights, precomputed=precomputed, position_ids=position_ids
                )
                steps_taken[active] += 1
                going_on = relative_state_change(new, state, active_real) >= threshold
                if going_on.all():
                    state = new
                    continue
                final[active[~going_on]] = new[~going_on]
                active, state, active_real = active[going_on], new[going_on], active_real[going_on]
                mask = None if mask is None else mask[going_on]
                if active.numel() == 0:
                    break
                if position_ids is not None:  # relative keys: the running samples' rows of the key index
                    position_ids = position_ids[going_on]
                    attention = precomputed["attention"]
                    attention = {**attention, "relative_key_index": attention["relative_key_index"][going_on]}
                    precomputed = {**precomputed, "attention": attention}
            if active.numel():
                final[active] = state  # at the cap
            hidden_states = final
        else:
            running = torch.ones(batch, dtype=torch.bool, device=hidden_states.device)
            for _ in range(max_steps):
                update_mask = running.unsqueeze(-1) & real
                new = self.layer(
                    hidden_states, attention_mask, update_mask, need_weights=need_weights, precomputed=precomputed,
                    position_ids=position_ids,
                )  # fmt: skip
                steps_taken += running.long()
                running = running & (relative_state_change(new, hidden_states, real) >= threshold)
                hidden_states = new
                if not running.any():
                    break
        return NDRModelOutput(last_hidden_state=hidden_states, num_steps_taken=steps_taken)


def readout_positions(attention_mask: torch.Tensor, readout: str) -> torch.LongTensor:
    """Index of the first (`"first"`: [BOS]) or last (`"last"`: [EOS]) real token of every row; works with right
    and left padding. `attention_mask` (batch, seq) → (batch,)."""
    positions = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
    is_token = attention_mask != 0
    if readout == "first":
        return torch.where(is_token, positions, attention_mask.shape[-1]).min(dim=-1).values
    return torch.where(is_token, positions, -1).max(dim=-1).values


def encode_for_head(ndr, input_ids, attention_mask, inputs_embeds, labels, num_steps, adaptive_steps,
                    token_labels: bool = False, **flags) -> tuple[torch.Tensor, NDRModelOutput]:  # fmt: skip
    """What a head's forward does before its head: check the inputs (and the labels' values, where it may read them),
    make the mask boolean, and run the encoder. Returns `(attention_mask (b, n) bool, the encoder's outputs)`."""
    batch, seq = check_inputs(input_ids, attention_mask, inputs_embeds)
    device = (input_ids if input_ids is not None else inputs_embeds).device
    if may_read_values(ndr.training, device):  # one host sync for all checks
        check_input_values(attention_mask, labels, ndr.config, need_a_token=True, token_labels=token_labels)
    if attention_mask is None:
        attention_mask = torch.ones(batch, seq, dtype=torch.bool, device=device)
    else:
        attention_mask = attention_mask != 0  # checked: the encoder need not check it again
    outputs = ndr(
        input_ids,
        attention_mask=attention_mask,
        inputs_embeds=inputs_embeds,
        num_steps=num_steps,
        adaptive_steps=adaptive_steps,
        return_dict=True,
        **{name: value for name, value in flags.items() if value is not None},  # None: the config decides
    )
    return attention_mask, outputs


def head_output(output_class, loss, logits, outputs: NDRModelOutput, config: NDRConfig):
    """A head's output: its loss (with ACT's ponder cost added, weighted by `act_ponder_weight`), its logits and what
    the encoder recorded (`output_class`: `NDRSequenceClassifierOutput` or `NDRTokenClassifierOutput`)."""
    if loss is not None and outputs.ponder_cost is not None:
        loss = loss + config.act_ponder_weight * outputs.ponder_cost.mean()
    recorded = ("hidden_states", "attentions", "gates", "ponder_cost", "halting_steps", "num_steps_taken")
    return output_class(loss=loss, logits=logits, **{name: getattr(outputs, name) for name in recorded})


class NDRForSequenceClassification(NDRPreTrainedModel):
    """NDR encoder with a linear head on one column (`config.readout`)."""

    def __init__(self, config: NDRConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.ndr = NDRModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    @auto_docstring(
        custom_intro="""
        Classify each sequence from the column `config.readout` names; the loss follows `config.problem_type`
        (single-label, multi-label or regression) as in other transformers models.
        """,
        custom_args=NDR_FORWARD_ARGS,
    )
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.Tensor | None = None,
        num_steps: int | None = None,
        adaptive_steps: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_gates: bool | None = None,
        position_ids: torch.LongTensor | None = None,
    ) -> NDRSequenceClassifierOutput:
        attention_mask, outputs = encode_for_head(
            self.ndr, input_ids, attention_mask, inputs_embeds, labels, num_steps, adaptive_steps,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, output_gates=output_gates,
            position_ids=position_ids,
        )  # fmt: skip
        batch = attention_mask.shape[0]
        states = outputs.last_hidden_state  # (b, n, d)
        positions = readout_positions(attention_mask, self.config.readout)  # (b,)
        logits = self.classifier(states[torch.arange(batch, device=states.device), positions])

        loss = None if labels is None else self.loss_function(labels=labels, pooled_logits=logits, config=self.config)
        return head_output(NDRSequenceClassifierOutput, loss, logits, outputs, self.config)


class NDRForTokenClassification(NDRPreTrainedModel):
    """NDR encoder with a linear head on every column: one label per input token (`BertForTokenClassification`'s
    shape). Labels of -100 are not scored (the special tokens, padding, the positions of a task that carry no answer).
    """

    def __init__(self, config: NDRConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.ndr = NDRModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    @auto_docstring(
        custom_intro="""
        Classify every token from its column's final state; `labels` of shape `(batch, seq)` hold a class id per
        token, -100 where nothing is scored.
        """,
        custom_args=NDR_FORWARD_ARGS,
    )
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        num_steps: int | None = None,
        adaptive_steps: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_gates: bool | None = None,
        position_ids: torch.LongTensor | None = None,
    ) -> NDRTokenClassifierOutput:
        _, outputs = encode_for_head(
            self.ndr, input_ids, attention_mask, inputs_embeds, labels, num_steps, adaptive_steps, token_labels=True,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, output_gates=output_gates,
            position_ids=position_ids,
        )  # fmt: skip
        logits = self.classifier(outputs.last_hidden_state)  # (b, n, labels)

        loss = None if labels is None else self.loss_function(logits, labels, self.config)  # float32; -100 ignored
        return head_output(NDRTokenClassifierOutput, loss, logits, outputs, self.config)


__all__ = [
    # the models and their outputs
    "NDRPreTrainedModel",
    "NDRModel",
    "NDRModelOutput",
    "NDRForSequenceClassification",
    "NDRSequenceClassifierOutput",
    "NDRForTokenClassification",
    "NDRTokenClassifierOutput",
    # attention: the geometric weights and the metric-tensor and dot-product modules
    "geometric_attention_weights",
    "NDRMetricAttention",
    "METRIC_PARAMETRIZATIONS",
    "NDRDotProductAttention",
]
