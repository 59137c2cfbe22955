"""MLPerf BERT pretraining: load a config, build the Trainer, train to the target accuracy.

    python run_pretraining.py                                   # tiny CPU run on synthetic data
    python run_pretraining.py --config configs/NAME.yaml [--set section.key=value ...]
    torchrun --nproc_per_node=8 run_pretraining.py \
        --config configs/bert_large_1x8xa100_lb56_ga1.yaml
    python run_pretraining.py --resume auto      # continue from the newest checkpoint
    python run_pretraining.py --eval-only --set run.init_checkpoint=PATH   # starting accuracy

The program is bert/train/cli.py (installed as the console command `open-bert-train`); this
file is its front end in a checkout, for torchrun and the launchers in launch/.

Exit status: 0 target reached (or eval-only done), 1 not reached or failed (a stalled rank, a
diverged loss), 2 bad input (config, data, checkpoint), with one line naming what is wrong;
143 / 130: stopped by SIGTERM / SIGINT at a step boundary.
"""

from __future__ import annotations

import sys

# main(argv, callbacks=...) is this module's too: tests/faults.py and the tests call it here
from bert.train.cli import command, main  # noqa: F401

if __name__ == "__main__":
    sys.exit(command())
