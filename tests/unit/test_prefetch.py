"""data.prefetch: order, depth, failure propagation, shutdown; the device copy (GPU test gated)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from gpu_gate import require_cuda
from data.packing import Sample, pack_samples
from data.prefetch import DeviceTransfer, Prefetcher


class Counter:
    """produce(): 0, 1, 2, ...; raises at call `fail_at`; blocks forever at `block_at`."""

    def __init__(self, fail_at: int = -1, block_at: int = -1):
        self.calls = 0
        self.fail_at, self.block_at = fail_at, block_at
        self.release = threading.Event()

    def __call__(self) -> int:
        n = self.calls
        if n == self.fail_at:
            raise ValueError(f"broken batch {n}")
        if n == self.block_at:
            self.release.wait()  # a collective whose peer never comes
        self.calls += 1
        return n


# Waits and joins below are bounded only so that a broken Prefetcher fails instead of hanging;
# a passing run never waits for the bound, so it is generous: a loaded machine can stall a
# thread for seconds. No assertion depends on how long something took.
WAIT_S = 60.0


def wait_until(cond, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_results_come_in_order_and_at_most_depth_ahead():
    produce = Counter()
    with Prefetcher(produce, depth=2) as prefetcher:
        wait_until(lambda: produce.calls == 3)  # 2 queued + 1 waiting to be queued
        time.sleep(0.2)
        assert produce.calls == 3
        assert [prefetcher.get() for _ in range(5)] == [0, 1, 2, 3, 4]
        wait_until(lambda: produce.calls == 8)
        time.sleep(0.2)
        assert produce.calls == 8


def test_exception_is_raised_by_the_get_of_its_own_result():
    """The failure belongs to its step, not to whichever get() runs after the thread failed:
    the results made before it still come (a timing-dependent failing step made the pipeline's
    test flaky)."""
    produce = Counter(fail_at=2)
    with Prefetcher(produce, depth=4) as prefetcher:
        wait_until(lambda: prefetcher._error is not None)
        assert [prefetcher.get(), prefetcher.get()] == [0, 1]  # made before the failure
        with pytest.raises(ValueError, match="broken batch 2") as info:
            prefetcher.get()
        assert any("prefetch thread" in note for note in info.value.__notes__)
        with pytest.raises(ValueError):  # and it stays failed
            prefetcher.get()


def test_waiting_get_wakes_up_on_failure():
    produce = Counter(fail_at=0)
    slow_start = threading.Event()

    def produce_later():
        slow_start.wait(0.3)
        return produce()

    with Prefetcher(produce_later, depth=1) as prefetcher:
        with pytest.raises(ValueError):
            prefetcher.get(timeout=WAIT_S)


def test_get_times_out_when_nothing_comes():
    produce = Counter(block_at=0)
    prefetcher = Prefetcher(produce, depth=1, join_timeout_s=0.2)
    with pytest.raises(TimeoutError):
        prefetcher.get(timeout=0.2)
    produce.release.set()
    prefetcher.close()


def test_close_stops_a_thread_blocked_on_a_full_queue():
    produce = Counter()
    prefetcher = Prefetcher(produce, depth=1)
    wait_until(lambda: produce.calls == 2)
    prefetcher.close()
    assert not prefetcher._thread.is_alive()
    with pytest.raises(RuntimeError, match="not running"):
        prefetcher.get()


def test_close_gives_up_on_a_stuck_thread_with_a_warning():
    produce = Counter(block_at=0)
    prefetcher = Prefetcher(produce, depth=1, join_timeout_s=0.1)
    assert prefetcher._thread.daemon  # cannot keep the process alive
    with pytest.warns(UserWarning, match="did not stop"):
        prefetcher.close()
    produce.release.set()
    wait_until(lambda: not prefetcher._thread.is_alive())


def test_bad_depth():
    with pytest.raises(ValueError, match="depth"):
        Prefetcher(Counter(), depth=0)


def _batch():
    rng = np.random.default_rng(0)
    samples = []
    for length in (5, 9, 3):
        ids = rng.integers(0, 100, length).astype(np.int16)
        samples.append(Sample(ids, np.zeros(length, np.int8), np.array([1], np.int16), ids[[1]], 1))
    return pack_samples(samples)


def _assert_same(moved, host, device_type: str):
    for name in (
        "input_ids",
        "segment_ids",
        "position_ids",
        "token_index",
        "cu_seqlens",
        "masked_positions",
        "masked_labels",
        "nsp_labels",
    ):
        tensor = getattr(moved, name)
        assert isinstance(tensor, torch.Tensor) and tensor.device.type == device_type
        np.testing.assert_array_equal(tensor.cpu().numpy(), getattr(host, name))
    assert moved.max_seqlen == host.max_seqlen


def test_device_transfer_on_cpu_wraps_arrays():
    host = _batch()
    transfer = DeviceTransfer("cpu")
    started = transfer.start([host, host])
    assert started.event is None
    for moved in transfer.finish(started):
        _assert_same(moved, host, "cpu")


@pytest.mark.gpu
def test_device_transfer_on_cuda_uses_a_side_stream():
    require_cuda()  # queried at run time, never at collection
    host = _batch()
    transfer = DeviceTransfer("cuda")
    assert transfer.stream != torch.cuda.current_stream()
    results = {}

    def on_thread():  # the copies are issued by the prefetch thread in training
        results["started"] = transfer.start([host])

    worker = threading.Thread(target=on_thread)
    worker.start()
    worker.join()
    started = results["started"]
    assert isinstance(started.event, torch.cuda.Event)
    (moved,) = transfer.finish(started)
    doubled = moved.input_ids * 2  # queued on the current stream after wait_event
    np.testing.assert_array_equal(doubled.cpu().numpy(), host.input_ids * 2)
    _assert_same(moved, host, "cuda")


def test_ranks_that_close_at_different_times_stop_after_the_same_collective():
    """produce() is a 2-party collective (a barrier); rank 1's thread lags behind and rank 1
    closes first, while rank 0's thread may already wait in the next collective. Both threads
    must stop after the same number of calls, none left waiting."""
    barrier = threading.Barrier(2, timeout=WAIT_S)
    calls = [0, 0]

    def produce(rank):
        def step():
            barrier.wait()
            if rank == 1:
                time.sleep(0.05)  # slow host work on this rank
            calls[rank] += 1
            return calls[rank]

        return step

    ranks = [Prefetcher(produce(r), depth=2, join_timeout_s=WAIT_S) for r in range(2)]
    for p in ranks:
        assert [p.get() for _ in range(3)] == [1, 2, 3]
    ranks[1].close()
    ranks[0].close()
    assert calls == [3 + 2 + 1] * 2
    assert not barrier.broken
    assert not any(p._thread.is_alive() for p in ranks)
