"""One run per output folder: `<run.output_dir>/run.lock`, held while a run is in it.

Two runs in one folder would prune each other's checkpoints and race for `mlperf.log`; the
second one is refused with one `error:` line naming the holder (pid, host, start time). The lock
is an advisory `flock` on the file, which the kernel drops when its process dies however it
dies: a lock file left by a killed run is stale, and the next run takes it over (and says so).
On a filesystem without flock (some parallel filesystems), the holder's pid is checked on the
same host instead; a holder on another host is then trusted to be alive.

Only the rank that writes the folder (rank 0) takes the lock; the trainer tells the other ranks
(`agree_on_lock`), so every rank of the job fails alike.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
from pathlib import Path

import torch.distributed as dist

from bert.core.errors import ConfigError
from bert.train.distributed import DistContext

LOCK_NAME = "run.lock"


class RunLock:
    def __init__(self, folder: str | os.PathLike) -> None:
        self.path = Path(folder) / LOCK_NAME
        self._fd: int | None = None
        self.stale_holder: str | None = None  # what a stale lock file said, if one was found

    def acquire(self) -> "RunLock":
        """Take the lock or raise ConfigError naming the run holding it."""
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise self._busy(holder) from None
            except OSError as err:
                if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    os.close(fd)
                    raise
                self._check_pid(fd)  # no flock here: the holder's pid decides
            # the file may have been removed by its last holder between our open and flock
            if os.path.exists(self.path) and os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                break
            os.close(fd)
        self.stale_holder = _read_holder(fd) or None
        os.ftruncate(fd, 0)
        os.write(
            fd,
            f"pid {os.getpid()} on host {socket.gethostname()} since "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(),
        )
        self._fd = fd
        return self

    def release(self) -> None:
        """Remove the file, then drop the lock (in that order: a waiter that opened the old
        file finds it gone and opens a new one)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise ConfigError(
                f"run.output_dir={str(self.path.parent)!r}: cannot write there "
                f"({err.strerror or err})"
            ) from None

    def _busy(self, holder: str) -> ConfigError:
        return ConfigError(
            f"run.output_dir={str(self.path.parent)!r} is in use by another run "
            f"({holder or 'holder unknown'}; lock file {self.path}): wait for "
            f"it to end, or choose another run.output_dir"
        )

    def _check_pid(self, fd: int) -> None:
        holder = _read_holder(fd)
        parts = holder.split()
        if len(parts) >= 5 and parts[0] == "pid" and parts[3] == socket.gethostname():
            try:
                os.kill(int(parts[1]), 0)
            except ProcessLookupError:
                return  # stale: its process is gone
            except (PermissionError, ValueError):
                pass
            else:
                if int(parts[1]) != os.getpid():
                    os.close(fd)
                    raise self._busy(holder)
        elif holder:
            os.close(fd)
            raise self._busy(holder)


def hold_output_dir(folder: Path, ctx: DistContext) -> RunLock:
    """Rank 0 takes the folder's lock; every rank raises the same ConfigError if it cannot."""
    lock, problem = RunLock(folder), None
    if ctx.is_main:
        try:
            lock.acquire()
        except ConfigError as err:
            problem = str(err)
        else:
            if lock.stale_holder:
                print(
                    f"{lock.path}: a stale lock ({lock.stale_holder}, no longer running) "
                    f"was taken over",
                    flush=True,
                )
    if ctx.is_distributed:
        shared = [problem]
        dist.broadcast_object_list(shared, src=0)
        problem = shared[0]
    if problem is not None:
        raise ConfigError(problem)
    return lock


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 300, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""
