"""Text shards -> fixed-length HDF5 examples, one output file per input shard.

Each shard is processed on its own, as the reference does (one create_pretraining_data.py
process per shard, every one with --random_seed=12345): the random-next sentences of a shard
come from that shard's documents. Shards run in parallel, one per worker process, so a worker
holds one shard's documents and instances at a time. Outputs that exist are skipped, and each
is written atomically, so an interrupted run is resumed by running it again.
"""

from __future__ import annotations

import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from bert.core.files import remove_stale_temps
from data.prepare.disk import check_disk, text_estimate
from data.prepare.fixed import write_fixed
from data.prepare.instances import (
    ExampleParams,
    compiled_code_cached,
    create_instances,
    load_compiled_code,
)
from data.prepare.parallel import StepRun
from data.prepare.progress import Progress
from data.prepare.wordpiece import load_tokenizer, read_documents
from data.sources.shards import DataError


@dataclass(frozen=True)
class ShardJob:
    text: Path
    output: Path
    vocab_file: Path
    params: ExampleParams


def output_name(text: Path) -> str:
    """part-00000-of-00500 -> part-00000-of-00500.hdf5; eval.txt -> eval.hdf5."""
    return (text.stem if text.suffix == ".txt" else text.name) + ".hdf5"


def create_examples_file(job: ShardJob) -> tuple[Path, int, float]:
    """One shard: (output path, samples written, seconds)."""
    start = time.perf_counter()
    tokenizer, vocab = load_tokenizer(job.vocab_file)
    documents = read_documents(job.text, tokenizer)
    if not documents:
        # The reference writes an empty output here, which training cannot use.
        raise DataError(
            f"{job.text}: no sentences (an empty text shard, or every line tokenizes to nothing)"
        )
    rng = random.Random(job.params.random_seed)
    instances = create_instances(documents, job.params, vocab, rng)
    write_fixed(job.output, instances, job.params.max_seq_length, job.params.max_predictions)
    return job.output, len(instances), time.perf_counter() - start


def create_examples(
    texts: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    vocab_file: str | os.PathLike,
    params: ExampleParams = ExampleParams(),
    run: StepRun = StepRun(),
) -> list[Path]:
    """All shards into `out_dir`; returns every output path (made now or earlier). The disk
    check runs first."""
    load_tokenizer(vocab_file)  # a bad vocabulary fails here once, before any folder is made
    out = Path(out_dir)
    jobs = [ShardJob(Path(t), out / output_name(Path(t)), Path(vocab_file), params) for t in texts]
    names = [j.output.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError("two input shards map to the same output name; rename them")
    todo = [j for j in jobs if not j.output.exists()]
    if len(todo) < len(jobs):
        run.log(f"examples: {len(jobs) - len(todo)} of {len(jobs)} outputs exist, skipped")
    text_bytes = {j.output: j.text.stat().st_size for j in todo}
    check_disk(
        "examples",
        text_estimate(sum(text_bytes.values()), params.dupe_factor)[0],
        out,
        f"{len(todo)} text files, {FIXED_HOW}",
        run.show_progress,
    )
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out)
    if todo and run.show_progress and not compiled_code_cached():
        # else a first run sits silent through the compile
        print(COMPILE_NOTE, file=sys.stderr, flush=True)
    if run.workers > 1 and len(todo) > 1:
        load_compiled_code()  # compiled here once, not in every worker on a first run
    progress = Progress("examples", len(todo), sum(text_bytes.values()), run.show_progress)

    def finished(result: tuple[Path, int, float]) -> None:
        path, count, seconds = result
        run.log(f"examples: wrote {path} ({count} samples, {seconds:.1f} s)")
        progress.done(count, text_bytes[path])

    run.map(create_examples_file, todo, finished)
    return [j.output for j in jobs]


COMPILE_NOTE = (
    "examples: compiling the instance loop (numba; about 10-20 s on a machine's first run, "
    "cached afterwards)"
)
FIXED_HOW = "fixed-length gzip HDF5 per text byte as measured on the stand-in text"
