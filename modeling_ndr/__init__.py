"""ndr: the Neural Data Router for the Hugging Face ecosystem.

Importing this package registers `NDRConfig` and the NDR models with `AutoConfig`, `AutoModel` and
`AutoModelForSequenceClassification`, and makes `save_pretrained` write an `auto_map` (plus the modeling code) so a
saved model also loads with `trust_remote_code=True` where this package is not installed.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

from .configuration_ndr import NDRConfig
from .modeling_ndr import (
    NDRForSequenceClassification,
    NDRModel,
    NDRModelOutput,
    NDRPreTrainedModel,
    NDRSequenceClassifierOutput,
    geometric_attention_weights,
)
from .tasks import TASK_NAMES, ctl_tables, load_task, task_label_names, task_readout, task_vocabulary
from .tokenization_ndr import build_tokenizer, task_tokenizer

__version__ = "0.1.0"

AutoConfig.register("ndr", NDRConfig)
AutoModel.register(NDRConfig, NDRModel)
AutoModelForSequenceClassification.register(NDRConfig, NDRForSequenceClassification)
NDRConfig.register_for_auto_class()
NDRModel.register_for_auto_class("AutoModel")
NDRForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")

__all__ = [
    "NDRConfig",
    "NDRPreTrainedModel",
    "NDRModel",
    "NDRForSequenceClassification",
    "NDRModelOutput",
    "NDRSequenceClassifierOutput",
    "geometric_attention_weights",
    "TASK_NAMES",
    "load_task",
    "ctl_tables",
    "task_label_names",
    "task_readout",
    "task_vocabulary",
    "build_tokenizer",
    "task_tokenizer",
]
