"""Parameter groups for LAMB: weight decay off for biases and LayerNorm (REFERENCE.md 1)."""

from __future__ import annotations

import torch

# A parameter whose name contains any of these gets neither weight decay nor the trust ratio.
NO_DECAY_MARKERS = ("LayerNorm", "layer_norm", "bias")


def is_no_decay(name: str) -> bool:
    """True for biases and LayerNorm parameters (by name, as the reference does)."""
    return any(marker in name for marker in NO_DECAY_MARKERS)


def _layer_norm_param_ids(model: torch.nn.Module) -> set[int]:
    """ids of parameters owned by nn.LayerNorm modules, whatever their names."""
    return {
        id(p)
        for m in model.modules()
        if isinstance(m, torch.nn.LayerNorm)
        for p in m.parameters(recurse=False)
    }


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: [decay (weight_decay), no-decay (0.0)], each with a `names` list.

    No-decay: names containing LayerNorm / layer_norm / bias (the reference rule), plus, as a
    safety net for modules not named like Google's BERT, parameters of any nn.LayerNorm.
    Tied or shared parameters appear once (named_parameters drops duplicates, keeping the first
    name). Frozen parameters (requires_grad False) are left out. Both groups are always present,
    possibly empty, so group indices are stable.
    """
    ln_ids = _layer_norm_param_ids(model)
    decay: dict[str, torch.nn.Parameter] = {}
    no_decay: dict[str, torch.nn.Parameter] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            skip = is_no_decay(name) or id(p) in ln_ids
            (no_decay if skip else decay)[name] = p
    return [
        {"params": list(decay.values()), "names": list(decay), "weight_decay": weight_decay},
        {"params": list(no_decay.values()), "names": list(no_decay), "weight_decay": 0.0},
    ]
