"""Configuration of the Neural Data Router (Csordás, Irie & Schmidhuber, ICLR 2022).

The fields are checked by this file's own small rules (after the class), not by transformers' typed `@strict` fields:
those raise a multi-line error that is not a `ValueError`, and only transformers releases from 2026 on have them, while
this package allows any transformers 5.x and a `trust_remote_code` copy of this file runs under the user's version.
"""

import math
import numbers

from transformers import PreTrainedConfig

from .position_coupling import COUPLED_TASKS, COUPLING_WORDS


# Every allowed value of every choice-valued field is listed here and only here; the model keys its classes by them.
ATTENTION_TYPES = ("geometric", "softmax")  # how scores become weights
POSITION_ENCODINGS = ("direction", "absolute", "relative", "gated", "none")
ATTENTION_SCORES = ("dot", "metric")  # q.k, or p_i M p_j with one projection per head
METRIC_TENSORS = ("symmetric", "psd", "diagonal")  # how M is parametrised
HALTINGS = ("none", "act")
READOUTS = ("first", "last")
# How the weights start: the NDR release's init, or that of the paper's official code (RobertCsordas/ndr), per variant.
INIT_STYLES = ("ndr", "official")
# How the token embeddings start: N(0, 1) (PyTorch's default), Kaiming-normal or Xavier-uniform (the official sweeps'
# `embedding_init`).
EMBEDDING_INITS = ("normal", "kaiming", "xavier")
# ACT's ponder cost: N + R per column averaged over each sample's real columns, or the official code's mean remainder.
ACT_PONDER_COSTS = ("ndr", "official")
# Position encodings that metric attention supports: its one projection serves as query and key, which the
# Transformer-XL terms (separate content and position biases on the query) do not fit.
METRIC_POSITION_ENCODINGS = ("direction", "absolute", "none")
# Written into every saved config so that `trust_remote_code=True` can build any of the three auto classes from a
# folder, whichever model class saved it (transformers itself only records the saving class).
AUTO_MAP = {
    "AutoConfig": "configuration_ndr.NDRConfig",
    "AutoModel": "modeling_ndr.NDRModel",
    "AutoModelForSequenceClassification": "modeling_ndr.NDRForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_ndr.NDRForTokenClassification",
}


