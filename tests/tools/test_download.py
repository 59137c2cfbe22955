"""The downloader against a loopback server laid out like the MLC R2 bucket (tests/r2_server.py):
the same code path as a real download (`python -m data.download`'s main with --metadata URLs),
with the published-MD5 table swapped for the small files' values.

Checked: selection of the needed files, MD5 verification, resume of a partial file with a Range
request, restart when the server ignores Range, text unpacking, and that every bad input
(corrupt or truncated file, a server list that disagrees with the published table, a foreign
file in the way, an unreachable server, a malformed .uri, an unsafe archive) ends with one
`error:` line and exit status 2, good files kept and nothing under a final name half-written.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from data.download import published
from data.download.__main__ import main
from r2_server import LoopbackR2, md5

ROOT = Path(__file__).resolve().parents[2]
INPUTS, TEXT = published.INPUT_FILES, published.TEXT_DATASET
BIG = published.TF1_DATA_STORED  # 300 kB in the loopback layout


@pytest.fixture
def r2(tmp_path, monkeypatch):
    server = LoopbackR2(tmp_path / "bucket")
    server.build()
    tables, text_md5 = server.published_tables()
    monkeypatch.setattr(published, "DATASETS", tables)
    monkeypatch.setattr(published, "TEXT_FILES_MD5", text_md5)
    yield server
    server.close()


def download(r2: LoopbackR2, out: Path, *extra: str) -> int:
    urls = [a for name in (INPUTS, TEXT) for a in ("--metadata", r2.metadata_url(name))]
    return main([str(out), *urls, "--retry-wait", "0", *extra])


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def final_files(out: Path) -> set[str]:
    return {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}


def test_the_published_table_is_well_formed():
    # REFERENCE 8: the two official metadata files, and eval.md5's value in the retired README.
    assert published.DEFAULT_METADATA == (
        "https://training.mlcommons-storage.org/metadata/bert-input-files.uri",
        "https://training.mlcommons-storage.org/metadata/bert-preprocessed-wikipedia-dataset.uri",
    )
    assert published.TEXT_FILES_MD5["eval.md5"] == "71a58382a68947e93e88aa0d42431b6c"
    for dataset in published.DATASETS.values():
        assert set(dataset.needed) <= set(dataset.md5)
        assert all(len(v) == 32 and int(v, 16) >= 0 for v in dataset.md5.values())


def test_fetches_the_needed_files_verified_and_unpacks_the_text(r2, tmp_path, capsys):
    out = tmp_path / "data"
    assert download(r2, out) == 0
    dl = out / "download"
    for name in (INPUTS, TEXT):
        for rel in published.DATASETS[name].needed:
            assert (dl / name / rel).read_bytes() == r2.contents[name][rel]
    for name, data in r2.text.items():
        assert (dl / TEXT / published.TEXT_DIR / name).read_bytes() == data
    ckpt = dl / INPUTS / published.TF1_DATA_NAME  # the name TensorFlow reads
    assert ckpt.samefile(dl / INPUTS / BIG)
    fetched = {path for path, _ in r2.data_requests()}
    assert not any("enwiki" in p or "tf2_ckpt" in p or p.endswith(".zip") for p in fetched)
    assert not [f for f in final_files(out) if f.endswith(".part") or "/." in f]
    stdout = capsys.readouterr().out
    assert "next:" in stdout and "open-bert-prepare all" in stdout

    r2.behaviour.requests.clear()  # a rerun verifies what is there and fetches nothing
    assert download(r2, out) == 0
    assert r2.data_requests() == []


def test_all_fetches_every_listed_file(r2, tmp_path):
    out = tmp_path / "data"
    assert download(r2, out, "--all") == 0
    for name, files in r2.contents.items():
        for rel, data in files.items():
            assert (out / "download" / name / rel).read_bytes() == data


def test_a_dropped_connection_is_resumed_not_restarted(r2, tmp_path, capsys):
    out, path = tmp_path / "data", f"/{r2.file_path(INPUTS, BIG).relative_to(r2.root)}"
    r2.behaviour.drop_after[path] = 100_000
    assert download(r2, out, "--retries", "0") == 2
    assert "100,000 of 300,000 bytes" in one_error(capsys)
    dest = out / "download" / INPUTS / BIG
    assert not dest.exists()
    assert dest.with_name(dest.name + ".part").stat().st_size == 100_000
    assert (out / "download" / INPUTS / "vocab.txt").exists()  # fetched before it: kept

    assert download(r2, out) == 0  # the rerun asks for the rest only
    assert (path, "bytes=100000-") in r2.behaviour.requests
    assert dest.read_bytes() == r2.contents[INPUTS][BIG]
    assert not dest.with_name(dest.name + ".part").exists()


def test_a_retry_resumes_within_the_same_run(r2, tmp_path):
    out, path = tmp_path / "data", f"/{r2.file_path(INPUTS, BIG).relative_to(r2.root)}"
    r2.behaviour.drop_after[path] = 123_456
    assert download(r2, out, "--retries", "1") == 0
    assert [r for r in r2.behaviour.requests if r[0] == path] == [
        (path, None),
        (path, "bytes=123456-"),
    ]
    assert (out / "download" / INPUTS / BIG).read_bytes() == r2.contents[INPUTS][BIG]


def test_a_server_that_ignores_range_gets_a_fresh_download(r2, tmp_path):
    out, path = tmp_path / "data", f"/{r2.file_path(INPUTS, BIG).relative_to(r2.root)}"
    r2.behaviour.drop_after[path] = 50_000
    r2.behaviour.ignore_range = True
    assert download(r2, out, "--retries", "1") == 0
    assert (out / "download" / INPUTS / BIG).read_bytes() == r2.contents[INPUTS][BIG]


@pytest.mark.parametrize("damage", ["flip_a_byte", "truncate"])
def test_a_corrupt_file_is_refused_and_the_good_ones_kept(r2, tmp_path, capsys, damage):
    served = r2.file_path(INPUTS, "bert_config.json")
    data = served.read_bytes()
    served.write_bytes(
        data[:100] + bytes([data[100] ^ 1]) + data[101:] if damage == "flip_a_byte" else data[:-1]
    )
    out = tmp_path / "data"
    assert download(r2, out) == 2
    err = one_error(capsys)
    assert "bert_config.json: md5" in err and md5(data) in err
    folder = out / "download" / INPUTS
    assert (folder / "vocab.txt").read_bytes() == r2.contents[INPUTS]["vocab.txt"]
    assert not (folder / "bert_config.json").exists()
    assert not (folder / "bert_config.json.part").exists()
    assert not (out / "download" / TEXT).exists()  # stopped there: nothing after it


def test_a_server_list_that_disagrees_with_the_published_table_is_refused(
    r2, tmp_path, capsys, monkeypatch
):
    tables = dict(published.DATASETS)
    real = tables[INPUTS]
    tables[INPUTS] = published.Dataset({**real.md5, "vocab.txt": "0" * 32}, real.needed, "pub")
    monkeypatch.setattr(published, "DATASETS", tables)
    assert download(r2, tmp_path / "data") == 2
    err = one_error(capsys)
    assert "vocab.txt" in err and "0" * 32 in err and "nothing was fetched" in err
    assert r2.data_requests() == []


def test_the_real_table_refuses_other_files_under_the_real_names(r2, tmp_path, capsys, monkeypatch):
    monkeypatch.undo()  # published.py as shipped: the small files are not the published ones
    assert download(r2, tmp_path / "data") == 2
    assert "the published value is" in one_error(capsys)
    assert r2.data_requests() == []


def test_a_file_in_the_way_is_left_alone(r2, tmp_path, capsys):
    mine = tmp_path / "data" / "download" / INPUTS / "vocab.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("my own vocabulary\n")
    assert download(r2, tmp_path / "data") == 2
    assert "vocab.txt: already exists and is not the published file" in one_error(capsys)
    assert mine.read_text() == "my own vocabulary\n"


def closed_port_url() -> str:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metadata/{INPUTS}.uri"


def test_an_unreachable_server_is_one_error(tmp_path, capsys):
    assert main([str(tmp_path / "data"), "--metadata", closed_port_url(), "--retries", "0"]) == 2
    assert "cannot reach the server" in one_error(capsys)
    assert not (tmp_path / "data").exists()


def test_the_shell_front_end_runs_the_same_command(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts" / "download_data.sh"),
            str(tmp_path),
            "--metadata",
            closed_port_url(),
            "--retries",
            "0",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.parametrize(
    "url_end, body, message",
    [
        ("/metadata/bert-input-files.txt", None, "not an MLC R2 metadata URL"),
        ("/metadata/bert-input-files.uri", "<html>login</html>\n", "not an MLC R2 .uri file"),
        ("/metadata/nothing-here.uri", None, "HTTP 404"),
    ],
)
def test_bad_metadata_is_one_error(r2, tmp_path, capsys, url_end, body, message):
    if body is not None:
        (r2.root / "metadata" / f"{INPUTS}.uri").write_text(body)
    assert main([str(tmp_path / "data"), "--metadata", r2.url + url_end]) == 2
    assert message in one_error(capsys)
    assert r2.data_requests() == []


def serve_text_archive(r2, archive: bytes, monkeypatch) -> dict:
    """`archive` as the text dataset's archive on the bucket, its md5 what the reference list
    expects; the patched table of datasets."""
    r2.file_path(TEXT, published.TEXT_ARCHIVE).write_bytes(archive)
    tables = dict(published.DATASETS)
    real = tables[TEXT]
    tables[TEXT] = published.Dataset(
        {**real.md5, published.TEXT_ARCHIVE: md5(archive)}, real.needed, real.source
    )
    monkeypatch.setattr(published, "DATASETS", tables)
    return tables


def test_a_text_part_that_differs_from_the_reference_list_is_refused(
    r2, tmp_path, capsys, monkeypatch
):
    text = dict(r2.text, **{"part-00001-of-00500": b"other text\n"})
    archive = r2.archive(text)
    tables = serve_text_archive(r2, archive, monkeypatch)
    r2.write_dataset(
        TEXT,
        {published.TEXT_ARCHIVE: archive},
        listed="".join(f"{h}  {p}\n" for p, h in tables[TEXT].md5.items()),
    )
    out = tmp_path / "data"
    assert download(r2, out) == 2
    assert "part-00001-of-00500: md5" in one_error(capsys)
    folder = out / "download" / TEXT
    assert (folder / published.TEXT_ARCHIVE).exists()  # the verified download stays
    assert not (folder / published.TEXT_DIR).exists()
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no unpack leftovers


def test_an_archive_member_outside_the_folder_is_refused(r2, tmp_path, capsys, monkeypatch):
    archive = r2.archive({"../../escaped": b"x"}, folder=published.TEXT_DIR)
    tables = serve_text_archive(r2, archive, monkeypatch)
    r2.write_dataset(TEXT, {}, listed="".join(f"{h}  {p}\n" for p, h in tables[TEXT].md5.items()))
    assert download(r2, tmp_path / "data") == 2
    assert "would land outside the folder" in one_error(capsys)
    assert not list(tmp_path.rglob("escaped"))


def test_a_large_file_reports_its_rate_and_eta():
    from data.download.fetch import rate_line

    # 1 GiB of 3 arrived in 10 s of this connection (0.5 GiB resumed from before)
    line = rate_line(2**30, 2**29, 3 * 2**30, 10.0)
    assert line == "1.0 of 3.0 GiB, 53.7 MB/s, ETA 40s"


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_a_part_linked_to_another_file_is_left_alone(r2, tmp_path, capsys, link):
    """A `.part` that is a link to a user's file is not ours to append to."""
    mine = tmp_path / "mine.txt"
    mine.write_text("my own notes\n")
    folder = tmp_path / "data" / "download" / INPUTS
    folder.mkdir(parents=True)
    part = folder / "vocab.txt.part"
    (part.symlink_to if link == "symlink" else part.hardlink_to)(mine)
    assert download(r2, tmp_path / "data") == 2
    err = one_error(capsys)
    assert "vocab.txt.part" in err and "move it away" in err
    assert mine.read_text() == "my own notes\n"
    assert part.is_symlink() == (link == "symlink")
