"""Tests for data/order/bucketing.py: buckets, exactly-once passes, resume, two ranks (CPU,
fast)."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from data.order import bucketing as bk
from data.order import curricula
from data.order import curriculum as cur

BOUNDS = [16, 32, 64, 128]


def make_pool(n: int = 600, seed: int = 0, shard: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """lengths (n,) in 1..128 and provenance (n, 2) = (shard, i)."""
    lengths = np.random.default_rng(seed).integers(1, 129, size=n)
    prov = np.stack([np.full(n, shard), np.arange(n)], axis=1)
    return lengths, prov


def fake_losses(step: int, bucket: int) -> tuple[float, float]:
    before = 6.0 - 0.01 * step + 0.1 * bucket
    return before, before - 0.02 * (1 + (bucket * 7 + step) % 3)


def drive(stream: bk.CurriculumSampler, steps: range) -> list[bk.BucketBatch]:
    """Draw and feed back losses step by step, like a trainer without prefetch."""
    out = []
    for step in steps:
        batch = stream.next_batch(step)
        stream.update(batch.bucket, *fake_losses(step, batch.bucket))
        out.append(batch)
    return out


def check_passes(sampler: bk.BucketSampler, batches: list[bk.BucketBatch]) -> int:
    """Every completed pass of every bucket used each member exactly once; no batch repeats a
    sample; returns the number of completed passes checked."""
    seen = defaultdict(list)  # (bucket, pass) -> pool indices
    for batch in batches:
        assert len(set(batch.indices.tolist())) == batch.indices.size
        for i, p in zip(batch.indices.tolist(), batch.passes.tolist()):
            seen[(batch.bucket, p)].append(i)
    checked = 0
    for (b, p), indices in seen.items():
        if p < sampler.passes[b]:  # completed
            dropped_ok = sampler.tail == "drop"
            members = sampler.members[b].tolist()
            if dropped_ok:
                assert len(indices) == len(set(indices))
                assert set(indices) <= set(members)
                assert len(members) - len(indices) < sampler.batch_size
            else:
                assert sorted(indices) == members
            checked += 1
        else:  # in progress: no repeats so far
            assert len(indices) == len(set(indices))
    return checked


# ------------------------------------------------------------------------- boundaries


def test_uniform_boundaries_and_bucket_of():
    assert bk.uniform_boundaries(128, 16) == [16, 32, 48, 64, 80, 96, 112, 128]
    assert bk.uniform_boundaries(100, 32) == [32, 64, 96, 100]
    lengths = np.array([1, 16, 17, 32, 33, 128])
    assert bk.bucket_of(lengths, BOUNDS).tolist() == [0, 0, 1, 1, 2, 3]
    assert bk.bucket_counts(lengths, BOUNDS).tolist() == [2, 2, 1, 1]


@pytest.mark.parametrize("bad", [[], [0, 16], [32, 16], [16, 16]])
def test_bad_boundaries(bad):
    with pytest.raises(ValueError, match="boundaries"):
        bk.check_boundaries(bad)


def test_length_outside_buckets():
    with pytest.raises(ValueError, match="sample 1: length 129"):
        bk.bucket_of(np.array([5, 129]), BOUNDS)
    with pytest.raises(ValueError, match="length 0"):
        bk.bucket_of(np.array([0]), BOUNDS)


def test_small_bucket_is_refused_with_sizes():
    lengths = np.array([5] * 10 + [100] * 3)
    with pytest.raises(ValueError, match=r"bucket 1 \(lengths 17..32\) holds 0 samples"):
        bk.BucketSampler(lengths, BOUNDS, batch_size=4, seed=0)


def test_bad_provenance_shape():
    with pytest.raises(ValueError, match="provenance"):
        bk.BucketSampler(np.full(8, 10), [16], 2, seed=0, provenance=np.zeros((8, 3)))


# ------------------------------------------------------------------------- drawing


@pytest.mark.parametrize("tail", ["carry", "drop"])
def test_batches_stay_in_their_bucket_and_passes_are_exact(tail):
    lengths, prov = make_pool(700, seed=1, shard=3)
    s = bk.BucketSampler(lengths, BOUNDS, batch_size=32, seed=5, provenance=prov, tail=tail)
    rng = np.random.default_rng(0)
    batches = [s.draw(int(b)) for b in rng.integers(0, 4, size=300)]
    edges = [0] + BOUNDS
    for batch in batches:
        assert batch.indices.size == 32
        assert np.all(
            (batch.lengths > edges[batch.bucket]) & (batch.lengths <= edges[batch.bucket + 1])
        )
        np.testing.assert_array_equal(batch.lengths, lengths[batch.indices])
        np.testing.assert_array_equal(batch.provenance, prov[batch.indices])
    assert check_passes(s, batches) >= 4 * 3
    if tail == "drop":
        assert s.dropped.sum() > 0
    else:
        assert s.dropped.sum() == 0
        # carry loses nothing: every drawn sample is a pass member, counted once per pass
        assert sum(b.indices.size for b in batches) == 300 * 32


def test_carry_batch_straddles_two_passes_without_repeats():
    # one bucket of 10 samples, batches of 4: the third batch is 2 old + 2 new
    s = bk.BucketSampler(np.full(10, 8), [16], batch_size=4, seed=0)
    draws = [s.draw(0) for _ in range(5)]
    assert draws[2].passes.tolist() == [0, 0, 1, 1]
    for batch in draws:
        assert len(set(batch.indices.tolist())) == 4
    assert sorted(np.concatenate([d.indices for d in draws])[:10].tolist()) == list(range(10))
    assert s.passes[0] == 2 and s.offsets[0] == 0  # 20 samples = exactly two passes


def test_many_straddles_never_repeat_inside_a_batch():
    # buckets barely larger than the batch: straddles at almost every draw
    lengths = np.array([10] * 9 + [20] * 11)
    s = bk.BucketSampler(lengths, [16, 32], batch_size=7, seed=2)
    rng = np.random.default_rng(1)
    batches = [s.draw(int(b)) for b in rng.integers(0, 2, size=200)]
    assert check_passes(s, batches) > 50


def test_default_provenance_is_shard_zero_in_order():
    s = bk.BucketSampler(np.full(6, 3), [4], batch_size=3, seed=0)
    batch = s.draw(0)
    np.testing.assert_array_equal(batch.provenance[:, 0], 0)
    np.testing.assert_array_equal(batch.provenance[:, 1], batch.indices)


def test_deterministic_by_seed():
    lengths, prov = make_pool()
    buckets = np.random.default_rng(0).integers(0, 4, size=50)
    a = bk.BucketSampler(lengths, BOUNDS, 16, seed=7, provenance=prov)
    b = bk.BucketSampler(lengths, BOUNDS, 16, seed=7, provenance=prov)
    c = bk.BucketSampler(lengths, BOUNDS, 16, seed=8, provenance=prov)
    da = [a.draw(int(k)).indices for k in buckets]
    db = [b.draw(int(k)).indices for k in buckets]
    dc = [c.draw(int(k)).indices for k in buckets]
    assert all(np.array_equal(x, y) for x, y in zip(da, db))
    assert not all(np.array_equal(x, y) for x, y in zip(da, dc))


@pytest.mark.parametrize("tail", ["carry", "drop"])
def test_sampler_state_resume_mid_pass(tail):
    lengths, prov = make_pool(300, seed=4)
    buckets = np.random.default_rng(3).integers(0, 4, size=120)
    a = bk.BucketSampler(lengths, BOUNDS, 16, seed=1, provenance=prov, tail=tail)
    for k in buckets[:47]:
        a.draw(int(k))
    state = json.loads(json.dumps(a.state_dict()))
    rest_a = [a.draw(int(k)).indices for k in buckets[47:]]
    b = bk.BucketSampler(lengths, BOUNDS, 16, seed=1, provenance=prov, tail=tail)
    b.load_state_dict(state)
    rest_b = [b.draw(int(k)).indices for k in buckets[47:]]
    assert all(np.array_equal(x, y) for x, y in zip(rest_a, rest_b))
    assert a.state_dict() == b.state_dict()


def test_sampler_state_rejects_another_pool_or_seed():
    lengths, prov = make_pool(300)
    state = bk.BucketSampler(lengths, BOUNDS, 16, seed=1).state_dict()
    with pytest.raises(ValueError, match="another sampler"):
        bk.BucketSampler(lengths, BOUNDS, 16, seed=2).load_state_dict(state)
    other = lengths.copy()
    other[0] = other[0] % 128 + 1
    with pytest.raises(ValueError, match="another sampler"):
        bk.BucketSampler(other, BOUNDS, 16, seed=1).load_state_dict(state)


# ------------------------------------------------------------------------- with curricula

CURRICULUM_OPTS = {
    "increasing": {"batches_per_visit": 3},
    "decreasing": {"batches_per_visit": [1, 2, 3, 4]},
    "random": {"batches_per_visit": 2},
    "shuffled": {"batches_per_visit": [2, 3, 1, 2]},
    "loss_controlled": {"targets": 5.5, "window": 2, "max_batches": 15},
    "exp3s": {"eta": 0.3, "gamma": 0.2},
}


def make_stream(
    name: str, lengths, prov, seed: int = 3, rank: int = 0, tail: str = "carry"
) -> bk.CurriculumSampler:
    sampler = bk.BucketSampler(
        lengths, BOUNDS, 16, seed=seed, rank=rank, provenance=prov, tail=tail
    )
    return bk.CurriculumSampler(
        sampler, curricula.make_curriculum(name, 4, seed, **CURRICULUM_OPTS[name])
    )


@pytest.mark.parametrize("name", curricula.CURRICULA)
def test_each_curriculum_covers_buckets_and_uses_samples_once_per_pass(name):
    lengths, prov = make_pool(500, seed=2)
    stream = make_stream(name, lengths, prov)
    batches = drive(stream, range(400))
    assert {b.bucket for b in batches} == {0, 1, 2, 3}
    assert check_passes(stream.sampler, batches) >= 4  # at least one full pass per bucket
    again = drive(make_stream(name, lengths, prov), range(400))
    assert all(np.array_equal(x.indices, y.indices) for x, y in zip(batches, again))


@pytest.mark.parametrize("name", curricula.CURRICULA)
def test_curriculum_sampler_resume_mid_epoch(name):
    lengths, prov = make_pool(500, seed=2)
    a = make_stream(name, lengths, prov)
    drive(a, range(123))
    state = json.loads(json.dumps(a.state_dict()))
    tail_a = drive(a, range(123, 260))
    b = make_stream(name, lengths, prov)
    b.load_state_dict(state)
    tail_b = drive(b, range(123, 260))
    assert [x.bucket for x in tail_a] == [x.bucket for x in tail_b]
    assert all(np.array_equal(x.indices, y.indices) for x, y in zip(tail_a, tail_b))


def test_proportional_round_is_one_epoch():
    # bucket sizes 64, 32, 96, 48 = multiples of B=16: one round of proportional visits
    # (4, 2, 6, 3 batches) uses every sample of the pool exactly once
    lengths = np.repeat([10, 20, 50, 100], [64, 32, 96, 48])
    sampler = bk.BucketSampler(lengths, BOUNDS, 16, seed=0)
    visits = cur.proportional_visits(sampler.bucket_sizes, 15)
    assert visits == [4, 2, 6, 3]
    for name in ("increasing", "decreasing", "random", "shuffled"):
        sampler = bk.BucketSampler(lengths, BOUNDS, 16, seed=0)
        stream = bk.CurriculumSampler(
            sampler, curricula.make_curriculum(name, 4, seed=1, batches_per_visit=visits)
        )
        used = np.concatenate([stream.next_batch(s).indices for s in range(15)])
        assert sorted(used.tolist()) == list(range(lengths.size))


# ------------------------------------------------------------------------- two ranks


@pytest.mark.parametrize("name", curricula.CURRICULA)
def test_two_ranks_agree_on_buckets_and_draw_disjoint_samples(name):
    # one epoch index shared by both ranks, dealt per bucket; samples carry their shard
    lengths, _ = make_pool(1000, seed=6)
    prov = np.stack([np.arange(1000) // 250, np.arange(1000) % 250], axis=1)
    owned = [bk.split_pool_by_bucket(lengths, BOUNDS, r, 2, seed=3) for r in range(2)]
    assert np.intersect1d(owned[0], owned[1]).size == 0
    assert np.union1d(owned[0], owned[1]).size == 1000
    streams = [make_stream(name, lengths[o], prov[o], rank=r) for r, o in enumerate(owned)]
    drawn = [[], []]
    for step in range(300):
        batches = [s.next_batch(step) for s in streams]
        assert batches[0].bucket == batches[1].bucket  # agreement without communication
        for r, batch in enumerate(batches):
            drawn[r].append(batch)
        # the global (all-reduced) loss is the same number on both ranks
        loss = fake_losses(step, batches[0].bucket)
        for s in streams:
            s.update(batches[0].bucket, *loss)
        keys = [{tuple(p) for p in b.provenance.tolist()} for b in batches]
        assert not keys[0] & keys[1]  # disjoint within the step
    assert streams[0].curriculum.fingerprint() == streams[1].curriculum.fingerprint()
    # each rank's first pass of each bucket covers its share; together they cover the pool
    covered = set()
    for r in range(2):
        check_passes(streams[r].sampler, drawn[r])
        for batch in drawn[r]:
            first = batch.passes == 0
            covered |= {tuple(p) for p in batch.provenance[first].tolist()}
    assert covered == {tuple(p) for p in prov.tolist()}


def test_split_pool_balances_buckets():
    lengths, _ = make_pool(1003, seed=8)
    shares = [bk.split_pool_by_bucket(lengths, BOUNDS, r, 3, seed=0) for r in range(3)]
    counts = np.array([bk.bucket_counts(lengths[s], BOUNDS) for s in shares])
    assert np.all(counts.max(axis=0) - counts.min(axis=0) <= 1)
    assert np.array_equal(np.sort(np.concatenate(shares)), np.arange(1003))


def test_describe_is_one_line():
    lengths, prov = make_pool()
    stream = make_stream("exp3s", lengths, prov)
    assert "\n" not in stream.describe() and "boundaries [16, 32, 64, 128]" in stream.describe()
