"""Files: atomic writing (a complete file under its final name, or nothing), output checks,
and a streaming digest."""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from bert.core.errors import ConfigError


def temp_name(path: Path) -> Path:
    """A hidden, unique sibling of `path`: same folder, so os.replace is a rename."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path to write; it replaces `path` only if the block succeeds.

    Readers never see a partial file, and a killed writer leaves at most a hidden .tmp file
    (which resumable steps ignore, since they test for the final name).
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(final)
    try:
        yield tmp
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


_TEMP_PATTERN = re.compile(r"^\..+\.(\d+)\.[0-9a-f]{8}\.tmp$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove_stale_temps(folder: str | os.PathLike) -> list[Path]:
    """Delete the temp_name files in `folder` whose writer is no longer running (a killed run's
    leftovers); a live writer's are kept. Returns the paths removed."""
    removed = []
    for path in Path(folder).glob(".*.tmp"):
        match = _TEMP_PATTERN.match(path.name)
        if match and path.is_file() and not _alive(int(match.group(1))):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


# -- outputs: never touch what is not ours ------------------------------------------------------


def real_path(path: str | os.PathLike) -> Path:
    """`path` with its symlinks resolved as far as they go: Path.resolve raises RuntimeError on
    a symlink loop (before Python 3.13), which a bad input must not turn into a traceback; the
    loop itself is refused where the path is opened."""
    return Path(os.path.realpath(path))


def _overlap(a: Path, b: Path) -> bool:
    """`a` and `b` are one path, or one holds the other."""
    return a == b or a in b.parents or b in a.parents


def check_output(
    out: str | os.PathLike, inputs: list, force: bool = False, what: str = "--out", folder_ok=None
) -> None:
    """Refuse (ConfigError) an output that is, holds or lies inside an input; an existing file
    unless `force`; an existing folder holding an entry `folder_ok(name)` does not accept
    (None: every entry is accepted, the command resumes into its own folder) unless `force`.
    Checked before anything is written."""
    final = real_path(out)
    for given in inputs:
        if _overlap(final, real_path(given)):
            raise ConfigError(
                f"{what} {out}: is or overlaps the input {given}; choose another output path"
            )
    # the path as given: a symlink there (dangling too) is the user's, not replaced unasked
    if force or not os.path.lexists(out) and not os.path.lexists(final):
        return
    if not final.is_dir():  # a file, or a symlink to one or to nothing
        raise ConfigError(f"{what} {out}: already exists; pass --force to replace it")
    if folder_ok is not None:
        foreign = sorted(p.name for p in final.iterdir() if not folder_ok(p.name))
        if foreign:
            raise ConfigError(
                f"{what} {out}: holds files this command did not write "
                f"({', '.join(foreign[:3])}); pass --force or choose an empty "
                f"folder"
            )


def safe_name(name: str, what: str) -> str:
    """`name` as one path component: no separator, '..', absolute path or NUL (a name used
    under --out must not reach outside it, --force least of all)."""
    if (
        not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or os.path.isabs(name)
    ):
        raise ConfigError(f"{what} {name!r}: must be a plain name (no '/', '..' or NUL)")
    return name


def file_digest(path: str | os.PathLike, algorithm: str, block: int = 1 << 20) -> str:
    """The hex digest (hashlib's `algorithm`) of a file, read a block at a time."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(block), b""):
            digest.update(chunk)
    return digest.hexdigest()
