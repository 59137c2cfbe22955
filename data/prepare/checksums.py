"""sha256 manifest of a data folder, in `sha256sum` format (so `sha256sum -c` reads it too).

Written once after preparation; verified before a run or after copying the data elsewhere.
Verification reports files that are missing or changed, and stray .hdf5 files in the folders the
manifest covers (a stray part_*.hdf5 in the training folder would silently join the data).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from bert.core.errors import DataError
from bert.core.files import file_digest, write_text_atomic
from bert.core.readers import read_text
from data.prepare.parallel import run_parallel

MANIFEST_NAME = "SHA256SUMS"
DEFAULT_PATTERNS = ("**/*.hdf5",)
BLOCK = 1 << 20


def sha256_file(path: str | os.PathLike) -> str:
    return file_digest(path, "sha256", BLOCK)


def data_files(folder: Path, patterns: Sequence[str]) -> list[str]:
    """Relative names matching any pattern, sorted; hidden (temporary) files excluded."""
    found = set()
    for pattern in patterns:
        for path in folder.glob(pattern):
            rel = path.relative_to(folder)
            if path.is_file() and not any(part.startswith(".") for part in rel.parts):
                found.add(rel.as_posix())
    return sorted(found)


def write_manifest(
    folder: str | os.PathLike, patterns: Sequence[str] = DEFAULT_PATTERNS, workers: int = 1
) -> Path:
    folder = Path(folder)
    names = data_files(folder, patterns)
    if not names:
        raise FileNotFoundError(f"{folder}: no files match {', '.join(patterns)}")
    digests = run_parallel(sha256_file, [folder / n for n in names], workers)
    lines = "".join(f"{d}  {n}\n" for d, n in zip(digests, names))
    return write_text_atomic(folder / MANIFEST_NAME, lines)


def read_manifest(path: Path) -> dict[str, str]:
    entries = {}
    # a regular file under the input cap (bert/core/inputs.py), like every manifest
    text = read_text(path, "checksum manifest", DataError)
    for lineno, line in enumerate(text.splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise ValueError(f"{path}:{lineno}: not a '<sha256>  <file>' line: {line!r}")
        entries[name] = digest
    return entries


def verify_manifest(folder: str | os.PathLike, workers: int = 1) -> list[str]:
    """Problems found, one line each naming the file; empty when everything matches."""
    folder = Path(folder)
    manifest = folder / MANIFEST_NAME
    if not manifest.is_file():
        return [f"{manifest}: no manifest (write one with --write-checksums)"]
    expected = read_manifest(manifest)
    present = [n for n in expected if (folder / n).is_file()]
    problems = [f"{folder / n}: missing" for n in expected if n not in present]
    digests = run_parallel(sha256_file, [folder / n for n in present], workers)
    problems += [
        f"{folder / n}: sha256 {d} differs from the manifest's {expected[n]}"
        for n, d in zip(present, digests)
        if d != expected[n]
    ]
    covered = sorted({Path(n).parent.as_posix() for n in expected})
    strays = data_files(folder, [f"{d}/*.hdf5" if d != "." else "*.hdf5" for d in covered])
    problems += [f"{folder / n}: not in the manifest" for n in strays if n not in expected]
    return problems
