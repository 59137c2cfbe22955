"""Checkpoint conversion (scripts/convert_checkpoint.py, bert/model/weights.py).

HuggingFace's BertForPreTraining is the oracle: an export must load into it with strict=True
and give our model's outputs; TF1-named arrays (built by this test from HF weights with Google's
variable names, no TensorFlow needed) must load into our model and give HF's outputs.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from bert.model import BertForPretraining, ModelConfig
from bert.convert.formats import SHAPE_KEYS
from bert.model.weights import (
    load_checkpoint_file,
    load_into_model,
    tf_to_hf_name,
    tf_to_hf_state_dict,
    to_hf_state_dict,
)
from data.packing import Sample, pack_samples

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
VOCAB, HIDDEN, LAYERS, MAX_LEN = 101, 64, 2, 40  # vocab 101 pads to 104 in our model
SHAPE = dict(
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    num_hidden_layers=LAYERS,
    num_attention_heads=4,
    intermediate_size=96,
    max_position_embeddings=MAX_LEN,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
PADDED = ("embeddings.word_embeddings.weight", "heads.decoder_weight", "heads.decoder_bias")


@pytest.fixture(scope="module")
def script():
    from bert.convert import cli as convert_checkpoint

    return convert_checkpoint


def ours(seed: int = 0) -> BertForPretraining:
    torch.manual_seed(seed)
    return BertForPretraining(ModelConfig(**SHAPE)).eval()


def hf_model(seed: int = 0):
    torch.manual_seed(seed)
    return transformers.BertForPreTraining(transformers.BertConfig(**SHAPE)).eval()


def samples() -> list[Sample]:
    rng = np.random.default_rng(5)
    out = []
    for length in (1, 7, MAX_LEN, 23):
        ids = rng.integers(1, VOCAB, size=length).astype(np.int16)
        seg = (np.arange(length) > length // 2).astype(np.int8)
        pos = np.sort(rng.choice(length, size=max(1, length // 5), replace=False))
        out.append(Sample(ids, seg, pos.astype(np.int16), ids[pos].astype(np.int16), 0))
    return out


def assert_same_outputs(model: BertForPretraining, hf) -> None:
    """Our MLM logits at the masked tokens and NSP logits equal HF's padded computation."""
    batch_samples = samples()
    with torch.no_grad():
        mlm, nsp = model(pack_samples(batch_samples).to("cpu"))
        ids = torch.zeros(len(batch_samples), MAX_LEN, dtype=torch.long)
        seg, mask = torch.zeros_like(ids), torch.zeros_like(ids)
        for i, s in enumerate(batch_samples):
            n = len(s.input_ids)
            ids[i, :n] = torch.from_numpy(s.input_ids.astype(np.int64))
            seg[i, :n] = torch.from_numpy(s.segment_ids.astype(np.int64))
            mask[i, :n] = 1
        out = hf(input_ids=ids, token_type_ids=seg, attention_mask=mask)
    expected = torch.cat(
        [
            out.prediction_logits[i, torch.from_numpy(s.masked_positions.astype(np.int64))]
            for i, s in enumerate(batch_samples)
        ]
    )
    torch.testing.assert_close(mlm[:, :VOCAB], expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(nsp, out.seq_relationship_logits, rtol=1e-4, atol=1e-4)


# -- HF export ----------------------------------------------------------------------------------


def test_export_loads_strictly_into_hf_with_same_outputs():
    model = ours()
    hf = hf_model(seed=1)  # other weights, all replaced below
    hf.load_state_dict(to_hf_state_dict(model.state_dict(), VOCAB), strict=True)
    assert_same_outputs(model, hf)


def hf_export(script, folder: Path, bert_config: Path) -> int:
    """`open-bert-convert hf-export` of FOLDER/ours.pt into FOLDER/hf: its exit status."""
    args = [str(folder / "ours.pt"), "--out", str(folder / "hf"), "--bert-config", str(bert_config)]
    return script.main(["hf-export", *args])


def test_export_import_round_trip_through_script(script, tmp_path):
    model = ours()
    torch.save({"model": model.state_dict()}, tmp_path / "ours.pt")
    shape = tmp_path / "bert_config.json"
    shape.write_text(json.dumps({**SHAPE, "hidden_act": "gelu"}))
    assert hf_export(script, tmp_path, shape) == 0
    hf = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    assert_same_outputs(model, hf)
    # hf-import reads the folder's config.json itself.
    assert script.main(["hf-import", str(tmp_path / "hf"), "--out", str(tmp_path / "back.pt")]) == 0
    back = ours(seed=3)
    load_checkpoint_file(back, str(tmp_path / "back.pt"))
    for (name, a), b in zip(model.state_dict().items(), back.state_dict().values()):
        # Rows past the real vocabulary are padding: dropped on export, zeros on import.
        rows = VOCAB if name in PADDED else None
        torch.testing.assert_close(a[:rows], b[:rows], rtol=0, atol=0, msg=name)


def test_the_default_run_keeps_its_model_and_hf_export_needs_no_config(script, tmp_path, capsys):
    """The default (tiny_cpu) run leaves a final checkpoint with its config (checkpoint.final);
    its weights load into the model that config builds, and hf-export reads the shape from the
    checkpoint folder's config.json (no --config): HF's model takes the export strictly."""
    import run_pretraining

    out = tmp_path / "run"
    short = ["run.max_steps=2", "eval.samples=64", f"run.output_dir={out}"]
    cache = f"data.synthetic.cache_dir={tmp_path / 'synthetic'}"
    assert run_pretraining.main(["--quiet", *(f"--set={s}" for s in [*short, cache])]) == 0
    folder = out / "checkpoints" / "step_00000002"
    saved = json.loads((folder / "config.json").read_text())
    assert saved["model"]["hidden_size"] == 128  # the run's own config, beside the weights
    model = BertForPretraining(ModelConfig(**{k: saved["model"][k] for k in SHAPE_KEYS}))
    load_checkpoint_file(model, str(folder / "trainer.pt"))  # strict: every tensor fits
    for src in (folder, folder / "trainer.pt"):
        export = tmp_path / f"hf_{src.name}"
        assert script.main(["hf-export", str(src), "--out", str(export), "--state-dict-only"]) == 0
        config = json.loads((export / "config.json").read_text())
        assert (config["hidden_size"], config["num_hidden_layers"]) == (128, 2)
        hf = transformers.BertForPreTraining(transformers.BertConfig(**config))
        hf.load_state_dict(torch.load(export / "pytorch_model.bin"), strict=True)
        torch.testing.assert_close(
            hf.bert.embeddings.word_embeddings.weight,
            model.state_dict()["embeddings.word_embeddings.weight"][: config["vocab_size"]],
        )


# -- TF1 names ----------------------------------------------------------------------------------


def tf_variables(hf) -> dict[str, np.ndarray]:
    """Google's TF1 variable names for an HF model's weights (kernels stored [in, out]),
    plus the non-weight variables a real checkpoint also holds."""
    leaf = {"weight": "kernel", "bias": "bias"}
    out = {}
    for name, tensor in hf.state_dict().items():
        if name.startswith("cls.predictions.decoder"):
            continue  # tied, not a TF variable
        value = tensor.numpy()
        if "embeddings" in name and "LayerNorm" not in name:
            out[name.rsplit(".", 1)[0].replace(".", "/")] = value
            continue
        if name == "cls.predictions.bias":
            out["cls/predictions/output_bias"] = value
            continue
        if name.startswith("cls.seq_relationship"):
            kind = "output_weights" if name.endswith("weight") else "output_bias"
            out[f"cls/seq_relationship/{kind}"] = value  # already [2, hidden]
            continue
        path, kind = name.rsplit(".", 1)
        path = path.replace("layer.", "layer_").replace(".", "/")
        if path.endswith("LayerNorm"):
            out[f"{path}/{'gamma' if kind == 'weight' else 'beta'}"] = value
        else:
            out[f"{path}/{leaf[kind]}"] = value.T if kind == "weight" else value
    out["global_step"] = np.array(28252)
    out["bert/encoder/layer_0/attention/self/query/kernel/adam_m"] = np.zeros((HIDDEN, HIDDEN))
    return out


def test_tf_names_map_to_hf():
    assert tf_to_hf_name("bert/encoder/layer_11/attention/self/query/kernel") == (
        "bert.encoder.layer.11.attention.self.query.weight",
        True,
    )
    assert tf_to_hf_name("bert/encoder/layer_0/output/LayerNorm/gamma") == (
        "bert.encoder.layer.0.output.LayerNorm.weight",
        False,
    )
    assert tf_to_hf_name("cls/seq_relationship/output_weights") == (
        "cls.seq_relationship.weight",
        False,
    )
    assert tf_to_hf_name("cls/predictions/output_bias") == ("cls.predictions.bias", False)
    assert tf_to_hf_name("bert/embeddings/word_embeddings") == (
        "bert.embeddings.word_embeddings.weight",
        False,
    )
    assert tf_to_hf_name("global_step") is None
    assert tf_to_hf_name("bert/pooler/dense/kernel/adam_v") is None


def test_tf_checkpoint_arrays_load_with_hf_outputs():
    hf = hf_model(seed=2)
    arrays = tf_variables(hf)
    assert "cls/seq_relationship/output_weights" in arrays
    state, skipped = tf_to_hf_state_dict(arrays)
    assert skipped == ["bert/encoder/layer_0/attention/self/query/kernel/adam_m", "global_step"]
    model = ours(seed=4)
    load_into_model(model, state, source="fake TF checkpoint")
    assert_same_outputs(model, hf)


def test_tf_without_tensorflow_is_one_clear_error(script, tmp_path, capsys):
    if importlib.util.find_spec("tensorflow") is not None:
        pytest.skip("tensorflow is installed")
    assert (
        script.main(["tf", str(tmp_path / "model.ckpt-28252"), "--out", str(tmp_path / "o.pt")])
        == 2
    )
    assert "needs TensorFlow" in capsys.readouterr().err
    assert not (tmp_path / "o.pt").exists()


def test_nvidia_checkpoint_converts(script, tmp_path):
    hf = hf_model(seed=6)
    nvidia = {
        "module." + k.replace("intermediate.dense.", "intermediate.dense_act."): v
        for k, v in hf.state_dict().items()
    }
    torch.save({"model": nvidia, "epoch": 0}, tmp_path / "nv.pt")
    config = tmp_path / "tiny.yaml"
    config.write_text(
        "model:\n"
        + "".join(f"  {k}: {v}\n" for k, v in SHAPE.items())
        + f"data:\n  max_seq_length: {MAX_LEN}\n"
    )
    assert (
        script.main(
            [
                "nvidia",
                str(tmp_path / "nv.pt"),
                "--out",
                str(tmp_path / "p1.pt"),
                "--config",
                str(config),
            ]
        )
        == 0
    )
    model = ours(seed=7)
    load_checkpoint_file(model, str(tmp_path / "p1.pt"))
    assert_same_outputs(model, hf)


def test_shape_mismatch_is_one_clear_error(script, tmp_path, capsys):
    torch.save({"model": ours().state_dict()}, tmp_path / "ours.pt")
    other = tmp_path / "bert_config.json"
    other.write_text(json.dumps({**SHAPE, "intermediate_size": 64}))
    assert hf_export(script, tmp_path, other) == 2
    assert "ffn.intermediate.weight" in capsys.readouterr().err


# -- run.init_checkpoint: HF .safetensors and .bin files ----------------------------------------


@pytest.mark.parametrize("suffix", [".safetensors", ".bin"])
def test_hf_weight_files_load_as_init_checkpoint(tmp_path, suffix):
    """What HF save_pretrained writes (model.safetensors, or pytorch_model.bin) is read by
    load_checkpoint_file, the reader of run.init_checkpoint."""
    hf = hf_model(seed=4)
    path = tmp_path / f"model{suffix}"
    if suffix == ".safetensors":
        pytest.importorskip("safetensors")
        hf.save_pretrained(tmp_path)  # model.safetensors, tied tensors stored once
    else:
        torch.save(hf.state_dict(), path)
    model = ours(seed=9)
    load_checkpoint_file(model, str(path))
    assert_same_outputs(model, hf)


def test_safetensors_without_the_package_says_how_to_install(tmp_path, monkeypatch):
    import builtins

    from bert.model.weights import CheckpointError

    real_import = builtins.__import__

    def no_safetensors(name, *args, **kwargs):
        if name.startswith("safetensors"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    (tmp_path / "model.safetensors").write_bytes(b"\0" * 16)
    monkeypatch.setattr(builtins, "__import__", no_safetensors)
    with pytest.raises(CheckpointError, match=re.escape("pip install 'open-bert-mlperf[hf]'")):
        load_checkpoint_file(ours(), str(tmp_path / "model.safetensors"))
