"""The downloader's one error: a bad-input error (one `error:` line, exit status 2)."""

from __future__ import annotations

from bert.core.errors import DataError


class DownloadError(DataError):
    """A download that cannot be made or verified; the message names the URL or file."""
