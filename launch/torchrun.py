"""torchrun that exits with the workers' own status (launch/torchrun.sh runs it).

    python launch/torchrun.py [torchrun arguments] run_pretraining.py [arguments]

torchrun turns any failed worker into exit status 1 and a ChildFailedError traceback, so a
launcher could not tell bad input (2) from a run that missed its target (1) or a crash. This
runs torchrun (torch.distributed.run) in this process with the same arguments. It hands the
workers a fresh folder in $OPEN_BERT_EXIT_DIR, where the rank that prints a bad-input `error:`
line leaves its status (bert/train/launch_env.py: report_error; the other ranks then print
nothing). When workers fail it prints one line (no traceback) and exits with that status, else
with the status of the first worker that failed (128 + N for signal N).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from bert.train.launch_env import EXIT_DIR_VAR, STATUS_FILE


def recorded_status(folder: Path) -> int | None:
    """The status a worker left with its `error:` line, if one did."""
    try:
        text = (folder / STATUS_FILE).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def exit_status(failure_code: int) -> int:
    """A worker's exit code as a shell reports it: a signal N (code -N) is 128 + N."""
    return 128 - failure_code if failure_code < 0 else failure_code or 1


def main(argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    folder = Path(tempfile.mkdtemp(prefix="open-bert-exit."))
    os.environ[EXIT_DIR_VAR] = str(folder)  # the workers inherit the agent's environment
    try:
        torchrun(argv)
    except ChildFailedError as err:
        rank, failure = err.get_first_failure()
        status = recorded_status(folder) or exit_status(failure.exitcode)
        print(
            f"torchrun: worker rank {rank} exited with status {exit_status(failure.exitcode)}"
            f"; exit status {status}",
            file=sys.stderr,
        )
        return status
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
