"""Configuration of the Neural Data Router (Csordás, Irie & Schmidhuber, ICLR 2022)."""

import math
import numbers
from dataclasses import dataclass

from transformers import PreTrainedConfig


# Every allowed value of every choice-valued field is listed here and only here; the model keys its classes by them.
ATTENTION_TYPES = ("geometric",)
READOUTS = ("first", "last")
# Written into every saved config so that `trust_remote_code=True` can build any of the three auto classes from a
# folder, whichever model class saved it (transformers itself only records the saving class).
AUTO_MAP = {
    "AutoConfig": "configuration_ndr.NDRConfig",
    "AutoModel": "modeling_ndr.NDRModel",
    "AutoModelForSequenceClassification": "modeling_ndr.NDRForSequenceClassification",
}


def as_python_scalar(value):
    """numpy and 0-d torch scalars as the Python `bool`/`int`/`float` they hold (so configs stay JSON-serialisable);
    anything else unchanged."""
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    if type(value).__name__ == "Tensor" and hasattr(value, "item") and value.dim() == 0:
        return value.item()
    return value


# --------------------------------------------------------------------------------- declarative field validation


@dataclass(frozen=True)
class Integer:
    """An `int` (not a `bool`) of at least `minimum`; `None` too if `optional`."""

    minimum: int = 1
    optional: bool = False

    def problem(self, value) -> str | None:
        if value is None and self.optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < self.minimum:
            return f"expected {'None or ' if self.optional else ''}an integer >= {self.minimum}"
        return None


@dataclass(frozen=True)
class Number:
    """A finite real number (not a `bool`) in `[minimum, maximum]`, or `[minimum, maximum)` if `below_maximum`."""

    minimum: float = -math.inf
    maximum: float = math.inf
    below_maximum: bool = False
    above_minimum: bool = False

    def problem(self, value) -> str | None:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            return "expected a finite number"
        too_low = value <= self.minimum if self.above_minimum else value < self.minimum
        too_high = value >= self.maximum if self.below_maximum else value > self.maximum
        if too_low or too_high:
            low = "(" if self.above_minimum else "["
            high = ")" if self.below_maximum else "]"
            return f"expected a number in {low}{self.minimum:g}, {self.maximum:g}{high}"
        return None


@dataclass(frozen=True)
class Flag:
    def problem(self, value) -> str | None:
        return None if isinstance(value, bool) else "expected True or False"


@dataclass(frozen=True)
class OneOf:
    values: tuple

    def problem(self, value) -> str | None:
        return None if isinstance(value, str) and value in self.values else f"expected one of {self.values}"


PROBABILITY = Number(0.0, 1.0, below_maximum=True)

# The NDR's own fields and what each accepts; checked when a field is set, and all together by `validate()`.
FIELD_RULES = {
    "vocab_size": Integer(1),
    "hidden_size": Integer(1),
    "intermediate_size": Integer(1),
    "num_attention_heads": Integer(1),
    "num_hidden_layers": Integer(1),
    "eval_num_hidden_layers": Integer(1, optional=True),
    "hidden_dropout_prob": PROBABILITY,
    "attention_dropout": PROBABILITY,
    "gate_dropout": PROBABILITY,
    "gate_bias_init": Number(),
    "copy_gate": Flag(),
    "attention_type": OneOf(ATTENTION_TYPES),
    "normalize_attention": Flag(),
    "readout": OneOf(READOUTS),
    "layer_norm_eps": Number(0.0, above_minimum=True),
    "initializer_range": Number(0.0),
    "output_gates": Flag(),
}


def field_error(field: str, value, problem: str) -> ValueError:
    return ValueError(f"NDRConfig.{field}={value!r} is invalid: {problem}.")


def check_field(field: str, value):
    """`value` as a plain Python scalar if `field` accepts it, else a `ValueError` that names the field."""
    value = as_python_scalar(value)
    rule = FIELD_RULES.get(field)
    if rule is not None and (problem := rule.problem(value)) is not None:
        raise field_error(field, value, problem)
    return value


class NDRConfig(PreTrainedConfig):
    r"""
    Configuration of an [`NDRModel`]: one Transformer layer with geometric attention and a copy gate, applied
    `num_hidden_layers` times with shared weights (Universal-Transformer style).

    Every field is checked when it is set (also after construction and by `from_pretrained(..., field=value)`), and
    all fields together by `validate()`, which runs when a model is built and when the config is saved; a bad value
    raises a `ValueError` that names the field. numpy and 0-d torch scalars are accepted and stored as Python numbers.

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
            Which attention the layer uses. One of `ATTENTION_TYPES`.
        normalize_attention (`bool`, *optional*, defaults to `False`):
            L1-normalise each row of the geometric attention (only the "+geom. att." baseline does this).
        readout (`str`, *optional*, defaults to `"last"`):
            Column the classifier reads: `"first"` ([BOS]) or `"last"` ([EOS]).
        layer_norm_eps (`float`, *optional*, defaults to 1e-5):
            Epsilon of the layer norms.
        initializer_range (`float`, *optional*, defaults to 0.02):
            Standard deviation of the classifier's weight init.
        output_gates (`bool`, *optional*, defaults to `False`):
            Return every step's copy gate (like `output_attentions` / `output_hidden_states`).
    """

    model_type = "ndr"

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
        normalize_attention=False,
        readout="last",
        layer_norm_eps=1e-5,
        initializer_range=0.02,
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
        self.normalize_attention = normalize_attention
        self.readout = readout
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        self.output_gates = output_gates
        kwargs.setdefault("auto_map", dict(AUTO_MAP))
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)
        self.validate()

    def __setattr__(self, name, value):
        super().__setattr__(name, check_field(name, value))

    def validate(self):
        """Check every field and the rules between fields; raise a `ValueError` naming the field(s).

        Runs at construction, when a model is built from this config and when it is saved, so a config changed
        after construction cannot reach a model or a `config.json` unchecked."""
        super().validate()
        for field in FIELD_RULES:
            value = getattr(self, field)
            if (problem := FIELD_RULES[field].problem(value)) is not None:
                raise field_error(field, value, problem)
        if self.hidden_size % self.num_attention_heads != 0:
            raise field_error(
                "hidden_size", self.hidden_size, f"must be divisible by num_attention_heads={self.num_attention_heads}"
            )
        num_labels = self.num_labels
        if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
            raise field_error("num_labels", num_labels, "expected an integer >= 1")


__all__ = ["NDRConfig"]
