"""Loading pretrained weights into BertForPretraining.

Accepted sources, all as PyTorch state dicts:
- this project's own `model.state_dict()`;
- HuggingFace `BertForPreTraining` (`bert.encoder.layer.N.attention.self.query.weight`, ...);
- NVIDIA's MLPerf phase-1 `.pt` (HF names with `dense_act` for activation-fused linears, an
  optional `module.` prefix, the state dict under the `model` key).
Google's TF1 `gamma`/`beta` LayerNorm names are accepted too. The vocabulary is padded (or
trimmed of its padding) to the model's padded size; anything unmatched is an error that names it.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

from bert.model import BertForPretraining

# HF name (after normalization) -> ours; `{i}` is the layer index.
_LAYER_MAP = {
    "attention.output.dense": "attention.out",
    "attention.output.LayerNorm": "attention.layer_norm",
    "intermediate.dense": "ffn.intermediate",
    "output.dense": "ffn.output",
    "output.LayerNorm": "ffn.layer_norm",
}
_GLOBAL_MAP = {
    "bert.embeddings.word_embeddings.weight": "embeddings.word_embeddings.weight",
    "bert.embeddings.position_embeddings.weight": "embeddings.position_embeddings.weight",
    "bert.embeddings.token_type_embeddings.weight": "embeddings.token_type_embeddings.weight",
    "bert.embeddings.LayerNorm.weight": "embeddings.layer_norm.weight",
    "bert.embeddings.LayerNorm.bias": "embeddings.layer_norm.bias",
    "bert.pooler.dense.weight": "heads.pooler.weight",
    "bert.pooler.dense.bias": "heads.pooler.bias",
    "cls.predictions.bias": "heads.decoder_bias",
    "cls.predictions.transform.dense.weight": "heads.transform.weight",
    "cls.predictions.transform.dense.bias": "heads.transform.bias",
    "cls.predictions.transform.LayerNorm.weight": "heads.transform_layer_norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "heads.transform_layer_norm.bias",
    "cls.seq_relationship.weight": "heads.nsp.weight",
    "cls.seq_relationship.bias": "heads.nsp.bias",
}
# Entries that carry no information of their own (tied decoder, buffers).
_IGNORED = re.compile(r"(cls\.predictions\.decoder\.(weight|bias)|.*position_ids)$")
_LAYER_KEY = re.compile(r"bert\.encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")
_QKV = ("attention.self.query", "attention.self.key", "attention.self.value")


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message names the file and the tensor."""


def _normalize(name: str) -> str:
    name = name.removeprefix("module.")
    name = name.replace("dense_act", "dense")
    name = re.sub(r"\.gamma$", ".weight", name)
    return re.sub(r"\.beta$", ".bias", name)


def convert_hf_state_dict(hf_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """HF/NVIDIA-named tensors -> this model's names (Q, K, V fused into one `qkv`)."""
    state = {_normalize(k): v for k, v in hf_state.items()}
    ours: dict[str, torch.Tensor] = {}
    qkv_parts: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for name, tensor in state.items():
        if _IGNORED.match(name):
            continue
        if name in _GLOBAL_MAP:
            ours[_GLOBAL_MAP[name]] = tensor
            continue
        match = _LAYER_KEY.match(name)
        if match is None:
            raise CheckpointError(f"unexpected tensor {name!r} {tuple(tensor.shape)}")
        layer, module, kind = int(match[1]), match[2], match[3]
        if module in _QKV:
            qkv_parts.setdefault((layer, kind), {})[module] = tensor
        elif module in _LAYER_MAP:
            ours[f"layers.{layer}.{_LAYER_MAP[module]}.{kind}"] = tensor
        else:
            raise CheckpointError(f"unexpected tensor {name!r} {tuple(tensor.shape)}")
    for (layer, kind), parts in qkv_parts.items():
        missing = [m for m in _QKV if m not in parts]
        if missing:
            raise CheckpointError(f"layer {layer}: missing {missing} {kind}")
        ours[f"layers.{layer}.attention.qkv.{kind}"] = torch.cat([parts[m] for m in _QKV])
    return ours


def _fit_vocab(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """Pad with zeros (or drop padding rows) along dim 0 to the model's padded vocabulary."""
    if tensor.shape[0] >= rows:
        return tensor[:rows]
    pad = tensor.new_zeros((rows - tensor.shape[0], *tensor.shape[1:]))
    return torch.cat([tensor, pad])


def load_into_model(model: BertForPretraining, state: dict[str, torch.Tensor],
                    source: str = "state dict") -> None:
    """Copy `state` (any accepted naming) into `model`; every model tensor must be covered."""
    if any(k.startswith(("bert.", "cls.", "module.bert.")) for k in state):
        state = convert_hf_state_dict(state)
    rows = model.config.padded_vocab_size
    for name in ("embeddings.word_embeddings.weight", "heads.decoder_bias"):
        if name in state:
            state[name] = _fit_vocab(state[name], rows)
    state.pop("heads.decoder_weight", None)  # tied to the word embeddings
    expected = {k: v for k, v in model.state_dict().items() if k != "heads.decoder_weight"}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{source}: missing {missing[:8]}, unexpected {unexpected[:8]}")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(f"{source}: {name} has shape {tuple(tensor.shape)}, the model "
                                  f"expects {tuple(expected[name].shape)} (check model config)")
    with torch.no_grad():
        for name, tensor in state.items():
            expected[name].copy_(tensor)


def load_checkpoint_file(model: BertForPretraining, path: str) -> None:
    """Load a `.pt` file: a bare state dict, or one under a `model` key (NVIDIA, ours)."""
    if not Path(path).is_file():
        raise CheckpointError(f"checkpoint {path!r} does not exist")
    blob = torch.load(path, map_location="cpu", weights_only=True)
    state = blob.get("model", blob) if isinstance(blob, dict) else None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: expected a state dict or a dict with a 'model' key")
    load_into_model(model, dict(state), source=path)
