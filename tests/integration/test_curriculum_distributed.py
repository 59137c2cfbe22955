"""Curricula across processes: run_pretraining.py under torchrun (gloo) with 2 ranks.

The audit trail (`--record-samples`) must show every step's samples, on both ranks, in one
length bucket, and every sample of a bucket exactly once per epoch of it (the shards of
tests/bucket_data.py make epochs end on step boundaries). loss_controlled's bucket sequence
depends on the training losses: it agrees across the ranks only if both feed it the same
all-gathered mean, which travels on the host comm from the data threads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bucket_data import BOUNDARIES, check_epochs, sample_buckets, write_bucketed_shards
from data_audit import read_rank_files
from launchers import launch, tiny_job_args

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return write_bucketed_shards(tmp_path_factory.mktemp("bucketed_dist"))


@pytest.mark.parametrize(
    "curriculum, strategy, extra",
    [
        # every loss is below 100: each visit ends with its 2-step window; with the loss lag of 3
        # (prefetch depth 2 + 1) a visit is 4 steps (tests/integration/test_bucketing_pipeline.py)
        (
            "loss_controlled",
            "serpentine",
            ["data.curriculum.loss_targets=100", "data.curriculum.loss_window=2"],
        ),
        # a target inside the batch-to-batch noise of the loss (about 6.2-6.6 here): whether a
        # visit ends depends on the exact numbers, so the ranks agree only on identical means
        (
            "loss_controlled",
            "none",
            ["data.curriculum.loss_targets=6.35", "data.curriculum.loss_window=1"],
        ),
        ("exp3s", "none", ["data.curriculum.eta=2", "data.curriculum.gamma=0.3"]),
        ("shuffled", "global_presort", ["data.curriculum.round_batches=8"]),
    ],
)
def test_two_ranks_train_one_bucket_per_step_each_sample_once(
    data_dir, tmp_path, curriculum, strategy, extra
):
    steps = 16  # global batch 16: a bucket epoch (32 samples) is 2 of its steps
    args = tiny_job_args(data_dir, tmp_path, strategy, 2, steps)
    for item in [
        f"data.curriculum.name={curriculum}",
        f"data.curriculum.bucket_boundaries={BOUNDARIES}",
        *extra,
    ]:
        args += ["--set", item]
    code, output, _ = launch("torchrun", 2, args)
    assert code == 0, output[-3000:]  # the tiny budget: a budget stop, status 0
    # one bucket per step on both ranks, each sample once per epoch of its bucket
    per_step = check_epochs(read_rank_files(tmp_path / "rec", 2), sample_buckets(data_dir))
    assert len(per_step) == steps
    if "data.curriculum.loss_targets=100" in extra:
        assert per_step == [(s // 4) % 4 for s in range(steps)]
