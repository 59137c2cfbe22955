"""A pytest plugin that writes each test's start and outcome to a JSON-lines journal as it
happens (`-p bert.tools.gpu.pytest_journal`, path in $BERT_TEST_JOURNAL).

Why: a device fault kills the pytest process, and pytest prints failures and writes its JUnit
file only at the end. The 2026-11-26 H100 window lost every verdict of five kernel test files
that way (a segmentation fault in one test each). With the journal, the tests that finished keep
their outcome and failure text, and the test that was running when the process died is named:
it is the last `start` without an outcome (`read_journal`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

JOURNAL_ENV = "BERT_TEST_JOURNAL"
LONGREPR_CHARS = 4000  # enough for an assertion's message and the lines around it


def _append(record: dict) -> None:
    path = os.environ.get(JOURNAL_ENV)
    if not path:
        return
    with open(path, "a") as journal:
        journal.write(json.dumps(record) + "\n")
        journal.flush()
        os.fsync(journal.fileno())  # the next line may be the one that kills the process


def pytest_runtest_logstart(nodeid, location):
    _append({"nodeid": nodeid, "event": "start"})


def pytest_runtest_logreport(report):
    # A test's outcome: its call phase, or a setup/teardown phase that failed or skipped.
    if report.when == "call" or report.failed or (report.when == "setup" and report.skipped):
        record = {
            "nodeid": report.nodeid,
            "event": "outcome",
            "when": report.when,
            "outcome": report.outcome,
            "seconds": round(report.duration, 3),
        }
        if report.failed:
            record["longrepr"] = report.longreprtext[-LONGREPR_CHARS:]
        _append(record)


def read_journal(path: Path) -> dict[str, dict]:
    """nodeid -> {"outcome": passed|failed|skipped|crashed, ...}, in the order tests started.
    A test that started and has no outcome died with its process: "crashed". A failed setup or
    teardown counts as "errored"; a failure in teardown after a pass overrides the pass."""
    tests: dict[str, dict] = {}
    if not path.is_file():
        return tests
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the last line, cut by the crash
            continue
        entry = tests.setdefault(record["nodeid"], {"outcome": "crashed"})
        if record["event"] != "outcome":
            continue
        outcome = record["outcome"]
        if outcome == "failed" and record["when"] != "call":
            outcome = "errored"
        if entry["outcome"] in ("crashed", "passed") or outcome != "passed":
            entry.update(outcome=outcome, when=record["when"], seconds=record["seconds"])
            if "longrepr" in record:
                entry["longrepr"] = record["longrepr"]
    return tests
