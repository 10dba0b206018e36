"""Configuration of the Neural Data Router (Csordás, Irie & Schmidhuber, ICLR 2022)."""

from transformers import PreTrainedConfig

ATTENTION_TYPES = ("geometric",)
READOUTS = ("first", "last")
# Written into every saved config so that `trust_remote_code=True` can build any of the three auto classes from a
# folder, whichever model class saved it (transformers itself only records the saving class).
AUTO_MAP = {
    "AutoConfig": "configuration_ndr.NDRConfig",
    "AutoModel": "modeling_ndr.NDRModel",
    "AutoModelForSequenceClassification": "modeling_ndr.NDRForSequenceClassification",
}


class NDRConfig(PreTrainedConfig):
    r"""
    Configuration of an [`NDRModel`]: one Transformer layer with geometric attention and a copy gate, applied
    `num_hidden_layers` times with shared weights (Universal-Transformer style).

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
        kwargs.setdefault("auto_map", dict(AUTO_MAP))
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)
        self._validate_ndr()

    def _validate_ndr(self):
        """Raise a `ValueError` that names the field for any value the model cannot run with."""

        def fail(field, allowed):
            raise ValueError(f"NDRConfig.{field}={getattr(self, field)!r} is invalid: {allowed}.")

        for field in ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                fail(field, "expected an integer >= 1")
        steps = self.eval_num_hidden_layers
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            fail("eval_num_hidden_layers", "expected None or an integer >= 1")
        if self.hidden_size % self.num_attention_heads != 0:
            fail("hidden_size", f"must be divisible by num_attention_heads={self.num_attention_heads}")
        for field in ("hidden_dropout_prob", "attention_dropout", "gate_dropout"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                fail(field, "expected a probability in [0, 1)")
        if self.attention_type not in ATTENTION_TYPES:
            fail("attention_type", f"expected one of {ATTENTION_TYPES}")
        if self.readout not in READOUTS:
            fail("readout", f"expected one of {READOUTS}")
        for field in ("copy_gate", "normalize_attention"):
            if not isinstance(getattr(self, field), bool):
                fail(field, "expected True or False")
        if not isinstance(self.layer_norm_eps, (int, float)) or self.layer_norm_eps <= 0:
            fail("layer_norm_eps", "expected a number > 0")
        if not isinstance(self.gate_bias_init, (int, float)):
            fail("gate_bias_init", "expected a number")


__all__ = ["NDRConfig"]
