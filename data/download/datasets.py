"""One MLC R2 dataset end to end: metadata -> the files to fetch, each with its expected MD5 ->
fetched and verified one by one -> the unpack steps of the BERT datasets.

Expected MD5s come from published.py where the dataset is known there. The server's own list
must agree with every published value it lists (else nothing is fetched: the bucket changed);
a file the published table does not know (only with --all, or a dataset other than the BERT
ones) is checked against the server's list alone, and said so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from data.download import published, unpack
from data.download.errors import DownloadError
from data.download.fetch import Transfer, fetch_file
from data.download.metadata import Metadata, read_metadata

# What follows a complete download of each BERT dataset.
AFTER = {published.TEXT_DATASET: unpack.unpack_text, published.INPUT_FILES: unpack.link_tf1_data}


def plan(meta: Metadata, everything: bool) -> list[tuple[str, str, str]]:
    """[(path, expected md5, where the value comes from)] in fetch order."""
    known = published.DATASETS.get(meta.name)
    if known is None:
        return [
            (path, _served(meta, path), f"{meta.name}.md5 on the server")
            for path in sorted(meta.listed)
        ]
    for path, md5 in meta.listed.items():
        if md5 is not None and path in known.md5 and known.md5[path] != md5:
            raise DownloadError(
                f"{meta.md5_url}: lists {path} with md5 {md5}, the "
                f"published value is {known.md5[path]} ({known.source}); the "
                f"files on the server changed, nothing was fetched"
            )
    missing = [path for path in known.needed if path not in meta.listed]
    if missing:
        raise DownloadError(
            f"{meta.md5_url}: does not list {missing[0]}, which this "
            f"project needs ({known.source} lists it)"
        )
    paths = sorted(meta.listed) if everything else list(known.needed)
    return [
        (path, known.md5[path], known.source)
        if path in known.md5
        else (path, _served(meta, path), f"{meta.name}.md5 on the server, not published")
        for path in paths
    ]


def _served(meta: Metadata, path: str) -> str:
    md5 = meta.listed[path]
    if md5 is None:
        raise DownloadError(f"{meta.md5_url}: gives no MD5 for {path}, so it cannot be verified")
    return md5


def download_dataset(
    uri_url: str,
    download_dir: Path,
    everything: bool = False,
    transfer: Transfer = Transfer(),
    log: Callable[[str], None] = print,
) -> Path:
    """Fetch, verify and unpack one dataset into download_dir/NAME; returns that folder."""
    meta = read_metadata(uri_url, transfer)
    folder = download_dir / meta.name
    files = plan(meta, everything)
    log(f"{meta.name}: {len(files)} files from {meta.base_url} into {folder}")
    for path, md5, source in files:
        state = fetch_file(meta.file_url(path), folder / path, md5, source, transfer, log)
        log(f"{state} {folder / path} (md5 ok)")
    step = AFTER.get(meta.name)
    if step is not None:
        step(folder, log)
    return folder
