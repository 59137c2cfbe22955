"""The unpadded BERT: its config, layers and heads (modeling.py), the fused-or-reference choice
of each op (fused.py), the attention backends (attention.py) and weight import/export
(weights.py)."""

from bert.model.config import ModelConfig
from bert.model.modeling import (
    BertForPretraining,
    FeedForward,
    mlm_correct,
    num_parameters,
    pretraining_loss,
)

__all__ = [
    "BertForPretraining",
    "FeedForward",
    "ModelConfig",
    "mlm_correct",
    "num_parameters",
    "pretraining_loss",
]
