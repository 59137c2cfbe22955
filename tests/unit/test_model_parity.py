"""The unpadded model against HuggingFace's padded BertForPreTraining (an independent oracle).

Same weights (loaded through bert/model/weights.py), fp32, dropout off, a batch of mixed lengths
including length 1 and the full length: MLM loss, NSP loss and every parameter gradient match.
"""

from __future__ import annotations

import dataclasses
import numpy as np
import pytest
import torch

from bert.model import BertForPretraining, ModelConfig, mlm_correct, pretraining_loss
from bert.model.weights import (
    CheckpointError,
    convert_hf_state_dict,
    load_checkpoint_file,
    load_into_model,
)
from data.packing import Sample, pack_samples

transformers = pytest.importorskip("transformers")

MAX_LEN = 48
LENGTHS = (1, MAX_LEN, 17, 2, 33, 5)


def tiny_configs(vocab_size: int = 101, act: str = "gelu"):
    """vocab 101 is deliberately not a multiple of 8, so our embedding is padded to 104."""
    shared = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        max_position_embeddings=MAX_LEN,
        type_vocab_size=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # both sides get the very same sizes
    hf = transformers.BertConfig(**shared, hidden_act=act, layer_norm_eps=1e-12)
    ours = ModelConfig(**shared, hidden_act="gelu_tanh" if act == "gelu_new" else "gelu")
    return hf, ours


