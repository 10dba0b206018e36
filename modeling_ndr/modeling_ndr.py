"""PyTorch Neural Data Router (NDR).

Csordás, Irie & Schmidhuber, "The Neural Data Router: Adaptive Control Flow in Transformers Improves
Systematic Generalization", ICLR 2022.

The NDR is an encoder whose one layer is applied `num_hidden_layers` times (weights shared across steps). The layer
has two ingredients on top of a post-LN Transformer layer:

* **geometric attention**: every key gets a sigmoid match probability, and the closest matching key wins
  (`geometric_attention_weights`); a per-query directional term tells left from right. There is no
  positional embedding and a column never attends to itself.
* **a copy gate**: each column mixes its update with its old state, so it can skip a step.

Reading order: geometric attention weights → attention module → update and gate networks → layer → models.

Tensor dimensions: b batch, h heads, n (i, j, k) sequence positions, d hidden size, e head size (d / h).
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput, can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_ndr import NDRConfig, as_python_scalar
from .geometric_ndr import geometric_attention_weights


class NDRGeometricAttention(nn.Module):
    """Multi-head geometric attention with a directional term (spec §1.2).

    `z_ij = scale * q_i . dropout(k_j) + direction_scale * (right_i if j > i else left_i) + logit_bias`, where
    `q_i = W_q h_i + b` and `[left_i, right_i] = W_d h_i + b_d` come from the query column.
    """

    def __init__(self, config: NDRConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.normalize = config.normalize_attention

        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=True)  # the bias is the content bias
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.direction_proj = nn.Linear(config.hidden_size, 2 * config.num_attention_heads)  # (left, right) per head
        self.scale = nn.Parameter(torch.empty(1))  # alpha
        self.direction_scale = nn.Parameter(torch.empty(1))  # beta
        self.logit_bias = nn.Parameter(torch.empty(1))  # gamma
        self.key_dropout = nn.Dropout(config.attention_dropout)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_size).transpose(1, 2)  # (b, h, n, e)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, n, d = hidden_states.shape
        query = self._split_heads(self.q_proj(hidden_states)) * self.scale  # alpha on (b, h, n, e), not on (n, n)
        key = self._split_heads(self.key_dropout(self.k_proj(hidden_states)))
        value = self._split_heads(self.v_proj(hidden_states))

        content = query @ key.transpose(-1, -2)  # (b, h, n, n)
        left, right = self.direction_proj(hidden_states).view(b, n, self.num_heads, 2).permute(3, 0, 2, 1)  # (b, h, n)
        left = self.direction_scale * left + self.logit_bias  # beta * left + gamma: the terms the kernel adds per row
        right = self.direction_scale * right + self.logit_bias
        weights = geometric_attention_weights(content, attention_mask, left=left, right=right)  # (b, h, n, n), fp32
        if self.normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-6)
        output = weights.to(value.dtype) @ value  # (b, h, n, e)
        output = output.transpose(1, 2).reshape(b, n, d)
        return self.o_proj(output), weights


ATTENTION_CLASSES = {"geometric": NDRGeometricAttention}


class NDRUpdate(nn.Module):
    """The candidate new state: `LayerNorm(W_2 dropout(relu(W_1 m)))` — no residual, the copy gate mixes instead."""

    def __init__(self, config: NDRConfig):
        super().__init__()
        self.fc_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc_out = nn.Linear(config.intermediate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(self.fc_out(self.dropout(F.relu(self.fc_in(hidden_states)))))


class NDRCopyGate(nn.Module):
    """Per column and channel, how much of the update to take: `sigmoid(G_2 dropout(relu(G_1 m)))`."""

    def __init__(self, config: NDRConfig):
        super().__init__()
        self.fc_in = nn.Linear(config.hidden_size, config.hidden_size)
        self.fc_out = nn.Linear(config.hidden_size, config.hidden_size)  # its bias starts at gate_bias_init
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.gate_dropout = config.gate_dropout

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.fc_out(self.dropout(F.relu(self.fc_in(hidden_states)))))  # (b, n, d)
        if self.training and self.gate_dropout > 0:
            # force whole columns of some samples to copy, so the model learns to rely on copying
            keep = torch.rand(gate.shape[:-1] + (1,), device=gate.device) >= self.gate_dropout  # (b, n, 1)
            gate = gate * keep
        return gate


class NDRFeedForward(nn.Module):
    """The plain post-LN Transformer feed-forward block, used when `copy_gate=False`."""

    def __init__(self, config: NDRConfig):
        super().__init__()
        self.fc_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc_out = nn.Linear(config.intermediate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        update = self.fc_out(self.dropout(F.relu(self.fc_in(hidden_states))))
        return self.layer_norm(hidden_states + self.dropout(update))


class NDRLayer(GradientCheckpointingLayer):
    """One NDR step (spec §1.1); the same instance is applied at every step."""

    def __init__(self, config: NDRConfig):
        super().__init__()
        self.attention = ATTENTION_CLASSES[config.attention_type](config)
        self.attention_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        if config.copy_gate:
            self.update = NDRUpdate(config)
            self.copy_gate = NDRCopyGate(config)
        else:
            self.feed_forward = NDRFeedForward(config)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        attended, _ = self.attention(hidden_states, attention_mask)  # the weights are recorded by a hook if asked for
        mixed = self.attention_layer_norm(hidden_states + self.dropout(attended))
        if not hasattr(self, "copy_gate"):
            return self.feed_forward(mixed)
        update = self.update(mixed)
        gate = self.copy_gate(mixed)  # (b, n, d); recorded by a hook if asked for
        return gate * update + (1 - gate) * hidden_states


@dataclass
class NDRModelOutput(ModelOutput):
    r"""
    Outputs of [`NDRModel`].

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch, seq, hidden)`):
            The state of every column after the last step.
        hidden_states (`tuple(torch.FloatTensor)`, *optional*, returned with `output_hidden_states=True`):
            The embeddings and the state after every step: `num_steps + 1` tensors of shape `(batch, seq, hidden)`.
        attentions (`tuple(torch.FloatTensor)`, *optional*, returned with `output_attentions=True`):
            The attention weights of every step: `num_steps` tensors of shape `(batch, heads, seq, seq)`.
        gates (`tuple(torch.FloatTensor)`, *optional*, returned with `output_gates=True`):
            The copy-gate values of every step (1 = take the update, 0 = copy): `num_steps` tensors of shape
            `(batch, seq, hidden)`.
    """

    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    gates: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class NDRSequenceClassifierOutput(ModelOutput):
    r"""
    Outputs of [`NDRForSequenceClassification`]: `loss` (when labels are given), `logits` of shape
    `(batch, num_labels)`, and `hidden_states`, `attentions`, `gates` as in [`NDRModelOutput`].
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    gates: tuple[torch.FloatTensor, ...] | None = None


class NDRPreTrainedModel(PreTrainedModel):
    config_class = NDRConfig
    base_model_prefix = "ndr"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["NDRLayer"]
    _supports_sdpa = False
    accepts_loss_kwargs = False
    # Per-step outputs are recorded by forward hooks (transformers' `capture_outputs`): the one shared layer is called
    # once per step, so each hook fires once per step and every tuple has one entry per step.
    _can_record_outputs = {
        "hidden_states": NDRLayer,
        "attentions": OutputRecorder(NDRGeometricAttention, index=1),
        "gates": OutputRecorder(NDRCopyGate, index=0),
    }

    def __init__(self, config: NDRConfig, *inputs, **kwargs):
        config.validate()  # the config may have been changed since it was built
        super().__init__(config, *inputs, **kwargs)

    def _feed_forward_init(self) -> dict[nn.Linear, tuple[float, float]]:
        """(xavier gain, bias value) of every feed-forward and gate layer. Looked up from the leaf `nn.Linear`
        because transformers skips custom-code modules that own no parameters directly (like `NDRCopyGate`)."""
        roles = {}
        for module in self.modules():
            if isinstance(module, (NDRUpdate, NDRFeedForward)):
                roles[module.fc_in] = (math.sqrt(2.0), 0.0)
                roles[module.fc_out] = (5.0 / 3.0, 0.0)
            elif isinstance(module, NDRCopyGate):
                roles[module.fc_in] = (math.sqrt(2.0), 0.0)
                roles[module.fc_out] = (1.0, self.config.gate_bias_init)
        return roles

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """The release's init (spec §1.1/§1.2): Xavier-uniform layers, N(0, 1) embeddings, gate bias at
        `gate_bias_init`; the classifier and layer norms get the transformers defaults."""
        super()._init_weights(module)
        if isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=1.0)
        elif isinstance(module, NDRGeometricAttention):
            for projection in (module.q_proj, module.k_proj, module.v_proj, module.o_proj, module.direction_proj):
                init.xavier_uniform_(projection.weight)
            init.zeros_(module.q_proj.bias)
            init.zeros_(module.direction_proj.bias)
            init.constant_(module.scale, 1.0 / math.sqrt(module.head_size))
            init.constant_(module.direction_scale, 1.0)
            init.zeros_(module.logit_bias)
        elif isinstance(module, nn.Linear) and module in (roles := self._feed_forward_init()):
            gain, bias = roles[module]
            init.xavier_uniform_(module.weight, gain=gain)
            init.constant_(module.bias, bias)


def check_inputs(input_ids, attention_mask, inputs_embeds) -> tuple[int, int]:
    """Check what `forward` was given; returns (batch, seq). Errors name the argument and what was expected."""
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
        if not torch.compiler.is_compiling() and not ((attention_mask == 0) | (attention_mask == 1)).all():
            values = sorted(set(attention_mask.unique().tolist()) - {0, 1})[:5]
            raise ValueError(f"attention_mask must hold only 0 (padding) and 1 (token); found {values}.")
    return batch, seq


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


class NDRModel(NDRPreTrainedModel):
    """The NDR encoder: token embeddings (no positional embedding) and one shared layer applied step after step."""

    def __init__(self, config: NDRConfig):
        super().__init__(config)
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layer = NDRLayer(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings

    def set_input_embeddings(self, value: nn.Embedding):
        self.embeddings = value

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        num_steps: int | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_gates: bool | None = None,
    ) -> NDRModelOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, seq)`): token ids, `[BOS] ... [EOS]`.
            attention_mask (`torch.Tensor` of shape `(batch, seq)`, *optional*): 1 for tokens, 0 for padding.
            inputs_embeds (`torch.FloatTensor` of shape `(batch, seq, hidden)`, *optional*): instead of `input_ids`.
            num_steps (`int`, *optional*): how often to apply the layer; defaults to `config.num_hidden_layers`
                in training and to `config.eval_num_hidden_layers` (if set) otherwise.
            output_attentions / output_hidden_states / output_gates (`bool`, *optional*): return every step's
                attention weights / states / copy gates; default to the config's values of the same name.
            return_dict (`bool`, *optional*): a tuple instead of an [`NDRModelOutput`] if `False`.
        """
        check_inputs(input_ids, attention_mask, inputs_embeds)
        num_steps = resolve_num_steps(num_steps, self.config, self.training)
        hidden_states = self.embeddings(input_ids) if inputs_embeds is None else inputs_embeds  # (b, n, d)
        for _ in range(num_steps):
            hidden_states = self.layer(hidden_states, attention_mask)
        return NDRModelOutput(last_hidden_state=hidden_states)


def readout_positions(attention_mask: torch.Tensor, readout: str) -> torch.LongTensor:
    """Index of the first (`"first"`: [BOS]) or last (`"last"`: [EOS]) real token of every row; works with right
    and left padding. `attention_mask` (batch, seq) → (batch,)."""
    positions = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
    is_token = attention_mask != 0
    if readout == "first":
        return torch.where(is_token, positions, attention_mask.shape[-1]).min(dim=-1).values
    return torch.where(is_token, positions, -1).max(dim=-1).values


class NDRForSequenceClassification(NDRPreTrainedModel):
    """NDR encoder with a linear head on one column (`config.readout`)."""

    def __init__(self, config: NDRConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.ndr = NDRModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.ndr.embeddings

    def set_input_embeddings(self, value: nn.Embedding):
        self.ndr.embeddings = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.Tensor | None = None,
        num_steps: int | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_gates: bool | None = None,
    ) -> NDRSequenceClassifierOutput:
        r"""
        Args:
            labels (`torch.Tensor` of shape `(batch,)` or `(batch, num_labels)`, *optional*): targets; the loss
                follows `config.problem_type` (single-label, multi-label or regression) as in other HF models.
            Other arguments as in [`NDRModel.forward`].
        """
        batch, seq = check_inputs(input_ids, attention_mask, inputs_embeds)
        device = (input_ids if input_ids is not None else inputs_embeds).device
        if attention_mask is None:
            attention_mask = torch.ones(batch, seq, dtype=torch.long, device=device)
        elif not torch.compiler.is_compiling():
            empty_rows = (attention_mask == 0).all(dim=-1)  # (b,)
            if empty_rows.any():
                rows = empty_rows.nonzero().flatten().tolist()[:8]
                raise ValueError(f"attention_mask rows {rows} hold no token: there is no column to classify from.")
        flags = {
            "output_attentions": output_attentions,
            "output_hidden_states": output_hidden_states,
            "output_gates": output_gates,
        }
        outputs = self.ndr(
            input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            num_steps=num_steps,
            return_dict=True,
            **{name: value for name, value in flags.items() if value is not None},  # None: the config decides
        )
        states = outputs.last_hidden_state  # (b, n, d)
        positions = readout_positions(attention_mask, self.config.readout)  # (b,)
        logits = self.classifier(states[torch.arange(batch, device=states.device), positions])

        loss = None
        if labels is not None:
            check_labels(labels, self.config)
            loss = self.loss_function(labels=labels, pooled_logits=logits, config=self.config)
        return NDRSequenceClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            gates=outputs.gates,
        )


def check_labels(labels: torch.Tensor, config: NDRConfig) -> None:
    """Single-label targets must be class ids in [0, num_labels) (torch's own message does not say which)."""
    single_label = config.problem_type == "single_label_classification" or (
        config.problem_type is None and config.num_labels > 1 and labels.dtype in (torch.long, torch.int)
    )
    if not single_label or torch.compiler.is_compiling():
        return
    bad = (labels < 0) | (labels >= config.num_labels)
    if bad.any():
        values = sorted(set(labels[bad].tolist()))[:8]
        raise ValueError(
            f"labels {values} are out of range: this model has num_labels={config.num_labels} (ids 0 to "
            f"{config.num_labels - 1}, {dict(list(config.id2label.items())[:10])})."
        )


__all__ = [
    "NDRPreTrainedModel",
    "NDRModel",
    "NDRForSequenceClassification",
    "NDRModelOutput",
    "NDRSequenceClassifierOutput",
    "geometric_attention_weights",
]
