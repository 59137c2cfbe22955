"""Weight import and export of BertForPretraining: the one place that knows the name tables.

Import (`load_checkpoint_file`, `load_into_model`); accepted sources, as PyTorch `.pt`/`.bin`
files or HF `.safetensors` files (read with the safetensors package when it is installed):
- this project's own `model.state_dict()`;
- HuggingFace `BertForPreTraining` (`bert.encoder.layer.N.attention.self.query.weight`, ...);
- NVIDIA's MLPerf phase-1 `.pt` (HF names with `dense_act` for activation-fused linears, an
  optional `module.` prefix, the state dict under the `model` key).
Google's TF1 `gamma`/`beta` LayerNorm names are accepted too. The vocabulary is padded (or
trimmed of its padding) to the model's padded size; anything unmatched is an error that names it.

A file that is no such checkpoint (random bytes, a truncated archive, a FIFO, tensors of the
wrong shape, a dtype that is not floating point, sparse or meta tensors, NaN or infinite
weights, missing or extra names) is one CheckpointError naming the file: bad input, exit 2.

HF `BertForPreTraining` names are the hub: HF (and NVIDIA) names map to ours for import
(`convert_hf_state_dict`), ours back to HF for export (`to_hf_state_dict`), and TF1 names to HF
(`tf_to_hf_state_dict`), so the same loader takes them (scripts/convert_checkpoint.py).

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
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import numpy as np
import torch

from bert.core.checkpoint_files import MANIFEST, TRAINER_FILE
from bert.core.errors import CheckpointError, install_hint
from bert.core.inputs import check_path, read_regular

if TYPE_CHECKING:  # the model imports nothing from here; only the annotations name it
    from bert.model.modeling import BertForPretraining

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
# what a checkpoint's weights may be stored as; each is copied into the model's own dtype
WEIGHT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
# Entries that carry no information of their own (tied decoder, buffers).
_IGNORED = re.compile(r"(cls\.predictions\.decoder\.(weight|bias)|.*position_ids)$")
_LAYER_KEY = re.compile(r"bert\.encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")
_QKV = ("attention.self.query", "attention.self.key", "attention.self.value")


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
        shapes = {m: tuple(parts[m].shape) for m in _QKV}
        if len(set(shapes.values())) > 1 or len(shapes[_QKV[0]]) != (2 if kind == "weight" else 1):
            raise CheckpointError(f"layer {layer}: query, key and value {kind} shapes {shapes}")
        ours[f"layers.{layer}.attention.qkv.{kind}"] = torch.cat([parts[m] for m in _QKV])
    return ours


def _fit_vocab(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """Pad with zeros (or drop padding rows) along dim 0 to the model's padded vocabulary."""
    if tensor.shape[0] >= rows:
        return tensor[:rows]
    pad = tensor.new_zeros((rows - tensor.shape[0], *tensor.shape[1:]))
    return torch.cat([tensor, pad])


def load_into_model(
    model: "BertForPretraining", state: dict[str, torch.Tensor], source: str = "state dict"
) -> None:
    """Copy `state` (any accepted naming) into `model`; every model tensor must be covered."""
    check_tensors(state, source)
    if any(k.startswith(("bert.", "cls.", "module.bert.")) for k in state):
        try:
            state = convert_hf_state_dict(state)
        except CheckpointError as err:
            raise CheckpointError(f"{source}: {err}") from None
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
            raise CheckpointError(
                f"{source}: {name} has shape {tuple(tensor.shape)}, the model "
                f"expects {tuple(expected[name].shape)} (check model config)"
            )
    with torch.no_grad():
        for name, tensor in state.items():
            expected[name].copy_(tensor)


def check_tensors(state: Mapping[str, object], source: str) -> None:
    """CheckpointError naming `source` and the tensor unless every value is a dense,
    floating-point tensor with data, of at least one dimension, and finite: anything else would
    fail deep inside the copy, or be cast without a word (integers, booleans, complex) and
    train from garbage (NaN, infinity). (8-bit floats are no checkpoint's weights here.)
    Entries the import skips (HF's int64 position_ids buffer) are not weights: not checked."""
    for name, tensor in state.items():
        if _IGNORED.match(_normalize(name)):
            continue
        where = f"{source}: {name}"
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"{where} is a {type(tensor).__name__}, not a tensor")
        if tensor.layout != torch.strided:
            raise CheckpointError(f"{where} is a {tensor.layout} tensor, not a dense one")
        if tensor.is_meta:
            raise CheckpointError(f"{where} is a meta tensor: a shape without data")
        if tensor.dtype not in WEIGHT_DTYPES:
            raise CheckpointError(
                f"{where} has dtype {tensor.dtype}; weights are float32, float16, bfloat16 "
                "or float64"
            )
        if tensor.dim() == 0:
            raise CheckpointError(f"{where} is a scalar; weights have at least one dimension")
        if not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{where} holds NaN or infinite values")


