"""Fixed-length (padded) HDF5 -> the variable-length format training reads, file by file."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from data.prepare.fixed import read_fixed
from data.prepare.parallel import run_parallel
from data.sources.shards import write_samples


@dataclass(frozen=True)
class ConvertJob:
    src: Path
    dst: Path
    max_seq_length: int
    max_predictions: int


def convert_file(job: ConvertJob) -> tuple[Path, int]:
    samples = read_fixed(job.src, job.max_seq_length, job.max_predictions)
    write_samples(job.dst, samples)  # atomic
    return job.dst, len(samples)


def to_varlen(inputs: Sequence[str | os.PathLike], out_dir: str | os.PathLike,
              max_seq_length: int = 512, max_predictions: int = 76, workers: int = 1,
              log=print) -> list[Path]:
    """Each input to a same-named file in `out_dir`; existing outputs are skipped."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [ConvertJob(Path(p), out / Path(p).name, max_seq_length, max_predictions)
            for p in inputs]
    todo = [j for j in jobs if not j.dst.exists()]
    for path, count in run_parallel(convert_file, todo, workers):
        log(f"to-varlen: wrote {path} ({count} samples)")
    return [j.dst for j in jobs]
