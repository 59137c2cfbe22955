"""model.last_layer_subset: the last encoder layer computes queries, attention output and FFN
only for [CLS] and the masked tokens, keys and values from all tokens. The heads read only those
rows, so the model must equal the full model: same logits, same losses, same gradients."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from bert.model import BertForPretraining, ModelConfig
from data.packing import Sample, pack_samples, subset_queries

from small_model import small_config

VOCAB = 101


def samples(seed: int, lengths=(9, 30, 17, 5, 64), masked=(2, 6, 0, 1, 9)) -> list[Sample]:
    """Sequences with their masked positions in random order (not sorted), never [CLS]; one
    sequence has no masked token at all."""
    rng = np.random.default_rng(seed)
    out = []
    for length, count in zip(lengths, masked):
        positions = rng.choice(np.arange(1, length), size=count, replace=False)
        out.append(
            Sample(
                rng.integers(0, VOCAB, length).astype(np.int16),
                (np.arange(length) >= length // 2).astype(np.int8),
                positions.astype(np.int16),
                rng.integers(0, VOCAB, count).astype(np.int16),
                int(rng.integers(2)),
            )
        )
    return out


def config(**overrides) -> ModelConfig:
    return small_config(VOCAB, 128, layers=3, **overrides)


def test_query_layout():
    batch = pack_samples(samples(0), query_subset=True)
    sub = batch.query_subset
    counts = np.diff(sub.cu_seqlens)
    assert counts.tolist() == [3, 7, 1, 2, 10]  # masked + [CLS] per sequence
    assert sub.max_seqlen == 10
    # Each sequence's first query is its [CLS]; the rest are its masked tokens in their order.
    assert (sub.index[sub.cu_seqlens[:-1]] == batch.cu_seqlens[:-1]).all()
    assert (sub.index[sub.masked_rows] == batch.masked_positions).all()
    assert sorted(sub.masked_rows.tolist() + sub.cu_seqlens[:-1].tolist()) == list(
        range(counts.sum())
    )
    # token_index places each query in a padded [B, max queries] layout, sequence by sequence.
    seq, pos = np.divmod(sub.token_index, sub.max_seqlen)
    assert (seq == np.repeat(np.arange(5), counts)).all()
    assert (pos < np.repeat(counts, counts)).all() and len(set(sub.token_index)) == len(seq)
    # Built only when asked for.
    assert pack_samples(samples(0)).query_subset is None


def test_layout_helper_on_its_own():
    sub = subset_queries(np.array([0, 4, 10]), np.array([2, 1]), np.array([3, 1, 8]))
    assert sub.index.tolist() == [0, 3, 1, 4, 8]
    assert sub.masked_rows.tolist() == [1, 2, 4]
    assert sub.cu_seqlens.tolist() == [0, 3, 5]


def run(model: BertForPretraining, batch) -> tuple[list[torch.Tensor], dict]:
    model.zero_grad()
    mlm_logits, nsp_logits = model(batch)
    mlm, nsp = model.loss(mlm_logits, nsp_logits, batch)
    (mlm + nsp).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return [mlm_logits, nsp_logits, mlm, nsp], grads


@pytest.mark.parametrize(
    "overrides",
    [
        {"attention": "padded_sdpa"},
        {"attention": "per_sequence"},
        {"attention": "grouped_flash"},
        {"attention": "per_sequence", "fused_dense": True, "fused_mlm_loss": True},
    ],
    ids=["padded_sdpa", "per_sequence", "grouped_flash", "fused_twins"],
)
def test_subset_model_equals_the_full_model(overrides):
    torch.manual_seed(0)
    full = BertForPretraining(config(**overrides))
    subset = BertForPretraining(dataclasses.replace(full.config, last_layer_subset=True))
    subset.load_state_dict(full.state_dict())
    batch = pack_samples(samples(1), **subset.pack_options()).to("cpu")
    assert batch.query_subset is not None
    outs_full, grads_full = run(full, batch)
    outs_subset, grads_subset = run(subset, batch)
    for a, b in zip(outs_full, outs_subset):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert grads_full.keys() == grads_subset.keys()
    for name, grad in grads_full.items():
        torch.testing.assert_close(grads_subset[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_subset_layer_computes_fewer_rows():
    """The point of the flag: the last layer's attention output and FFN see Q rows, not T."""
    torch.manual_seed(0)
    model = BertForPretraining(config(last_layer_subset=True)).eval()
    batch = pack_samples(samples(2), **model.pack_options()).to("cpu")
    rows = []
    hook = model.layers[-1].ffn.register_forward_hook(lambda m, i, o: rows.append(o.shape[0]))
    model(batch)
    hook.remove()
    assert rows == [batch.num_masked + batch.num_sequences] and rows[0] < batch.num_tokens


def test_training_with_dropout_runs_and_a_missing_layout_is_one_clear_error():
    torch.manual_seed(0)
    model = BertForPretraining(
        config(last_layer_subset=True, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    ).train()
    outs, grads = run(model, pack_samples(samples(3), query_subset=True).to("cpu"))
    assert torch.isfinite(outs[2]) and all(torch.isfinite(g).all() for g in grads.values())
    with pytest.raises(ValueError, match="model.last_layer_subset needs PackedBatch.query_subset"):
        model(pack_samples(samples(3)).to("cpu"))