def load_checkpoint_file(model: "BertForPretraining", path: str) -> None:
    """Load a checkpoint file (`read_checkpoint_file`) into `model`."""
    load_into_model(model, read_checkpoint_file(path), source=path)


def read_checkpoint_file(path: str | Path, weights_only: bool = True) -> dict[str, torch.Tensor]:
    """The state dict of a `.pt`/`.bin` file (a bare state dict, or one under a `model` key:
    NVIDIA, ours, a training checkpoint's trainer.pt) or of a `.safetensors` file (HF).
    Anything else is a CheckpointError that says what the path is. `weights_only=False`
    unpickles any object (a trusted file that holds more than tensors)."""
    path = Path(check_path(path, "checkpoint file", CheckpointError))
    if path.is_dir():
        raise CheckpointError(_folder_hint(path))
    if not path.exists():
        raise CheckpointError(f"{path}: checkpoint file does not exist")
    if not path.is_file():
        read_regular(path, "checkpoint file", CheckpointError)  # the reason: a FIFO, a device
    if path.suffix == ".safetensors":
        blob = _read_safetensors(path)
    else:
        blob = _read_torch(path, weights_only)
    # the state dict is the file itself or under its 'model' key; checked before any use
    state = blob.get("model", blob) if isinstance(blob, dict) else None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(
            f"{path}: expected a state dict of tensors, or a dict with one under a 'model' key"
        )
    if not state:
        raise CheckpointError(f"{path}: holds no tensors")
    check_tensors(state, str(path))
    return dict(state)


def _folder_hint(path: Path) -> str:
    """What a folder given as a checkpoint file is, and which file to pass instead."""
    if (path / MANIFEST).is_file() and (path / TRAINER_FILE).is_file():
        return (
            f"{path}: is a training checkpoint folder (for --resume {path}); to start a new "
            f"run from its weights pass run.init_checkpoint={path / TRAINER_FILE}"
        )
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (path / name).is_file():
            return f"{path}: is a HF model folder; pass run.init_checkpoint={path / name}"
    return f"{path}: is a folder, not a checkpoint file (.pt, .bin or .safetensors)"


def _first_line(err: Exception) -> str:
    """An error's first sentence (torch.load's messages run for paragraphs)."""
    text = str(err).strip()
    return re.split(r"(?<=\.)\s", text.splitlines()[0])[0] if text else type(err).__name__


def _read_torch(path: Path, weights_only: bool):
    with open(path, "rb") as f:
        head = f.read(4)
    # torch.save writes a zip archive (or, before 1.6, a pickle): anything else (a text file,
    # say) gets no unpickler error about a byte it tripped on
    if head[:2] != b"PK" and head[:1] != b"\x80":
        raise CheckpointError(
            f"{path}: not a PyTorch checkpoint (neither a zip archive nor a "
            f"pickle; starts with {head!r})"
        )
    # a zip whose directory is missing (a truncated copy) would be retried as a pickle, whose
    # "Weights only load failed" says nothing of the real damage
    if head[:2] == b"PK" and not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"{path}: cannot read as a PyTorch checkpoint (a damaged or truncated zip archive)"
        )
    try:
        with warnings.catch_warnings():  # the unpickler warns of what it then refuses
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=weights_only)
    except Exception as err:  # noqa: BLE001 - the unpickler's and zip reader's errors share no base
        raise CheckpointError(
            f"{path}: cannot read as a PyTorch checkpoint ({_first_line(err)})"
        ) from None


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise CheckpointError(
            f"{path}: reading .safetensors needs the safetensors package: {install_hint('hf')}"
        ) from None
    try:
        return load_file(str(path))
    except Exception as err:  # noqa: BLE001 - safetensors raises its own error types
        raise CheckpointError(f"{path}: cannot read as safetensors ({_first_line(err)})") from None


# ---- TF1 -> HF, and ours -> HF (export) ---------------------------------------------------
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


def tf_to_hf_state_dict(
    arrays: Mapping[str, np.ndarray], source: str = "TF checkpoint"
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """TF1 variables (name -> numpy array) of `source` -> (HF-named tensors, skipped TF
    names)."""
    state, skipped = {}, []
    for name, value in arrays.items():
        mapped = tf_to_hf_name(name)
        if mapped is None:
            skipped.append(name)
            continue
        if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
            kind = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
            raise CheckpointError(
                f"{source}: variable {name} is {kind}, not floating-point weights"
            )
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