class NDRConfig(PreTrainedConfig):
    r"""
    Configuration of an [`NDRModel`]: one Transformer layer with geometric attention and a copy gate, applied
    `num_hidden_layers` times with shared weights (Universal-Transformer style).

    Every field is checked when it is set (also after construction and by `from_pretrained(..., field=value)`), and
    all fields together by `validate()`, which runs when a model is built and when the config is saved; a bad value
    raises a `ValueError` that names the field. numpy and 0-d torch scalars are accepted and stored as Python numbers.

    What computes the attention is not a field: it is chosen when a model is made or loaded, with transformers'
    `attn_implementation` (`"eager"`, the default: the fused CPU kernel where it builds; `"ndr_torch"`: PyTorch
    operations; `"ndr_triton"`: the Triton kernels on a GPU), and the weights do not depend on it.

    Args:
        vocab_size (`int`, *optional*, defaults to 16):
            Number of tokens the embedding knows.
        hidden_size (`int`, *optional*, defaults to 256):
            Width `d` of every column's state.
        intermediate_size (`int`, *optional*, defaults to 512):
            Inner width `d_ff` of the update feed-forward network.
        num_attention_heads (`int`, *optional*, defaults to 1):
            Heads of the geometric attention; must divide `hidden_size`.
        num_hidden_layers (`int`, *optional*, defaults to 14):
            Number of steps: how often the one shared layer is applied. `forward(num_steps=...)` overrides it.
        eval_num_hidden_layers (`int`, *optional*):
            Number of steps when the model is not training (evaluation, inference), if different: the paper's
            ListOps model trains with 20 steps and is evaluated with 24. `None` means `num_hidden_layers`.
        hidden_dropout_prob (`float`, *optional*, defaults to 0.1):
            Dropout after attention and inside the update and gate networks.
        attention_dropout (`float`, *optional*, defaults to 0.1):
            Dropout on the attention keys (never on the attention probabilities).
        gate_dropout (`float`, *optional*, defaults to 0.1):
            During training, the probability that a (sample, column) copy gate is forced shut (the column copies).
        gate_bias_init (`float`, *optional*, defaults to -3.0):
            Initial bias of the gate's output layer; sigmoid(-3) ≈ 0.05, so the layer starts by copying.
        copy_gate (`bool`, *optional*, defaults to `True`):
            Use the copy gate. Without it the layer is a plain post-LN Transformer layer (residual feed-forward).
        attention_type (`str`, *optional*, defaults to `"geometric"`):
            How scores become attention weights: `"geometric"` (sigmoid match probabilities, the closest match wins;
            no self-attention) or `"softmax"` (the Transformer's).
        position_encoding (`str`, *optional*, defaults to `"direction"`):
            Where position information comes from: `"direction"` (the NDR's per-query left/right logit terms),
            `"absolute"` (sinusoidal encodings added to the embeddings), `"relative"` (Transformer-XL relative
            attention), `"gated"` (a per-query, per-head gate between relative and absolute position terms, the
            paper's "+abs/rel" baseline) or `"none"`.
        relative_key_window (`int`, *optional*, defaults to 0):
            Relative position keys over the position ids (Shaw et al., 2018, clipped; here one set per head): each
            head adds `q_i . a_t` to its scores, `t = p_j - p_i` clipped to
            `[-w, w]`, with `p` the ids `forward(position_ids=...)` gives (by default each real token's index) and one
            learned key `a_t` per offset. With position coupling (the token tasks' `--position_coupling`) and
            `w = 1`, a blank finds the symbol that shares its id at any length. Added to the `position_encoding`
            term; 0: none.
        position_coupling (`str`, *optional*):
            `"copy"`, `"reverse"` or `"addition"`: where `forward` is given no `position_ids`, it computes the token
            task's coupled positions from `input_ids` (a symbol and the blank that answers it share an id;
            `modeling_ndr.position_coupling`), so that a model trained with `train.py --position_coupling` answers
            the same through the pipeline and the tokenizer, which give no position ids. Needs a model that reads
            position ids and `position_coupling_token_ids`. None: position ids are only what `forward` is given.
        position_coupling_token_ids (`dict`, *optional*):
            With `position_coupling`: the ids of the words the rule finds, `{"=": id}` (addition also `"+"`; the
            blank's, `"_"`, optional, checks the rows more closely).
        attention_scores (`str`, *optional*, defaults to `"dot"`):
            `"dot"`: `q_i . k_j`; `"metric"`: metric-tensor attention, one projection `p` per head serving as query,
            key and value, scores `p_i^T M p_j / sqrt(d_head)` with a learned symmetric `M` per head.
        metric_tensor (`str`, *optional*, defaults to `"symmetric"`):
            Parametrisation of `M` for metric scores: `"symmetric"` (`(C + C^T) / 2`), `"psd"` (`L L^T`) or
            `"diagonal"`; initialised to the identity.
        normalize_attention (`bool`, *optional*, defaults to `False`):
            L1-normalise each row of the geometric attention (only the "+geom. att." baseline does this).
        halting (`str`, *optional*, defaults to `"none"`):
            `"act"`: Adaptive Computation Time halting per column (Universal Transformer): each column stops when its
            cumulative halting probability passes `act_threshold`, and its output is the probability-weighted mix of
            its states; at most the step count of `num_steps` / `num_hidden_layers`.
        act_threshold (`float`, *optional*, defaults to 0.99):
            Cumulative halting probability at which a column halts (1 - epsilon of the ACT paper).
        act_ponder_weight (`float`, *optional*, defaults to 0.01):
            Weight tau of the ponder cost N + R added to the classification loss.
        act_halting_bias_init (`float`, *optional*, defaults to -3.0):
            Initial bias of the halting unit: sigmoid(-3) ≈ 0.05 per step, so no column halts early at the start.
        act_ponder_cost (`str`, *optional*, defaults to `"ndr"`):
            The ponder cost that `act_ponder_weight` weighs: `"ndr"` (N + R per column, averaged over each sample's
            real columns, then over the batch) or `"official"` (the official code's: the remainder R alone, averaged
            over every position of the batch, padding counting 0; N has no gradient, so the two differ in how columns
            are weighted).
        act_ut_variant (`bool`, *optional*, defaults to `False`):
            With ACT, the Universal Transformer's own variant (the official code's `ut_variant`): a column still
            running at the last step is not made to halt (its weights sum to less than 1), and each step's output
            replaces `(1 - w)` of the mix so far, `o <- (1 - w) o + w h`, instead of adding `w h`.
        act_update_halted (`bool`, *optional*, defaults to `False`):
            With ACT, keep applying the layer to columns that have halted, as the paper's release does: halting then
            only ends a column's contribution to its output, and a halted column still passes values on to the
            others, so only the read-out column's halting decides the prediction. `False`: a halted column's state
            is copied from then on (the Universal Transformer paper); the ponder cost then makes the columns that
            carry values along a chain halt before the values arrive.
        adaptive_steps (`bool`, *optional*, defaults to `False`):
            At inference (not in training), run each sample until its state stops changing (relative change of every
            real column below `adaptive_threshold`) instead of a fixed step count, at most `max_adaptive_steps`; a
            finished sample is frozen and dropped from the batch, so easy inputs cost less.
        adaptive_threshold (`float`, *optional*, defaults to 0.15):
            The largest relative state change, `||h_t - h_(t-1)|| / ||h_(t-1)||` over a sample's real columns, at
            which it is done. The state change, not the copy gates or the prediction, is the signal: the default was
            chosen with `benchmarks/adaptive_steps.py --study` (the docs' results pages hold the study).
        max_adaptive_steps (`int`, *optional*):
            The cap for `adaptive_steps`; `None` means twice `num_hidden_layers`.
        readout (`str`, *optional*, defaults to `"last"`):
            Column the classifier reads: `"first"` ([BOS]) or `"last"` ([EOS]).
        layer_norm_eps (`float`, *optional*, defaults to 1e-5):
            Epsilon of the layer norms.
        initializer_range (`float`, *optional*, defaults to 0.02):
            Standard deviation of the classifier's weight init (and of the halting unit's) with `init_style="ndr"`.
        init_style (`str`, *optional*, defaults to `"ndr"`):
            How the layers' weights start: `"ndr"` (the NDR release's init, which every released model was trained
            from) or `"official"` (as the paper's official code initialises the counterpart of each layer, per
            variant: Xavier with the head size as fan for geometric attention, PyTorch's default init for the
            direction and gate projections, the classifier, the halting unit, the softmax attentions' output and
            every bias but the copy gate's; the model docs list each choice). Needs `attention_scores="dot"` (the
            official code has no metric-tensor attention).
        embedding_init (`str`, *optional*, defaults to `"normal"`):
            How the token embeddings start: `"normal"` (N(0, 1), PyTorch's default), `"kaiming"` (Kaiming-normal,
            std sqrt(2 / hidden_size): the official sweeps of the CTL and arithmetic baselines) or `"xavier"`
            (Xavier-uniform: the official default of the relative-position baselines).
        embedding_dropout (`float`, *optional*, defaults to 0.0):
            Dropout on the input embeddings (after the absolute positions are added). The official baselines with
            absolute positions apply 0.1 there (their positional encoding's dropout); the others none.
        output_gates (`bool`, *optional*, defaults to `False`):
            Return every step's copy gate (like `output_attentions` / `output_hidden_states`).
    """

    model_type = "ndr"
    # per-sample step counts, not predictions: Trainer's evaluation leaves them out of `EvalPrediction.predictions`
    keys_to_ignore_at_inference = ["ponder_cost", "halting_steps", "num_steps_taken"]

    def __init__(
        self,
        vocab_size=16,
        hidden_size=256,
        intermediate_size=512,
        num_attention_heads=1,
        num_hidden_layers=14,
        eval_num_hidden_layers=None,
        hidden_dropout_prob=0.1,
        attention_dropout=0.1,
        gate_dropout=0.1,
        gate_bias_init=-3.0,
        copy_gate=True,
        attention_type="geometric",
        position_encoding="direction",
        relative_key_window=0,
        position_coupling=None,
        position_coupling_token_ids=None,
        attention_scores="dot",
        metric_tensor="symmetric",
        normalize_attention=False,
        halting="none",
        act_threshold=0.99,
        act_ponder_weight=0.01,
        act_halting_bias_init=-3.0,
        act_update_halted=False,
        adaptive_steps=False,
        adaptive_threshold=0.15,
        max_adaptive_steps=None,
        readout="last",
        layer_norm_eps=1e-5,
        initializer_range=0.02,
        init_style="ndr",
        embedding_init="normal",
        embedding_dropout=0.0,
        act_ponder_cost="ndr",
        act_ut_variant=False,
        output_gates=False,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_attention_heads = num_attention_heads
        self.num_hidden_layers = num_hidden_layers
        self.eval_num_hidden_layers = eval_num_hidden_layers
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_dropout = attention_dropout
        self.gate_dropout = gate_dropout
        self.gate_bias_init = gate_bias_init
        self.copy_gate = copy_gate
        self.attention_type = attention_type
        self.position_encoding = position_encoding
        self.relative_key_window = relative_key_window
        self.position_coupling = position_coupling
        self.position_coupling_token_ids = position_coupling_token_ids
        self.attention_scores = attention_scores
        self.metric_tensor = metric_tensor
        self.normalize_attention = normalize_attention
        self.halting = halting
        self.act_threshold = act_threshold
        self.act_ponder_weight = act_ponder_weight
        self.act_halting_bias_init = act_halting_bias_init
        self.act_update_halted = act_update_halted
        self.adaptive_steps = adaptive_steps
        self.adaptive_threshold = adaptive_threshold
        self.max_adaptive_steps = max_adaptive_steps
        self.readout = readout
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        self.init_style = init_style
        self.embedding_init = embedding_init
        self.embedding_dropout = embedding_dropout
        self.act_ponder_cost = act_ponder_cost
        self.act_ut_variant = act_ut_variant
        self.output_gates = output_gates
        kwargs.setdefault("auto_map", dict(AUTO_MAP))
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)
        self.validate()

    @property
    def reads_position_ids(self) -> bool:
        """Whether the model reads `forward(position_ids=...)`: absolute encodings or relative position keys."""
        return self.position_encoding == "absolute" or self.relative_key_window > 0

    def __setattr__(self, name, value):
        super().__setattr__(name, check_field(name, value))

    def validate(self):
        """Check every field and the rules between fields; raise a `ValueError` naming the field(s).

        Runs at construction, when a model is built from this config and when it is saved, so a config changed
        after construction cannot reach a model or a `config.json` unchecked."""
        super().validate()
        for field in FIELD_RULES:
            value = getattr(self, field)
            if (problem := FIELD_RULES[field](value)) is not None:
                raise field_error(field, value, problem)
        if self.hidden_size % self.num_attention_heads != 0:
            raise field_error(
                "hidden_size", self.hidden_size, f"must be divisible by num_attention_heads={self.num_attention_heads}"
            )
        for fields, allowed, reason in COMBINATION_RULES:
            if not allowed(self):
                values = " with ".join(f"NDRConfig.{field}={getattr(self, field)!r}" for field in fields)
                raise ValueError(f"{values} is invalid: {reason}.")
        num_labels = self.num_labels
        if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
            raise field_error("num_labels", num_labels, "expected an integer >= 1")


