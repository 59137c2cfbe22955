"""Names and paths of the compiled extension, shared by the loader and the build."""
from __future__ import annotations

import os
from pathlib import Path

LIB_NAME = "bert_kernels_cuda"  # also the torch.ops namespace of the raw C++ ops
OPS = ("bias_dropout_residual_layernorm", "embedding_backward", "softmax_cross_entropy",
       "dense", "lamb")
RAW_OPS = ("bdrln_forward", "bdrln_backward", "embedding_backward", "softmax_cross_entropy",
           "softmax_cross_entropy_backward", "dense_forward", "dense_dgrad", "dense_wgrad",
           "lamb_sums", "lamb_update", "lamb_apply")
DEFAULT_BUILD_DIR = Path(__file__).resolve().parent.parent / "build" / "kernels"


def library_path(build_dir: str | os.PathLike = DEFAULT_BUILD_DIR) -> Path:
    return Path(build_dir) / f"{LIB_NAME}.so"


def registered_ops() -> list[str]:
    """The raw ops the loaded library registered (after a build or torch.ops.load_library)."""
    import torch

    namespace = getattr(torch.ops, LIB_NAME)
    return [name for name in RAW_OPS if hasattr(namespace, name)]
