"""The project's commands as the tests run them, and the promise a refused input keeps.

- `run_python(*args, timeout=...)`: `python ARGS` from the checkout's root, output captured as
  text (`torchrun(world, ...)` puts torchrun's arguments ahead of a script's);
- `check_compliance(*logs)`: scripts/check_compliance.py (the official checker plus this
  project's notes) on MLPerf logs;
- `one_error_line(stderr)` / `assert_one_error(...)`: a refused input ends in exactly one
  `error:` line and no traceback (the second also wants exit status 2 and the line's fragments).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_PRETRAINING = ROOT / "run_pretraining.py"
CHECK_SCRIPT = ROOT / "scripts" / "check_compliance.py"
# an error line, also behind a prefix ending in ": " (a rank's line as a launcher shows it)
ERROR_LINE = re.compile(r"(^|: )error: ")


def run_python(*args, timeout: float, cwd: Path = ROOT, env=None) -> subprocess.CompletedProcess:
    """`python ARGS` (each argument as str) in `cwd`; stdout and stderr captured as text."""
    return subprocess.run(
        [sys.executable, *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def torchrun(world: int, *args) -> list:
    """`python -m torch.distributed.run` for `world` ranks on this host, then `args`."""
    return ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}", *args]


def check_compliance(*logs: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_python(CHECK_SCRIPT, *logs, timeout=timeout)


def one_error_line(stderr: str) -> str:
    """The one line of `stderr` that starts with `error: `, after checking it is the only one and
    that no traceback was printed."""
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    return errors[0]


def assert_one_error(status: int, stdout: str, stderr: str, fragments: list[str]) -> None:
    """Exit status 2, no traceback, exactly one error line (ERROR_LINE: a rank's too), holding
    every fragment and short (values are shortened: a YAML bomb too)."""
    shown = f"status {status}\nstdout:\n{stdout[-2000:]}\nstderr:\n{stderr[-3000:]}"
    assert status == 2, shown
    assert "Traceback" not in stderr + stdout, shown
    errors = [line for line in stderr.splitlines() if ERROR_LINE.search(line)]
    assert len(errors) == 1, shown
    for fragment in fragments:
        assert fragment in errors[0], f"{fragment!r} not in: {errors[0]}"
    assert len(errors[0]) < 600, errors[0][:2000]  # values are shortened (a YAML bomb too)
