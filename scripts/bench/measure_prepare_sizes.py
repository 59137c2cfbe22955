#!/usr/bin/env python3
"""Bytes written by data prep per text byte and per sample: the figures of data/prepare/disk.py.

    python scripts/bench/measure_prepare_sizes.py [--out JSON]

Runs `examples` (MLPerf parameters) on the stand-in text of bench_prepare.py, converts the
result to the variable-length format, and records the sizes of the text, the fixed-length gzip
HDF5 and the variable-length HDF5, plus the variable-length bytes of full-length samples.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts" / "bench")]
from bench_prepare import stand_in_text, train_vocab  # noqa: E402
from bert.tools.common import provenance  # noqa: E402
from data.packing import Sample  # noqa: E402
from data.prepare.create_examples import ShardJob, create_examples_file  # noqa: E402
from data.prepare.fixed import read_fixed  # noqa: E402
from data.prepare.instances import ExampleParams  # noqa: E402
from data.sources.shards import write_samples  # noqa: E402


def full_length_bytes(folder: Path, length: int, predictions: int, count: int = 2000) -> float:
    ids = np.arange(length, dtype=np.int16)
    seg = np.zeros(length, dtype=np.int8)
    pos = np.arange(1, predictions + 1, dtype=np.int16)
    path = write_samples(folder / "full.hdf5", [Sample(ids, seg, pos, pos, 0)] * count)
    return path.stat().st_size / count


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "prepare_sizes_stand_in.json"
    )
    args = p.parse_args(argv)
    params = ExampleParams()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        text = stand_in_text(work)
        vocab = train_vocab(text, work)
        fixed, count, _ = create_examples_file(ShardJob(text, work / "fixed.hdf5", vocab, params))
        samples = read_fixed(fixed, params.max_seq_length, params.max_predictions)
        varlen = write_samples(work / "varlen.hdf5", samples)
        tokens = sum(len(s[0]) for s in samples)
        sizes = {
            "text_bytes": text.stat().st_size,
            "fixed_bytes": fixed.stat().st_size,
            "varlen_bytes": varlen.stat().st_size,
            "samples": count,
            "mean_tokens": tokens / count,
            "varlen_bytes_per_full_length_sample": full_length_bytes(
                work, params.max_seq_length, params.max_predictions
            ),
        }
    sizes["fixed_per_text_byte"] = sizes["fixed_bytes"] / sizes["text_bytes"]
    sizes["varlen_per_text_byte"] = sizes["varlen_bytes"] / sizes["text_bytes"]
    record = {
        **provenance("measure_prepare_sizes"),
        "text": "stand-in (pydoc topics + stdlib docstrings)",
        "params": vars(params),
        **sizes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(sizes, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
