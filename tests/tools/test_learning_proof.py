"""bert/tools/gpu/learning_proof.py, the learning proof: its CPU twin (the default run's
reference path) reaches MLPerf's 0.720 with a log the official checker passes; the verdict
fails on every kind of wrong run; the CUDA variants' settings are valid configs."""

from __future__ import annotations

import json

import pytest

from bert.config import load_config
from bert.train.cli import DEFAULT_CONFIG
from bert.tools.gpu import learning_proof as lp


@pytest.mark.slow
def test_cpu_twin_reaches_the_target_and_passes_the_checker(tmp_path, capsys):
    out = tmp_path / "proof.json"
    assert lp.main(["--device", "cpu", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    reference = record["runs"]["reference"]
    assert (reference["exit"], reference["run_stop"], reference["error"]) == (0, "success", None)
    assert reference["compliance"]["passed"]
    accuracies = [acc for _, acc in reference["evals"]]
    # the run stops at its first eval at or above the target
    assert accuracies[-1] >= lp.TARGET > max(accuracies[:-1], default=0.0)
    assert reference["samples_to_target"] == reference["evals"][-1][0] > 0
    assert record["verdict"]["passed"] and record["verdict"]["failures"] == []
    assert "learning_proof (cpu): passed" in capsys.readouterr().out


def good_run(samples: int = 25600) -> dict:
    """A run record as one_run writes it, of a run that reached the target at `samples`."""
    return {
        "exit": 0,
        "error": None,
        "run_stop": "success",
        "evals": [[samples // 2, 0.41], [samples, 0.7231]],
        "samples_to_target": samples,
        "compliance": {"passed": True, "reasons": []},
    }


def test_verdict_passes_variants_within_the_slack():
    runs = {"reference": good_run(25600), "fused": good_run(28160), "fp16": good_run(23040)}
    found = lp.verdict(runs)
    assert found["passed"], found["failures"]
    assert found["ratio_to_reference"] == {"fused": 1.1, "fp16": 0.9}


@pytest.mark.parametrize(
    "name, change, reason",
    [
        ("fused", {"samples_to_target": 28161}, "1.100x the reference's"),
        ("fp16", {"samples_to_target": None, "evals": [[1280, 0.5]]}, "never reached"),
        ("fused", {"exit": 0, "run_stop": "aborted"}, "run_stop aborted"),  # a budget stop
        ("fp16", {"compliance": {"passed": False}}, "fails the compliance checker"),
        ("fused", {"error": "RuntimeError: bad"}, "raised RuntimeError"),
        ("reference", {"samples_to_target": None, "evals": []}, "reference never reached"),
    ],
)
def test_verdict_fails_on_a_wrong_run(name, change, reason):
    runs = {"reference": good_run(25600), "fused": good_run(25600), "fp16": good_run(25600)}
    runs[name] = {**runs[name], **change}
    found = lp.verdict(runs)
    assert not found["passed"]
    assert any(reason in failure for failure in found["failures"]), found["failures"]


def test_verdict_needs_a_reference():
    assert "no reference run" in lp.verdict({"fused": good_run()})["failures"]


def test_eval_curve_and_samples_to_target():
    events = [
        {"key": "eval_accuracy", "value": 0.3, "metadata": {"epoch_num": 1280}},
        {"key": "train_samples", "value": 2560},
        {"key": "eval_accuracy", "value": 0.72, "metadata": {"epoch_num": 2560}},
    ]
    curve = lp.eval_curve(events)
    assert curve == [[1280, 0.3], [2560, 0.72]]
    assert lp.samples_to_target(curve) == 2560
    assert lp.samples_to_target(curve[:1]) is None


@pytest.mark.parametrize("variant", lp.DEFAULT_VARIANTS["cuda"])
def test_cuda_variants_are_valid_configs(tmp_path, variant):
    """What the window will run, through the config's own checks (fused flags' shape limits,
    precision), before any device time is spent."""
    args = lp.run_args("cuda", tmp_path, variant)
    cfg = load_config(DEFAULT_CONFIG, [a for a in args if a not in ("--quiet", "--set")])
    assert cfg.run.device == "cuda" and cfg.eval.target_mlm_accuracy == lp.TARGET
    # an eval every 10 steps: 10% of the samples to target spans evals, not a fraction of one
    assert cfg.eval.interval_samples == lp.EVAL_EVERY_STEPS * cfg.run.global_batch_size
    if variant == "fused":
        assert cfg.model.fused_dense and cfg.model.fused_mlm_loss and cfg.optim.fused_kernel
        assert not cfg.model.fused_dense_gelu  # tanh GeLU only; this model has erf GeLU
    else:
        assert not cfg.model.fused_dense and not cfg.optim.fused_kernel
    assert cfg.run.precision == ("fp16" if variant == "fp16" else "bf16")


def test_cpu_runs_the_reference_only(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        lp.main(["--device", "cpu", "--variants", "reference,fused", "--out", str(tmp_path / "x")])
    assert exit_.value.code == 2
    assert "choose from reference" in capsys.readouterr().err
