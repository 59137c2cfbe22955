"""The unpadded BERT: its config, layers and heads (modeling.py), the functions its layers call
and their references (layer_functions.py), the fused kernels' records (fused.py), the attention
backends (attention.py) and weight import/export (weights.py).

The names below are imported when first used, not with the package: a fused op's record
(fused.py) can then be registered before ModelConfig, which declares one flag per record, is
built (tests/unit/test_registries.py registers one that way).
"""

import importlib

_EXPORTS = {
    "ModelConfig": "bert.model.config",
    "BertForPretraining": "bert.model.modeling",
    "FeedForward": "bert.model.modeling",
    "mlm_correct": "bert.model.modeling",
    "num_parameters": "bert.model.modeling",
    "pretraining_loss": "bert.model.modeling",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bert.model' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
