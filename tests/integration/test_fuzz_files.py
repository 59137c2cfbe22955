"""Every console command's files, fuzzed: in each place a command reads a
file (a config, a bert_config.json, a checkpoint, a system description, a log, a metrics file,
text) or writes one (an output folder or image), a generated bad one of each class: a folder
where a file goes (and a file where a folder goes), a FIFO, a device, a symlink loop, a dangling
symlink, a symlink to a FIFO or to a user's file, a file past the reader's size cap, a JSON or
YAML object giving a key twice, garbage bytes, an output path under a file. Each ends with exit
status 2 and exactly one `error:` line naming the path, no traceback, no hang (a FIFO is never
opened), and nothing of the user's changed, no output created. Runs in this process
(tests/fuzz_support.py).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_support import (
    DUPLICATE_PARTS,
    INPUT_CLASSES,
    Watched,
    assert_refused,
    duplicate_keys,
    examples,
    make_bad,
    run,
)
from bert.core.inputs import MAX_INPUT_BYTES
from bert.submission.reader import MAX_LOG_BYTES
from bert.submission.metrics_plot import MAX_METRICS_BYTES

RUN_START = (
    ':::MLLOG {"namespace": "", "time_ms": %d, "event_type": "%s", "key": "%s", "value": %s, '
    '"metadata": {"file": "x.py", "lineno": 1%s}}\n'
)
GOOD_LOG = "".join(
    RUN_START % args
    for args in (
        (1000, "POINT_IN_TIME", "submission_division", '"open"', ""),
        (1000, "POINT_IN_TIME", "seed", "7", ""),
        (1001, "INTERVAL_START", "run_start", "null", ""),
        (61001, "INTERVAL_END", "run_stop", "null", ', "status": "success"'),
    )
)


@dataclass(frozen=True)
class Slot:
    """One place a command takes a path: its command line ({bad}: the bad path, {w}: the
    case's folder), the file's format and size cap, the classes that apply, its name there."""

    command: str
    argv: tuple[str, ...]
    name: str  # the bad path's file name
    fmt: str = ""  # yaml, json, mllog, jsonl, or "" (no keys)
    cap: int = MAX_INPUT_BYTES
    classes: tuple[str, ...] = tuple(INPUT_CLASSES)


NO_KEYS = tuple(c for c in INPUT_CLASSES if c != "duplicate_keys")  # a checkpoint, text
NOT_SIZED = tuple(c for c in NO_KEYS if c not in ("oversized", "garbage"))  # text is any size
TRAIN = ("--print-config", "--set", "run.output_dir={w}/out/run")
PKG = ("--system", "s", "--out", "{w}/out/pkg", "--skip-checks")
SLOTS = [
    Slot("open-bert-train", (*TRAIN, "--config", "{bad}"), "config.yaml", "yaml"),
    Slot("open-bert-train", (*TRAIN, "--set", "model.bert_config_file={bad}"), "bc.json", "json"),
    Slot(
        "open-bert-prepare",
        ("vocab", "{w}/t.txt", "--config", "{bad}", "--out", "{w}/out/v.txt"),
        "c.yaml",
        "yaml",
    ),
    Slot(
        "open-bert-prepare",
        ("vocab", "{bad}", "--out", "{w}/out/v.txt"),
        "part-0",
        classes=NOT_SIZED,
    ),
    Slot(
        "open-bert-convert", ("nvidia", "{bad}", "--out", "{w}/out/c.pt"), "nv.pt", classes=NO_KEYS
    ),
    Slot(
        "open-bert-convert",
        ("nvidia", "{w}/t.txt", "--bert-config", "{bad}", "--out", "{w}/out/c.pt"),
        "bc.json",
        "json",
    ),
    Slot(
        "open-bert-convert",
        ("nvidia", "{w}/t.txt", "--config", "{bad}", "--out", "{w}/out/c.pt"),
        "c.yaml",
        "yaml",
    ),
    Slot("open-bert-package", ("{bad}", *PKG), "result_0.txt", "mllog", MAX_LOG_BYTES),
    Slot("open-bert-package", ("{w}/good.log", *PKG, "--system-json", "{bad}"), "sys.json", "json"),
    Slot("open-bert-check", ("{bad}",), "result_0.txt", "mllog", MAX_LOG_BYTES),
    Slot(
        "open-bert-plot", ("{bad}", "--out", "{w}/out/p.png"), "mlperf.log", "mllog", MAX_LOG_BYTES
    ),
    Slot(
        "open-bert-plot",
        ("{bad}", "--out", "{w}/out/p.png"),
        "metrics.jsonl",
        "jsonl",
        MAX_METRICS_BYTES,
    ),
]
FOLDER_OUT = ("regular_file", "fifo", "device", "symlink_loop", "dangling_symlink", "under_a_file")
FILE_OUT = ("folder", "symlink_to_user_file", "dangling_symlink", "symlink_loop", "under_a_file")
OUT_SLOTS = [
    Slot(
        "open-bert-download",
        ("{bad}", "--metadata", "http://127.0.0.1:9/m/bert.uri"),
        "dl",
        classes=FOLDER_OUT,
    ),
    Slot(
        "open-bert-package",
        ("{w}/good.log", "--system", "s", "--out", "{bad}"),
        "pkg",
        classes=FOLDER_OUT,
    ),
    Slot("open-bert-plot", ("{w}/good.log", "--out", "{bad}"), "p.png", classes=FILE_OUT),
    Slot(  # a folder is taken: the config is written into it under its own name
        "open-bert-plan",
        ("--gpus=8", "--gpu=h100", "--write-config", "{bad}"),
        "plan.yaml",
        classes=FILE_OUT[1:],
    ),
    Slot("open-bert-prepare", ("vocab", "{w}/t.txt", "--out", "{bad}"), "v.txt", classes=FILE_OUT),
]
COMMANDS = sorted({slot.command for slot in SLOTS + OUT_SLOTS})


def content(data, slot: Slot, kind: str) -> bytes:
    if kind == "garbage":  # never UTF-8 (an empty YAML file is a valid, empty config)
        return b"\xff" + data.draw(st.binary(max_size=200), label="garbage")
    if kind == "duplicate_keys":
        return duplicate_keys(slot.fmt, *data.draw(DUPLICATE_PARTS, label="key, values")).encode()
    return b""


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz_files")


@pytest.mark.parametrize("command", COMMANDS)
@settings(max_examples=examples(12))
@given(data=st.data())
def test_a_bad_file_is_refused(world, command, data):
    slots = [slot for slot in SLOTS + OUT_SLOTS if slot.command == command]
    slot = data.draw(st.sampled_from(slots), label="slot")
    kind = data.draw(st.sampled_from(slot.classes), label="class")
    case = world / uuid.uuid4().hex
    case.mkdir()
    (case / "t.txt").write_text("one sentence here.\nanother one.\n\nnext document.\n")
    (case / "good.log").write_text(GOOD_LOG)
    bad = make_bad(kind, case / slot.name, slot.cap, content(data, slot, kind))
    watched = Watched(case)
    argv = [a.replace("{bad}", bad).replace("{w}", str(case)) for a in slot.argv]
    result = run(command, argv, case)
    assert_refused(result)
    named = "/dev/zero" if kind == "device" else slot.name
    assert named in result.err, result.shown()
    assert watched.changed() == [], result.shown()
    assert not (case / "out").exists(), result.shown()


def test_the_classes_are_made_as_named(tmp_path):
    """The factory itself: each class is what its name says (a check that cannot fail would
    otherwise hide behind a file that is not bad at all)."""
    made = {kind: Path(make_bad(kind, tmp_path / kind, 10, b"{}")) for kind in INPUT_CLASSES}
    assert made["folder"].is_dir() and made["fifo"].is_fifo()
    assert str(made["device"]) == "/dev/zero"
    assert made["symlink_loop"].is_symlink() and not made["symlink_loop"].exists()
    assert made["symlink_to_fifo"].is_fifo() and made["symlink_to_fifo"].is_symlink()
    assert made["oversized"].stat().st_size == 11
    for fmt in ("yaml", "json", "jsonl", "mllog"):
        text = duplicate_keys(fmt, "k", 1, 2)
        assert text.count('"k"') == 2, text
    assert json.loads(duplicate_keys("json", "k", 1, 2))["k"] == 2  # json alone keeps the last