# ------------------------------------------------------------------------------------------------------ validation
# A rule takes a value and returns None if the field accepts it, else what was expected.


def _integer(minimum: int = 1, optional: bool = False):
    expected = f"expected {'None or ' if optional else ''}an integer >= {minimum}"

    def problem(value):
        if value is None and optional:
            return None
        return None if isinstance(value, int) and not isinstance(value, bool) and value >= minimum else expected

    return problem


def _number(low: float = -math.inf, high: float = math.inf, open_low: bool = False, open_high: bool = False):
    """A finite real number in [low, high]; `open_low` / `open_high` leave that end out."""
    interval = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"

    def problem(value):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            return "expected a finite number"
        too_low = value <= low if open_low else value < low
        too_high = value >= high if open_high else value > high
        return f"expected a number in {interval}" if too_low or too_high else None

    return problem


def _flag(value):
    return None if isinstance(value, bool) else "expected True or False"


def _one_of(values: tuple):
    return lambda value: None if isinstance(value, str) and value in values else f"expected one of {values}"


def _token_ids(value):
    if value is None:
        return None
    ids = value.values() if isinstance(value, dict) else [None]
    good = all(isinstance(word, str) for word in value) and all(type(i) is int and i >= 0 for i in ids)
    return None if good else "expected None or a dict of words to token ids, such as {'=': 5}"


