"""The MLC R2 metadata of one dataset, read the way MLCommons' own downloader reads it.

For `https://HOST/metadata/NAME.uri`:
- the `.uri` file's text is one URL, the folder that holds the dataset's files;
- `https://HOST/metadata/NAME.md5`, beside it, lists every file of the dataset in `md5sum`
  form (`<md5>  <path>`, the path relative to that folder, sometimes with a leading `./`);
- file PATH is fetched from `<folder URL>/PATH` and lands at `<download dir>/PATH`.
"""

from __future__ import annotations

import posixpath
import re
import urllib.parse
from dataclasses import dataclass

from data.download.errors import DownloadError
from data.download.fetch import Transfer, read_text

_LINE = re.compile(r"^(?P<md5>[0-9a-fA-F]{32})?\s+\*?(?P<path>\S.*?)\s*$")


@dataclass(frozen=True)
class Metadata:
    """A dataset's name (the .uri file's stem), its metadata URLs, its files' base URL and its
    MD5 list (path -> MD5, or None where the list leaves the value blank)."""

    name: str
    uri_url: str
    md5_url: str
    base_url: str
    listed: dict[str, str | None]

    def file_url(self, path: str) -> str:
        return f"{self.base_url.rstrip('/')}/{urllib.parse.quote(path)}"


def dataset_name(uri_url: str) -> str:
    """The dataset a metadata URL names (bert-input-files for .../bert-input-files.uri);
    DownloadError, before anything is fetched, for any other URL: another scheme than the
    fetcher's (http, https, file), no host, no NAME.uri, or one urllib cannot split."""
    try:
        parts = urllib.parse.urlsplit(uri_url)
        port_ok = parts.port is None or parts.port > 0  # .port raises on a bad one
    except ValueError:
        parts, port_ok = None, False
    path = parts.path if parts else ""
    if (
        not port_ok
        or parts.scheme not in ("http", "https", "file")
        or parts.scheme != "file"
        and not parts.hostname
        or not path.endswith(".uri")
        or len(posixpath.basename(path)) <= len(".uri")
    ):
        raise DownloadError(
            f"{uri_url}: not an MLC R2 metadata URL (an http(s) or file URL naming a "
            f"NAME.uri file, e.g. https://training.mlcommons-storage.org/metadata/"
            f"bert-input-files.uri)"
        )
    return posixpath.basename(path)[: -len(".uri")]


def read_metadata(uri_url: str, transfer: Transfer = Transfer()) -> Metadata:
    name = dataset_name(uri_url)
    text = read_text(uri_url, transfer).strip()
    if "\n" in text or not re.match(r"^(https?|file)://\S+$", text):
        raise DownloadError(
            f"{uri_url}: not an MLC R2 .uri file (expected one URL, found {text[:80]!r})"
        )
    parts = urllib.parse.urlsplit(uri_url)
    md5_url = urllib.parse.urlunsplit(parts._replace(path=parts.path[: -len(".uri")] + ".md5"))
    return Metadata(
        name, uri_url, md5_url, text, parse_md5_list(read_text(md5_url, transfer), md5_url)
    )


def parse_md5_list(text: str, where: str) -> dict[str, str | None]:
    """`md5sum` lines -> {path: md5 or None}; a path that could leave the folder is refused."""
    listed: dict[str, str | None] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _LINE.match(line)
        if not match:
            raise DownloadError(f"{where}:{lineno}: not an '<md5>  <path>' line: {line!r}")
        path = match["path"].removeprefix("./")
        if path.startswith("/") or ".." in path.split("/") or "\\" in path:
            raise DownloadError(f"{where}:{lineno}: path {path!r} leaves the dataset folder")
        md5 = match["md5"].lower() if match["md5"] else None
        if listed.get(path, md5) != md5:
            raise DownloadError(f"{where}:{lineno}: {path} listed twice with different MD5s")
        listed[path] = md5
    if not listed:
        raise DownloadError(f"{where}: lists no files")
    return listed
