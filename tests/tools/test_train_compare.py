"""bert/tools/gpu/train_compare.py, the fused-vs-reference training comparison:
on the CPU (the fused switches run their PyTorch twins) the three runs train and the record
holds their loss curves; the verdict passes only when both runs ended as expected, both learned
(final accuracy at least the floor), their accuracies and their last 50 steps' mean losses
agree and no 10-step mean loss gap exceeds the bound from the reseeded reference."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bert.model import fused as fused_ops
from bert.model.fused_functions import fused_linear
from bert.tools.gpu import train_compare

RECORDS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "gpu"
# a step-gap bound for hand-made curves, wide enough that only the other checks decide
WIDE = train_compare.stated_spread(10.0, "a test's hand-made curves")


@pytest.mark.slow  # in the default suite and CI; out of the quick subset (README)
def test_cpu_comparison_writes_the_three_curves_and_a_plot(tmp_path, capsys):
    out, png = tmp_path / "compare.json", tmp_path / "compare.png"
    # three steps learn nothing: the mechanics only, so no accuracy floor
    code = train_compare.main(
        [
            "--device",
            "cpu",
            "--steps",
            "3",
            "--min-accuracy",
            "0",
            "--out",
            str(out),
            "--plot",
            str(png),
        ]
    )
    record = json.loads(out.read_text())
    reference, fused = record["runs"]["reference"], record["runs"]["fused"]
    reseeded = record["runs"]["reseeded"]
    assert reference["switches"] == reseeded["switches"] == {}
    # the fused run starts where the reference does; the reseeded one elsewhere
    assert reference["seed"] == fused["seed"] != reseeded["seed"]
    # every fused switch the width-1024, erf-GeLU model admits (not fused_dense_gelu: tanh only)
    assert set(fused["switches"]) == {
        "model.fused_bias_dropout_residual_layernorm",
        "model.fused_embedding_backward",
        "model.fused_mlm_loss",
        "model.fused_dense",
    }
    for run in (reference, fused, reseeded):
        assert run["error"] is None and sorted(run["loss_by_step"], key=int) == ["1", "2", "3"]
        assert run["final_eval_mlm_accuracy"] is not None
        # the expected end, said plainly: the target 1.0 is out of reach on purpose
        assert (run["exit"], run["run_stop"], run["steps_trained"]) == (1, "aborted", 3)
        assert run["ended"].startswith("exit 1, run_stop aborted after 3 steps (expected")
    assert "exit 1 with run_stop 'aborted'" in record["expected_end"]
    # the schedule spans the run's own steps (a warmup longer than the run is cut to it)
    assert record["shape"]["schedule.total_steps"] == 3
    assert record["shape"]["schedule.warmup_steps"] == 3
    comparison = record["comparison"]
    assert comparison["steps_compared"] == 3 and comparison["min_accuracy"] == 0
    # three steps: the tail and the moving mean take all of them
    assert comparison["tail_mean_loss"]["steps"] == 3 and comparison["step_gap"]["at_step"] == 3
    spread = comparison["step_gap"]["spread"]
    assert comparison["step_gap"]["bound"] == pytest.approx(2 * spread["largest_gap"])
    assert "run.seed=1234" in spread["from"]
    assert code == (0 if comparison["passed"] else 1)
    assert png.stat().st_size > 0
    assert f"train_compare (cpu): {'passed' if code == 0 else 'FAILED'}" in capsys.readouterr().out


def curve(losses, accuracy, **ended):
    return {
        "exit": 1,
        "error": None,
        "run_stop": "aborted",
        **ended,
        "loss_by_step": {str(i + 1): v for i, v in enumerate(losses)},
        "final_eval_mlm_accuracy": accuracy,
    }


def test_the_default_floor_is_well_above_chance_and_the_cuda_shape_can_learn():
    # chance is one word in 920; the floor is what the issue-22 check stands on
    assert 0.1 <= train_compare.LEARNED_FLOOR <= 0.5
    cuda = train_compare.SHAPES["cuda"]
    assert cuda["model.vocab_size"] == 1024 and cuda["model.hidden_size"] == 1024
    assert set(train_compare.fused_switches(cuda, "cuda")) == {
        "model.fused_bias_dropout_residual_layernorm",
        "model.fused_embedding_backward",
        "model.fused_mlm_loss",
        "model.fused_dense",
        "optim.fused_kernel",
    }


def test_the_runs_settings_follow_the_shape_and_the_steps(tmp_path):
    def settings(device, steps):
        args = train_compare.run_args(device, tmp_path, "reference", steps, {})
        return dict(a.split("=", 1) for a in args[2::2])  # "--quiet", then "--set" k=v pairs

    cuda, cpu = settings("cuda", 300), settings("cpu", 3)
    assert cuda["run.global_batch_size"] == "128" and cuda["model.initializer_range"] == "0.02"
    assert (cuda["schedule.total_steps"], cuda["schedule.warmup_steps"]) == ("300", "20")
    assert cuda["data.synthetic.samples_per_shard"] == "8192"  # the shape's, not the default
    assert cpu["data.synthetic.samples_per_shard"] == "2048"
    # the eval is the whole eval set: 4096 samples on CUDA, 512 on the CPU
    assert cuda["eval.samples"] == cuda["data.synthetic.eval_samples"] == "4096"
    assert cpu["eval.samples"] == cpu["data.synthetic.eval_samples"] == "512"
    assert (cpu["schedule.total_steps"], cpu["schedule.warmup_steps"]) == ("3", "3")
    assert cuda["eval.target_mlm_accuracy"] == "1.0" and cuda["run.max_steps"] == "300"


def test_two_runs_that_learned_nothing_fail():
    # the 2026-11-26b window's record: 0.0000 and 0.0000, a gap of 0 that "passed"
    verdict = train_compare.compare(curve([7.6, 7.6], 0.0), curve([7.6, 7.6], 0.0), WIDE)
    floor = train_compare.LEARNED_FLOOR
    assert not verdict["passed"] and verdict["accuracy_gap"] == 0.0
    assert verdict["failures"] == [
        f"reference accuracy 0.0000 below floor {floor}",
        f"fused accuracy 0.0000 below floor {floor}",
    ]
    line = train_compare.verdict_line("cuda", verdict, "x.json")
    assert line.startswith(
        f"train_compare (cuda): FAILED: reference accuracy 0.0000 below "
        f"floor {floor}; fused accuracy 0.0000 below floor {floor}."
    )


def test_one_run_below_the_floor_fails():
    # within the tolerance of each other, but one of them short of the floor
    verdict = train_compare.compare(
        curve([3.0, 2.0], 0.302), curve([3.0, 2.0], 0.298), WIDE, min_accuracy=0.3
    )
    assert not verdict["passed"]
    assert verdict["failures"] == ["fused accuracy 0.2980 below floor 0.3"]


def test_the_floor_is_a_parameter():
    runs = curve([3.0, 2.0], 0.001), curve([3.0, 2.0], 0.002)
    assert not train_compare.compare(*runs, WIDE)["passed"]
    assert train_compare.compare(*runs, WIDE, min_accuracy=0)["passed"]


@pytest.mark.parametrize(
    "broken, reason",
    [
        (
            {"exit": 1, "error": "RuntimeError: CUDA error", "run_stop": None},
            "fused run raised RuntimeError: CUDA error",
        ),
        (
            {"exit": 2, "run_stop": None, "ended": "exit 2 without its run_stop"},
            "fused run ended otherwise than expected: exit 2 without its run_stop",
        ),
        (
            {"exit": 1, "run_stop": None, "ended": "exit 1 without its run_stop"},
            "fused run ended otherwise than expected: exit 1 without its run_stop",
        ),
    ],
)
def test_a_run_that_failed_fails_even_with_a_good_accuracy(broken, reason):
    verdict = train_compare.compare(curve([3.0, 2.0], 0.7), curve([3.0, 2.0], 0.7, **broken), WIDE)
    assert not verdict["passed"] and verdict["failures"] == [reason]


def test_a_small_gap_between_runs_that_learned_passes():
    verdict = train_compare.compare(curve([3.0, 2.0], 0.700), curve([3.02, 2.0], 0.703), WIDE)
    assert verdict["passed"] and verdict["failures"] == []
    assert verdict["accuracy_gap"] == pytest.approx(0.003)
    assert verdict["max_loss_gap"] == pytest.approx(0.02)
    assert train_compare.verdict_line("cuda", verdict, "x.json").startswith(
        "train_compare (cuda): passed. Final MLM accuracy reference 0.7000, fused 0.7030"
    )


def test_a_large_gap_between_runs_that_learned_fails():
    verdict = train_compare.compare(curve([3.0, 2.0], 0.700), curve([3.0, 2.0], 0.760), WIDE)
    assert not verdict["passed"]
    assert verdict["failures"] == ["accuracy gap 0.0600 above tolerance 0.005"]


@pytest.mark.parametrize("fused_accuracy, passed", [(0.503, True), (0.506, False)])
def test_verdict_is_the_accuracy_gap_at_the_tolerance(fused_accuracy, passed):
    verdict = train_compare.compare(
        curve([3.0, 2.0], 0.5), curve([3.02, 2.0], fused_accuracy), WIDE
    )
    assert verdict["passed"] is passed


def test_the_last_step_is_the_last_in_number_not_in_text():
    reference = curve([3.0] * 9 + [2.0], 0.7)
    fused = curve([3.0] * 9 + [2.5], 0.7)  # steps "1".."10": "10" sorts before "2" as text
    assert train_compare.compare(reference, fused, WIDE)["final_loss_gap"] == pytest.approx(0.5)


def test_a_run_without_an_eval_or_with_a_nonfinite_loss_fails():
    no_eval = train_compare.compare(curve([3.0], 0.5), curve([3.0], None), WIDE)
    assert not no_eval["passed"] and no_eval["failures"] == ["fused run has no final eval"]
    missing = train_compare.compare(curve([3.0, 2.0], 0.5), curve([3.0, None], 0.5), WIDE)
    assert missing["failures"] == ["1 of 2 steps without a finite loss in both runs"]
    nan = train_compare.compare(curve([3.0, 2.0], 0.5), curve([3.0, float("nan")], 0.5), WIDE)
    assert not nan["passed"]
    assert not train_compare.compare(curve([], 0.5), curve([], 0.5), WIDE)["passed"]


def test_min_accuracy_must_be_a_fraction(tmp_path):
    with pytest.raises(SystemExit):
        train_compare.main(
            ["--device", "cpu", "--min-accuracy", "30", "--out", str(tmp_path / "x.json")]
        )


# ---- the loss criterion ---------------------------------------------------------------------
def test_a_loss_gap_the_accuracies_hide_fails():
    # accuracies 0.700 and 0.703 used to pass with a 2.4 loss gap
    verdict = train_compare.compare(curve([3.0, 2.0], 0.700), curve([5.4, 4.4], 0.703), WIDE)
    assert verdict["accuracy_gap"] == pytest.approx(0.003)
    assert verdict["failures"] == [
        "mean loss over the last 2 steps 4.9000 vs reference 2.5000: 96.00% apart, above 2%"
    ]


@pytest.mark.parametrize("fused_loss, passed", [(1.019, True), (1.021, False)])
def test_the_tail_mean_loss_at_its_tolerance(fused_loss, passed):
    # 60 steps: only the last 50 count, so a gap in the first 10 does not
    reference = curve([5.0] * 10 + [1.0] * 50, 0.7)
    fused = curve([9.0] * 10 + [fused_loss] * 50, 0.7)
    verdict = train_compare.compare(reference, fused, WIDE)
    assert verdict["tail_mean_loss"]["steps"] == 50
    assert verdict["tail_mean_loss"]["relative_gap"] == pytest.approx(fused_loss - 1.0)
    assert verdict["passed"] is passed


def test_a_steps_gap_is_a_ten_step_mean():
    spread = train_compare.stated_spread(0.1, "a test's bound")
    reference = curve([1.0] * 80, 0.7)  # the gaps before the last 50 steps
    # one spike of 0.9 moves a 10-step mean by 0.09: under the bound
    spike = curve([1.0] * 20 + [1.9] + [1.0] * 59, 0.7)
    verdict = train_compare.compare(reference, spike, spread)
    assert verdict["passed"] and verdict["step_gap"]["largest"] == pytest.approx(0.09)
    assert verdict["max_loss_gap"] == pytest.approx(0.9)  # the raw one, recorded only
    # ten steps 0.15 apart: over it
    lag = curve([1.0] * 20 + [1.15] * 10 + [1.0] * 50, 0.7)
    verdict = train_compare.compare(reference, lag, spread)
    assert verdict["failures"] == [
        "10-step mean loss gap 0.1500 at step 30 above the reseeded spread's bound 0.1000"
    ]


def test_the_bound_is_twice_the_reseeded_references_largest_gap():
    reference = curve([2.0] * 30, 0.7)
    reseeded = curve([2.0] * 10 + [2.3] * 10 + [2.0] * 10, 0.68)
    spread = train_compare.reseeded_spread(reference, reseeded, 0.3)
    assert spread["largest_gap"] == pytest.approx(0.3) and spread["at_step"] == 20
    assert spread["bound"] == pytest.approx(0.6) and spread["failures"] == []
    # a reseeded run that learned nothing stands for no spread: no bound, and the verdict fails
    unlearned = train_compare.reseeded_spread(reference, curve([2.0] * 30, 0.001), 0.3)
    assert unlearned["bound"] is None
    verdict = train_compare.compare(reference, curve([2.0] * 30, 0.7), unlearned)
    assert verdict["failures"] == ["reseeded reference accuracy 0.0010 below floor 0.3"]


def gpu_record(window: str) -> dict:
    return json.loads((RECORDS / window / "train_compare.json").read_text())


def test_the_healthy_h200_runs_of_the_2026_11_28_window_pass():
    runs = gpu_record("2026-11-28_window")["runs"]
    # that window ran no reseeded reference: the step-gap bound is stated. Its pair's largest
    # 10-step gap, 0.313 (step 40, in the descent from 7.8), passes a reseeded reference whose
    # largest gap is 0.16, half the fused run's own, and no less
    verdict = train_compare.compare(
        runs["reference"], runs["fused"], train_compare.stated_spread(2 * 0.16, "stated")
    )
    assert verdict["failures"] == [] and verdict["passed"]
    step_gap, tail = verdict["step_gap"], verdict["tail_mean_loss"]
    assert step_gap["largest"] == pytest.approx(0.3129, abs=1e-4) and step_gap["at_step"] == 40
    assert (tail["reference"], tail["fused"]) == (
        pytest.approx(1.0098, abs=1e-4),
        pytest.approx(1.0227, abs=1e-4),
    )
    assert tail["relative_gap"] == pytest.approx(0.0128, abs=1e-4)  # 1% would fail it
    line = train_compare.verdict_line("cuda", verdict, "x.json")
    assert "reference 1.0098, fused 1.0227: 1.28% apart (tolerance 2%)" in line
    assert "largest 10-step mean loss gap 0.3129 (bound 0.3200: stated, stated)" in line
    tighter = train_compare.compare(
        runs["reference"], runs["fused"], train_compare.stated_spread(2 * 0.15, "stated")
    )
    assert tighter["failures"] == [
        "10-step mean loss gap 0.3129 at step 40 above the reseeded spread's bound 0.3000"
    ]


def test_the_unlearned_runs_of_the_2026_11_26b_window_fail():
    runs = gpu_record("2026-11-26b_window")["runs"]
    verdict = train_compare.compare(runs["reference"], runs["fused"], WIDE)
    floor = train_compare.LEARNED_FLOOR
    # their loss curves agree (9.96 and 9.90 over the last 50 steps): only the floor tells
    assert verdict["tail_mean_loss"]["relative_gap"] < train_compare.TAIL_TOLERANCE
    assert verdict["failures"] == [
        f"reference accuracy 0.0000 below floor {floor}",
        f"fused accuracy 0.0000 below floor {floor}",
    ]


# ---- a wrong fused function fails on the CPU ------------------------------------------------
# The cheapest CPU shape found that learns (tiny_cpu's width with sequences of 64, 1 layer):
# the twins of fused_dense and fused_mlm_loss, width-free, are the fused run's switches. The
# fused LayerNorm's and embedding's twins need width 1024, where a step of 1024 tokens took
# 2.3 s on the 2 busy cores, and that width learns only from batch 64 of 128 tokens on (see
# LEARN): minutes a run, out of this test's budget.
LEARNING_CPU = {
    **train_compare.SHAPES["cpu"],
    "model.hidden_size": 128,
    "model.num_attention_heads": 2,
    "model.intermediate_size": 512,
    "model.initializer_range": 0.08,
    "model.max_position_embeddings": 128,
    "data.max_seq_length": 64,
    "data.max_predictions_per_seq": 10,
    "run.global_batch_size": 32,
    "eval.batch_size": 256,
    "run.threads": 1,  # beside other busy processes (configs/tiny_cpu.yaml)
    "schedule.warmup_steps": 10,
}
LEARNING_STEPS = 150  # 100 steps reached 0.34, too near the floor 0.3; 150 reach 0.64


def residual_gradient_dropped(x, weight, bias):
    """fused_dense's linear_with_residual whose data-gradient GEMM adds the residual's gradient
    with beta 0, not 1: the block's input loses the gradient of its skip connection."""
    return fused_linear(x, weight, bias), x.detach()