_PROBABILITY = _number(0.0, 1.0, open_high=True)

# The NDR's own fields and what each accepts; checked when a field is set, and all together by `validate()`.
FIELD_RULES = {
    "vocab_size": _integer(),
    "hidden_size": _integer(),
    "intermediate_size": _integer(),
    "num_attention_heads": _integer(),
    "num_hidden_layers": _integer(),
    "eval_num_hidden_layers": _integer(optional=True),
    "hidden_dropout_prob": _PROBABILITY,
    "attention_dropout": _PROBABILITY,
    "gate_dropout": _PROBABILITY,
    "gate_bias_init": _number(),
    "copy_gate": _flag,
    "attention_type": _one_of(ATTENTION_TYPES),
    "position_encoding": _one_of(POSITION_ENCODINGS),
    "relative_key_window": _integer(minimum=0),
    "position_coupling": lambda value: None if value is None else _one_of(COUPLED_TASKS)(value),
    "position_coupling_token_ids": _token_ids,
    "attention_scores": _one_of(ATTENTION_SCORES),
    "metric_tensor": _one_of(METRIC_TENSORS),
    "normalize_attention": _flag,
    "halting": _one_of(HALTINGS),
    "act_threshold": _number(0.0, 1.0, open_low=True),
    "act_ponder_weight": _number(0.0),
    "act_halting_bias_init": _number(),
    "act_update_halted": _flag,
    "adaptive_steps": _flag,
    "adaptive_threshold": _number(0.0, open_low=True),
    "max_adaptive_steps": _integer(optional=True),
    "readout": _one_of(READOUTS),
    "layer_norm_eps": _number(0.0, open_low=True),
    "initializer_range": _number(0.0),
    "init_style": _one_of(INIT_STYLES),
    "embedding_init": _one_of(EMBEDDING_INITS),
    "embedding_dropout": _PROBABILITY,
    "act_ponder_cost": _one_of(ACT_PONDER_COSTS),
    "act_ut_variant": _flag,
    "output_gates": _flag,
}

