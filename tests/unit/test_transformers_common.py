"""transformers' own common model tests (`ModelTesterMixin`, from its source distribution: tests/transformers_suite.py)
on the three NDR classes, as a model inside transformers runs them: save/load, initialisation, output shapes and
hidden states, attention outputs, head masking, training and gradient checkpointing, `from_pretrained` with
`ignore_mismatched_sizes`, resizing the embeddings, dtypes, `torch.compile`-free inference paths and more (about 80
tests and 800 subtests per model option; what a model lacks, such as SDPA, RoPE or experts, the mixin skips itself).

Every model variant of `configuration/variants/` runs the whole mixin with its model fields (the NDR, ACT halting,
metric-tensor attention, the Universal Transformer and the paper's other baselines, the official initialisation
among them), each with three seeds. Adaptive steps at inference do not: they run as many steps as the input needs (up
to `max_adaptive_steps`), and the mixin expects one hidden state and attention map per `num_hidden_layers`;
tests/unit/test_adaptive_computation.py tests them against fixed steps."""

import io
import sys
import tarfile
import unittest
from pathlib import Path
from unittest import mock

import pytest
import torch
from transformers.models.auto import modeling_auto
from transformers_suite import missing_reason, prepare, suite_root

from modeling_ndr import NDRConfig, NDRForSequenceClassification, NDRForTokenClassification, NDRModel
from modeling_ndr.training.presets import read_variant


REASON = missing_reason()
if REASON is None:
    sys.path.insert(0, str(suite_root()))
    from transformers_tests.test_modeling_common import ModelTesterMixin, ids_tensor, random_attention_mask
else:  # the module still collects (a `-m gpu` run imports it too); the test below fails and says why
    ModelTesterMixin, ids_tensor, random_attention_mask = object, None, None


def test_prepare_unpacks_the_common_tests_and_the_two_modules_the_source_distribution_lacks(tmp_path):
    sdist = tmp_path / "transformers-9.9.9.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for module in ("test_modeling_common.py", "test_configuration_common.py"):
            data = f"# {module}\n".encode()
            member = tarfile.TarInfo(f"transformers-9.9.9/tests/{module}")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    package = prepare(tmp_path / "suite", "9.9.9", sdist)
    assert (package / "test_modeling_common.py").read_text() == "# test_modeling_common.py\n"
    assert (package / "VERSION").read_text().strip() == "9.9.9"
    for module, mixin in (("exporters/test_export.py", "ExportTesterMixin"),
                          ("generation/test_utils.py", "GenerationTesterMixin")):  # fmt: skip
        assert f"class {mixin}:" in (package / module).read_text()
        assert (package / module).parent.joinpath("__init__.py").is_file()
    with pytest.raises(FileNotFoundError, match=r"transformers-9\.9\.8/tests/test_modeling_common\.py"):
        prepare(tmp_path / "other", "9.9.8", sdist)


def test_transformers_common_model_tests_are_unpacked():
    assert REASON is None, f"{REASON}: run `make setup` (or `python tests/transformers_suite.py`) to unpack them"


# where transformers looks a model's classes up by name to choose its labels and to leave the headless model out of
# the training tests: the NDR's names, as a model in the library has them
NDR_MAPPINGS = {
    "MODEL_MAPPING_NAMES": NDRModel,
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": NDRForSequenceClassification,
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": NDRForTokenClassification,
}


class NDRModelTester:
    """Builds the tiny config and the inputs the mixin asks for (padded rows: a random attention mask)."""

    def __init__(self, parent, options: dict, batch_size=3, seq_length=7, vocab_size=99):
        self.parent, self.options = parent, options
        self.batch_size, self.seq_length, self.vocab_size = batch_size, seq_length, vocab_size
        self.hidden_size, self.num_attention_heads, self.num_hidden_layers = options.get("hidden_size", 16), 2, 2
        self.num_labels = 3
        self.is_training = True

    def get_config(self) -> NDRConfig:
        values = dict(vocab_size=self.vocab_size, intermediate_size=24,
                      num_attention_heads=self.num_attention_heads, num_hidden_layers=self.num_hidden_layers,
                      num_labels=self.num_labels, hidden_dropout_prob=0.0, attention_dropout=0.0,
                      gate_dropout=0.0)  # fmt: skip
        return NDRConfig(**{**values, "hidden_size": self.hidden_size, **self.options})

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        attention_mask = random_attention_mask([self.batch_size, self.seq_length])
        return self.get_config(), {"input_ids": input_ids, "attention_mask": attention_mask}


class NDRCommonTests(ModelTesterMixin):
    all_model_classes = (NDRModel, NDRForSequenceClassification, NDRForTokenClassification)
    test_resize_embeddings = True
    # the mixin runs this check only for models it dates from 2023 on (a copyright line), or with this flag
    test_can_init_all_missing_weights_before_2023 = True
    options: dict = {}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._mappings = [
            mock.patch.dict(getattr(modeling_auto, name), {"ndr": model_class.__name__})
            for name, model_class in NDR_MAPPINGS.items()
        ]
        for patch in cls._mappings:
            patch.start()

    @classmethod
    def tearDownClass(cls):
        for patch in cls._mappings:
            patch.stop()
        super().tearDownClass()

    def setUp(self):
        self.model_tester = NDRModelTester(self, self.options)

    def test_the_options_are_in_the_models_config(self):
        """The mixin ran on the model option this class names, not on the default NDR."""
        config = self.model_tester.get_config()
        for name, value in self.options.items():
            self.assertEqual(getattr(config, name), value)
        model = NDRForTokenClassification(config).eval()
        inputs = self.model_tester.prepare_config_and_inputs_for_common()[1]
        with torch.no_grad():
            self.assertEqual(model(**inputs).logits.shape, (3, 7, 3))


# Every model variant of configuration/variants/ (its model fields: attention, positions, gate, halting, init style),
# with three seeds for the weights and the inputs (transformers' checks of a new head's init depend on the draw).
VARIANTS_DIR = Path(__file__).resolve().parents[2] / "configuration" / "variants"
VARIANTS = sorted(path.stem for path in VARIANTS_DIR.glob("*.yaml"))
SEEDS = (0, 1, 2)


def variant_test_class(variant: str, seed: int) -> type:
    options = read_variant(variant)
    if options.get("init_style") == "official":
        # PyTorch's own init of the classifier (the official code's): U(+-1/sqrt(hidden_size)) for its bias, whose mean
        # over the 3 labels transformers' new-head check bounds by 0.1; 1/sqrt(128) < 0.1 bounds it for every draw
        options["hidden_size"] = 128

    def setUp(self):
        torch.manual_seed(seed)
        NDRCommonTests.setUp(self)

    name = f"{''.join(part.title() for part in variant.split('_'))}Seed{seed}Test"
    return type(name, (NDRCommonTests, unittest.TestCase), {"options": options, "setUp": setUp, "seed": seed})


globals().update(
    {test_class.__name__: test_class for test_class in (variant_test_class(v, s) for v in VARIANTS for s in SEEDS)}
)


def test_every_variant_runs_the_common_tests():
    assert set(VARIANTS) >= {"ndr", "ndr_act", "ndr_metric", "transformer_act", "absrel_gate"}, VARIANTS
    classes = [value for value in globals().values() if isinstance(value, type) and issubclass(value, NDRCommonTests)]
    assert len(classes) == len(VARIANTS) * len(SEEDS) + 1, "one test class per variant and seed"
