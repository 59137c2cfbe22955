"""One file over HTTP(S) (or file://): resumed, MD5-checked, renamed into place.

The bytes go to `NAME.part` beside the final name; an interrupted transfer leaves that part,
and the next attempt (a retry here, or a rerun) asks the server for the rest with a Range
request. Only a complete file whose MD5 equals the published value is renamed to NAME, so a
final name never holds a partial or wrong file. A server that ignores Range gets the whole file
again (the part is restarted, not appended to).
"""

from __future__ import annotations

import os
import stat
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bert.core.files import file_digest
from bert.core.inputs import check_float
from data.download.errors import DownloadError
from data.prepare.progress import duration

BLOCK = 1 << 20
PROGRESS_EVERY = 256 << 20  # a progress line per this many bytes of a large file
RETRY_STATUS = {500, 502, 503, 504}  # worth another try; any other HTTP error is final
USER_AGENT = "open-bert-mlperf-download/1"
MAX_WAIT_S = 24 * 3600.0  # a timeout or one wait between tries: beyond a day is a typo
MAX_RETRIES = 100


@dataclass(frozen=True)
class Transfer:
    """How hard to try: socket timeout (s), extra attempts after a failure, first wait (s)."""

    timeout: float = 60.0
    retries: int = 3
    retry_wait: float = 2.0

    def __post_init__(self) -> None:
        # NaN or inf here ends in the socket's or time.sleep's own ValueError/OverflowError
        check_float(self.timeout, "--timeout", DownloadError, low=0.0, high=MAX_WAIT_S)
        check_float(
            self.retry_wait, "--retry-wait", DownloadError, low=0.0, inclusive=True, high=MAX_WAIT_S
        )
        if not 0 <= self.retries <= MAX_RETRIES:
            raise DownloadError(f"--retries={self.retries}: must be in [0, {MAX_RETRIES}]")


class _Interrupted(Exception):
    """A transfer that stopped early but may be resumed (connection lost, 5xx)."""


def md5_file(path: str | os.PathLike) -> str:
    return file_digest(path, "md5", BLOCK)


def _open(url: str, timeout: float, start: int = 0):
    headers = {"User-Agent": USER_AGENT}
    if start:
        headers["Range"] = f"bytes={start}-"
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and start:
            return None  # the part already holds every byte
        if err.code in RETRY_STATUS:
            raise _Interrupted(f"HTTP {err.code} {err.reason}") from None
        raise DownloadError(f"{url}: HTTP {err.code} {err.reason}") from None
    except (urllib.error.URLError, OSError) as err:  # refused, unknown host, timeout
        raise _Interrupted(f"cannot reach the server ({getattr(err, 'reason', err)})") from None


def read_text(url: str, transfer: Transfer = Transfer()) -> str:
    """A small text file (metadata), with the same retries as a data file."""

    def attempt() -> str:
        resp = _open(url, transfer.timeout)
        with resp:
            _refuse_login_page(url, resp.geturl())
            try:
                return resp.read().decode("utf-8")
            except OSError as err:
                raise _Interrupted(str(err)) from None
            except UnicodeDecodeError:
                raise DownloadError(f"{url}: not a text file") from None

    return _with_retries(url, attempt, transfer, lambda msg: None)


def _refuse_login_page(url: str, final_url: str) -> None:
    # A members-only bucket redirects to a Cloudflare Access login; its HTML is no metadata.
    if "cloudflareaccess.com" in final_url or "/cdn-cgi/access/" in final_url:
        raise DownloadError(
            f"{url}: the server asks for a Cloudflare Access login; this "
            f"downloader reads public buckets only (use the MLC R2 downloader)"
        )


def _with_retries(
    url: str, attempt: Callable[[], object], transfer: Transfer, log: Callable[[str], None]
):
    for tries in range(transfer.retries + 1):
        try:
            return attempt()
        except _Interrupted as why:
            if tries == transfer.retries:
                raise DownloadError(f"{url}: {why}") from None
            wait = min(transfer.retry_wait * 2.0 ** min(tries, 64), MAX_WAIT_S)
            log(f"  {url}: {why}; retrying in {wait:g} s")
            time.sleep(wait)
    raise AssertionError("unreachable")


