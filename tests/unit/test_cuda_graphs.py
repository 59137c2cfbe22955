"""CUDA graphs over bucketed shapes (bert/train/graphs/): bucket selection, the static buffers
and their neutral padding on the model, the graph cache with the eager backend, and, marked
gpu, the real capture against eager.

The equality check (`assert_same_step`) is shown to fail on a wrong copy: cu_seqlens left from
the previous batch, and a token_index copied as made for the batch's own max_seqlen.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from bert.model import BertForPretraining
from bert.train.graphs.backends import CudaGraphBackend, EagerBackend
from bert.train.graphs.cache import GraphCache
from bert.train.graphs.shapes import (
    GraphBuckets,
    GraphShape,
    batch_shape,
    padding_sequences,
    select_shape,
)
from bert.train.graphs.static_batch import IGNORE, StaticBatch, padding_layout
from data.packing import pack_samples
from data.synthetic_language import generate_samples, successor_table
from gpu_gate import require_cuda
from small_model import forbid_host_reads, small_config

VOCAB, MAX_LEN, MAX_PRED, SEQS = 128, 64, 10, 4
BUCKETS = GraphBuckets((32, 64), SEQS, token_bucket=64, masked_bucket=8, max_masked=SEQS * 10)


# ---- bucket selection -----------------------------------------------------------------------


def test_length_bound_exact_just_over_and_past_the_last_edge():
    assert select_shape(40, SEQS, 8, 32, BUCKETS).max_seqlen == 32  # exactly an edge
    assert select_shape(40, SEQS, 8, 33, BUCKETS).max_seqlen == 64  # just over it
    assert select_shape(40, SEQS, 8, 65, BUCKETS) is None  # longer than any bucket


def test_token_count_exact_and_just_over_a_bucket():
    pad = padding_sequences(64, 64)  # ceil(63 / 63) = 1 padding sequence
    assert pad == 1
    exact = select_shape(128 - pad, SEQS, 8, 64, BUCKETS)
    assert exact == GraphShape(tokens=128, sequences=SEQS + pad, masked=8, max_seqlen=64)
    assert select_shape(128 - pad + 1, SEQS, 8, 64, BUCKETS).tokens == 192


def test_masked_count_exact_just_over_and_past_the_cap():
    assert select_shape(40, SEQS, 16, 32, BUCKETS).masked == 16
    assert select_shape(40, SEQS, 17, 32, BUCKETS).masked == 24
    assert select_shape(40, SEQS, SEQS * 10 + 1, 32, BUCKETS) is None


def test_other_batch_sizes_are_not_graphed():
    assert select_shape(40, SEQS - 1, 8, 32, BUCKETS) is None
    assert select_shape(40, SEQS + 1, 8, 32, BUCKETS) is None


@pytest.mark.parametrize("bound,bucket", [(2, 1), (2, 64), (32, 64), (64, 64), (512, 1024)])
def test_every_token_count_leaves_padding_the_padding_sequences_can_hold(bound, bucket):
    buckets = GraphBuckets((bound,), SEQS, bucket, 8, 40)
    for tokens in range(SEQS, SEQS * bound + 1):
        shape = select_shape(tokens, SEQS, 8, bound, buckets)
        pad_seqs, pad_tokens = shape.sequences - SEQS, shape.tokens - tokens
        assert pad_seqs <= pad_tokens <= pad_seqs * bound, (tokens, shape)
        lengths, _, pos = padding_layout(pad_tokens, pad_seqs, bound, torch.device("cpu"))
        assert lengths.min() >= 1 and lengths.max() <= bound and lengths.sum() == pad_tokens
        assert pos.max() < bound


def test_padding_layout_refuses_padding_that_does_not_fit():
    with pytest.raises(ValueError, match="do not fit"):
        padding_layout(2, 3, 8, torch.device("cpu"))
    with pytest.raises(ValueError, match="do not fit"):
        padding_layout(25, 3, 8, torch.device("cpu"))


# ---- batches and the model ------------------------------------------------------------------


def make_batches(count: int, seed: int = 0, max_len: int = MAX_LEN):
    rng = np.random.default_rng(seed)
    samples = generate_samples(rng, successor_table(0, VOCAB), count * SEQS, max_len, MAX_PRED)
    return [pack_samples(samples[i * SEQS : (i + 1) * SEQS]) for i in range(count)]


def same_shape_pair(batches, different_lengths: bool = True):
    """Two batches of one shape (with different sequence lengths)."""
    for i, a in enumerate(batches):
        for b in batches[i + 1 :]:
            if batch_shape(a, BUCKETS) == batch_shape(b, BUCKETS) and (
                not different_lengths or not np.array_equal(a.cu_seqlens, b.cu_seqlens)
            ):
                return a, b
    raise AssertionError("no two batches of one shape")


def tiny_model(attention: str = "padded_sdpa", device="cpu") -> BertForPretraining:
    torch.manual_seed(0)
    # no dropout: padding moves the dropout draws, so compare without
    cfg = small_config(VOCAB, MAX_LEN, hidden=32, heads=2, ffn=64, attention=attention)
    return BertForPretraining(cfg).to(device).train()


def loss_and_grads(model, batch, autocast_dtype=None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    with torch.autocast(
        batch.input_ids.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None
    ):
        mlm_logits, nsp_logits = model(batch)
    loss = sum(model.loss(mlm_logits, nsp_logits, batch))
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def assert_same_step(model, padded, unpadded, rtol=None, atol=None) -> None:
    """Loss and every gradient of the padded batch equal the unpadded batch's (fp32
    rounding: the padding changes the order of the sums, nothing else)."""
    loss, grads = loss_and_grads(model, padded)
    want_loss, want_grads = loss_and_grads(model, unpadded)
    torch.testing.assert_close(loss, want_loss, rtol=rtol, atol=atol)
    for (name, _), got, want in zip(model.named_parameters(), grads, want_grads):
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=name)


# ---- static buffers -------------------------------------------------------------------------


def test_static_buffers_hold_the_batch_and_valid_padding():
    batch = make_batches(1)[0]
    shape = batch_shape(batch, BUCKETS)
    static = StaticBatch(shape, torch.device("cpu"))
    static.load(batch.to("cpu"))
    s, t, b, m = static.batch, batch.num_tokens, batch.num_sequences, batch.num_masked
    for name in ("input_ids", "segment_ids", "position_ids", "masked_positions", "masked_labels"):
        real = getattr(s, name)[: m if name.startswith("masked") else t]
        assert np.array_equal(real.numpy(), getattr(batch, name)), name
    assert np.array_equal(s.cu_seqlens[: b + 1].numpy(), batch.cu_seqlens)
    assert np.array_equal(s.nsp_labels[:b].numpy(), batch.nsp_labels)
    assert (s.masked_labels[m:] == IGNORE).all() and (s.nsp_labels[b:] == IGNORE).all()
    lengths = s.cu_seqlens.diff()
    assert lengths.min() >= 1 and lengths.max() <= shape.max_seqlen  # no empty sequence
    assert int(s.cu_seqlens[-1]) == shape.tokens and s.max_seqlen == shape.max_seqlen
    # token_index: every token its own slot of the padded [sequences, max_seqlen] layout
    slots = s.token_index.numpy()
    assert len(set(slots.tolist())) == shape.tokens
    assert slots.max() < shape.sequences * shape.max_seqlen
    seq = np.repeat(np.arange(shape.sequences), lengths.numpy())
    assert np.array_equal(slots, seq * shape.max_seqlen + s.position_ids.numpy())


@pytest.mark.parametrize("attention", ["padded_sdpa", "per_sequence"])
def test_padding_changes_neither_loss_nor_gradients(attention):
    model = tiny_model(attention)
    for batch in make_batches(3):
        static = StaticBatch(batch_shape(batch, BUCKETS), torch.device("cpu"))
        static.load(batch.to("cpu"))
        assert static.batch.num_tokens > batch.num_tokens  # padding is there
        assert_same_step(model, static.batch, batch.to("cpu"))


class StaleCuSeqlens(StaticBatch):
    """A wrong copy: the previous batch's cu_seqlens stay."""

    def load(self, batch):
        stale = self.batch.cu_seqlens.clone()
        super().load(batch)
        self.batch.cu_seqlens.copy_(stale)


