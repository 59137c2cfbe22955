"""One run per output folder: `<run.output_dir>/run.lock`, held while a run is in it.

Two runs in one folder would prune each other's checkpoints and race for `mlperf.log`; the
second one is refused with one `error:` line naming the holder (pid, host, start time). The lock
is an advisory `flock` on the file, which the kernel drops when its process dies however it
dies: a lock file left by a killed run is stale, and the next run takes it over (and says so).
On a filesystem without flock (some parallel filesystems), the holder's pid is checked on the
same host instead; a holder on another host is then trusted to be alive.

Only the rank that writes the folder (rank 0) takes the lock; the trainer tells the other ranks
(`agree_on_lock`), so every rank of the job fails alike.

The lock file is created anew (O_EXCL) or opened without following a symlink, and a `run.lock`
that is a symlink, a hard link or holds anything but a holder record is refused and left as it
is: a run never writes through, truncates or removes a file it did not make.
The same lock guards a `--record-samples` folder (`hold_folder`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import socket
import stat
import time
from pathlib import Path

import torch.distributed as dist

from bert.core.errors import ConfigError
from bert.train.distributed import DistContext
from bert.train.own_files import check_own_files

LOCK_NAME = "run.lock"
HOLDER = re.compile(r"^pid \d+ on host \S+ since \S+ \S+$")  # what acquire writes


class RunLock:
    def __init__(self, folder: str | os.PathLike, what: str | None = None) -> None:
        """what: how the error lines name the folder (default `run.output_dir='FOLDER'`)."""
        self.path = Path(folder) / LOCK_NAME
        self.what = what or f"run.output_dir={str(folder)!r}"
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
        if self.stale_holder and not HOLDER.match(self.stale_holder):
            os.close(fd)  # someone's own file named run.lock: not ours to truncate
            raise self._not_ours("holds something other than a run's lock record")
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
        """A new lock file, or an existing one (a killed run's) opened without following a
        symlink and refused unless it is a plain file with no other name."""
        flags = os.O_RDWR | os.O_NOFOLLOW
        while True:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                return os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                pass
            except OSError as err:
                raise self._cannot_write(err) from None
            try:
                fd = os.open(self.path, flags)
            except FileNotFoundError:
                continue  # its holder removed it meanwhile: create it
            except OSError as err:
                if err.errno == errno.ELOOP:
                    raise self._not_ours("is a symlink") from None
                raise self._cannot_write(err) from None
            found = os.fstat(fd)
            if stat.S_ISREG(found.st_mode) and found.st_nlink == 1:
                return fd
            os.close(fd)
            raise self._not_ours("is not a plain file of its own (a hard link?)")

    def _cannot_write(self, err: OSError) -> ConfigError:
        return ConfigError(f"{self.what}: cannot write there ({err.strerror or err})")

    def _not_ours(self, why: str) -> ConfigError:
        return ConfigError(
            f"{self.what}: its lock file {self.path} {why}, not a lock a run made; left as "
            f"it is: move it away, or choose another folder"
        )

    def _busy(self, holder: str) -> ConfigError:
        return ConfigError(
            f"{self.what} is in use by another run "
            f"({holder or 'holder unknown'}; lock file {self.path}): wait for "
            f"it to end, or choose another folder"
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


class RunLocks:
    """The locks a run holds till it ends (hold_run_folders)."""

    def __init__(self, locks: list[RunLock]) -> None:
        self.locks = locks

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()


def hold_run_folders(ctx: DistContext, cfg, published: list[Path], force: bool) -> RunLocks:
    """run.output_dir's lock (hold_output_dir), then the --record-samples folder's (unless it
    is the same folder): two runs writing one audit trail would overwrite each other's files."""
    out_dir, record_dir = Path(cfg.run.output_dir), cfg.log.record_samples_dir
    locks = [hold_output_dir(out_dir, ctx, published, force)]
    if record_dir and Path(record_dir).resolve() != out_dir.resolve():
        try:
            locks.append(hold_folder(Path(record_dir), f"--record-samples {record_dir}", ctx))
        except BaseException:
            locks[0].release()
            raise
    return RunLocks(locks)


def hold_output_dir(
    folder: Path, ctx: DistContext, published: list[Path] = (), force: bool = False
) -> RunLock:
    """Rank 0 takes the folder's lock and checks that the files it will publish (`published`)
    replace only files of an earlier run (bert/train/own_files.py; `force` skips that); every
    rank raises the same ConfigError if it cannot."""

    def check(lock: RunLock) -> None:
        check_own_files(list(published), force)

    return _hold(RunLock(folder), ctx, check)


def hold_folder(folder: Path, what: str, ctx: DistContext) -> RunLock:
    """The lock of another folder a run writes into (--record-samples): one run at a time."""
    return _hold(RunLock(folder, what), ctx, lambda lock: None)


def _hold(lock: RunLock, ctx: DistContext, check) -> RunLock:
    """Rank 0 acquires `lock` and runs `check(lock)` under it; the outcome is every rank's."""
    problem = None
    if ctx.is_main:
        try:
            lock.acquire()
            check(lock)
        except ConfigError as err:
            lock.release()  # a refused run leaves no lock behind
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
