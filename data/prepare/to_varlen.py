"""Fixed-length (padded) HDF5 -> the variable-length format training reads, file by file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from bert.core.files import remove_stale_temps
from data.prepare.disk import check_disk, content_bytes
from data.prepare.fixed import read_fixed
from data.prepare.parallel import StepRun
from data.prepare.progress import Progress
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


def to_varlen(
    inputs: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    max_seq_length: int = 512,
    max_predictions: int = 76,
    run: StepRun = StepRun(),
) -> list[Path]:
    """Each input to a same-named file in `out_dir`; existing outputs are skipped."""
    out = Path(out_dir)
    jobs = [
        ConvertJob(Path(p), out / Path(p).name, max_seq_length, max_predictions) for p in inputs
    ]
    todo = [j for j in jobs if not j.dst.exists()]
    sizes = {j.dst: content_bytes(j.src) for j in todo}
    check_disk(
        "to-varlen",
        sum(sizes.values()),
        out,
        f"{len(todo)} files, their samples' real tokens",
        run.show_progress,
    )
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out)
    progress = Progress("to-varlen", len(todo), sum(sizes.values()), run.show_progress)

    def finished(result: tuple[Path, int]) -> None:
        path, count = result
        run.log(f"to-varlen: wrote {path} ({count} samples)")
        progress.done(count, sizes[path])

    run.map(convert_file, todo, finished)
    return [j.dst for j in jobs]
