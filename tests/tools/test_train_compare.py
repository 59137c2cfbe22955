"""bert/tools/gpu/train_compare.py, the fused-vs-reference training comparison of issue 22, on
the CPU (the fused switches run their PyTorch twins): both runs train, the record holds both
loss curves, and the verdict follows the accuracy gap."""
from __future__ import annotations

import json

import pytest

from bert.tools.gpu import train_compare


def test_cpu_comparison_writes_both_curves_and_a_plot(tmp_path):
    out, png = tmp_path / "compare.json", tmp_path / "compare.png"
    code = train_compare.main(["--device", "cpu", "--steps", "3", "--out", str(out),
                               "--plot", str(png)])
    record = json.loads(out.read_text())
    reference, fused = record["runs"]["reference"], record["runs"]["fused"]
    assert reference["switches"] == {}
    # every fused switch the width-1024, erf-GeLU model admits (not fused_dense_gelu: tanh only)
    assert set(fused["switches"]) == {"model.fused_bias_dropout_residual_layernorm",
                                      "model.fused_embedding_backward",
                                      "model.fused_mlm_loss", "model.fused_dense"}
    for run in (reference, fused):
        assert run["error"] is None and sorted(run["loss_by_step"], key=int) == ["1", "2", "3"]
        assert run["final_eval_mlm_accuracy"] is not None
    assert record["comparison"]["steps_compared"] == 3
    assert code == (0 if record["comparison"]["passed"] else 1)
    assert png.stat().st_size > 0


def curve(losses, accuracy):
    return {"loss_by_step": {str(i + 1): v for i, v in enumerate(losses)},
            "final_eval_mlm_accuracy": accuracy}


@pytest.mark.parametrize("fused_accuracy, passed", [(0.503, True), (0.506, False)])
def test_verdict_is_the_accuracy_gap(fused_accuracy, passed):
    verdict = train_compare.compare(curve([3.0, 2.0], 0.5), curve([3.1, 2.0], fused_accuracy))
    assert verdict["passed"] is passed
    assert verdict["max_loss_gap"] == pytest.approx(0.1)


def test_a_run_without_an_eval_or_with_a_nonfinite_loss_fails():
    assert not train_compare.compare(curve([3.0], 0.5), curve([3.0], None))["passed"]
    assert not train_compare.compare(curve([3.0, 2.0], 0.5), curve([3.0, None], 0.5))["passed"]
