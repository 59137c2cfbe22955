"""How long each step of the GPU window is expected to take (bert/tools/gpu/window.py plans
with these, not with the caps): the seconds of the newest window record that ran the step, or,
for a step no window has run yet, an estimate built from recorded parts (`estimate`).
"""

from __future__ import annotations

from dataclasses import dataclass

# A GPU test file no window has run yet (an estimate): the recorded files of a few small tests
# took 7-14 s (2026-11-28: test_prefetch 7.1, test_bucketing_pipeline 7.9, test_attention's 10
# tests 11.6, test_lamb_kernel's 16 tests 13.7), the longest, test_dense's 145, 31.8 s.
UNRECORDED_TEST_FILE_S = 20

RECORDS = "benchmarks/results/gpu"
NEWEST = "2026-11-28_window"  # H200, every step up to throughput_fused finished


@dataclass(frozen=True)
class Expectation:
    seconds: float
    record: str | None  # the window (RECORDS/<record>/summary.json) whose step took `seconds`
    basis: str = ""  # for an estimate (no record): how it is built from recorded parts

    @property
    def estimate(self) -> bool:
        return self.record is None


# The attention probe has no GPU record yet: probe_sdpa.py, its model, took 15.6 s (2026-11-28:
# the process and CUDA's start, then 16 kernel runs, each with its yardsticks, at batch 8); this
# one runs 20 cases (10 paths, 2 dtypes) on batch 56, each checked once and timed 66 times at a
# few milliseconds, but for the nested-tensor math path, which loops over the sequences in
# Python (about 30 ms a call: 2 s a dtype).
ATTENTION_PROBE_S = 15.6 + 20 * 66 * 0.005 + 2 * 2.0
# The one throughput process has no GPU record yet: its parts, each from a record.
GRAPHED_VARIANTS = 2  # window.THROUGHPUT_VARIANTS with +graphs (a test counts them)
# A +graphs variant's warm-up captures every batch shape (10 batches: up to 10 shapes), each
# after the capture's 3 warm-up iterations, so about 5 steps a shape at the unfused step's
# 0.096 s (2026-11-28 throughput_eager.json), rounded up for the captures' synchronizations.
GRAPHED_WARMUP_S = 10 * 5 * 0.096 + 0.2
THROUGHPUT_PARTS_S = {
    # 2026-11-28 throughput_eager: 45.0 s, less its warm-ups (1.49 + 4.12 s) and 3 rounds of
    # 10 steps at 0.096 + 0.214 s
    "the process, its workload and two variants built": 30.1,
    # 2026-11-28 throughput_fused built two variants more than throughput_eager and took 15 s
    # more once its warm-ups, selection blocks and rounds are taken out; the FP8 and graphed
    # variants (no record yet) are counted like the others
    "seven more variants built, 7.5 s each": 7 * 7.5,
    # hf_compile 51.84 s (2026-11-26 throughput_compiled.json), flash_varlen 1.49 and hf_eager
    # 4.12 s (2026-11-28 throughput_eager.json), the fused ones about 1.9 s each (2026-11-28
    # throughput_fused.json; the two FP8 variants like them), the graphed ones GRAPHED_WARMUP_S
    "warm-ups (HF compile's is 51.8 s)": 51.84
    + 1.49
    + 4.12
    + 4 * 1.9
    + GRAPHED_VARIANTS * GRAPHED_WARMUP_S,
    # seconds_per_step of the records: flash_varlen 0.096, +fused 0.082, +fusedlamb 0.092,
    # hf_eager 0.214, hf_compile 0.178; the FP8 and graphed variants (no record yet) at the
    # unfused step's 0.096 each
    "2 rounds of 10 steps of the 9 variants": 2 * 10 * (0.662 + 4 * 0.096),
}


def measured(seconds: float, record: str = NEWEST) -> Expectation:
    return Expectation(seconds, record)


EXPECTED = {
    "device": measured(7.2),
    # 3 runs to the target in 40 steps each (learning_proof.json): a run that misses it runs
    # its 500 steps and takes longer, and the plan then skips what no longer fits (starts)
    "learning_proof": measured(20.3, "2026-11-28b_window"),
    "smoke": measured(20.9, "2026-11-28b_window"),
    "sdpa_probe": measured(15.6),
    "build": measured(20.5),
    "tests_test_fused_model": measured(28.8),
    "tests_test_attention": measured(11.6),
    "tests_test_sync_free": measured(13.4),
    "tests_test_dense": measured(31.8),
    "tests_test_bias_dropout_residual_layernorm": measured(27.2),
    "tests_test_softmax_cross_entropy": measured(11.6),
    "tests_test_embedding_backward": measured(12.6),
    "tests_test_lamb_kernel": measured(13.7),
    "tests_test_bucketing_pipeline": measured(7.9),
    "tests_test_prefetch": measured(7.1),
    "tests_test_cuda_graphs": measured(9.0, "2026-11-28b_window"),
    "tests_test_cuda_graphs_trainer": measured(15.1, "2026-11-28b_window"),
    "tests_test_fp8": measured(14.7, "2026-11-28b_window"),
    # 2026-11-28 ran two runs in 25.3 s; train_compare now adds a reseeded reference (the
    # bound of its step-gap check), one more run at the reference's 11.7 s
    "train_compare": Expectation(
        round(25.3 + 11.7, 1), None, "2026-11-28's two runs 25.3 s + one reference run 11.7 s"
    ),
    "bench_lamb": measured(15.0),
    "attention_probe": Expectation(
        round(ATTENTION_PROBE_S, 1),
        None,
        "probe_sdpa's 15.6 s, plus 20 cases x 66 timed runs at about 5 ms and the nested "
        "math path's Python loop, 2 s a dtype",
    ),
    "throughput": Expectation(
        round(sum(THROUGHPUT_PARTS_S.values()), 1),
        None,
        "; ".join(f"{part} {s:.1f} s" for part, s in THROUGHPUT_PARTS_S.items()),
    ),
}


def expectation(name: str) -> Expectation:
    """A step's expected duration; a test file no window has run yet is expected to take its
    cap (every other step has an entry: tests/tools/test_validate_gpu.py)."""
    return EXPECTED.get(name) or Expectation(
        UNRECORDED_TEST_FILE_S, None, "no record: a small test file"
    )
