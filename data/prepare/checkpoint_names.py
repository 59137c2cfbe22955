"""Name mappings for the phase-1 checkpoint: Google TF1 -> HF, and this model -> HF.

HF `BertForPreTraining` names are the hub: bert/checkpoint.py maps HF (and NVIDIA) names to ours,
this module maps TF1 names to HF (so the same loader takes them) and ours back to HF (export).

TF1 names (Google's modeling.py / run_pretraining.py), e.g.
    bert/embeddings/word_embeddings                     -> bert.embeddings.word_embeddings.weight
    bert/encoder/layer_3/attention/self/query/kernel    -> ...layer.3.attention.self.query.weight
    bert/encoder/layer_3/output/LayerNorm/gamma         -> ...layer.3.output.LayerNorm.weight
    cls/predictions/output_bias                         -> cls.predictions.bias
    cls/seq_relationship/output_weights                 -> cls.seq_relationship.weight
`kernel`s are [in, out] in TF and are transposed to torch's [out, in]; `output_weights` is
already [2, hidden]. Optimizer slots (.../adam_m, .../adam_v, LAMB state) and counters
(global_step, loss-scale variables) are not model weights and are skipped.
"""
from __future__ import annotations

import re
from typing import Mapping

import numpy as np
import torch

# Importing the loader's private tables keeps one source of truth for the HF <-> ours names.
# (Suggested move: this export into bert/checkpoint.py as `to_hf_state_dict`.)
from bert.checkpoint import _GLOBAL_MAP, _LAYER_MAP, _QKV, CheckpointError

# TF leaf name -> (HF leaf name, transpose?)
_TF_LEAVES = {
    "kernel": ("weight", True),
    "bias": ("bias", False),
    "gamma": ("weight", False),
    "beta": ("bias", False),
    "output_weights": ("weight", False),
    "output_bias": ("bias", False),
}
_TF_EMBEDDINGS = ("word_embeddings", "position_embeddings", "token_type_embeddings")
_TF_LAYER = re.compile(r"layer_(\d+)$")


def tf_to_hf_name(tf_name: str) -> tuple[str, bool] | None:
    """(HF name, transpose?) of a TF1 variable, or None for a non-weight (optimizer, counter)."""
    parts = tf_name.split("/")
    if parts[0] not in ("bert", "cls") or len(parts) < 2:
        return None
    leaf = parts[-1]
    if leaf in _TF_EMBEDDINGS:
        return ".".join(parts) + ".weight", False
    if leaf not in _TF_LEAVES:
        return None
    hf_leaf, transpose = _TF_LEAVES[leaf]
    middle = [_TF_LAYER.sub(r"layer.\1", p) for p in parts[:-1]]
    return ".".join(middle + [hf_leaf]), transpose


def tf_to_hf_state_dict(arrays: Mapping[str, np.ndarray]) -> tuple[dict[str, torch.Tensor],
                                                                    list[str]]:
    """TF1 variables (name -> numpy array) -> (HF-named tensors, skipped TF names)."""
    state, skipped = {}, []
    for name, value in arrays.items():
        mapped = tf_to_hf_name(name)
        if mapped is None:
            skipped.append(name)
            continue
        hf_name, transpose = mapped
        tensor = torch.from_numpy(np.ascontiguousarray(value.T if transpose else value))
        state[hf_name] = tensor.float()
    return state, sorted(skipped)


def to_hf_state_dict(state: Mapping[str, torch.Tensor], vocab_size: int) -> dict[str, torch.Tensor]:
    """This model's state dict -> HF BertForPreTraining's, complete for load_state_dict(strict).

    Q, K and V are split out of the fused `qkv`, the vocabulary padding rows are dropped, and
    the tied decoder entries HF lists (`cls.predictions.decoder.weight/bias`) are filled in.
    """
    to_hf_global = {ours: hf for hf, ours in _GLOBAL_MAP.items()}
    to_hf_layer = {ours: hf for hf, ours in _LAYER_MAP.items()}
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        name = name.removeprefix("module.")
        if name == "heads.decoder_weight":
            continue  # tied to the word embeddings
        if name in to_hf_global:
            out[to_hf_global[name]] = tensor
            continue
        match = re.fullmatch(r"layers\.(\d+)\.(.+)\.(weight|bias)", name)
        if match is None:
            raise CheckpointError(f"cannot export tensor {name!r} to HF names")
        layer, module, kind = match.groups()
        prefix = f"bert.encoder.layer.{layer}"
        if module == "attention.qkv":
            for hf_module, part in zip(_QKV, tensor.chunk(3)):
                out[f"{prefix}.{hf_module}.{kind}"] = part
        elif module in to_hf_layer:
            out[f"{prefix}.{to_hf_layer[module]}.{kind}"] = tensor
        else:
            raise CheckpointError(f"cannot export tensor {name!r} to HF names")
    for name in ("bert.embeddings.word_embeddings.weight", "cls.predictions.bias"):
        out[name] = out[name][:vocab_size]
    out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"]
    out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return {k: v.detach().clone().contiguous() for k, v in out.items()}
