"""README.md's and kernels/VALIDATION.md's GPU figures are generated from the committed windows
(`python -m bert.tools.gpu.gpu_docs --write`): the docs must equal the records, an edited number
must fail the check, and the verdicts must follow the test counts."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from collections import Counter

import pytest

from bert.tools.common import ROOT
from bert.tools.gpu import gpu_docs, verdicts
from bert.tools.gpu.records import windows

RENDERED = gpu_docs.render_all(windows())


@pytest.mark.parametrize("doc", sorted(gpu_docs.BLOCKS))
def test_the_docs_equal_the_records(doc):
    assert gpu_docs.stale((ROOT / doc).read_text(), RENDERED[doc]) == []


@pytest.mark.parametrize(
    "doc, recorded, edited, block",
    [
        ("README.md", "| 586, 586, 582 | 584 |", "| 586, 586, 582 | 586 |", "perf-table"),
        (
            "kernels/VALIDATION.md",
            "| `dense` | `test_dense.py` 145 of 145",
            "| `dense` | `test_dense.py` 144 of 145",
            "kernel-verdicts",
        ),
        ("kernels/VALIDATION.md", "| 300 | 0.7887 |", "| 200 | 0.7887 |", "train-compare"),
    ],
)
def test_an_edited_number_in_the_docs_fails_the_check(
    tmp_path, monkeypatch, doc, recorded, edited, block
):
    text = (ROOT / doc).read_text()
    assert text.count(recorded) == 1
    assert gpu_docs.stale(text.replace(recorded, edited), RENDERED[doc]) == [block]
    for name in gpu_docs.BLOCKS:  # the command line says so too, with exit status 1
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / doc).write_text(text.replace(recorded, edited))
    monkeypatch.setattr(gpu_docs, "ROOT", tmp_path)
    assert gpu_docs.main(["--check"]) == 1
    assert gpu_docs.main(["--write"]) == 0
    assert (tmp_path / doc).read_text() == text


def test_a_missing_block_is_refused_and_an_empty_one_is_filled():
    blocks = {"a": "one", "b": "two"}
    empty = "x\n<!-- generated: a -->\n<!-- end generated -->\ny\n<!-- generated: b -->\n"
    empty += "old\n<!-- end generated -->\n"
    filled = gpu_docs.rewrite(empty, blocks, "doc")
    assert gpu_docs.stale(filled, blocks) == []
    assert filled.startswith("x\n") and "\ny\n" in filled
    with pytest.raises(SystemExit, match="error: gpu_docs: doc has blocks"):
        gpu_docs.rewrite(empty.split("y\n")[0], blocks, "doc")


def summary(date: str, device: str, dense: dict) -> dict:
    return {"date": date, "device": device, "commit": "b" * 40, "tests_per_file": dense}


def test_validated_only_when_the_target_gpu_passed(tmp_path):
    passed = {"tests/kernels/test_dense.py": {"passed": 3, "failed": 0}}
    failed = {"tests/kernels/test_dense.py": {"passed": 2, "failed": 1}}
    for name, record in [
        ("2030-01-01", summary("2030-01-01", "NVIDIA H100", failed)),
        ("2030-01-02", summary("2030-01-02", "NVIDIA H200", passed)),
    ]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(record))
    found = windows(tmp_path)
    table = verdicts.kernel_verdicts(found)
    assert (
        "| `dense` | `test_dense.py` 3 of 3 passed (2030-01-02, H200) | "
        "`test_dense.py` 2 passed, 1 failed (of 3) (2030-01-01, H100) |" in table
    )
    assert "not yet: passes on H200, not yet rerun on H100" in table
    assert "No window has run on an A100" in table
    # a later window that ran other files only (a --continue call) leaves dense's verdict
    other = {"tests/unit/test_fp8.py": {"passed": 4, "failed": 0}}
    (tmp_path / "2030-01-03").mkdir()
    (tmp_path / "2030-01-03" / "summary.json").write_text(
        json.dumps(summary("2030-01-03", "NVIDIA H200", other))
    )
    assert verdicts.kernel_verdicts(windows(tmp_path)) == table
    (tmp_path / "2030-01-02" / "summary.json").write_text(
        json.dumps(summary("2030-01-02", "NVIDIA H100", passed))
    )
    assert "| yes, on H100 |" in verdicts.kernel_verdicts(windows(tmp_path))


@pytest.mark.parametrize("window", ["2026-11-28_window", "2026-11-28b_window"])
def test_the_journals_agree_with_the_summarys_counts(window):
    newest = next(w for w in windows() if w.folder.name == window)
    passed = Counter()
    with tarfile.open(newest.folder / "logs_window.tar.gz") as tar:
        for member in tar.getmembers():
            if member.name.endswith(".journal.jsonl"):
                for line in io.TextIOWrapper(tar.extractfile(member)):
                    event = json.loads(line)
                    if event.get("when") == "call" and event.get("outcome") == "passed":
                        passed[event["nodeid"].split("::")[0]] += 1
    counts = newest.summary["tests_per_file"]
    assert passed == Counter({path: c["passed"] for path, c in counts.items()})


def test_a_correction_beside_the_records_names_the_commit(tmp_path):
    """The records stay as produced; a window's corrections.json (with its reason) fixes a
    fact they got wrong, such as 2026-11-28b's commit (a stale git on the GPU machine)."""
    (tmp_path / "2030-01-01").mkdir()
    (tmp_path / "2030-01-01" / "summary.json").write_text(
        json.dumps(summary("2030-01-01", "NVIDIA H200", {}))
    )
    assert windows(tmp_path)[0].commit == "bbbbbbb"
    (tmp_path / "2030-01-01" / "corrections.json").write_text(
        json.dumps({"commit": "c" * 40, "why": "a stale git"})
    )
    assert windows(tmp_path)[0].label == "2030-01-01 (H200, `ccccccc`)"
    assert "`fc38826`" in next(w for w in windows() if w.name == "2026-11-28b").label
