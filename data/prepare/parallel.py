"""Process-parallel map over files, one file per task so memory stays bounded per worker."""

from __future__ import annotations

import multiprocessing as mp
import os
from dataclasses import dataclass
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class StepRun:
    """How a folder step (examples, to-varlen, reshard) runs: its files on `workers`
    processes (`run_parallel`), a line per written file to `log`, and progress and the disk
    estimate on stderr unless `show_progress` is False."""

    workers: int = 1
    log: Callable[[str], None] = print
    show_progress: bool = True

    def map(
        self, fn: Callable[[T], R], tasks: Iterable[T], on_result: Callable[[R], None] | None
    ) -> list[R]:
        return run_parallel(fn, tasks, self.workers, on_result)


def _init_worker() -> None:
    # Each worker tokenizes on its own core; the tokenizers Rust thread pool would otherwise
    # start one thread per core in every worker.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


def _indexed(job: tuple[Callable, int, object]) -> tuple[int, object, Exception | None]:
    """(index, result, None), or (index, None, the exception): a failed task does not stop
    the others, as with Pool.map."""
    fn, index, task = job
    try:
        return index, fn(task), None
    except Exception as err:  # raised in the parent once every task has finished
        return index, None, err


def run_parallel(
    fn: Callable[[T], R],
    tasks: Iterable[T],
    workers: int,
    on_result: Callable[[R], None] | None = None,
) -> list[R]:
    """[fn(t) for t in tasks], in order, on `workers` processes (in-process when workers <= 1).

    `on_result` is called with each result as soon as its task finishes (in finishing order),
    which is what lets a step report progress while the others run. Workers are spawned, not
    forked: a fork after the parent has started threads (tokenizers' pool, torch's OpenMP) can
    deadlock the child. An exception in any task is raised here, after the other tasks have
    finished (so their outputs are complete); of several, the first task's.
    """
    tasks = list(tasks)
    report = on_result or (lambda _: None)
    results: list = [None] * len(tasks)
    if workers <= 1 or len(tasks) <= 1:
        for index, task in enumerate(tasks):
            results[index] = fn(task)
            report(results[index])
        return results
    ctx = mp.get_context("spawn")
    jobs = [(fn, index, task) for index, task in enumerate(tasks)]
    errors: dict[int, Exception] = {}
    with ctx.Pool(min(workers, len(tasks)), initializer=_init_worker) as pool:
        for index, result, error in pool.imap_unordered(_indexed, jobs, chunksize=1):
            if error is not None:
                errors[index] = error
                continue
            results[index] = result
            report(result)
    if errors:
        raise errors[min(errors)]
    return results