# Combinations that make no sense: (the fields involved, a test the config must pass, why).
COMBINATION_RULES = (
    (
        ("normalize_attention", "attention_type"),
        lambda c: not c.normalize_attention or c.attention_type == "geometric",
        "normalize_attention applies to geometric attention only (softmax rows already sum to 1)",
    ),
    (
        ("attention_scores", "position_encoding"),
        lambda c: c.attention_scores == "dot" or c.position_encoding in METRIC_POSITION_ENCODINGS,
        f"metric scores use one projection as query and key; they support position_encoding in "
        f"{METRIC_POSITION_ENCODINGS}",
    ),
    (
        ("relative_key_window", "attention_scores"),
        lambda c: c.relative_key_window == 0 or c.attention_scores == "dot",
        "relative position keys are added to a query's scores; metric scores have no query of their own",
    ),
    (
        ("position_coupling", "position_encoding", "relative_key_window"),
        lambda c: c.position_coupling is None or c.reads_position_ids,
        "coupled positions are read by position_encoding='absolute' or relative position keys (relative_key_window "
        ">= 1); this model would not read them",
    ),
    (
        ("position_coupling", "position_coupling_token_ids"),
        lambda c: set(COUPLING_WORDS.get(c.position_coupling, ())) <= set(c.position_coupling_token_ids or {}),
        "the rule finds the words of the task's rows by their ids: give {'=': id} (addition: also '+')",
    ),
    (
        ("halting", "adaptive_steps"),
        lambda c: not (c.halting == "act" and c.adaptive_steps),
        "ACT already chooses the number of steps per column; use one of the two",
    ),
    (
        ("init_style", "attention_scores"),
        lambda c: c.init_style == "ndr" or c.attention_scores == "dot",
        "the official code has no metric-tensor attention, so there is no official init of it",
    ),
)


def as_python_scalar(value):
    """numpy and 0-d torch scalars as the Python `bool`/`int`/`float` they hold (so configs stay JSON-serialisable);
    anything else unchanged."""
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    if type(value).__name__ == "Tensor" and hasattr(value, "item") and value.dim() == 0:
        return value.item()
    return value


def field_error(field: str, value, problem: str) -> ValueError:
    return ValueError(f"NDRConfig.{field}={value!r} is invalid: {problem}.")


def check_field(field: str, value):
    """`value` as a plain Python scalar if `field` accepts it, else a `ValueError` that names the field."""
    value = as_python_scalar(value)
    rule = FIELD_RULES.get(field)
    if rule is not None and (problem := rule(value)) is not None:
        raise field_error(field, value, problem)
    return value


__all__ = ["NDRConfig"]
