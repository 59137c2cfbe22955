"""Background preparation of the next steps, and their copy to the device on a side stream.

`Prefetcher(produce, depth)` calls `produce()` on a daemon thread and keeps up to `depth` results
queued, so step k+1 (and k+2, ...) is ready while step k trains ([Zeng], section IV-B).

Failure handling, so that a broken pipeline never hangs or silently stops the run:
- an exception in `produce()` is stored and re-raised by the `get()` that would have returned
  its result, with a note saying it came from the prefetch thread: the results produced before
  it are still handed out, so a failure belongs to its own step however far ahead the thread
  ran (the step a run fails at does not depend on timing), and stays raised after that;
- `get()` waits in short slices and notices a thread that ended without a result;
- `close()` (also via `with`) stops the thread in lockstep with the other ranks (see
  `Prefetcher`) and joins it with a timeout. A thread stuck in a collective whose peer died
  cannot be joined; it is a daemon and dies with the process.

`DeviceTransfer` moves host PackedBatches to a CUDA device from the prefetch thread: the numpy
arrays are copied into pinned memory, then copied to the device with non_blocking=True on a
side stream, and an event is recorded there. The consumer makes its stream wait on that event
(no host sync) and calls record_stream so the caching allocator does not reuse the device
memory while the consumer's stream may still read it. On CPU it only wraps arrays as tensors.
"""

from __future__ import annotations

import queue
import threading
import warnings
from typing import Callable, Generic, NamedTuple, Sequence, TypeVar

import torch

from data.packing import PackedBatch

T = TypeVar("T")
POLL_S = 0.05  # wake-up period of blocking waits: bounds the reaction time to stop/failure


class _Done(NamedTuple):
    """Queued by the thread when it ends (failure or stop), so a waiting get() wakes up."""


class Prefetcher(Generic[T]):
    """Runs `produce()` repeatedly on a daemon thread, up to `depth` results ahead.

    Lockstep shutdown: when `produce()` takes part in collectives (the host exchange), every
    rank's thread must run it the same number of times, or a peer waits forever in a
    collective that this rank never enters. At any moment a thread has run it at most
    gets + depth + 1 times (depth queued, one waiting for room), and all ranks close after the
    same number of gets; so `close(finish=True)` lets the thread run exactly
    gets + depth + 1 times in total, dropping the results, and then stop.
    """

    def __init__(
        self,
        produce: Callable[[], T],
        depth: int = 2,
        name: str = "prefetch",
        join_timeout_s: float = 30.0,
    ):
        if depth < 1:
            raise ValueError(f"Prefetcher: depth={depth} must be >= 1")
        self._produce = produce
        self._depth = depth
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()  # set by close(): stop queueing
        self._limit = float("inf")  # total produce() calls allowed; set by close()
        self._produced = 0
        self._gets = 0
        self._error: BaseException | None = None
        self._join_timeout_s = join_timeout_s
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def get(self, timeout: float | None = None) -> T:
        """The next result; re-raises the thread's exception; TimeoutError after `timeout` s."""
        if self._stop.is_set():
            raise RuntimeError("prefetch thread is not running (closed)")
        waited = 0.0
        while True:
            try:
                item = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                waited += POLL_S
                if not self._thread.is_alive():
                    self._raise_if_failed()
                    raise RuntimeError("prefetch thread is not running (closed?)")
                if timeout is not None and waited >= timeout:
                    raise TimeoutError(f"no prefetched result within {timeout} s")
                continue
            if isinstance(item, _Done):  # queued after the last result (and after any error)
                self._queue.put_nowait(item)  # keep waking later get() calls
                self._raise_if_failed()
                continue
            self._gets += 1
            return item

    def close(self, finish: bool = True) -> None:
        """Stop the thread and wait for it (bounded); queued results are dropped.

        finish: run produce() up to the lockstep count first (see class docstring). Pass
        False on an error path: peers may be gone, so the thread is left where it is (it is a
        daemon) after a short join.
        """
        self._limit = self._gets + self._depth + 1 if finish else self._produced
        self._stop.set()
        self._drain()  # frees memory early; the thread sees the stop within POLL_S
        self._thread.join(self._join_timeout_s if finish else min(1.0, self._join_timeout_s))
        self._drain()
        if finish and self._thread.is_alive():
            warnings.warn(
                f"prefetch thread {self._thread.name} did not stop within "
                f"{self._join_timeout_s} s (blocked in I/O or a collective?)"
            )

    def __enter__(self) -> "Prefetcher[T]":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(finish=exc_type is None)

    def _run(self) -> None:
        try:
            while self._produced < self._limit:
                item = self._produce()
                self._produced += 1
                self._put(item)  # dropped once stopping
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, never lost
            err.add_note(f"(raised in the data prefetch thread {self._thread.name})")
            self._error = err
        self._put(_Done())

    def _put(self, item) -> bool:
        """Queue item unless stopped first; False when stopped."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _drain(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return


class Transferred(NamedTuple):
    """Batches whose device copy was issued; `event` is None when no copy stream is used."""

    batches: list[PackedBatch]
    event: object


class DeviceTransfer:
    """Host PackedBatches -> device, copied on a side CUDA stream (see module docstring)."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.stream = None
        if self.device.type == "cuda":
            self.stream = torch.cuda.Stream(device=self.device)

    def start(self, batches: Sequence[PackedBatch]) -> Transferred:
        """Issue the copies (called on the prefetch thread); returns at once on CUDA."""
        if self.stream is None:
            return Transferred([b.to(self.device) for b in batches], None)
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            moved = [b.to("cpu").pin_memory().to(self.device, non_blocking=True) for b in batches]
            event = torch.cuda.Event()
            event.record(self.stream)
        return Transferred(moved, event)

    def finish(self, transferred: Transferred) -> list[PackedBatch]:
        """Order the copies before work queued next on the current stream (main thread)."""
        if transferred.event is None:
            return transferred.batches
        current = torch.cuda.current_stream(self.device)
        current.wait_event(transferred.event)
        for batch in transferred.batches:
            for tensor in batch.tensors():
                tensor.record_stream(current)
        return transferred.batches