@pytest.mark.slow
def test_a_wrong_fused_function_fails_and_the_real_ones_pass(tmp_path, monkeypatch):
    """20 s on the 2 shared cores beside the CPU comparison test, 60 s at load average 7.6:
    four runs of 150 steps. The
    twins of the width-free switches equal the reference here, so the checks that matter are
    those whose thresholds sit above a healthy GPU pair's noise: the tail mean loss and the
    step gap.

    Measured at this shape and not asserted: fused_dense with every bias dropped (linear and
    linear_with_residual) learns as well (tail mean 1.6% lower, accuracy 0.657 vs 0.643, the
    reseeded reference 0.670): no loss criterion can tell it, only the accuracy gap, which
    the reseeded reference fails too. The fused LayerNorm's dropout scale 10% off cannot run
    at this width (above)."""

    def trained(name, extra, seed=train_compare.RUN_SEED):
        return train_compare.one_run(
            "cpu", tmp_path, name, LEARNING_STEPS, extra, shape=LEARNING_CPU, seed=seed
        )

    switches = train_compare.fused_switches(LEARNING_CPU, "cpu")
    assert set(switches) == {"model.fused_dense", "model.fused_mlm_loss"}
    runs = {
        "reference": trained("reference", {}),
        "fused": trained("fused", switches),
        "reseeded": trained("reseeded", {}, seed=train_compare.RESEED),
    }
    healthy = train_compare.verdict(runs, train_compare.LEARNED_FLOOR)
    assert healthy["failures"] == [] and min(healthy["accuracies"].values()) > 0.5
    record = fused_ops.FUSED_OPS["fused_dense"]
    wrong = {**record.replaces, "linear_with_residual": residual_gradient_dropped}
    monkeypatch.setitem(
        fused_ops.FUSED_OPS, "fused_dense", dataclasses.replace(record, replaces=wrong)
    )
    runs["fused"] = trained("wrong", switches)
    verdict = train_compare.verdict(runs, train_compare.LEARNED_FLOOR)
    # measured: 4.35 vs 3.97 (9.8%), accuracy 0.586 vs 0.643
    assert verdict["failures"][0].startswith("mean loss over the last 50 steps")
    assert verdict["tail_mean_loss"]["relative_gap"] > 2 * train_compare.TAIL_TOLERANCE
