"""Run many command lines in one process, as `python SCRIPT ARGS` / `python -m MODULE ARGS` would.

    python tests/cli_rows.py ROWS.json RESULTS.json

ROWS.json: {"watch": [folders], "rows": [{"name", "script" or "module", "argv", "env"}]}.
Each row runs through runpy as __main__ (so its `sys.exit(main())` line runs too) with its
stdout and stderr captured; an exception that escapes is a traceback in its stderr and status 1,
as the interpreter would print it. After each row every file under the watched folders is
compared with the snapshot taken before the first row. RESULTS.json: per row its status,
stdout, stderr and the watched files it changed.

Why one process: importing torch costs seconds under load; a table of 30+ bad inputs, each
failing in milliseconds, would otherwise spend minutes starting interpreters
(tests/integration/test_bad_inputs.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import runpy
import sys
import traceback
import warnings
from pathlib import Path

# Rows run earlier in this process imported the modules that later rows run as __main__; runpy
# warns about that, which a fresh interpreter would not print.
warnings.filterwarnings(
    "ignore", message=".*found in sys.modules after import of package", category=RuntimeWarning
)


def snapshot(folders: list[str]) -> dict[str, list]:
    """{path: [size, mtime_ns, sha256]} of every file (and every folder, as a marker) under
    `folders`."""
    seen = {}
    for folder in folders:
        for path in sorted(Path(folder).rglob("*")):
            if path.is_dir():
                seen[str(path)] = ["dir"]
            else:
                st = path.stat()
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                seen[str(path)] = [st.st_size, st.st_mtime_ns, digest]
    return seen


def changed_paths(before: dict, after: dict) -> list[str]:
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


@contextlib.contextmanager
def environment(env: dict[str, str]):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_row(row: dict) -> dict:
    """One command line in this process: its exit status and output."""
    out, err = io.StringIO(), io.StringIO()
    target = row.get("script") or row["module"]
    sys.argv = [target, *row["argv"]]
    status = 0
    with (
        environment(row.get("env", {})),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            if "script" in row:
                runpy.run_path(target, run_name="__main__")
            else:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
        except SystemExit as exit_:
            code = exit_.code
            status = code if isinstance(code, int) else (0 if code is None else 1)
            if isinstance(code, str):
                print(code, file=sys.stderr)  # sys.exit("message"), as the interpreter does
        except BaseException:  # noqa: BLE001 - reported as the interpreter would, then go on
            traceback.print_exc()
            status = 1
    return {"status": status, "stdout": out.getvalue(), "stderr": err.getvalue()}


def main(spec_path: str, result_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    before = snapshot(spec["watch"])
    results = {}
    for row in spec["rows"]:
        result = run_row(row)
        result["changed"] = changed_paths(before, snapshot(spec["watch"]))
        results[row["name"]] = result
    Path(result_path).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
