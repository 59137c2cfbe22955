"""The conversions open-bert-convert runs (its command line: bert/convert/cli.py,
which imports this module, and with it torch, once its arguments are read): the model shape from
a config, readers of each source format, and the writers of ours and of HF's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from bert.config import load_config
from bert.core.checkpoint_files import TRAINER_FILE
from bert.core.files import atomic_path, write_text_atomic
from bert.core.readers import read_json
from bert.model import BertForPretraining, ModelConfig
from bert.model.weights import (
    CheckpointError,
    load_into_model,
    read_checkpoint_file,
    tf_to_hf_name,
    to_hf_state_dict,
)


# HF config.json activation names -> ours
HF_ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
MODEL_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
    "layer_norm_eps",
)
# a run's model keys that fix the tensors' shapes (its kernel and backend choices do not)
SHAPE_KEYS = (*MODEL_KEYS, "hidden_act", "pad_vocab_to_multiple_of")


# -- model shape ------------------------------------------------------------------------------


def config_from_hf_json(path: Path) -> ModelConfig:
    values = read_json(path, "bert config", CheckpointError)  # a regular file, capped, an object
    act = values.get("hidden_act", "gelu")
    if act not in HF_ACTS:
        raise CheckpointError(f"{path}: hidden_act {act!r} is not supported ({sorted(HF_ACTS)})")
    kwargs = {k: values[k] for k in MODEL_KEYS if k in values}
    return ModelConfig(hidden_act=HF_ACTS[act], **kwargs)


def model_config(args: argparse.Namespace, folder: Path | None = None) -> ModelConfig:
    if args.bert_config:
        return config_from_hf_json(Path(args.bert_config))  # Google's keys are HF's keys
    if args.config:
        return load_config(args.config).model
    if folder is not None and (folder / "config.json").is_file():
        return config_from_hf_json(folder / "config.json")
    return ModelConfig()  # BERT-Large


def checkpoint_model_config(folder: Path) -> ModelConfig | None:
    """The model shape a training checkpoint folder's config.json (the run's config, written
    beside trainer.pt) holds; None when the folder has no such file."""
    path = folder / "config.json"
    if not path.is_file():
        return None
    values = read_json(path, "checkpoint config", CheckpointError, expect=object)
    model = values.get("model") if isinstance(values, dict) else None
    if not isinstance(model, dict):
        return None  # not a run's config (an HF config.json has no sections)
    return ModelConfig(**{k: model[k] for k in SHAPE_KEYS if k in model})


def hf_config_dict(cfg: ModelConfig) -> dict:
    values = {k: getattr(cfg, k) for k in MODEL_KEYS}
    values["hidden_act"] = "gelu_new" if cfg.hidden_act == "gelu_tanh" else "gelu"
    return values


# -- reading sources --------------------------------------------------------------------------


def read_tf_checkpoint(prefix: str) -> dict:
    """Model variables of a TF1 checkpoint as numpy arrays (optimizer slots are not read)."""
    try:
        import tensorflow as tf
    except ImportError:
        raise CheckpointError(
            "reading a TF1 checkpoint needs TensorFlow, used only by this "
            "conversion: pip install 'open-bert-mlperf[tf]' (tensorflow-cpu)"
        ) from None
    try:
        reader = tf.train.load_checkpoint(prefix)
        return {
            name: reader.get_tensor(name)
            for name in reader.get_variable_to_shape_map()
            if tf_to_hf_name(name) is not None
        }
    except Exception as err:  # noqa: BLE001 - TensorFlow's errors (DataLoss, NotFound, ...)
        first = " ".join(str(err).split())[:200] or type(err).__name__
        raise CheckpointError(
            f"{prefix}: cannot read as a TF1 checkpoint ({type(err).__name__}: {first})"
        ) from None


def read_torch_state(path: Path, unsafe: bool = False) -> dict:
    if not unsafe:
        try:
            return read_checkpoint_file(path)
        except CheckpointError as err:
            if "Weights only load failed" not in str(err):
                raise
            raise CheckpointError(
                f"{err}; if you trust the file and it holds more than tensors, pass --unsafe-load"
            ) from None
    return read_checkpoint_file(path, weights_only=False)


def read_hf_source(src: Path) -> dict:
    if src.is_dir():
        for name in ("model.safetensors", "pytorch_model.bin"):
            if (src / name).is_file():
                return read_torch_state(src / name)
        raise CheckpointError(f"{src}: holds neither model.safetensors nor pytorch_model.bin")
    return read_torch_state(src)


# -- writing ----------------------------------------------------------------------------------


def save_ours(state: dict, cfg: ModelConfig, out: Path, source: str) -> None:
    """Load into the model (validates every tensor), then save {"model": state_dict}."""
    model = BertForPretraining(cfg)
    load_into_model(model, state, source=source)
    with atomic_path(out) as tmp:
        torch.save({"model": model.state_dict()}, tmp)
    print(
        f"wrote {out} ({len(model.state_dict())} tensors); use it with "
        f"--set run.init_checkpoint={out}"
    )


def export_hf(
    src: Path, cfg: ModelConfig, out: Path, state_dict_only: bool, shape_given: bool = True
) -> None:
    model, state = BertForPretraining(cfg), read_checkpoint_file(src)
    try:
        load_into_model(model, state, source=str(src))
    except CheckpointError as err:
        if shape_given:
            raise
        # without a shape argument the model is BERT-Large, which a smaller checkpoint misses
        raise CheckpointError(
            f"{src}: does not fit BERT-Large, the shape hf-export assumes "
            f"unless told: pass the training checkpoint folder (its config.json), "
            f"--config (the run's YAML) or --bert-config ({err})"
        ) from None
    state = to_hf_state_dict(model.state_dict(), cfg.vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    if state_dict_only:
        with atomic_path(out / "pytorch_model.bin") as tmp:
            torch.save(state, tmp)
        write_text_atomic(out / "config.json", json.dumps(hf_config_dict(cfg), indent=1))
    else:
        import transformers

        hf = transformers.BertForPreTraining(transformers.BertConfig(**hf_config_dict(cfg)))
        hf.load_state_dict(state, strict=True)
        hf.save_pretrained(out)
    print(f"wrote {out} (HF BertForPreTraining names)")


def run_hf_export(args: argparse.Namespace, src: Path, out: Path) -> None:
    """A training checkpoint (its folder or trainer.pt) brings its shape in its config.json;
    --config or --bert-config still win."""
    weights = src / TRAINER_FILE if (src / TRAINER_FILE).is_file() else src
    saved = checkpoint_model_config(weights.parent)
    given = bool(args.config or args.bert_config)
    cfg = saved if saved is not None and not given else model_config(args)
    export_hf(weights, cfg, out, args.state_dict_only, shape_given=given or saved is not None)
