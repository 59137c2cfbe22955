"""Fault injection for the tests: run_pretraining.py with a rank that crashes or is killed.

The training loop and the data pipeline hold no test hooks; this wraps the program instead,
with generic hooks of theirs (`Trainer(callbacks=...)`, `TrainPipeline(prepare_hooks=...)`):

    python tests/faults.py RUN_PRETRAINING_ARGS...     (under torchrun or mpiexec)

with, in the environment,
    BERT_TEST_KILL_RANK=R [BERT_TEST_KILL_STEP=S (default 1)]    rank R kills itself with
        SIGKILL right after optimizer step S (tests/integration/test_resume.py: a job dies
        mid-run);
    BERT_TEST_CRASH_RANK=R [BERT_TEST_CRASH_STEP=S (default 2)]  rank R's data thread fails
        while preparing step S (tests/integration/test_data_distributed.py: a failing rank
        ends the job);
    BERT_TEST_STALL_RANK=R [BERT_TEST_STALL_STEP=S (default 2)]  rank R freezes (sleeps for
        an hour, deaf to SIGTERM) right after optimizer step S
        (tests/integration/test_reliability.py: a stalled rank is named once dist.timeout_s
        has passed).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KILL_RANK_VAR, KILL_STEP_VAR = "BERT_TEST_KILL_RANK", "BERT_TEST_KILL_STEP"
CRASH_RANK_VAR, CRASH_STEP_VAR = "BERT_TEST_CRASH_RANK", "BERT_TEST_CRASH_STEP"
STALL_RANK_VAR, STALL_STEP_VAR = "BERT_TEST_STALL_RANK", "BERT_TEST_STALL_STEP"


def crash_at(rank: int, step: int):
    """A TrainPipeline prepare hook: fail while preparing `step`, as rank `rank`."""

    def hook(prepared: int) -> None:
        if prepared == step:
            raise RuntimeError(
                f"{CRASH_RANK_VAR}={rank}: injected failure while preparing "
                f"step {prepared} (test hook)"
            )

    return hook


class Faults:
    """A Trainer callback injecting the faults the environment asks of this rank."""

    def __init__(self, env=os.environ):
        self.env = env

    def _step(self, rank_var: str, step_var: str, rank: int, default: int) -> int:
        if self.env.get(rank_var, "") != str(rank):
            return -1
        return int(self.env.get(step_var, str(default)))

    def on_train_start(self, trainer) -> None:
        rank = trainer.ctx.rank
        step = self._step(CRASH_RANK_VAR, CRASH_STEP_VAR, rank, 2)
        if step >= 0:
            trainer.pipeline.prepare_hooks.append(crash_at(rank, step))

    def on_step_end(self, trainer, step: int) -> None:
        if step == self._step(KILL_RANK_VAR, KILL_STEP_VAR, trainer.ctx.rank, 1):
            os.kill(os.getpid(), signal.SIGKILL)
        if step == self._step(STALL_RANK_VAR, STALL_STEP_VAR, trainer.ctx.rank, 2):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # frozen: only SIGKILL ends it
            time.sleep(3600)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    import run_pretraining

    from bert.train.stop_signals import install_stop_handlers

    install_stop_handlers()  # SIGTERM, SIGINT: stop at the next step boundary
    sys.exit(run_pretraining.main(sys.argv[1:], callbacks=[Faults()]))