class RawTokenIndex(StaticBatch):
    """A wrong copy: token_index as made for the batch's own max_seqlen."""

    def load(self, batch):
        super().load(batch)
        self.batch.token_index[: batch.num_tokens].copy_(batch.token_index)


def test_the_equality_check_fails_on_stale_cu_seqlens():
    model = tiny_model()
    first, second = (b.to("cpu") for b in same_shape_pair(make_batches(12)))
    static = StaleCuSeqlens(batch_shape(first, BUCKETS), torch.device("cpu"))
    static.load(first)
    static.load(second)
    with pytest.raises(AssertionError):
        assert_same_step(model, static.batch, second)


def test_the_equality_check_fails_on_a_token_index_for_another_max_seqlen():
    model = tiny_model()
    batch = next(b for b in make_batches(8) if b.max_seqlen < batch_shape(b, BUCKETS).max_seqlen)
    static = RawTokenIndex(batch_shape(batch, BUCKETS), torch.device("cpu"))
    static.load(batch.to("cpu"))
    with pytest.raises(AssertionError):
        assert_same_step(model, static.batch, batch.to("cpu"))


# ---- the cache ------------------------------------------------------------------------------


def summing_cache(backend, max_shapes: int = 8) -> GraphCache:
    """A cache whose "step" sums the static token ids (padding ids are 0): a replay's value
    shows which batch the buffers hold."""
    return GraphCache(
        BUCKETS,
        lambda b: b.input_ids.sum(),
        lambda b: None,
        backend,
        torch.device("cpu"),
        max_shapes,
    )


