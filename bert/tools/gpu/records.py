"""The committed GPU windows, read for the generated docs (`bert/tools/gpu/gpu_docs.py`).

A window is one folder `benchmarks/results/gpu/<date>_window/`: `summary.json`, some main
records beside it, and `logs_window.tar.gz` holding every record the window wrote
(`window/<name>.json`). Windows are ordered by the date in their summary, oldest first, so
"newest" means the last one run, whatever the folder is called.
"""

from __future__ import annotations

import json
import statistics
import tarfile
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

from bert.tools.common import ROOT

RECORDS = ROOT / "benchmarks" / "results" / "gpu"
CORRECTIONS = "corrections.json"  # a fact the window's own records got wrong, with the reason
TARGET_GPU = "H100"  # the product's target (configs/bert_large_*); the docs say where it stands
# how the steady rate of a throughput run is read from its rounds (said once in every table)
STATISTIC = (
    "the median of the rounds after the first (a run's first round is dropped: the records "
    "show it slow for our variants, see the rounds; with 2 rounds this is round 2 alone)"
)


@dataclass(frozen=True)
class Window:
    folder: Path
    summary: dict

    @property
    def name(self) -> str:
        return self.folder.name.removesuffix("_window")

    @property
    def device(self) -> str:
        return self.summary["device"].removeprefix("NVIDIA ")

    @property
    def commit(self) -> str:
        """The commit the window ran, abbreviated: the summary's, unless the folder's
        CORRECTIONS file (written beside the records, which stay as produced) says otherwise
        and why."""
        sha = self.corrections.get("commit") or self.summary.get("commit", "unknown")
        return sha[:7] + ("-dirty" if sha.endswith("-dirty") else "")

    @cached_property  # read once: every label of the window asks for the commit
    def corrections(self) -> dict:
        path = self.folder / CORRECTIONS
        return json.loads(path.read_text()) if path.is_file() else {}

    @property
    def label(self) -> str:
        """How a figure names its window: date, device and commit."""
        return f"{self.name} ({self.device}, `{self.commit}`)"

    def record(self, stem: str) -> dict | None:
        """`<stem>.json` beside the summary, else the same file in the logs archive."""
        path = self.folder / f"{stem}.json"
        if path.is_file():
            return json.loads(path.read_text())
        return archived_records(self.folder / "logs_window.tar.gz").get(f"window/{stem}.json")

    def file_counts(self, test_file: str) -> dict | None:
        """The outcome counts of one GPU test file, matched by its name (the tests moved into
        tests/unit/ and tests/integration/ between windows); None when the window lacks it."""
        name = Path(test_file).name
        for path, counts in self.summary.get("tests_per_file", {}).items():
            if Path(path).name == name:
                return counts
        return None


@cache
def archived_records(archive: Path) -> dict[str, dict]:
    """Every JSON file in a window's logs archive, by member name (read once: the docs ask
    one archive for several records)."""
    if not archive.is_file():
        return {}
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".json")]
        return {m.name: json.load(tar.extractfile(m)) for m in members}


def windows(root: Path = RECORDS) -> list[Window]:
    found = [
        Window(path.parent, json.loads(path.read_text())) for path in root.glob("*/summary.json")
    ]
    if not found:
        raise SystemExit(f"error: gpu_docs: no <window>/summary.json under {root}")
    return sorted(found, key=lambda w: w.summary["date"])


def newest_record(found: list[Window], stem: str) -> tuple[Window, dict] | None:
    """The newest complete `<stem>` record (a run killed mid-way, `partial`, is no figure)."""
    for window in reversed(found):
        record = window.record(stem)
        if record is not None and not record.get("partial"):
            return window, record
    return None


def steady(variant: dict) -> float:
    """A throughput variant's samples/s by STATISTIC."""
    rounds = variant.get("samples_per_s_per_round") or [variant["samples_per_s"]]
    return statistics.median(rounds[1:] or rounds)


def outcome(counts: dict | None) -> str:
    """A test file's counts in words: "54 of 54 passed", or what went wrong."""
    if counts is None:
        return "not run"
    if "passed" not in counts:
        return counts.get("note", "no counts")
    kinds = ("passed", "failed", "errored", "crashed", "skipped")
    total = sum(counts.get(kind, 0) for kind in kinds)
    if counts["passed"] == total:
        return f"{total} of {total} passed"
    parts = [f"{counts.get(kind, 0)} {kind}" for kind in kinds if counts.get(kind, 0)]
    return f"{', '.join(parts)} (of {total})"


def all_passed(counts: dict | None) -> bool:
    return counts is not None and "passed" in counts and outcome(counts).endswith(" passed")


def window_tests(window: Window) -> str:
    """A window's GPU test totals in words, with the files that left no counts."""
    totals = window.summary.get("tests", {})
    counts = {k: v for k, v in totals.items() if isinstance(v, int) and k != "collected"}
    missing = len(totals.get("files_without_counts", []))
    return outcome(counts) + (f", {missing} file(s) without counts" if missing else "")


def newest_counts(found: list[Window], test_file: str, gpu: str = "") -> tuple[Window, dict] | None:
    """The newest run of one GPU test file (on `gpu`, when given): its window and counts. A
    window that ran only some files (a --continue call) leaves the others to older windows."""
    for window in reversed(found):
        counts = window.file_counts(test_file)
        if gpu in window.device and counts is not None:
            return window, counts
    return None


def test_files(found: list[Window]) -> list[str]:
    """Every GPU test file any window ran, by file name (tests moved between folders)."""
    names = {}
    for window in found:
        for path in window.summary.get("tests_per_file", {}):
            names.setdefault(Path(path).name, path)
    return sorted(names.values())


def newest_tests(found: list[Window], gpu: str) -> str:
    """Each test file's newest run on `gpu`, summed: "298 of 298 passed", with the windows."""
    runs = [newest_counts(found, f, gpu) for f in test_files(found)]
    runs = [r for r in runs if r is not None]
    kinds = ("passed", "failed", "errored", "crashed", "skipped")
    total = {k: sum(c.get(k, 0) for _, c in runs) for k in kinds}
    used = {w.label: sum(1 for v, _ in runs if v is w) for w, _ in runs}
    where = ", ".join(f"{label}: {n} file{'s' if n > 1 else ''}" for label, n in used.items())
    return f"{outcome(total)} ({where})"
