"""Attention of the NDR encoder and of the paper's baselines, as configuration of one model (Csordás et al., 2022).

Three config axes pick the attention; each allowed value is listed in `configuration_ndr` and implemented here once:

* `attention_scores` picks the class (`ATTENTION_CLASSES`): `"dot"` scores `q_i . k_j` with separate query, key and
  value projections; `"metric"` scores `p_i^T M p_j` with one projection per head (metric-tensor attention).
* `attention_type` picks how scores become weights (`ATTENTION_WEIGHT_FUNCTIONS`): `"geometric"` (`geometric_ndr`) or
  `"softmax"`.
* `position_encoding` picks the position term: `"direction"` (the NDR's per-query logit terms for keys on the left and
  on the right, Sec. 3.2 of the paper), `"relative"` (Transformer-XL, Dai et al. 2019, Sec. 3.3), `"gated"` (the
  paper's "+abs/rel" baseline: a per-query gate between the relative and an absolute term), `"absolute"` (sinusoidal
  encodings added to the embeddings by the model, Vaswani et al. 2017, Sec. 3.5; nothing here) or `"none"`.

Every attention class has the same interface: `forward(hidden_states, attention_mask, need_weights) -> (output,
weights)`, weights of shape `(batch, heads, seq, seq)` (`None` only when `need_weights=False` let softmax attention
take torch's fused kernel). Attention dropout acts on the keys, never on the weights (as in the NDR release).

Tensor dimensions: b batch, h heads, i query, j key (n positions), d hidden size, e head size (d / h).
"""

import logging
import math

import torch
from torch import nn
from torch.nn import functional as F

from .configuration_ndr import NDRConfig
from .dropout_ndr import NDRDropout
from .geometric_ndr import (
    attention_kernel,
    cached_per_length,
    direction_logits,
    geometric_attention_weights,
    triton_kernel_device_type,
)


logger = logging.getLogger(__name__)


def sinusoidal_encoding(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """`P(pos)[2k] = sin(pos / 10000^(2k / dim))`, `P(pos)[2k + 1] = cos(pos / 10000^(2k / dim))` (Vaswani et al.).

    `positions` of any shape (integers, may be negative) → `(*positions.shape, dim)` float32."""
    frequencies = torch.exp(
        torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) * (-math.log(10000.0) / dim)
    )  # (ceil(dim / 2),)
    angles = positions.to(torch.float32).unsqueeze(-1) * frequencies  # (..., ceil(dim / 2))
    encoding = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # sin, cos interleaved
    return encoding[..., :dim]


def position_ids(attention_mask: torch.Tensor | None, batch: int, seq: int, device: torch.device) -> torch.Tensor:
    """Position of every token counted over the real tokens only, so left padding does not shift it: (b, n)."""
    if attention_mask is None:
        return torch.arange(seq, device=device).expand(batch, seq)
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


@cached_per_length
def _relative_index(n: int, device: torch.device) -> torch.Tensor:
    """For each (i, j), the row of a table of offsets -(n-1) .. n-1 that holds `j - i`: (n, n). The indices of a row
    differ, so the gather's backward adds each gradient once (deterministic on CUDA)."""
    i = torch.arange(n, device=device).unsqueeze(1)
    j = torch.arange(n, device=device).unsqueeze(0)
    return j - i + n - 1


def relative_key_index(position_ids: torch.Tensor | None, seq: int, window: int, device: torch.device) -> torch.Tensor:
    """For each (query i, key j), the row of the relative keys that holds `p_j - p_i` clipped to `[-window, window]`:
    (b, n, n), or (1, n, n) for the token indices where `position_ids` (b, n) is None."""
    ids = torch.arange(seq, device=device).unsqueeze(0) if position_ids is None else position_ids.long()
    return (ids.unsqueeze(1) - ids.unsqueeze(2)).clamp(-window, window) + window


def linear(in_features: int, out_features: int, init_role: str, bias: bool = True) -> nn.Linear:
    """An `nn.Linear` tagged with how `NDRPreTrainedModel._init_weights` starts it (`init_role`, one of the roles that
    method lists), so that initialising a projection needs no search through the model."""
    layer = nn.Linear(in_features, out_features, bias=bias)
    layer.init_role = init_role
    return layer


