"""The unpadded BERT: its config, layers and heads (modeling.py), the functions its layers call
and their references (layer_functions.py), the fused kernels' records (fused.py), the attention
backends (attention.py) and weight import/export (weights.py).

The names below are imported when first used, not with the package: a fused op's record
(fused.py) can then be registered before ModelConfig, which declares one flag per record, is
built (tests/unit/test_registries.py registers one that way).
"""

from bert.core.lazy import module_getattr

_EXPORTS = {
    "ModelConfig": "bert.model.config",
    "BertForPretraining": "bert.model.modeling",
    "FeedForward": "bert.model.modeling",
    "mlm_correct": "bert.model.modeling",
    "num_parameters": "bert.model.modeling",
    "pretraining_loss": "bert.model.modeling",
}

__all__ = sorted(_EXPORTS)

__getattr__ = module_getattr(__name__, _EXPORTS)
