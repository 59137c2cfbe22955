"""Content hash of variable-length HDF5 shards, by the method of NVIDIA's MLPerf BERT kit.

NVIDIA's kit ships the hashes of its prepared data (`eval_varlength.chk`,
`4320_shards_varlength.chk`: lines `<file>\\t<hash>`) written by its `hdf5_md5.py`. The method,
read from that public script and implemented here on our own:

1. For each sample, in file order: its `input_ids` as decimal integers written the way Python
   prints a list ("[101, 2023, 102]": ", " between values, "[]" when empty), UTF-8 encoded; the
   MD5 of that text as 32 lowercase hex digits.
2. Those digests, in sample order, written the way Python prints a list of strings
   ("['9e10...', '03c7...']"); the MD5 of that text is the file's content hash.

So the hash depends on the token ids and their order only: not on the file name, the integer
dtype, chunking or compression. Only `input_ids` counts: masking shows (a masked position holds
[MASK], a random id or the original), but masked_lm_ids, masked_lm_positions, segment_ids and
next_sentence_labels are not covered; SHA256SUMS (checksums.py) covers whole files.

NVIDIA's published value for the 10,000-sample eval set is NVIDIA_EVAL_MD5 (REFERENCE 8).

    python -m data.prepare.content_hash FILE_OR_DIR ... [--workers N] [--expect HEX|nvidia-eval]

prints `<file>\\t<hash>` per file (NVIDIA's .chk form). With --expect (one file): exit 0 when
the hash matches, 1 when it differs; 2 for a file that cannot be read.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from pathlib import Path
from typing import Sequence

import h5py
import numpy as np

from bert.core.errors import DataError
from bert.core.files import write_text_atomic
from data.prepare.checksums import data_files
from data.prepare.parallel import run_parallel

NVIDIA_EVAL_MD5 = "611d8bae26646145e1c33338a27ba124"  # part_eval_10k.hdf5, eval_varlength.chk
NVIDIA_EVAL_SAMPLES = 10_000
NVIDIA_EVAL_SOURCE = "NVIDIA's eval_varlength.chk (REFERENCE 8)"
CHECK_FILE = "content_md5.chk"
PREPARED = ("train/*.hdf5", "eval/*.hdf5")
ROWS_PER_READ = 4096  # samples read at a time: bounded memory on 36k-sample shards


def row_digest(ids: np.ndarray) -> str:
    """Step 1 for one sample: MD5 hex of its ids printed as a Python list."""
    text = "[" + ", ".join(map(str, ids.tolist())) + "]"
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def combine(digests: Sequence[str]) -> str:
    """Step 2: MD5 hex of the digests printed as a Python list of strings."""
    text = "[" + ", ".join(f"'{d}'" for d in digests) + "]"
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def _input_ids(path: Path, f: h5py.File) -> h5py.Dataset:
    ds = f.get("input_ids")
    if not isinstance(ds, h5py.Dataset):
        raise DataError(f"{path}: no input_ids dataset")
    if ds.ndim != 1 or h5py.check_vlen_dtype(ds.dtype) is None:
        raise DataError(
            f"{path}: input_ids has shape {ds.shape}, dtype {ds.dtype}; the content "
            f"hash is defined on the variable-length format (one vlen row per "
            f"sample; convert with prepare_data.py to-varlen)"
        )
    return ds


def _open(path: Path) -> h5py.File:
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        return h5py.File(path, "r")
    except OSError as err:
        raise DataError(f"{path}: not a readable HDF5 file ({err})") from None


def content_hash(path: str | os.PathLike) -> str:
    """The content hash of one variable-length file."""
    path = Path(path)
    with _open(path) as f:
        ds = _input_ids(path, f)
        digests = [
            row_digest(row)
            for start in range(0, len(ds), ROWS_PER_READ)
            for row in ds[start : start + ROWS_PER_READ]
        ]
    return combine(digests)


def content_hashes(paths: Sequence[str | os.PathLike], workers: int = 1) -> list[str]:
    """One hash per file, in order, on `workers` processes (the result does not depend on it)."""
    return run_parallel(content_hash, [Path(p) for p in paths], workers)


def sample_count(path: str | os.PathLike) -> int:
    path = Path(path)
    with _open(path) as f:
        return len(_input_ids(path, f))


def eval_verdict(eval_file: str | os.PathLike, digest: str) -> str:
    """What the eval set's hash says against NVIDIA's published one."""
    count = sample_count(eval_file)
    if count != NVIDIA_EVAL_SAMPLES:
        return (
            f"not compared with {NVIDIA_EVAL_SOURCE}: that value is for "
            f"{NVIDIA_EVAL_SAMPLES:,} samples, this eval set has {count:,}"
        )
    if digest == NVIDIA_EVAL_MD5:
        return (
            f"matches {NVIDIA_EVAL_SOURCE}: the eval samples' input_ids, masking included, "
            f"and their order are the benchmark's"
        )
    return (
        f"DIFFERS from {NVIDIA_EVAL_MD5} in {NVIDIA_EVAL_SOURCE}: this eval set is not "
        f"the benchmark's (check the eval text, vocab, seed and max lengths)"
    )


def record_content_hashes(
    out: str | os.PathLike, eval_file: str | os.PathLike, workers: int = 1
) -> str:
    """Hash every prepared file (OUT/train/*.hdf5, OUT/eval/*.hdf5) into OUT/content_md5.chk
    (`<path under OUT>\\t<hash>` lines) and compare the eval set with NVIDIA's value; returns
    the lines to print."""
    out, eval_file = Path(out), Path(eval_file)
    names = data_files(out, PREPARED)
    digests = content_hashes([out / n for n in names], workers)
    chk = write_text_atomic(
        out / CHECK_FILE, "".join(f"{n}\t{d}\n" for n, d in zip(names, digests))
    )
    try:
        eval_digest = dict(zip(names, digests))[eval_file.relative_to(out).as_posix()]
    except (ValueError, KeyError):  # an eval file outside OUT/eval
        eval_digest = content_hash(eval_file)
    return (
        f"content hashes: {len(names)} files in {chk} (NVIDIA's hdf5_md5 method)\n"
        f"eval set {eval_file}: content hash {eval_digest}; "
        f"{eval_verdict(eval_file, eval_digest)}"
    )


def expand(paths: Sequence[str]) -> list[Path]:
    """Files as given; a folder stands for the .hdf5 files in it."""
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found = [path / n for n in data_files(path, ["*.hdf5"])]
            if not found:
                raise DataError(f"{path}: holds no .hdf5 files")
            files += found
        else:
            files.append(path)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m data.prepare.content_hash",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", help="variable-length HDF5 files or folders")
    parser.add_argument("--workers", type=int, default=1, help="processes (one file each)")
    parser.add_argument(
        "--expect", help="a 32-digit hex hash, or nvidia-eval for NVIDIA's published eval-set value"
    )
    args = parser.parse_args(argv)
    try:
        files = expand(args.paths)
        if args.expect is not None and len(files) != 1:
            raise DataError(f"--expect compares one file; {len(files)} given")
        if args.expect not in (None, "nvidia-eval") and not re.fullmatch(
            r"[0-9a-fA-F]{32}", args.expect
        ):
            raise DataError(f"--expect {args.expect!r}: not 32 hex digits nor nvidia-eval")
        digests = content_hashes(files, args.workers)
    except DataError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for path, digest in zip(files, digests):
        print(f"{path.name}\t{digest}")
    if args.expect is None:
        return 0
    expected = NVIDIA_EVAL_MD5 if args.expect == "nvidia-eval" else args.expect.lower()
    if digests[0] != expected:
        print(
            f"error: {files[0]}: content hash {digests[0]} differs from {expected}", file=sys.stderr
        )
        return 1
    print(f"{files[0]}: content hash matches {expected}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