def test_one_capture_per_shape_and_a_replay_per_batch():
    backend = EagerBackend()
    cache = summing_cache(backend)
    batches = [b.to("cpu") for b in make_batches(12)]
    for batch in batches:
        assert int(cache.run(batch)) == int(batch.input_ids.sum())
    shapes = [batch_shape(b, BUCKETS) for b in batches]
    assert backend.captures == list(dict.fromkeys(shapes))  # once each, in first-seen order
    assert len(set(shapes)) < len(shapes)  # some shape came back
    assert backend.replays == {s: shapes.count(s) for s in set(shapes)}
    assert cache.metrics() == {
        "graph_captures": len(set(shapes)),
        "graph_replays": len(batches),
        "graph_fallbacks": 0,
    }


def test_unbucketed_and_unseen_shapes_fall_back_and_are_counted():
    backend = EagerBackend()
    cache = summing_cache(backend, max_shapes=1)
    batches = [b.to("cpu") for b in make_batches(12)]
    first = batch_shape(batches[0], BUCKETS)
    other = next(b for b in batches if batch_shape(b, BUCKETS) != first)
    rng = np.random.default_rng(1)
    odd = pack_samples(generate_samples(rng, successor_table(0, VOCAB), 3, 32, 5))
    assert cache.run(batches[0]) is not None
    assert cache.run(other) is None  # a new shape past max_shapes
    assert cache.run(odd) is None  # 3 sequences: no bucket
    assert cache.run(batches[0]) is not None
    assert backend.captures == [first] and backend.replays == {first: 2}
    assert cache.counts.fallbacks == 2 and cache.counts.replays == 2