def random_samples(rng: np.random.Generator, vocab: int) -> list[Sample]:
    samples = []
    for length in LENGTHS:
        # id 0 is [PAD]: HF's embedding has padding_idx=0 (no gradient); real data never has it.
        ids = rng.integers(1, vocab, size=length).astype(np.int16)
        segments = (np.arange(length) >= length // 2).astype(np.int8)
        n_masked = int(rng.integers(1, max(2, length // 3) + 1)) if length > 1 else 1
        positions = np.sort(rng.choice(length, size=min(n_masked, length), replace=False))
        labels = rng.integers(0, vocab, size=positions.shape[0])
        samples.append(
            Sample(
                ids,
                segments,
                positions.astype(np.int16),
                labels.astype(np.int16),
                int(rng.integers(0, 2)),
            )
        )
    return samples


def hf_inputs(samples: list[Sample]) -> dict[str, torch.Tensor]:
    """The same samples, padded to MAX_LEN, the way HF consumes them."""
    batch = len(samples)
    input_ids = torch.zeros(batch, MAX_LEN, dtype=torch.long)
    token_type = torch.zeros_like(input_ids)
    attention_mask = torch.zeros_like(input_ids)
    labels = torch.full_like(input_ids, -100)
    for i, s in enumerate(samples):
        n = s.input_ids.shape[0]
        input_ids[i, :n] = torch.from_numpy(s.input_ids.astype(np.int64))
        token_type[i, :n] = torch.from_numpy(s.segment_ids.astype(np.int64))
        attention_mask[i, :n] = 1
        labels[i, torch.from_numpy(s.masked_positions.astype(np.int64))] = torch.from_numpy(
            s.masked_ids.astype(np.int64)
        )
    nsp = torch.tensor([s.nsp_label for s in samples])
    return dict(
        input_ids=input_ids,
        token_type_ids=token_type,
        attention_mask=attention_mask,
        labels=labels,
        next_sentence_label=nsp,
    )


def build_pair(act: str = "gelu"):
    torch.manual_seed(0)
    hf_cfg, our_cfg = tiny_configs(act=act)
    hf_model = transformers.BertForPreTraining(hf_cfg).eval()
    ours = BertForPretraining(our_cfg).eval()
    load_into_model(ours, dict(hf_model.state_dict()), source="hf")
    return hf_model, ours, our_cfg


def hf_losses(hf_model, inputs, vocab):
    out = hf_model(
        **{k: v for k, v in inputs.items() if k not in ("labels", "next_sentence_label")}
    )
    mlm = torch.nn.functional.cross_entropy(
        out.prediction_logits.reshape(-1, vocab), inputs["labels"].reshape(-1), ignore_index=-100
    )
    nsp = torch.nn.functional.cross_entropy(
        out.seq_relationship_logits, inputs["next_sentence_label"]
    )
    return mlm, nsp, out


@pytest.mark.parametrize("act", ["gelu", "gelu_new"])
def test_losses_and_gradients_match_hf(act):
    hf_model, ours, cfg = build_pair(act)
    samples = random_samples(np.random.default_rng(1), cfg.vocab_size)
    inputs = hf_inputs(samples)

    hf_mlm, hf_nsp, out = hf_losses(hf_model, inputs, cfg.vocab_size)
    (hf_mlm + hf_nsp).backward()

    batch = pack_samples(samples).to("cpu")
    mlm_logits, nsp_logits = ours(batch)
    mlm, nsp = pretraining_loss(mlm_logits, nsp_logits, batch, cfg.vocab_size)
    (mlm + nsp).backward()

    torch.testing.assert_close(mlm, hf_mlm, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(nsp, hf_nsp, rtol=1e-5, atol=1e-5)

    hf_grads = {k: p.grad for k, p in hf_model.named_parameters() if p.grad is not None}
    expected = convert_hf_state_dict(hf_grads)
    ours_grads = {k: p.grad for k, p in ours.named_parameters()}
    assert set(expected) == set(ours_grads), set(expected) ^ set(ours_grads)
    for name, grad in expected.items():
        got = ours_grads[name][: grad.shape[0]]
        torch.testing.assert_close(got, grad, rtol=1e-4, atol=1e-6, msg=name)


def test_hf_loss_oracle_agrees_with_hf_total():
    """HF computes its total loss itself when given labels; our split of it must sum to that."""
    hf_model, _, cfg = build_pair()
    inputs = hf_inputs(random_samples(np.random.default_rng(2), cfg.vocab_size))
    mlm, nsp, _ = hf_losses(hf_model, inputs, cfg.vocab_size)
    total = hf_model(**inputs).loss
    torch.testing.assert_close(total, mlm + nsp)


def test_accuracy_counts_match_padded_argmax():
    hf_model, ours, cfg = build_pair()
    samples = random_samples(np.random.default_rng(3), cfg.vocab_size)
    inputs = hf_inputs(samples)
    with torch.no_grad():
        logits = hf_model(
            **{k: inputs[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
        ).prediction_logits
        mask = inputs["labels"] != -100
        expected = (logits.argmax(-1)[mask] == inputs["labels"][mask]).sum()
        batch = pack_samples(samples).to("cpu")
        mlm_logits, _ = ours(batch)
        assert mlm_correct(mlm_logits, batch, cfg.vocab_size) == expected


def test_nvidia_phase1_naming_loads(tmp_path):
    """NVIDIA's .pt: `module.` prefix, `dense_act` linears, state dict under `model`."""
    hf_model, reference, cfg = build_pair()
    nvidia = {}
    for name, tensor in hf_model.state_dict().items():
        for fused in ("intermediate.dense", "pooler.dense", "transform.dense"):
            name = name.replace(fused + ".", fused.replace("dense", "dense_act") + ".")
        nvidia["module." + name] = tensor
    path = tmp_path / "phase1.pt"
    torch.save({"model": nvidia, "epoch": 0}, path)

    loaded = BertForPretraining(cfg).eval()
    load_checkpoint_file(loaded, str(path))
    batch = pack_samples(random_samples(np.random.default_rng(4), cfg.vocab_size)).to("cpu")
    with torch.no_grad():
        for a, b in zip(loaded(batch), reference(batch)):
            torch.testing.assert_close(a, b)


def test_shape_mismatch_names_tensor():
    hf_model, _, _ = build_pair()
    _, other_cfg = tiny_configs()
    other_cfg = dataclasses.replace(other_cfg, intermediate_size=64)
    with pytest.raises(CheckpointError, match="ffn.intermediate.weight"):
        load_into_model(BertForPretraining(other_cfg), dict(hf_model.state_dict()))
