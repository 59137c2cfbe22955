"""Length bucketing and curricula in the training pipeline (data/pipeline.py with a curriculum).

Ranks run as threads (tests/thread_comm.py), so every curriculum can be checked
with the exchange strategies in seconds: all ranks train the same bucket at every step, every
sample once per epoch of its bucket (tests/bucket_data.py), the same batches for the same seed,
exact resume from `state_dict()`, and the loss feedback: losses posted per rank, averaged over
the ranks, reaching loss_controlled and exp3s identically everywhere. Then the config checks,
and the whole program (`run_pretraining.py`) for a few steps with a curriculum.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from bert.config import ConfigError, load_config
from data.order.loss_feedback import LossFeedback
from data.sources.bucket_queues import BucketStream
from data.sources.rank_shards import RankShards
from data.sources.shards import DataError, list_shards

from bucket_data import (
    BOUNDARIES,
    EDGES,
    MAX_PRED,
    MAX_SEQ,
    check_epochs,
    sample_buckets,
    step_buckets,
    write_bucketed_shards,
)
from data_audit import read_rank_files
from commands import check_compliance
from thread_comm import open_pipeline, run_thread_ranks

ROOT = Path(__file__).resolve().parents[2]
SEED = 21
CURRICULA = ("shuffled", "random", "increasing", "decreasing", "loss_controlled", "exp3s")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return write_bucketed_shards(tmp_path_factory.mktemp("bucketed"))


def config(
    data_dir: Path, curriculum: str, *extra: str, global_batch: int = 8, strategy: str = "none"
):
    return load_config(
        None,
        [
            f"data.train_dir={data_dir}",
            f"data.max_seq_length={MAX_SEQ}",
            f"data.max_predictions_per_seq={MAX_PRED}",
            f"model.max_position_embeddings={MAX_SEQ}",
            f"data.balance={strategy}",
            f"run.global_batch_size={global_batch}",
            f"data.curriculum.name={curriculum}",
            f"data.curriculum.bucket_boundaries={BOUNDARIES}",
            "data.curriculum.round_batches=8",
            "data.curriculum.loss_targets=5.5",
            "data.curriculum.loss_window=2",
            "submission.division=open",
            *extra,
        ],
    )


def fake_loss(step: int, rank: int) -> float:
    """Differs by rank (4 on rank 0, 6 on rank 1: mean 5, below the 5.5 target; rank 1's own
    loss never is) and varies by step, so only correctly averaged losses keep ranks in step."""
    return 4.0 + 2.0 * rank + 0.1 * np.sin(step)


def run_ranks(
    cfg,
    world: int,
    steps: int,
    record_dir: Path,
    states_at: int = -1,
    resume: list[dict] | None = None,
) -> list[dict]:
    """Steps up to `steps` on `world` thread ranks (from resume[rank]'s step, if given),
    posting fake_loss after each; returns each rank's pipeline.state_dict() after step
    `states_at` (or the last step)."""
    states: list[dict] = [{} for _ in range(world)]

    def rank_main(rank: int, comm) -> None:
        with open_pipeline(cfg, rank, world, SEED, comm, record_dir=record_dir) as pipeline:
            if resume:
                pipeline.load_state_dict(json.loads(json.dumps(resume[rank])))
            for step in range(resume[rank]["step"] if resume else 0, steps):
                pipeline.next_step()
                pipeline.observe_loss(torch.tensor(fake_loss(step, rank)))
                if step == states_at or step == steps - 1 and states_at < 0:
                    states[rank] = pipeline.state_dict()

    run_thread_ranks(world, rank_main)
    return states


def fingerprint(state: dict) -> int:
    return zlib.crc32(json.dumps(state["curriculum"], sort_keys=True).encode())


# --------------------------------------------------------------------------------------------
# Coverage, agreement, determinism
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["none", "serpentine", "node_swap"])
@pytest.mark.parametrize("curriculum", CURRICULA)
def test_every_sample_once_per_epoch_on_two_ranks(data_dir, tmp_path, curriculum, strategy):
    states = run_ranks(config(data_dir, curriculum, strategy=strategy), 2, 40, tmp_path)
    per_step = check_epochs(read_rank_files(tmp_path, 2), sample_buckets(data_dir))
    assert set(per_step) == {0, 1, 2, 3}
    assert fingerprint(states[0]) == fingerprint(states[1])  # the ranks' curricula agree


def test_loss_feedback_is_averaged_over_ranks_and_reaches_loss_controlled(data_dir, tmp_path):
    """Global loss 5 < target 5.5: each visit ends once its 2-step window is full. Step s is
    drawn with the losses of steps <= s - 3 (lag = prefetch depth 2 + 1), so a visit lasts 4
    steps: 2 in the window, 2 drawn before the window's last loss arrived."""
    run_ranks(config(data_dir, "loss_controlled"), 2, 24, tmp_path)
    per_step = step_buckets(read_rank_files(tmp_path, 2), sample_buckets(data_dir))
    assert per_step == [(s // 4) % 4 for s in range(24)]


def test_without_the_other_rank_loss_controlled_would_stay(data_dir, tmp_path):
    """The same run on rank 1 alone (its loss 6 > 5.5) never leaves bucket 0: the agreement
    above comes from the average, not from the schedule."""
    cfg = config(data_dir, "loss_controlled")
    with open_pipeline(cfg, 0, 1, SEED, record_dir=tmp_path) as pipeline:
        for step in range(12):
            pipeline.next_step()
            pipeline.observe_loss(torch.tensor(fake_loss(step, rank=1)))
    assert set(step_buckets(read_rank_files(tmp_path, 1), sample_buckets(data_dir))) == {0}


def test_exp3s_ranks_agree_and_learn(data_dir, tmp_path):
    states = run_ranks(config(data_dir, "exp3s", "data.curriculum.gamma=0.5"), 2, 30, tmp_path)
    assert fingerprint(states[0]) == fingerprint(states[1])
    bandit = states[0]["curriculum"]
    # 27 updates applied (lag 3); each bucket's first batch has no visit gain to reward
    assert 27 - len(EDGES) <= bandit["updates"] < 27
    assert np.ptp(bandit["weights"]) > 0
    check_epochs(read_rank_files(tmp_path, 2), sample_buckets(data_dir))


@pytest.mark.parametrize("curriculum", ["shuffled", "exp3s"])
def test_same_seed_same_batches_other_seed_other_order(data_dir, tmp_path, curriculum):
    cfg = config(data_dir, curriculum)
    runs = {}
    for name, seed in (("a", SEED), ("b", SEED), ("c", SEED + 1)):
        with open_pipeline(cfg, 0, 1, seed, record_dir=tmp_path / name) as pipeline:
            for step in range(16):
                pipeline.next_step()
                pipeline.observe_loss(torch.tensor(fake_loss(step, 0)))
        runs[name] = (tmp_path / name / "rank0.txt").read_text()
    assert runs["a"] == runs["b"] and runs["a"] != runs["c"]


def test_one_rank_covers_each_bucket_per_epoch_with_accumulation(data_dir, tmp_path):
    cfg = config(data_dir, "increasing", "run.gradient_accumulation_steps=2")
    with open_pipeline(cfg, 0, 1, SEED, record_dir=tmp_path) as pipeline:
        for _ in range(40):
            micro = pipeline.next_step()
            assert len(micro) == 2 and all(b.num_sequences == 4 for b in micro)
            assert max(b.max_seqlen for b in micro) <= EDGES[-1]
    check_epochs(read_rank_files(tmp_path, 1), sample_buckets(data_dir))


# --------------------------------------------------------------------------------------------
# Resume
# --------------------------------------------------------------------------------------------


def _take(pipeline, start: int, n: int) -> list[list[np.ndarray]]:
    out = []
    for step in range(start, start + n):
        out.append([b.input_ids.numpy().copy() for b in pipeline.next_step()])
        pipeline.observe_loss(torch.tensor(fake_loss(step, 0)))
    return out


@pytest.mark.parametrize("strategy", ["none", "global_presort"])
@pytest.mark.parametrize("curriculum", CURRICULA)
def test_resume_gives_exactly_the_same_next_batches(data_dir, curriculum, strategy):
    cfg = config(data_dir, curriculum, strategy=strategy)
    with open_pipeline(cfg, 0, 1, SEED) as original:
        _take(original, 0, 11)  # past an epoch of some bucket queues (4 visits each)
        state = json.loads(json.dumps(original.state_dict()))  # survives a JSON checkpoint
        expected = _take(original, 11, 14)
    assert state["step"] == 11
    with open_pipeline(cfg, 0, 1, SEED) as resumed:
        resumed.load_state_dict(state)
        got = _take(resumed, 11, 14)
    for a, b in zip(got, expected):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_resume_on_two_ranks_continues_both(data_dir, tmp_path):
    cfg = config(data_dir, "loss_controlled", strategy="serpentine")
    states = run_ranks(cfg, 2, 24, tmp_path / "whole", states_at=9)
    run_ranks(cfg, 2, 24, tmp_path / "resumed", resume=states)  # steps 10..23
    whole = read_rank_files(tmp_path / "whole", 2)
    resumed = read_rank_files(tmp_path / "resumed", 2)
    for rank in range(2):
        assert {s: whole[rank][s] for s in range(10, 24)} == resumed[rank]


def test_state_needs_the_last_loss_and_matching_settings(data_dir):
    cfg = config(data_dir, "loss_controlled")
    with open_pipeline(cfg, 0, 1, SEED) as pipeline:
        pipeline.next_step()
        with pytest.raises(RuntimeError, match=r"losses of steps \[0\] were not posted"):
            pipeline.state_dict()
        with pytest.raises(RuntimeError, match="call pipeline.observe_loss"):
            pipeline.next_step()
        pipeline.observe_loss(torch.tensor(3.0))
        state = pipeline.state_dict()
    assert state["losses"] == {0: 3.0} and state["loss_lag"] == 3
    other = config(data_dir, "loss_controlled", "data.prefetch_depth=1")
    with open_pipeline(other, 0, 1, SEED) as pipeline:
        with pytest.raises(ValueError, match="loss lag of 3 steps"):
            pipeline.load_state_dict(state)
    plain = load_config(
        None,
        [
            f"data.train_dir={data_dir}",
            f"data.max_seq_length={MAX_SEQ}",
            f"data.max_predictions_per_seq={MAX_PRED}",
            f"model.max_position_embeddings={MAX_SEQ}",
        ],
    )
    with open_pipeline(plain, 0, 1, SEED) as pipeline:
        plain_state = pipeline.state_dict()
    with open_pipeline(cfg, 0, 1, SEED) as pipeline:
        with pytest.raises(ValueError, match="saved without data.curriculum"):
            pipeline.load_state_dict(plain_state)


# --------------------------------------------------------------------------------------------
# Loss feedback
# --------------------------------------------------------------------------------------------


def test_loss_feedback_waits_for_the_loss_and_gives_up_when_closed():
    feedback = LossFeedback("cpu", lag=2)
    got, failed = [], []

    def reader():
        got.append(feedback.value(1))
        try:
            feedback.value(5)
        except RuntimeError as err:
            failed.append(str(err))

    thread = threading.Thread(target=reader)
    thread.start()
    feedback.observe(0, torch.tensor(1.0))
    feedback.observe(1, torch.tensor(2.0, dtype=torch.float64))
    feedback.observe(2, torch.tensor(3.0))  # step 0 is more than lag behind: dropped
    assert not feedback.observed(0) and feedback.values([1, 2]) == {1: 2.0, 2: 3.0}
    feedback.close()
    thread.join(60)  # returns at once when the reader woke up; bounded against a hang
    assert got == [2.0] and "closed while waiting for the loss of step 5" in failed[0]


@pytest.mark.gpu
def test_cuda_loss_is_posted_without_a_host_sync():
    if not torch.cuda.is_available():  # queried at run time, never at collection
        pytest.skip("needs a CUDA GPU")
    feedback = LossFeedback("cuda", lag=3)
    loss = torch.full((), 2.5, device="cuda") * 2
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        feedback.observe(0, loss)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    got = []
    thread = threading.Thread(target=lambda: got.append(feedback.value(0)))
    thread.start()
    thread.join(60)
    assert got == [5.0]


# --------------------------------------------------------------------------------------------
# Bucket queues
# --------------------------------------------------------------------------------------------


def test_a_batch_across_an_epoch_end_never_repeats_a_sample(data_dir):
    """32 samples per bucket and epoch (one rank), batches of 6: batches straddle epoch ends;
    a sample of the new epoch already in the batch waits for the next batch, also across a
    resume taken while it waits."""
    stream = BucketStream(RankShards(list_shards(data_dir), 0, 1, SEED, MAX_SEQ, MAX_PRED), EDGES)
    drawn, saved = [], None
    for batch in range(16):  # 96 samples: 3 epochs of the queue
        _, origin = stream.next_batch_tagged(6, 2)
        keys = [tuple(o) for o in origin.tolist()]
        assert len(set(keys)) == 6
        drawn += keys
        if stream.queues[2].deferred and saved is None:
            saved = (batch + 1, json.loads(json.dumps(stream.state_dict())))
    assert saved is not None  # the case this test is about did occur
    for epoch in range(3):
        assert len(set(drawn[32 * epoch : 32 * (epoch + 1)])) == 32, epoch
    done, state = saved
    again = BucketStream(RankShards(list_shards(data_dir), 0, 1, SEED, MAX_SEQ, MAX_PRED), EDGES)
    again.load_state_dict(state)
    rest = [tuple(o) for _ in range(done, 16) for o in again.next_batch_tagged(6, 2)[1].tolist()]
    assert rest == drawn[6 * done :]
    stream.close()
    again.close()


def test_a_bucket_smaller_than_the_batch_is_a_clear_error(data_dir):
    """One rank reads all 4 shards: 32 samples of bucket 1 per epoch, fewer than 40."""
    stream = BucketStream(RankShards(list_shards(data_dir), 0, 1, SEED, MAX_SEQ, MAX_PRED), EDGES)
    with pytest.raises(DataError, match=r"length bucket \(16, 32\] holds fewer than 40"):
        stream.next_batch_tagged(40, 1)
    stream.close()


def test_an_empty_bucket_is_a_clear_error(data_dir):
    stream = BucketStream(
        RankShards(list_shards(data_dir), 0, 1, SEED, MAX_SEQ, MAX_PRED), (2, 16, 64)
    )
    with pytest.raises(DataError, match=r"length in \(0, 2\].*bucket is empty"):
        stream.next_batch_tagged(4, 0)
    stream.close()


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data.curriculum.name=sorted"], "data.curriculum.name='sorted': expected one of none, "),
        (["data.curriculum.bucket_boundaries=128,512"], "needs a data.curriculum.name"),
        (
            ["data.curriculum.name=random", "data.curriculum.bucket_boundaries=128,x,512"],
            "expected comma-separated integers",
        ),
        (
            ["data.curriculum.name=random", "data.curriculum.bucket_boundaries=256,128,512"],
            "strictly increasing",
        ),
        (
            ["data.curriculum.name=random", "data.curriculum.bucket_boundaries=128,256"],
            "the last edge must equal data.max_seq_length=512",
        ),
        (
            ["data.curriculum.name=shuffled", "data.balance=stratified_local_snake"],
            "use data.balance none, global_presort, serpentine or node_swap",
        ),
        (
            ["data.curriculum.name=random", "data.curriculum.round_batches=3"],
            "must be >= the 4 buckets",
        ),
        (
            ["data.curriculum.name=loss_controlled", "data.curriculum.loss_targets=3,2"],
            "expected one positive loss or 4",
        ),
        (
            ["data.curriculum.name=loss_controlled", "data.curriculum.loss_targets=high"],
            "expected comma-separated numbers",
        ),
        (
            ["data.curriculum.name=loss_controlled", "data.curriculum.loss_window=0"],
            "data.curriculum.loss_window=0 must be >= 1",
        ),
        (["data.curriculum.name=exp3s", "data.curriculum.gamma=0"], "in \\(0, 1\\]"),
        (["data.curriculum.name=exp3s", "data.curriculum.alpha=1/2"], "expected a number or 1/t"),
        (
            ["data.curriculum.name=exp3s", "data.curriculum.reward=prediction_gain"],
            "needs a second forward",
        ),
    ],
)
def test_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_config_defaults_keep_bucketing_off_and_parse_settings():
    d = load_config(None, []).data
    assert d.curriculum.name == "none" and d.curriculum.bucket_boundaries == []
    d = load_config(
        None,
        ["data.curriculum.name=exp3s", "data.curriculum.alpha=1/t", "submission.division=open"],
    ).data
    assert d.curriculum.bucket_boundaries == [128, 256, 384, 512]  # [Kim]'s strata
    d = load_config(
        None,
        [
            "data.curriculum.name=loss_controlled",
            "data.max_seq_length=128",
            "data.curriculum.bucket_boundaries=16, 64,128",
            "data.curriculum.loss_targets=4,3.5,3",
            "submission.division=open",
        ],
    ).data
    assert d.curriculum.bucket_boundaries == [16, 64, 128]
    assert d.curriculum.loss_targets == [4.0, 3.5, 3.0]


def test_closed_division_refuses_a_curriculum(data_dir):
    # refused when the config is read, before anything runs
    with pytest.raises(ConfigError, match="open division only.*submission.division=open"):
        config(data_dir, "shuffled", "submission.division=closed")


# --------------------------------------------------------------------------------------------
# The whole program
# --------------------------------------------------------------------------------------------


def run_main(data_dir: Path, out: Path, *settings: str) -> subprocess.CompletedProcess:
    base = {
        "data.synthetic.enabled": "false",
        "data.train_dir": data_dir,
        "data.eval_file": data_dir / "eval.hdf5",
        "data.max_seq_length": MAX_SEQ,
        "data.max_predictions_per_seq": MAX_PRED,
        "model.vocab_size": 256,
        "model.hidden_size": 32,
        "model.num_hidden_layers": 1,
        "model.num_attention_heads": 2,
        "model.intermediate_size": 64,
        "model.max_position_embeddings": MAX_SEQ,
        "run.global_batch_size": 8,
        "run.max_steps": 10,
        "eval.interval_samples": 40,
        "eval.samples": 16,
        "run.device": "cpu",
        "run.threads": 1,
        "run.seed": SEED,
        "run.output_dir": out,
        "log.interval_s": 1000,
        "data.curriculum.bucket_boundaries": BOUNDARIES,
        "submission.division": "open",
    }
    args = [sys.executable, str(ROOT / "run_pretraining.py"), "--record-samples", str(out / "rec")]
    for key, value in base.items():
        args += ["--set", f"{key}={value}"]
    for item in settings:
        args += ["--set", item]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_run_pretraining_with_a_curriculum(data_dir, tmp_path):
    proc = run_main(
        data_dir,
        tmp_path,
        "data.curriculum.name=loss_controlled",
        "data.curriculum.loss_targets=9",
        "data.curriculum.loss_window=1",
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]  # a budget stop
    assert "curriculum loss_controlled(" in proc.stdout and "global loss of step t-3" in proc.stdout
    log = (tmp_path / "mlperf.log").read_text()
    assert '"key": "data_curriculum", "value": "loss_controlled"' in log
    assert '"bucket_boundaries": [16, 32, 48, 64]' in log
    per_step = check_epochs(read_rank_files(tmp_path / "rec", 1), sample_buckets(data_dir))
    # the real losses (about 5.6) are below 9: the curriculum moves on after every window
    assert len(per_step) == 10 and len(set(per_step)) > 1
    checked = check_compliance(tmp_path / "mlperf.log")
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.slow
def test_run_pretraining_refuses_a_curriculum_in_the_closed_division(data_dir, tmp_path):
    proc = run_main(data_dir, tmp_path, "data.curriculum.name=random", "submission.division=closed")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: data.curriculum.name='random' is open division only")
    assert "Traceback" not in proc.stderr
