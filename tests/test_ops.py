"""Attention backends of bert/ops.py against the reference, padded_sdpa (CPU, fp32/fp64)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from bert import ops
from bert.model import BertForPretraining, pretraining_loss
from bert.config import ModelConfig
from data.batching import Sample, pack_samples

# Length 1, a prime, the maximum, and repeats: the shapes where slicing bugs show up.
LENGTHS = (1, 13, 48, 2, 48, 31)
HEADS, HEAD_DIM = 3, 8


def tiny_config(attention: str = "padded_sdpa") -> ModelConfig:
    cfg = ModelConfig(vocab_size=101, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=96, max_position_embeddings=48,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    cfg.attention = attention  # set after validation: bert/config.py lists fewer backends
    return cfg


def packed_qkv(lengths, dtype=torch.float32, seed=0):
    """q, k, v (T, heads, head_dim) with grads, plus cu_seqlens, max_seqlen and token_index."""
    samples = [Sample(np.ones(n, np.int16), np.zeros(n, np.int8), np.zeros(1, np.int16),
                      np.ones(1, np.int16), 0) for n in lengths]
    batch = pack_samples(samples).to("cpu")
    gen = torch.Generator().manual_seed(seed)
    qkv = [torch.randn(batch.num_tokens, HEADS, HEAD_DIM, generator=gen, dtype=dtype)
           .requires_grad_() for _ in range(3)]
    return qkv, batch


def attention(backend, qkv, batch, dropout_p=0.0):
    return ops.varlen_attention(*qkv, batch.cu_seqlens, batch.max_seqlen, batch.token_index,
                                dropout_p, backend)


def grads(out, qkv, seed=1):
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed),
                           dtype=out.dtype)
    return torch.autograd.grad(out, qkv, upstream)


@pytest.mark.parametrize("lengths", [LENGTHS, (48,), (1,), (5, 5, 5)])
def test_per_sequence_matches_padded_sdpa(lengths):
    qkv, batch = packed_qkv(lengths)
    expected = attention("padded_sdpa", qkv, batch)
    got = attention("per_sequence", qkv, batch)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    for g, e in zip(grads(got, qkv), grads(expected, qkv)):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_per_sequence_dropout_math_matches_its_own_gradient():
    """The dropout path (hand-written math) under a fixed mask: autograd agrees with finite
    differences in fp64. Re-seeding inside the function makes every call draw the same mask."""
    qkv, batch = packed_qkv((1, 4, 7), dtype=torch.float64)

    def fn(q, k, v):
        torch.manual_seed(0)
        return ops.per_sequence_attention(q, k, v, batch.cu_seqlens, 0.3)

    assert torch.autograd.gradcheck(fn, tuple(qkv))


def test_per_sequence_dropout_is_unbiased():
    """With v = 1 every output is (sum of kept probabilities) / (1 - p): mean 1, and some
    entries dropped (outputs differ from 1)."""
    (q, k, _), batch = packed_qkv((48, 48, 31))
    v = torch.ones_like(q)
    torch.manual_seed(0)
    out = ops.per_sequence_attention(q, k, v, batch.cu_seqlens, 0.1)
    assert abs(out.mean().item() - 1.0) < 0.02
    assert (out - 1.0).abs().max() > 0.01


def test_per_sequence_never_crosses_sequences():
    """Changing one sequence's keys and values leaves the others' outputs untouched."""
    qkv, batch = packed_qkv((5, 7, 6))
    before = attention("per_sequence", qkv, batch)
    k, v = qkv[1].detach().clone(), qkv[2].detach().clone()
    k[5:12] += 3.0
    v[5:12] -= 2.0
    after = attention("per_sequence", [qkv[0], k, v], batch)
    torch.testing.assert_close(after[:5], before[:5])
    torch.testing.assert_close(after[12:], before[12:])


def test_unknown_backend_names_choices():
    qkv, batch = packed_qkv((3,))
    with pytest.raises(ValueError, match="per_sequence"):
        attention("nope", qkv, batch)


def test_model_with_per_sequence_matches_reference_model():
    """The whole model, dropout off: same losses and gradients with either backend."""
    cfg = tiny_config()
    torch.manual_seed(0)
    reference = BertForPretraining(cfg).eval()
    fast = BertForPretraining(tiny_config("per_sequence")).eval()
    fast.load_state_dict(reference.state_dict())
    rng = np.random.default_rng(0)
    samples = [Sample(rng.integers(1, cfg.vocab_size, n).astype(np.int16),
                      (np.arange(n) >= n // 2).astype(np.int8), np.array([0], np.int16),
                      np.array([7], np.int16), i % 2) for i, n in enumerate(LENGTHS)]
    batch = pack_samples(samples).to("cpu")
    losses = []
    for model in (reference, fast):
        mlm, nsp = pretraining_loss(*model(batch), batch, cfg.vocab_size)
        (mlm + nsp).backward()
        losses.append(mlm + nsp)
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    for (name, p_ref), p_fast in zip(reference.named_parameters(), fast.parameters()):
        torch.testing.assert_close(p_fast.grad, p_ref.grad, rtol=1e-4, atol=1e-6, msg=name)
