"""Process-parallel map over files, one file per task so memory stays bounded per worker."""
from __future__ import annotations

import multiprocessing as mp
import os
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def _init_worker() -> None:
    # Each worker tokenizes on its own core; the tokenizers Rust thread pool would otherwise
    # start one thread per core in every worker.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


def run_parallel(fn: Callable[[T], R], tasks: Iterable[T], workers: int) -> list[R]:
    """[fn(t) for t in tasks], in order, on `workers` processes (in-process when workers <= 1).

    Workers are spawned, not forked: a fork after the parent has started threads (tokenizers'
    pool, torch's OpenMP) can deadlock the child. An exception in any task is raised here.
    """
    tasks = list(tasks)
    if workers <= 1 or len(tasks) <= 1:
        return [fn(t) for t in tasks]
    ctx = mp.get_context("spawn")
    with ctx.Pool(min(workers, len(tasks)), initializer=_init_worker) as pool:
        return pool.map(fn, tasks, chunksize=1)
