"""data.comm.wire and data.comm.host in one process: encoding, the gathered batch, LocalComm.

The multi-process paths (MPIComm, GlooComm) run in tests/integration/test_data_distributed.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from data.comm.host import LocalComm, allgather_batch, make_host_comm
from data.comm.mpi import mpi_launched
from data.comm.wire import GlobalBatch, encode, payload_size
from data.order.strategies import balance
from data.packing import Sample, pack_samples

from exchange_samples import random_samples


def assert_same(a: Sample, b: Sample) -> None:
    for x, y in zip(a[:4], b[:4]):
        np.testing.assert_array_equal(x, y)
    assert a.nsp_label == b.nsp_label


def simulated_gather(per_rank: list[list[Sample]]) -> GlobalBatch:
    """What every rank holds after the two all-gathers of a world of len(per_rank) ranks."""
    encoded = [encode(s, np.array([[r, i] for i in range(len(s))])) for r, s in enumerate(per_rank)]
    return GlobalBatch([m for m, _ in encoded], [p for _, p in encoded])


def test_encode_layout():
    samples = random_samples(np.random.default_rng(0), 4)
    meta, payload = encode(samples, np.array([[7, 0], [7, 1], [8, 5], [9, 2]]))
    assert meta.shape == (4, 5) and payload.dtype == np.int16
    assert meta[:, 0].tolist() == [len(s.input_ids) for s in samples]
    assert meta[:, 3:].tolist() == [[7, 0], [7, 1], [8, 5], [9, 2]]
    assert payload.size == payload_size(meta)
    tokens = meta[:, 0].sum()
    np.testing.assert_array_equal(payload[:tokens], np.concatenate([s.input_ids for s in samples]))


@pytest.mark.parametrize("world, local", [(1, 1), (1, 5), (3, 4), (8, 7)])
def test_gathered_batch_decodes_every_row(world, local):
    rng = np.random.default_rng(world * 10 + local)
    per_rank = [random_samples(rng, local) for _ in range(world)]
    pooled = simulated_gather(per_rank)
    flat = [s for rank in per_rank for s in rank]
    assert len(pooled) == world * local
    assert pooled.lengths.tolist() == [len(s.input_ids) for s in flat]
    rows = rng.permutation(world * local)
    for row, sample in zip(rows, pooled.samples(rows)):
        assert_same(sample, flat[row])
        assert pooled.origin[row].tolist() == [row // local, row % local]


def test_balanced_rows_pack_like_the_original_samples():
    rng = np.random.default_rng(5)
    per_rank = [random_samples(rng, 6) for _ in range(4)]
    pooled = simulated_gather(per_rank)
    flat = [s for rank in per_rank for s in rank]
    assignment = balance("serpentine", pooled.lengths, 4, 4)
    for rows in assignment:
        got, expected = pack_samples(pooled.samples(rows)), pack_samples([flat[i] for i in rows])
        for name in (
            "input_ids",
            "segment_ids",
            "cu_seqlens",
            "masked_positions",
            "masked_labels",
            "nsp_labels",
            "token_index",
        ):
            np.testing.assert_array_equal(getattr(got, name), getattr(expected, name))


def test_local_comm():
    comm = LocalComm()
    assert (comm.rank, comm.size) == (0, 1)
    assert comm.allgather_obj({"a": 1}) == [{"a": 1}]
    (out,) = comm.allgather_array(np.arange(5, dtype=np.int16))
    assert out.dtype == np.int16 and out.tolist() == [0, 1, 2, 3, 4]
    assert comm.split(3) is comm
    assert isinstance(make_host_comm(1), LocalComm)


def test_allgather_batch_with_local_comm_is_the_identity():
    samples = random_samples(np.random.default_rng(2), 5)
    origin = np.array([[1, i] for i in range(5)])
    pooled = allgather_batch(LocalComm(), samples, origin)
    for got, expected in zip(pooled.samples(range(5)), samples):
        assert_same(got, expected)
    np.testing.assert_array_equal(pooled.origin, origin)


@pytest.mark.parametrize("var", ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"])
def test_mpi_launch_is_detected(monkeypatch, var):
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert not mpi_launched()
    monkeypatch.setenv(var, "2")
    assert mpi_launched()


def test_world_without_any_comm_is_an_error(monkeypatch):
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="no way to exchange"):
        make_host_comm(2)


def test_gloo_host_comm_waits_as_long_as_dist_timeout_s(monkeypatch):
    """A new gloo group does not inherit init_process_group's timeout (torch's default for it
    is 30 minutes): the data pipeline's groups, the world's and the node groups split from it,
    are made with the run's dist.timeout_s, so a lost rank ends the run in that time."""
    from datetime import timedelta

    import torch.distributed as dist

    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    made = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(dist, "new_group", lambda **kw: made.append(kw) or object())

    def all_gather_object(out, obj, group=None):  # every rank answers color 0 or 1
        out[:] = [0, 0, 1, 1]

    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    comm = make_host_comm(4, 12.5)
    node = comm.split(0)
    assert node.ranks == [0, 1] and node.timeout_s == 12.5
    assert [kw["timeout"] for kw in made] == [timedelta(seconds=12.5)] * 3
    assert all(kw["backend"] == "gloo" for kw in made)
