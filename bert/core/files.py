"""Atomic file writing: a complete file under its final name, or nothing."""
from __future__ import annotations

import os
import re
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


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
