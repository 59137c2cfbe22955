"""The planner's scale model (bert/plan/scale.py), its fit on the training subset
(bert/plan/fit.py) and the held-out validation through the CLI (bert/plan/validate.py,
docs/plan.md): each part of the model, the fitter on data with known constants, the pinned
constants against a refit, the split, the docs' table against a recomputation, bad input."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from bert.model.config import ModelConfig
from bert.core import gpus
from bert.plan import fit, scale, validate
from bert.plan.cli import main
from bert.plan.memory import parameter_count

ROOT = Path(__file__).resolve().parents[2]
PARAMS = parameter_count(ModelConfig())
SIZE = scale.GRAD_BYTES * PARAMS
K = scale.Fitted(overhead_samples=10.0, eval_speed=0.5, hidden=0.0)


def topo(gpus_: int, domain: int = 8, sharp: bool = False) -> scale.Topology:
    return scale.Topology(gpus_, domain, nvlink_gbs=450.0, network_gbs=50.0, sharp=sharp)


# -- the model's parts --------------------------------------------------------------------------


def test_gradient_reduction_over_the_topology():
    assert scale.gradient_seconds(PARAMS, topo(1)) == 0.0
    intra = 2 * 7 / 8 * SIZE / 450e9
    assert scale.gradient_seconds(PARAMS, topo(8)) == pytest.approx(intra)
    # four domains of 8: each GPU's 1/8 shard crosses its NIC in a ring of 4
    ring = intra + 2 * 3 / 4 * SIZE / 8 / 50e9
    assert scale.gradient_seconds(PARAMS, topo(32)) == pytest.approx(ring)
    sharp = intra + SIZE / 8 / 50e9  # in-network reduction: the shard sent once
    assert scale.gradient_seconds(PARAMS, topo(32, sharp=True)) == pytest.approx(sharp)
    # an NVLink domain larger than the job (16 GPUs of an NVL72 rack): no network at all
    assert scale.gradient_seconds(PARAMS, topo(16, domain=72)) == pytest.approx(
        2 * 15 / 16 * SIZE / 450e9
    )


def test_per_gpu_throughput_falls_at_small_per_gpu_batches():
    peak = 1000.0
    for b in (4, 16, 96, 1024):
        one = scale.step(b, PARAMS, topo(1), peak, K)
        assert b / one.step_s == pytest.approx(peak * b / (b + K.overhead_samples))
    assert 4 / scale.step(4, PARAMS, topo(1), peak, K).step_s < 0.3 * peak


def test_hidden_share_of_the_backward():
    peak, b = 1000.0, 96
    comm = scale.gradient_seconds(PARAMS, topo(64))
    assert scale.step(b, PARAMS, topo(64), peak, K).exposed_s == pytest.approx(comm)
    hidden = dataclasses.replace(K, hidden=1.0)
    backward = scale.BACKWARD_SHARE * b / peak
    assert scale.step(b, PARAMS, topo(64), peak, hidden).exposed_s == pytest.approx(
        max(0.0, comm - backward)
    )


def test_eval_time_is_the_eval_set_over_the_eval_rate():
    one = scale.eval_seconds(10_000, 8, 1000.0, K)
    assert one == pytest.approx(10_000 / (8 * 0.5 * 1000.0))
    assert scale.eval_seconds(10_000, 64, 1000.0, K) == pytest.approx(one / 8)


def test_calibrate_inverts_the_step():
    t = topo(16)
    peak = scale.calibrate(900.0, 48, PARAMS, t, K)
    assert 48 / scale.step(48, PARAMS, t, peak, K).step_s == pytest.approx(900.0, rel=1e-9)
    with pytest.raises(ValueError, match="no throughput per GPU"):
        scale.calibrate(1e12, 48, PARAMS, t, K)  # faster than the reduction alone allows
    with pytest.raises(ValueError, match="finite"):
        scale.calibrate(math.inf, 48, PARAMS, t, K)


def test_calibrate_row_reproduces_the_published_time():
    row = next(r for r in scale.published_results() if r["eval_s_median"] and r["gpus"] == 16)
    t = topo(16)
    peak = scale.calibrate_row(row, PARAMS, t, K)
    train, _ = scale.predicted_seconds(row, PARAMS, t, peak, K)
    total = train + row["evals_mean"] * row["eval_s_median"]
    assert total == pytest.approx(row["olympic_mean_minutes"] * 60, rel=1e-9)


# -- the fit ------------------------------------------------------------------------------------


def _synthetic(truth: scale.Fitted) -> list[dict]:
    """The published results with their times replaced by what `truth` predicts (every row's
    R from its kind's calibration point, whose time is kept)."""
    rows = scale.published_results()
    cal = fit.calibration_ids(rows)
    peaks = {}
    for r in rows:
        if scale.row_id(r) == cal.get(r["gpu"]):
            peaks[r["gpu"]] = scale.calibrate_row(r, PARAMS, fit._topology(r), truth)
    out = []
    for r in rows:
        if r["gpu"] in peaks and scale.row_id(r) != cal[r["gpu"]]:
            peak = peaks[r["gpu"]]
            train, evals = scale.predicted_seconds(r, PARAMS, fit._topology(r), peak, truth)
            one = scale.eval_seconds(scale.EVAL_SAMPLES, r["gpus"], peak, truth)
            r = {**r, "olympic_mean_minutes": (train + evals) / 60}
            r["eval_s_median"] = one if r["eval_s_median"] else None
        out.append(r)
    return out


def test_fit_recovers_known_constants():
    truth = scale.Fitted(overhead_samples=30.0, eval_speed=0.6, hidden=0.0)
    found = fit.fit(_synthetic(truth), PARAMS)
    assert fit.disagreements(truth, found) == []


def test_pinned_constants_are_the_fit():
    """scale.FITTED is what `python -m bert.plan.fit` finds on the training subset (to the
    digits pinned); an edited constant fails the same comparison."""
    found = fit.fit(scale.published_results(), PARAMS)
    assert fit.disagreements(scale.FITTED, found) == []
    edited = dataclasses.replace(scale.FITTED, overhead_samples=scale.FITTED.overhead_samples + 1)
    assert fit.disagreements(edited, found) == ["overhead_samples"]


@pytest.mark.slow
def test_refit_at_scale_predicts_what_it_left_out():
    """On data made from known constants every large result left out is still predicted (errors
    near 0); one whose time is doubled is predicted about 50% too fast when left out, which an
    in-sample score would blur."""
    truth = scale.Fitted(overhead_samples=30.0, eval_speed=0.6, hidden=0.0)
    rows = _synthetic(truth)
    clean = fit.refit_errors_at_scale(rows, PARAMS)
    assert len(clean) >= 2
    assert all(abs(e) < 0.01 for _, alone, together in clean for e in (alone, together))
    target = clean[0][0]
    doubled = [
        {**r, "olympic_mean_minutes": 2 * r["olympic_mean_minutes"]} if r is target else r
        for r in rows
    ]
    wrong = fit.refit_errors_at_scale(doubled, PARAMS)
    assert wrong[0][1] == pytest.approx(-0.5, abs=0.02)


def test_split_is_the_rule():
    rows = scale.published_results()
    cal = fit.calibration_ids(rows)
    assert {k: v.calibration for k, v in gpus.GPUS.items()} == cal
    by_id = {scale.row_id(r): r for r in rows}
    assert all(by_id[c]["gpus"] == 8 for c in cal.values())
    training = {scale.row_id(r) for r in fit.training_rows(rows)}
    held = {scale.row_id(r) for r in validate.held_out(rows)}
    assert not training & held and not (training | held) & set(cal.values())
    assert all(by_id[t]["round"] in fit.TRAINING_ROUNDS for t in training)
    assert all(by_id[h]["round"] not in fit.TRAINING_ROUNDS for h in held)
    assert len(training) >= 20 and len(held) >= 20


def test_every_constant_names_its_source():
    """Each module-level constant of the scale model appears in its doc's list of sources."""
    sources = scale.__doc__.split("Constants and their sources:")[1]
    names = [n for n in vars(scale) if n.isupper() and not n.startswith("_") and n != "DATA"]
    assert {"GRAD_BYTES", "BACKWARD_SHARE", "EVAL_SAMPLES", "FITTED"} <= set(names)
    assert [n for n in names if n not in sources] == []
    for name in fit.NAMES:  # the fitted ones: by bert.plan.fit
        assert name in sources.split("FITTED")[1] and "bert.plan.fit" in sources


# -- the held-out table -------------------------------------------------------------------------


def test_scale_bands_cover_every_held_out_result():
    """The 8 / 16-256 / 512+ bands count every scored result (a result outside them, say on
    300 GPUs, fails here rather than going uncounted)."""
    rows = [{"gpus": r["gpus"], "gpu": r["gpu"], "error": 0.0} for r in validate.held_out()]
    s = validate.summary(rows)
    assert sum(s[name][1] for name, _, _ in validate.BANDS) == s["all"][1]
    odd = validate.summary([*rows, {"gpus": 300, "gpu": "h100", "error": 0.0}])
    assert sum(odd[name][1] for name, _, _ in validate.BANDS) != odd["all"][1]


def test_docs_table_is_the_clis_output():
    """docs/plan.md's held-out table is what `python -m bert.plan.validate` prints now; an edited
    number in it would not be."""
    doc = (ROOT / "docs/plan.md").read_text()
    block = validate.markdown(validate.table())
    assert validate.replace_block(doc, block) == doc
    edited = doc.replace("| 512+ GPUs | 0 | 1 |", "| 512+ GPUs | 1 | 1 |")
    assert edited != doc and validate.replace_block(edited, block) != edited


# -- the command --------------------------------------------------------------------------------


def test_new_gpu_kinds_plan():
    for kind in ("gb200", "h100-pcie", "gaudi2"):
        assert main(["--gpus", "16", "--gpu", kind, "--batch", "768"]) == 0


def test_calibrate_flag(capsys):
    assert main(["--gpus", "64", "--gpu", "h100", "--batch", "4608", "--calibrate", "8:1000"]) == 0
    assert "given (--calibrate)" in capsys.readouterr().out
    custom = ["--gpu", "mygpu", "--memory-gib", "48", "--tflops", "300", "--calibrate", "8:500"]
    assert main(["--gpus", "16", *custom]) == 0


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--gpu", "nosuch"], "unknown GPU kind"),
        (["--calibrate", "8:x"], "--calibrate SAMPLES_PER_S_PER_GPU"),
        (["--calibrate", "0:900"], "--calibrate GPUS=0"),
        (["--calibrate", "8.5:900"], "--calibrate GPUS"),
        (["--calibrate", "8:0"], "must be > 0"),
        (["--calibrate", "8:-5"], "must be > 0"),
        (["--calibrate", "8:nan"], "finite"),
        (["--calibrate", "8:inf"], "finite"),
        (["--calibrate", "8:900:0"], "--calibrate LOCAL_BATCH"),
        (["--calibrate", "8:900:1:2"], "want GPUS:SAMPLES_PER_S_PER_GPU"),
        (["--calibrate", ""], "want GPUS:SAMPLES_PER_S_PER_GPU"),
        (["--calibrate", "8:1e12"], "no throughput per GPU explains it"),
        (["--gpu", "mygpu", "--memory-gib", "48", "--tflops", "300"], "give --calibrate"),
        (["--nics-per-node", "0"], "--nics-per-node 0: must be >= 1"),
        (["--nics-per-node", "2.5"], "--nics-per-node"),
        (["--nic-gbps", "nan"], "--nic-gbps"),
        (["--nic-gbps", "inf"], "--nic-gbps"),
        (["--nic-gbps", "0"], "--nic-gbps"),
    ],
)
def test_bad_gpu_kind_calibrate_and_network_are_one_error_line(extra, fragment, capsys):
    args = ["--gpus", "8", "--gpu", "h100", *extra]
    assert main(args) == 2
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert captured.out == "" and len(err) == 1, captured
    assert err[0].startswith("error: ") and fragment in err[0], err