def test_replayed_steps_equal_eager_and_read_nothing_back(monkeypatch):
    """The cache with the model's step: each replay's loss is the unpadded batch's, and the
    copies and the step read no device value on the host (a sync on a GPU)."""
    model = tiny_model()

    def step(batch):
        mlm_logits, nsp_logits = model(batch)
        return sum(model.loss(mlm_logits, nsp_logits, batch)).detach()

    cache = GraphCache(BUCKETS, step, lambda b: None, EagerBackend(), torch.device("cpu"), 8)
    batches = [b.to("cpu") for b in make_batches(6)]
    for batch in batches:  # capture every shape first; the copies then run with reads refused
        cache.run(batch)
    forbid_host_reads(monkeypatch)
    losses = [cache.run(batch) for batch in batches]
    monkeypatch.undo()
    for batch, loss in zip(batches, losses):
        torch.testing.assert_close(loss, step(batch))


# ---- on a GPU: the real capture -------------------------------------------------------------


def graphed_model_step(model, autocast_dtype):
    """The step a graph captures: forward and backward into the fixed .grad tensors."""

    def forward(batch):
        with torch.autocast("cuda", dtype=autocast_dtype, enabled=autocast_dtype is not None):
            mlm_logits, nsp_logits = model(batch)
        return sum(model.loss(mlm_logits, nsp_logits, batch))

    def step(batch):
        loss = forward(batch)
        loss.backward()
        return loss.detach()

    def warm_up(batch):
        torch.autograd.grad(forward(batch), list(model.parameters()), allow_unused=True)

    return step, warm_up


def cuda_cache(attention, dtype):
    """A tiny model on the GPU with its gradients allocated once, a twin for the eager
    steps, and a cache capturing the model's step with CudaGraphBackend."""
    require_cuda()
    device = torch.device("cuda")
    model = tiny_model(attention, device)
    eager = copy.deepcopy(model)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    step, warm_up = graphed_model_step(model, dtype)
    cache = GraphCache(BUCKETS, step, warm_up, CudaGraphBackend(device), device, 8)
    batches = [b.to(device) for b in make_batches(12)]
    return model, eager, cache, batches


@pytest.mark.gpu
@pytest.mark.parametrize(
    "attention,dtype,tol",
    [("padded_sdpa", None, None), ("flash_varlen", torch.bfloat16, 2e-2)],
)
def test_graph_replay_equals_eager_on_cuda(attention, dtype, tol):
    """Two shapes replayed in turn (A, B, A'): every replay's loss and gradients equal the
    eager unpadded step's; two replays without zeroing add up like two backwards; the
    gradients stay at the addresses the graphs write to."""
    model, eager, cache, batches = cuda_cache(attention, dtype)
    addresses = [p.grad.data_ptr() for p in model.parameters()]
    a, a2 = same_shape_pair(batches)
    b = next(x for x in batches if batch_shape(x, BUCKETS) != batch_shape(a, BUCKETS))
    for batch in (a, b, a2):
        model.zero_grad(set_to_none=False)
        loss = cache.run(batch)
        want_loss, want_grads = loss_and_grads(eager, batch, dtype)
        torch.testing.assert_close(loss, want_loss, rtol=tol, atol=tol)
        for p, want in zip(model.parameters(), want_grads):
            torch.testing.assert_close(p.grad, want, rtol=tol, atol=tol)
    model.zero_grad(set_to_none=False)
    cache.run(a)
    cache.run(a2)  # gradient accumulation over micro-batches of one shape
    grads_a, grads_a2 = (loss_and_grads(eager, x, dtype)[1] for x in (a, a2))
    summed = [x + y for x, y in zip(grads_a, grads_a2)]
    for p, want in zip(model.parameters(), summed):
        torch.testing.assert_close(p.grad, want, rtol=tol, atol=tol)
    assert [p.grad.data_ptr() for p in model.parameters()] == addresses
    assert cache.counts.captures == 2 and cache.counts.replays == 5


@pytest.mark.gpu
def test_graph_replays_never_sync_on_cuda():
    """Once a shape is captured, its copies and replays run under CUDA's sync debug mode."""
    model, _, cache, batches = cuda_cache("flash_varlen", torch.bfloat16)
    for batch in batches:
        cache.run(batch)  # every capture (each synchronizes once) before the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        losses = [cache.run(batch).clone() for batch in batches]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(torch.isfinite(loss).item() for loss in losses)