def fetch_file(
    url: str,
    dest: Path,
    md5: str,
    source: str,
    transfer: Transfer = Transfer(),
    log: Callable[[str], None] = print,
) -> str:
    """Put the file at `url` under `dest`, verified; "present" if it was already there, else
    "fetched". A different file already at `dest` is left alone and refused."""
    if dest.exists():
        found = md5_file(dest)
        if found != md5:
            raise DownloadError(
                f"{dest}: already exists and is not the published file (md5 "
                f"{found}, expected {md5}, {source}); left as it is: move it "
                f"away to download it"
            )
        return "present"
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    _check_part(part)
    _with_retries(url, lambda: _transfer(url, part, transfer.timeout, log), transfer, log)
    found = md5_file(part)
    if found != md5:
        part.unlink()
        raise DownloadError(
            f"{dest}: md5 {found} differs from the published {md5} ({source}); "
            f"the download was deleted, files fetched before it are kept"
        )
    os.replace(part, dest)
    return "fetched"


def _check_part(part: Path) -> None:
    """Refuse a `.part` this program cannot have left: appending to a symlink or a hard link
    would write into someone else's file."""
    try:
        found = part.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
        kind = "a symlink" if stat.S_ISLNK(found.st_mode) else "not a plain file of its own"
        raise DownloadError(
            f"{part}: is {kind}, not a partial download this program left; left as it "
            f"is: move it away to download {part.name[:-5]}"
        )


def _open_part(part: Path, append: bool):
    """The part file for writing, never through a symlink (swapped in since _check_part, the
    open fails rather than write into its target)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    return os.fdopen(os.open(part, flags, 0o644), "ab" if append else "wb")


def _transfer(url: str, part: Path, timeout: float, log: Callable[[str], None]) -> None:
    """Append the missing bytes of `url` to `part`; _Interrupted if the stream stops early."""
    start = part.lstat().st_size if part.exists() else 0
    resp = _open(url, timeout, start)
    if resp is None:
        return
    with resp:
        if start and resp.status != 206:
            log(f"  {url}: the server does not resume; fetching the whole file again")
            start = 0
        elif start and not resp.headers.get("Content-Range", "").startswith(f"bytes {start}-"):
            raise DownloadError(
                f"{url}: asked for bytes {start}- and got {resp.headers.get('Content-Range')!r}"
            )
        length = resp.headers.get("Content-Length")
        total = start + int(length) if length is not None else None
        got = _copy(resp, part, start, total, url, log)
    if total is not None and got < total:
        raise _Interrupted(
            f"the connection closed after {got:,} of {total:,} bytes "
            f"({part} kept: a rerun resumes it)"
        )


def _copy(
    resp, part: Path, start: int, total: int | None, url: str, log: Callable[[str], None]
) -> int:
    got, next_report, began = start, start + PROGRESS_EVERY, time.monotonic()
    with _open_part(part, append=bool(start)) as out:
        while True:
            try:
                block = resp.read(BLOCK)
            except OSError as err:  # reset, timeout: what arrived stays in the part
                raise _Interrupted(f"{err} after {got:,} bytes ({part} kept)") from None
            if not block:
                return got
            out.write(block)
            got += len(block)
            if got >= next_report and total:
                log(f"  {part.name[:-5]}: {rate_line(got, start, total, time.monotonic() - began)}")
                next_report += PROGRESS_EVERY


def rate_line(got: int, start: int, total: int, seconds: float) -> str:
    """'1.2 of 4.5 GiB, 35.0 MB/s, ETA 1m34s': the rate of this connection's bytes (a resumed
    file's earlier bytes took no time now)."""
    rate = (got - start) / seconds if seconds > 0 else 0.0
    eta = duration((total - got) / rate) if rate > 0 else "?"
    return f"{got / 2**30:.1f} of {total / 2**30:.1f} GiB, {rate / 1e6:.1f} MB/s, ETA {eta}"
