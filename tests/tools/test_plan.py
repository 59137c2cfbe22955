"""`python -m bert.plan`: RCP hyperparameters, counted activation memory, the CLI,
the written config, the start-of-run RCP warning and the comparison with published results."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from bert.config import load_config
from bert.model.config import ModelConfig
from bert.model.modeling import BertForPretraining
from bert.mlperf import rcp
from bert.mlperf import rcp_check as check
from bert.plan import activations, published, published_hyper, scale
from bert.plan.cli import main

from small_model import small_config

ROOT = Path(__file__).resolve().parents[2]
SMALL = small_config(1024, 128, heads=2, ffn=256, dropout=True)


# -- RCP table --------------------------------------------------------------------------------


def test_rcp_table_is_the_installed_checkers():
    """REFERENCE 8: 13 RCPs from 256 to 16,384; BS 448: lr 4.25e-4, 6,700 steps, about 2.41M
    samples; BS 1536: lr 2e-3, beta1 0.66, beta2 0.996."""
    table = rcp.table()
    assert len(table) == 13
    assert (table[0].global_batch_size, table[-1].global_batch_size) == (256, 16384)
    p448, p1536 = rcp.plan_for(448), rcp.plan_for(1536)
    assert p448.settings["optim.lr"] == 4.25e-4 and p448.settings["schedule.total_steps"] == 6700
    assert 2.40e6 < p448.samples_mean < 2.42e6 and not p448.interpolated
    assert (p1536.settings["optim.beta1"], p1536.settings["optim.beta2"]) == (0.66, 0.996)
    # the checker prunes 1536 (slower than the 448-4608 line): it checks 1536 by interpolation
    assert "interpolated between bert_ref_448 and bert_ref_4608" in p1536.reference_rule


def test_batch_between_rcps_is_interpolated_and_flagged():
    """2048: no RCP and no published submission, so the planner interpolates (labelled)."""
    published = published_hyper.published()
    assert 2048 not in published
    p = rcp.plan_for(2048, published)
    assert p.interpolated and p.basis == "interpolated"
    assert "bert_ref_1536 and bert_ref_3072" in p.source
    lo, hi = rcp.plan_for(1536).settings, rcp.plan_for(3072).settings
    lrs = sorted((lo["optim.lr"], hi["optim.lr"]))
    assert lrs[0] <= p.settings["optim.lr"] <= lrs[1]
    steps_samples = p.settings["schedule.total_steps"] * 2048
    low_samples = lo["schedule.total_steps"] * 1536
    high_samples = hi["schedule.total_steps"] * 3072
    assert min(low_samples, high_samples) <= steps_samples <= max(low_samples, high_samples)
    ends = sorted((rcp.plan_for(1536).samples_mean, rcp.plan_for(3072).samples_mean))
    assert ends[0] < p.samples_mean < ends[1]


def test_batch_768_takes_the_converged_published_hyperparameters():
    """REFERENCE 3 and the v3.0-v5.0 submissions at 768 (59 of 62): lr 9.6e-4, 3,680 steps,
    betas 0.60466/0.85437, weight decay 0.1; labelled, checked against the RCP line."""
    p = rcp.plan_for(768, published_hyper.published())
    assert p.basis == "published submissions" and not p.interpolated
    s = p.settings
    assert (s["optim.lr"], s["schedule.total_steps"]) == (9.6e-4, 3680)
    assert (s["optim.beta1"], s["optim.beta2"], s["optim.weight_decay"]) == (0.60466, 0.85437, 0.1)
    assert p.samples_mean == 2.5e6 and p.samples_low < 2.5e6 < p.samples_high
    assert p.reference.name == "bert_interp_768"
    assert rcp.plan_for(448).basis == "reference point"


def _most_used(rows: list[dict], batch: int) -> list[dict]:
    """The settings sets used by the most results at `batch` (the oracle: counted directly)."""
    sets = [published_hyper._config_settings(r["hyperparameters"]) for r in rows]
    sets = [s for s, r in zip(sets, rows) if r["global_batch_size"] == batch]
    top = max(sets.count(s) for s in sets)
    return [s for s in sets if sets.count(s) == top]


def test_hyperparameters_equal_the_published_ones_at_every_published_batch():
    """Every batch a converged published submission used and no RCP has: the planner proposes
    the set most of those results used, labelled `+`; batches with their own RCP keep it."""
    rows = scale.published_results()
    published = published_hyper.settings_by_batch(rows)
    batches = {r["global_batch_size"] for r in rows}
    assert set(published) == {b for b in batches if rcp.own_rcp(b) is None}
    assert {480, 512, 576, 768, 896, 1024, 13888} <= set(published)
    for batch in published:
        plan = rcp.plan_for(batch, published)
        assert plan.basis == "published submissions"
        assert plan.settings in _most_used(rows, batch), batch
    # the rule follows the data: three more results at 768 with 4,500 steps would not move it,
    # sixty would
    minority = next(
        r
        for r in rows
        if r["global_batch_size"] == 768
        and r["hyperparameters"]["opt_learning_rate_training_steps"] == 4500
    )
    more = rows + [minority] * 3
    assert published_hyper.settings_by_batch(more)[768][0]["schedule.total_steps"] == 3680
    many = rows + [minority] * 60
    assert published_hyper.settings_by_batch(many)[768][0]["schedule.total_steps"] == 4500


def test_batch_above_the_largest_rcp_is_refused():
    with pytest.raises(rcp.RCPError, match="above the largest"):
        rcp.plan_for(20_000)


# -- activation memory --------------------------------------------------------------------------


def measured_forward_bytes(cfg: ModelConfig, lengths) -> int:
    """Net CPU memory a training forward leaves allocated (the profiler's allocation events):
    what the graph holds for backward, measured without saved-tensor hooks."""
    torch.manual_seed(0)
    model = BertForPretraining(cfg).train()
    batch = activations.synthetic_batch(lengths, 20, cfg.vocab_size, seed=1)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = activations._forward(model, batch.to("cpu"))
    del loss
    return sum(event.self_cpu_memory_usage for event in prof.events())


def test_counted_activations_scaled_match_a_cpu_measurement():
    """The planner's way: count what the model saves on a small batch of the mix, scale to the
    micro-batch; against the memory a real CPU forward at that micro-batch holds: within 10%."""
    reference = activations.mix_lengths(8, 128)
    counted = activations.count_saved(SMALL, reference, "fp32", "cpu", max_predictions=20)
    micro_batch = np.concatenate([reference] * 4)
    np.random.default_rng(0).shuffle(micro_batch)
    measured = measured_forward_bytes(SMALL, micro_batch)
    assert measured > 0
    assert abs(4 * counted.activations - measured) / measured < 0.10, (counted, measured)


def _newest_memory_record() -> dict:
    """The newest GPU window's unfused eager throughput record (our largest-memory path)."""
    found = sorted(ROOT.glob("benchmarks/results/gpu/*_window/throughput_eager.json"))
    assert found, "no GPU throughput record in benchmarks/results/gpu"
    return {**json.loads(found[-1].read_text()), "path": found[-1].relative_to(ROOT).as_posix()}


def memory_margin(record: dict) -> float:
    """The planner's estimate (tensors only: the runtime assumption left out, as the
    allocator's peak leaves it out) over the record's measured peak, minus 1."""
    from bert.plan import memory

    est = memory.estimate(ModelConfig(), record["precision"], record["batch"], 1, False)
    measured = record["variants"]["fastest"]["peak_mem_gb"] * 1e9
    return (est.total() - est.runtime) / measured - 1


def test_memory_estimate_is_above_the_gpu_measurement_by_what_the_docs_say():
    """The estimate stays on the safe side of our own GPU measurement (same batch, precision,
    one GPU, replicated LAMB), and docs/plan.md states by how much; a record measuring more
    than the estimate fails the first check."""
    record = _newest_memory_record()
    margin = memory_margin(record)
    assert margin > 0
    doc = " ".join((ROOT / "docs/plan.md").read_text().split())
    assert f"{margin:+.0%} above" in doc and record["path"] in doc
    heavier = json.loads(json.dumps(record))
    heavier["variants"]["fastest"]["peak_mem_gb"] *= 1 + margin + 0.05
    assert memory_margin(heavier) < 0


def test_meta_count_reports_the_16_bit_weight_copies():
    """On the meta device, under the CUDA-like bf16 policy, every weight a matrix product reads
    is cast once (2 bytes each; the tied decoder once) and kept for backward; LayerNorm and the
    position and segment embeddings stay fp32, and the biases' casts are not needed by backward.
    The copies are not counted as activations."""
    counted = activations.count_saved(SMALL, [100, 60], "bf16", "meta", max_predictions=20)
    with torch.device("meta"):
        model = BertForPretraining(SMALL)
    fp32_only = ("layer_norm", "position_embeddings", "token_type_embeddings")
    cast = sum(
        p.numel()
        for name, p in model.named_parameters()
        if not any(part in name for part in fp32_only) and not name.endswith("bias")
    )
    assert counted.weight_copies == 2 * cast
    fp32 = activations.count_saved(SMALL, [100, 60], "fp32", "meta", max_predictions=20)
    assert fp32.weight_copies == 0 and fp32.activations > counted.activations


def test_mix_lengths_have_the_reference_mean():
    """REFERENCE 2: mean about 254 real tokens, 23% of samples at 512."""
    lengths = activations.mix_lengths(100)
    assert 245 < lengths.mean() < 265 and 0.2 <= (lengths == 512).mean() <= 0.26


# -- the command ------------------------------------------------------------------------------


def test_plan_for_8_a100s(capsys):
    assert main(["--gpus", "8", "--gpu", "a100-80gb"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.strip()[:3].isdigit()]
    minutes = [float(r[-2]) for r in rows if r[1] != "-"]
    assert minutes == sorted(minutes)  # fastest first
    assert {"256", "448", "1536", "16384"} <= {r[0].rstrip("*+") for r in rows}
    assert "activations, MLPerf mix (counted)" in out and "scale model: R" in out


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--gpus", "8", "--gpu", "tpu-v9"], "unknown GPU kind"),
        (["--gpus", "0", "--gpu", "h100"], "need at least one GPU"),
        (["--gpus", "8", "--gpu", "h100", "--batch", "1001"], "not a multiple"),
        (["--gpus", "8", "--gpu", "h100", "--batch", "20000"], "above the largest"),
        (["--gpus", "12", "--gpus-per-node", "8", "--gpu", "h100"], "must divide"),
        (["--gpus", "8", "--gpu", "x", "--memory-gib", "40"], "go together"),
        (["--gpus", "eight", "--gpu", "h100"], "invalid int value"),
    ],
    ids=[
        "unknown_gpu",
        "zero_gpus",
        "indivisible_batch",
        "batch_above_rcps",
        "nodes",
        "half_custom",
        "not_a_number",
    ],
)
def test_bad_input_is_one_error_line(args, fragment, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err


def test_written_config_runs_as_is(tmp_path, capsys):
    """--write-config names the file by the configs' scheme; the file starts a run on the CPU
    with only device, size and data overrides (as the other tests shrink configs)."""
    assert (
        main(
            ["--gpus", "1", "--gpu", "a100-80gb", "--batch", "768", "--write-config", str(tmp_path)]
        )
        == 0
    )
    written = sorted(tmp_path.glob("*.yaml"))
    assert [p.name for p in written] == ["bert_large_1x1xa100_lb96_ga8.yaml"], written
    # the mode any file the user writes gets (0666 less the umask), not a temp file's 0600
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(written[0].stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == [written[0].name]  # no temp file left
    cfg = load_config(written[0])
    assert cfg.run.global_batch_size == 768 and cfg.run.gradient_accumulation_steps == 8
    assert "no RCP of its own" in check.rcp_warning(cfg)  # 768 is interpolated
    assert (
        main(
            [
                "--gpus",
                "1",
                "--gpu",
                "a100-80gb",
                "--batch",
                "768",
                "--write-config",
                str(written[0]),
            ]
        )
        == 2
    )  # never replaces a file
    small = [
        f"model.{k}={v}"
        for k, v in (
            ("vocab_size", 1024),
            ("hidden_size", 32),
            ("num_hidden_layers", 1),
            ("num_attention_heads", 2),
            ("intermediate_size", 64),
            ("max_position_embeddings", 64),
            ("attention", "per_sequence"),
        )
    ]
    small += [
        "run.device=cpu",
        "run.precision=fp32",
        "run.threads=1",
        "run.global_batch_size=8",
        "run.gradient_accumulation_steps=2",
        "run.max_steps=2",
        "run.init_checkpoint=",
        f"run.output_dir={tmp_path / 'out'}",
        "data.train_dir=",
        "data.eval_file=",
        "data.synthetic.enabled=true",
        "data.synthetic.num_shards=1",
        "data.synthetic.samples_per_shard=64",
        "data.synthetic.eval_samples=32",
        f"data.synthetic.cache_dir={tmp_path / 'cache'}",
        "data.max_seq_length=64",
        "data.max_predictions_per_seq=10",
        "eval.samples=32",
        "log.interval_s=1000",
    ]
    args = [a for item in small for a in ("--set", item)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "run_pretraining.py"), "--config", str(written[0]), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (tmp_path / "out" / "mlperf.log").exists()


# -- start of run, packaging --------------------------------------------------------------------


def test_rcp_warning_for_the_shipped_configs():
    a100 = load_config(ROOT / "configs" / "bert_large_1x8xa100_lb56_ga1.yaml")
    h100 = load_config(ROOT / "configs" / "bert_large_1x8xh100_lb96_ga1.yaml")
    assert check.rcp_warning(a100) is None  # REFERENCE 3 = the 448 RCP
    assert "global batch 768 has no RCP of its own" in check.rcp_warning(h100)
    assert check.rcp_warning(load_config(ROOT / "configs" / "tiny_cpu.yaml")) is None
    changed = load_config(ROOT / "configs" / "bert_large_1x8xa100_lb56_ga1.yaml", ["optim.lr=5e-4"])
    assert "optim.lr=0.0005 (RCP: 0.000425)" in check.rcp_warning(changed)


def test_package_reference_names_the_rcp():
    assert "checked against bert_ref_448 (its own RCP)" in check.package_reference(448)
    assert "bert_interp_1000" in check.package_reference(1000)
    assert "cannot accept" in check.package_reference(20_000)


# -- published results ------------------------------------------------------------------------


@pytest.mark.parametrize("row", published.PUBLISHED, ids=lambda r: f"{r.submitter}-{r.round}")
def test_prediction_of_published_results_within_15_percent(row):
    comparison = published.predict(row)
    assert abs(comparison.error) < 0.15, (row, comparison.predicted_minutes)


def test_published_rows_are_the_logs_figures():
    """Every row's figures are those of the ten logs read (docs/data/published_bert_runs.json):
    the olympic mean of the runs' minutes, the median per-GPU throughput, the batch."""
    import json
    import statistics

    from bert.tools.common import ROOT

    runs_file = json.loads((ROOT / published.RUNS_FILE).read_text())
    assert len(published.PUBLISHED) >= 5  # at least five published results
    for row in published.PUBLISHED:
        repo_folder = row.source.split("@")[0], row.source.split(":", 1)[1]
        record = next(r for r in runs_file if (r["repo"], r["bert_folder"]) == repo_folder)
        runs = record["runs"]
        assert len(runs) == 10 and all(run["status"] == "success" for run in runs)
        minutes = sorted(run["minutes"] for run in runs)
        assert row.minutes == pytest.approx(statistics.mean(minutes[1:-1]), abs=1e-3)
        rates = [
            run["throughput_reported"] or run["samples"] / (run["minutes"] * 60) for run in runs
        ]
        assert row.per_gpu_samples_per_s == pytest.approx(
            statistics.median(rates) / record["gpus"], abs=0.01
        )
        assert (row.gpus, row.global_batch_size) == (record["gpus"], record["global_batch_size"])


def test_own_gpu_records_set_the_default_efficiency():
    """Where this program has a GPU record, the planner predicts this program:
    the h100 default comes from the window's throughput JSON, read here, not retyped."""
    import json

    from bert.core import gpus
    from bert.tools.common import ROOT

    h100 = gpus.lookup("h100")
    record_path = ROOT / h100.own_source.rsplit(": ", 1)[1]
    fastest = json.loads(record_path.read_text())["variants"]["fastest"]
    assert h100.own_samples_per_s == pytest.approx(fastest["samples_per_s"], abs=0.01)
    assert fastest["options"]["fused_flags"] == [] and fastest["options"]["precision"] == "bf16"
    assert h100.throughput_basis() == (h100.own_samples_per_s, h100.own_source)
    # kinds without a record of ours fall back to the published throughput
    assert gpus.lookup("a100-80gb").throughput_basis()[0] == 305.0