def concatenated_linear(*layers: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
    """The weights and biases of `layers` (which read the same input) concatenated, so that they are one matrix
    product (faster than one per layer, also in the backward): (sum of out_features, in_features) and
    (sum of out_features,). Under autocast they are cast to its dtype here, so a caller that reuses them over several
    steps casts them once, not at every step's product."""
    weight = torch.cat([layer.weight for layer in layers])
    bias = torch.cat([p.bias if p.bias is not None else p.weight.new_zeros(p.out_features) for p in layers])
    device_type = weight.device.type
    if torch.is_autocast_enabled(device_type):
        dtype = torch.get_autocast_dtype(device_type)
        weight, bias = weight.to(dtype), bias.to(dtype)
    return weight, bias


def softmax_attention_weights(logits, attention_mask=None, left=None, right=None, kernel="auto") -> torch.Tensor:
    """Softmax over the keys (in float32), padded keys excluded; a row without any key stays finite (uniform).
    `logits` (b, h, n, n) → (b, h, n, n); `attention_mask` (b, n), 1 for tokens. `left` / `right` (b, h, n) are added
    to the logits of the keys left / right of each query (the direction term). The signature is the one the weight
    functions share (`ATTENTION_WEIGHT_FUNCTIONS`); softmax has one implementation, so `kernel` changes nothing."""
    if left is not None:
        logits = direction_logits(logits, left, right)
    logits = logits.float()
    if attention_mask is not None:
        logits = logits.masked_fill(attention_mask[:, None, None, :] == 0, torch.finfo(torch.float32).min)
    return torch.softmax(logits, dim=-1)


class NDRAttentionBase(nn.Module):
    """What all attention classes share: the heads, the position terms and turning scores into weights.

    Subclasses make `query` (already scaled), `key` (after key dropout) and `value` and call `attend`. What every step
    reuses (concatenated projection weights, the position table) is computed once per forward by `precompute`, which
    the model calls before its step loop; an attention module called on its own computes it itself."""

    def __init__(self, config: NDRConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.attention_type = config.attention_type
        self.position_encoding = config.position_encoding
        self.normalize = config.normalize_attention
        self.config = config  # its `_attn_implementation` (transformers' switch) chooses the kernel at each forward
        kernel = attention_kernel(config._attn_implementation)
        if kernel == "triton" and config.attention_type == "geometric" and not triton_kernel_device_type():
            logger.warning(
                'attn_implementation="ndr_triton" but triton is not installed (pip install "ndr[triton]"): '
                "the PyTorch path computes the same weights."
            )
        self.key_dropout = NDRDropout(config.attention_dropout)
        d, h = config.hidden_size, config.num_attention_heads
        if config.position_encoding == "direction":
            self.direction_proj = linear(d, 2 * h, "direction")  # (left, right) logit terms per head, from the query
            self.direction_scale = nn.Parameter(torch.empty(1))  # beta
        if config.position_encoding in ("relative", "gated"):
            self.relative_proj = linear(d, d, "relative_position", bias=False)  # W_p, applied to sinusoidal encodings
            self.relative_position_bias = nn.Parameter(torch.empty(h, self.head_size))  # v of Transformer-XL
        if config.position_encoding == "gated":
            # r_i = sigmoid(W_r h_i + b_r): relative (1) or absolute (0)
            self.position_gate_proj = linear(d, h, "position_gate")
        if config.attention_type == "geometric":
            self.logit_bias = nn.Parameter(torch.empty(1))  # gamma
        self.relative_key_window = config.relative_key_window
        if self.relative_key_window:
            # a_t of Shaw et al. (2018) per head, for the clipped offsets t = -w .. w between position ids
            self.relative_keys = nn.Parameter(torch.empty(h, 2 * self.relative_key_window + 1, self.head_size))

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, -1).transpose(1, 2)  # (b, h, n, e)

    def _merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, _, n, _ = x.shape
        return x.transpose(1, 2).reshape(b, n, -1)  # (b, n, d)

    def precompute(self, hidden_states: torch.Tensor, position_ids: torch.Tensor | None = None) -> dict:
        """What every step of one forward reuses, from the first step's `hidden_states` (b, n, d): the position table
        (relative and gated position terms) and, with relative keys, which key each pair of `position_ids` (b, n)
        reads (`relative_key_index`; None: the token indices)."""
        precomputed = {}
        if self.position_encoding in ("relative", "gated"):
            precomputed["position_table"] = self.position_table(hidden_states.shape[1], hidden_states)
        if self.relative_key_window:
            seq, window = hidden_states.shape[1], self.relative_key_window
            precomputed["relative_key_index"] = relative_key_index(position_ids, seq, window, hidden_states.device)
        return precomputed

    def position_table(self, n: int, like: torch.Tensor) -> torch.Tensor:
        """`W_p P(t)` per head for the offsets t = -(n-1) .. n-1: (h, 2n - 1, e), in `like`'s dtype and device. Row
        `n - 1 + t` holds offset t, so rows n-1 .. 2n-2 are also `W_p P(j)` of the positions j = 0 .. n-1."""
        offsets = torch.arange(-(n - 1), n, device=like.device)  # (2n - 1,)
        table = self.relative_proj(sinusoidal_encoding(offsets, like.shape[-1]).to(like.dtype))  # (2n - 1, d)
        return table.view(2 * n - 1, self.num_heads, self.head_size).transpose(0, 1)  # (h, 2n - 1, e)

    def relative_logits(
        self,
        hidden_states: torch.Tensor,
        position_query: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_table: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`(q_i + v) . W_p P(j - i)` (relative), or for `gated` that term times `r_i` plus `(1 - r_i)` times the
        absolute term `(q_i + v) . W_p P(j)`. `position_query` is the (scaled) `q_i + v`:
        (b, h, n, e) → (b, h, n, n). `position_table` is `position_table(n, hidden_states)` if already computed."""
        b, n, _ = hidden_states.shape
        table = self.position_table(n, hidden_states) if position_table is None else position_table
        by_offset = position_query @ table.transpose(-1, -2)  # (b, h, n, 2n - 1)
        relative = by_offset.gather(-1, _relative_index(n, hidden_states.device).expand(b, self.num_heads, n, n))
        if self.position_encoding == "relative":
            return relative
        positions = position_ids(attention_mask, b, n, hidden_states.device)  # (b, n)
        absolute_table = table[:, n - 1 + positions].transpose(0, 1)  # (b, h, n, e): W_p P(j) of every key
        absolute = position_query @ absolute_table.transpose(-1, -2)  # (b, h, n, n)
        gate = torch.sigmoid(self.position_gate_proj(hidden_states)).transpose(1, 2).unsqueeze(-1)  # (b, h, n, 1)
        return gate * relative + (1 - gate) * absolute

    def attend(
        self,
        hidden_states: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        need_weights: bool,
        position_query: torch.Tensor | None = None,
        direction: torch.Tensor | None = None,
        position_table: torch.Tensor | None = None,
        relative_key_index: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Scores, position terms, weights and the weighted values: (b, h, n, e) each → ((b, h, n, e), weights).
        `direction` is `direction_proj(hidden_states)` if the caller has computed it already: (b, n, 2h);
        `position_table` and `relative_key_index` are what `precompute` holds."""
        b, n, _ = hidden_states.shape
        left = right = None
        if self.position_encoding == "direction":
            if direction is None:
                direction = self.direction_proj(hidden_states)
            left, right = direction.view(b, n, self.num_heads, 2).permute(3, 0, 2, 1)
            left, right = self.direction_scale * left, self.direction_scale * right  # (b, h, n)

        fused = FUSED_ATTENTION.get(self.attention_type)
        plain = left is None and position_query is None and relative_key_index is None
        if fused is not None and plain and not need_weights:
            return fused(query, key, value, attention_mask), None  # nothing but q . k, and no weights asked for

        position_logits = None
        if position_query is not None:
            position_logits = self.relative_logits(hidden_states, position_query, attention_mask, position_table)
        if relative_key_index is not None:
            # q_i . a_t (Shaw et al.), t the clipped offset of the position ids: (b, h, n, 2w + 1) → (b, h, n, n)
            by_offset = query @ self.relative_keys.transpose(-1, -2)
            index = relative_key_index.unsqueeze(1).expand(b, self.num_heads, n, n)
            relative_keys = by_offset.gather(-1, index)
            position_logits = relative_keys if position_logits is None else position_logits + relative_keys
        if hasattr(self, "logit_bias"):
            # gamma (geometric attention) joins the per-row terms, which the geometric kernel adds itself
            if left is None:
                left = right = self.logit_bias.expand(b, self.num_heads, n)
            else:
                left, right = left + self.logit_bias, right + self.logit_bias
        return attention(
            query, key, value, attention_mask, self.attention_type, left, right, position_logits,
            normalize=self.normalize, kernel=attention_kernel(self.config._attn_implementation),
        )  # fmt: skip


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    attention_type: str,
    left: torch.Tensor | None = None,
    right: torch.Tensor | None = None,
    position_logits: torch.Tensor | None = None,
    normalize: bool = False,
    kernel: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention op itself: `weights(query . key + terms) @ value`; (b, h, n, e) each → ((b, h, n, e), weights).

    `left` / `right` (b, h, n) are added to the logits of the keys left / right of each query (the direction term;
    the geometric kernel adds them per row), `position_logits` (b, h, n, n) to all of them; `attention_type` picks the
    weight function (`ATTENTION_WEIGHT_FUNCTIONS`). `kernel` picks what computes geometric weights
    (`geometric_attention_weights`); `normalize` (geometric attention only) makes each row sum to 1. The benchmarks
    call this function, so what they time is what the model computes."""
    content = query @ key.transpose(-1, -2)  # (b, h, n, n)
    if position_logits is not None:
        content = content + position_logits
    weights = ATTENTION_WEIGHT_FUNCTIONS[attention_type](
        content, attention_mask, left=left, right=right, kernel=kernel
    )
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-6)
    return weights.to(value.dtype) @ value, weights


def fused_softmax_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    """Softmax attention of nothing but `q . k` by torch's fused kernel, which keeps no (n, n) weights: (b, h, n, e)
    each → (b, h, n, e)."""
    mask = None if attention_mask is None else (attention_mask != 0)[:, None, None, :]
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=1.0)


# attention_type -> the function that turns logits into weights; they share one signature (logits, attention_mask,
# left, right, kernel), and the attention reads it here instead of branching on the name (as llama reads its
# attention-function registry)
ATTENTION_WEIGHT_FUNCTIONS = {"geometric": geometric_attention_weights, "softmax": softmax_attention_weights}
# attention_type -> torch's fused kernel for attention without position terms, where no weights are asked for
FUSED_ATTENTION = {"softmax": fused_softmax_attention}


class NDRDotProductAttention(NDRAttentionBase):
    """Multi-head attention with `q_i . k_j` scores: `q = W_q h + b` (the content bias), `k = W_k h`, `v = W_v h`,
    output `W_o`. The scale is learned (init 1/sqrt(e)) for geometric attention (alpha of the NDR) and for the
    relative terms (s of Transformer-XL); plain softmax attention uses the fixed 1/sqrt(e)."""

    def __init__(self, config: NDRConfig):
        super().__init__(config)
        d = config.hidden_size
        self.q_proj = linear(d, d, "query")  # the bias is the content bias (u of Transformer-XL)
        self.k_proj = linear(d, d, "key", bias=False)
        self.v_proj = linear(d, d, "value", bias=False)
        self.o_proj = linear(d, d, "attention_output", bias=False)
        if config.attention_type == "geometric" or config.position_encoding in ("relative", "gated"):
            self.scale = nn.Parameter(torch.empty(1))
        else:
            self.scale = 1.0 / math.sqrt(self.head_size)  # a constant, not a buffer: nothing to save or to load

    def _projections(self) -> list[nn.Linear]:
        projections = [self.q_proj, self.k_proj, self.v_proj]
        if self.position_encoding == "direction":
            projections.append(self.direction_proj)
        return projections

    def fused_projection(self) -> tuple[torch.Tensor, torch.Tensor]:
        """`q_proj`, `k_proj`, `v_proj` (and `direction_proj`) as one layer (`concatenated_linear`)."""
        return concatenated_linear(*self._projections())

    def precompute(self, hidden_states: torch.Tensor, position_ids: torch.Tensor | None = None) -> dict:
        """`NDRAttentionBase.precompute` plus the fused projection (`fused_projection`)."""
        return {**super().precompute(hidden_states, position_ids), "projection": self.fused_projection()}

    def projections(
        self, hidden_states: torch.Tensor, projection: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, ...]:
        """`q_proj`, `k_proj`, `v_proj` (and `direction_proj`) of `hidden_states`, as one matrix product with
        `projection` (`fused_projection()` if not given)."""
        weight, bias = self.fused_projection() if projection is None else projection
        return F.linear(hidden_states, weight, bias).split([p.out_features for p in self._projections()], dim=-1)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        precomputed: dict | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`precomputed` is what `precompute` returned for this forward (computed here if not given, relative keys
        then reading the token indices as position ids)."""
        precomputed = self.precompute(hidden_states) if precomputed is None else precomputed
        query, key, value, *direction = self.projections(hidden_states, precomputed["projection"])
        query = self._split_heads(query) * self.scale  # scale (b, h, n, e), not (n, n)
        key = self._split_heads(self.key_dropout(key))
        value = self._split_heads(value)
        position_query = None
        if self.position_encoding in ("relative", "gated"):
            # s (q_i + v): the query with the position bias v in place of the content bias u
            content_bias = self.q_proj.bias.view(self.num_heads, 1, self.head_size)
            position_query = query + self.scale * (self.relative_position_bias.unsqueeze(1) - content_bias)
        output, weights = self.attend(
            hidden_states,
            query,
            key,
            value,
            attention_mask,
            need_weights,
            position_query=position_query,
            direction=direction[0] if direction else None,
            position_table=precomputed.get("position_table"),
            relative_key_index=precomputed.get("relative_key_index"),
        )
        return self.o_proj(self._merge_heads(output)), weights


def _symmetric(parameter: torch.Tensor) -> torch.Tensor:
    return (parameter + parameter.transpose(-1, -2)) / 2


def _positive_semidefinite(parameter: torch.Tensor) -> torch.Tensor:
    return parameter @ parameter.transpose(-1, -2)


def _diagonal(parameter: torch.Tensor) -> torch.Tensor:
    return torch.diag_embed(parameter)


# metric_tensor -> (the metric M (h, e, e) from the learned parameter, shape of the parameter given h and e)
METRIC_PARAMETRIZATIONS = {
    "symmetric": (_symmetric, lambda h, e: (h, e, e)),
    "psd": (_positive_semidefinite, lambda h, e: (h, e, e)),
    "diagonal": (_diagonal, lambda h, e: (h, e)),
}


class NDRMetricAttention(NDRAttentionBase):
    """Metric-tensor attention (the nlp-metaformer idea): one projection per head, `p_i = P h_i`, serves as query,
    key and value; scores are `p_i^T M p_j / sqrt(e)` with a learned symmetric `e x e` metric `M` per head (initialised
    to the identity), then softmax or geometric weights, `o_i = sum_j A_ij p_j`, and an output projection.

    What `M` adds, said plainly: any symmetric `M = U diag(s) U^T` is tied query/key attention (q = k = U^T p) with a
    signed reweighting `s` of the directions; a positive semidefinite `M = L L^T` is exactly tied attention with
    `q = k = L^T p` after a change of basis, so `"psd"` adds nothing over tied Q = K. The scores are symmetric
    (`r_ij = r_ji`): with geometric weights, left and right come from the `direction` term only.
    """

    def __init__(self, config: NDRConfig):
        super().__init__(config)
        d = config.hidden_size
        self.p_proj = linear(d, d, "projection", bias=False)
        self.o_proj = linear(d, d, "attention_output", bias=False)
        self.metric_tensor_type = config.metric_tensor
        _, shape = METRIC_PARAMETRIZATIONS[config.metric_tensor]
        self.metric = nn.Parameter(torch.empty(shape(self.num_heads, self.head_size)))
        self.scale = 1.0 / math.sqrt(self.head_size)

    def metric_tensor(self) -> torch.Tensor:
        """The metric `M` of every head: (h, e, e), symmetric."""
        build, _ = METRIC_PARAMETRIZATIONS[self.metric_tensor_type]
        return build(self.metric)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        precomputed: dict | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Metric attention has no position table (`precomputed` is accepted for the common interface)."""
        projected = self.p_proj(hidden_states)
        value = self._split_heads(projected)  # (b, h, n, e)
        key = self._split_heads(self.key_dropout(projected))
        query = (value @ self.metric_tensor()) * self.scale  # p_i^T M / sqrt(e)
        output, weights = self.attend(hidden_states, query, key, value, attention_mask, need_weights)
        return self.o_proj(self._merge_heads(output)), weights


ATTENTION_CLASSES = {"dot": NDRDotProductAttention, "metric": NDRMetricAttention}
# The position encodings handled here; "absolute" is added to the embeddings by the model.
POSITION_TERMS = ("direction", "relative", "gated", "none")

__all__ = [
    "NDRAttentionBase",
    "NDRDotProductAttention",
    "NDRMetricAttention",
    "ATTENTION_CLASSES",
    "ATTENTION_WEIGHT_FUNCTIONS",
    "FUSED_ATTENTION",
    "METRIC_PARAMETRIZATIONS",
    "attention",
    "concatenated_linear",
    "linear",
    "sinusoidal_encoding",
    "position_ids",
    "relative_key_index",
]
