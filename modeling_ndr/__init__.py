"""ndr: the Neural Data Router for the Hugging Face ecosystem.

Importing this package registers `NDRConfig` and the NDR models with `AutoConfig`, `AutoModel`,
`AutoModelForSequenceClassification` and `AutoModelForTokenClassification`, and makes `save_pretrained` write an
`auto_map` (plus the modeling code) so a saved model also loads with `trust_remote_code=True` where this package is
not installed.

The package holds what a hub model folder holds (configuration, modeling, tokenization) and its registration; the
paper's tasks (`modeling_ndr.tasks`, which needs `datasets`) and the routing plot (`modeling_ndr.plotting`, which needs
matplotlib) are imported only when one of their names is used, so `import modeling_ndr` imports neither.
"""

import importlib

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from .configuration_ndr import NDRConfig
from .modeling_ndr import (
    NDRForSequenceClassification,
    NDRForTokenClassification,
    NDRModel,
    NDRModelOutput,
    NDRPreTrainedModel,
    NDRSequenceClassifierOutput,
    NDRTokenClassifierOutput,
    geometric_attention_weights,
)
from .tokenization_ndr import NDRTokenizerFast, UnknownWordsError, build_tokenizer, extend_tokenizer


__version__ = "0.3.0"

AutoConfig.register("ndr", NDRConfig)
AutoModel.register(NDRConfig, NDRModel)
AutoModelForSequenceClassification.register(NDRConfig, NDRForSequenceClassification)
AutoModelForTokenClassification.register(NDRConfig, NDRForTokenClassification)
AutoTokenizer.register(NDRConfig, fast_tokenizer_class=NDRTokenizerFast)
NDRConfig.register_for_auto_class()
NDRModel.register_for_auto_class("AutoModel")
NDRForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
NDRForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")

# name -> submodule, imported on first use (PEP 562)
_LAZY_NAMES = {
    "TASK_NAMES": "tasks",
    "load_task": "tasks",
    "ctl_tables": "tasks",
    "task_label_names": "tasks",
    "task_readout": "tasks",
    "task_vocabulary": "tasks",
    "task_tokenizer": "tasks",
    "TOKEN_TASK_NAMES": "tasks",
    "load_token_task": "tasks",
    "token_task_tokenizer": "tasks",
    "plot_routing": "plotting",
}


def __getattr__(name):
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY_NAMES))


__all__ = [
    "NDRConfig",
    "NDRPreTrainedModel",
    "NDRModel",
    "NDRForSequenceClassification",
    "NDRForTokenClassification",
    "NDRModelOutput",
    "NDRSequenceClassifierOutput",
    "NDRTokenClassifierOutput",
    "geometric_attention_weights",
    "NDRTokenizerFast",
    "UnknownWordsError",
    "build_tokenizer",
    "extend_tokenizer",
    *_LAZY_NAMES,
]
