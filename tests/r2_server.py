"""A loopback stand-in for the MLC R2 bucket of the BERT inputs (tests/tools/test_download.py).

It serves a temporary folder laid out like the real bucket (metadata/NAME.uri -> the dataset
folder URL, metadata/NAME.md5 -> the file list, the files under wikipedia_for_bert/), with the
real file names and small contents. The handler answers Range requests (http.server does not)
and can misbehave on purpose: drop a connection after some bytes, ignore Range, or serve a
file other than the listed one. It records every request (path, Range header).
"""

from __future__ import annotations

import hashlib
import io
import random
import socket
import tarfile
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from data.download import published
from data.download.published import Dataset

FOLDERS = {
    published.INPUT_FILES: "wikipedia_for_bert/input_files",
    published.TEXT_DATASET: "wikipedia_for_bert/processed_dataset",
}
TEXT_FILES = ("part-00000-of-00500", "part-00001-of-00500", "eval.txt", "eval.md5")


@dataclass
class Behaviour:
    drop_after: dict[str, int] = field(default_factory=dict)  # path -> bytes, then close (once)
    ignore_range: bool = False
    requests: list[tuple[str, str | None]] = field(default_factory=list)


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _handler(root: Path, behaviour: Behaviour) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            wanted = self.headers.get("Range")
            behaviour.requests.append((path, wanted))
            file = root / path.lstrip("/")
            if not file.is_file():
                self.send_error(404)
                return
            data = file.read_bytes()
            start = (
                0
                if wanted is None or behaviour.ignore_range
                else int(wanted.removeprefix("bytes=").split("-")[0])
            )
            if start >= len(data) > 0:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206 if start else 200)
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            cut = behaviour.drop_after.pop(path, None)
            self.wfile.write(data[start:] if cut is None else data[start : start + cut])
            if cut is not None:  # promise the whole file, send part of it, hang up
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)

        def log_message(self, *args) -> None:
            pass

    return Handler


class LoopbackR2:
    """The server (127.0.0.1, a free port, one thread) and the layout it serves."""

    def __init__(self, root: Path):
        self.root = root
        self.behaviour = Behaviour()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(root, self.behaviour))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        self.contents: dict[str, dict[str, bytes]] = {}
        self.text: dict[str, bytes] = {}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def metadata_url(self, name: str) -> str:
        return f"{self.url}/metadata/{name}.uri"

    def file_path(self, name: str, rel: str) -> Path:
        return self.root / FOLDERS[name] / rel

    def data_requests(self) -> list[tuple[str, str | None]]:
        return [r for r in self.behaviour.requests if not r[0].startswith("/metadata/")]

    def build(self) -> None:
        """Both BERT datasets with every listed file; small, seeded contents."""
        rng = random.Random(0)
        self.text = {
            name: (f"{name} sentence one.\nsentence two of {name}.\n\n" * 40).encode()
            for name in TEXT_FILES
        }
        text_list = "".join(f"{md5(data)}  {name}\n" for name, data in self.text.items())
        self.contents = {
            published.INPUT_FILES: {
                path: rng.randbytes(300_000 if path == published.TF1_DATA_STORED else 2_000)
                for path in published.DATASETS[published.INPUT_FILES].md5
            },
            published.TEXT_DATASET: {
                "License.txt": b"license\n",
                published.TEXT_LIST: text_list.encode(),
                published.TEXT_ARCHIVE: self.archive(self.text),
                "results_text.zip": b"zip",
            },
        }
        for name, files in self.contents.items():
            self.write_dataset(name, files)

    def write_dataset(self, name: str, files: dict[str, bytes], listed: str | None = None):
        for rel, data in files.items():
            self.file_path(name, rel).parent.mkdir(parents=True, exist_ok=True)
            self.file_path(name, rel).write_bytes(data)
        meta = self.root / "metadata"
        meta.mkdir(exist_ok=True)
        (meta / f"{name}.uri").write_text(f"{self.url}/{FOLDERS[name]}\n")
        if listed is None:
            listed = "".join(f"{md5(data)}  {rel}\n" for rel, data in sorted(files.items()))
        (meta / f"{name}.md5").write_text(listed)

    @staticmethod
    def archive(files: dict[str, bytes], folder: str = published.TEXT_DIR) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(f"{folder}/{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buffer.getvalue()

    def published_tables(self) -> tuple[dict[str, Dataset], dict[str, str]]:
        """The tables published.py would hold for these contents (same needed files)."""
        tables = {
            name: Dataset(
                {rel: md5(data) for rel, data in files.items()},
                published.DATASETS[name].needed,
                f"test table for {name}",
            )
            for name, files in self.contents.items()
        }
        return tables, {name: md5(data) for name, data in self.text.items()}
