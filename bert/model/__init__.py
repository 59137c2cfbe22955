"""The unpadded BERT: its config, layers and heads (modeling.py), the functions its layers call
and their references (layer_functions.py), the fused kernels' records (fused.py), the attention
backends (attention.py) and weight import/export (weights.py).

The names below are imported when first used, not with the package: a fused op's record
(fused.py) can then be registered before ModelConfig, which declares one flag per record, is
built (tests/unit/test_registries.py registers one that way).
"""

from bert.core.lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "bert.model.config": ("ModelConfig",),
        "bert.model.modeling": (
            "BertForPretraining",
            "FeedForward",
            "mlm_correct",
            "num_parameters",
            "pretraining_loss",
        ),
    },
)
