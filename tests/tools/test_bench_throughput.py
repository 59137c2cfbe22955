"""scripts/bench_throughput.py runs end to end on the CPU and writes the documented JSON.

Only the schema is checked: performance is measured by the script, never asserted by a test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
TOP_KEYS = {
    "device",
    "torch",
    "commit",
    "command",
    "date",
    "model",
    "precision",
    "matmul_peak_tflops",
    "variants",
    "ratios",
    "workload",
    "flop_formula",
    "profile",
}
VARIANT_KEYS = {
    "samples_per_s",
    "tokens_per_s",
    "mfu",
    "peak_mem_gb",
    "seconds_per_step",
    "options",
}


# A benchmark run small enough for the CPU: 2 rounds of 1 step, a mini BERT on 32 tokens.
SMALL_RUN = [
    *("--device", "cpu", "--model", "mini", "--batch", "2", "--steps", "1"),
    *("--warmup", "1", "--repeats", "2", "--max-length", "32", "--threads", "1"),
]


@pytest.mark.slow  # in the default suite and CI; out of the quick subset (README)
def test_cpu_run_writes_schema(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "bench_throughput.py"),
        *SMALL_RUN,
        "--num-batches",
        "3",
        "--profile",
        "--json",
        str(out),
    ]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    record = json.loads(out.read_text())
    assert TOP_KEYS <= set(record), TOP_KEYS - set(record)
    assert set(record["variants"]) == {"fastest", "reference", "hf_eager"}
    for name, variant in record["variants"].items():
        assert VARIANT_KEYS <= set(variant), (name, VARIANT_KEYS - set(variant))
        assert variant["samples_per_s"] > 0 and variant["mfu"] > 0, name
    assert record["variants"]["reference"]["options"]["attention"] == "padded_sdpa"
    assert record["variants"]["hf_eager"]["options"]["padding"] == "batch_max"
    assert {"fastest/hf_eager", "fastest/reference", "reference/hf_eager"} <= set(record["ratios"])
    assert record["model"] == "mini" and record["precision"] == "fp32"
    assert record["commit"] and record["matmul_peak_tflops"] > 0
    profile = record["profile"]
    assert profile["wall_ms"] > 0 and abs(sum(profile["share"].values()) - 1.0) < 0.01
    assert "gemm" in profile["share"] and profile["top_ops"]
    assert record["partial"] is False and record["rounds_done"] == 2
    # MFU on executed FLOPs: HF computes every padded position, the reference pads inside
    # attention, per_sequence (fastest on the CPU) computes exactly the useful FLOPs, less
    # with the last layer on its query subset
    v = record["variants"]
    assert v["hf_eager"]["mfu_executed"] > 1.5 * v["hf_eager"]["mfu"]
    assert v["reference"]["mfu_executed"] > v["reference"]["mfu"]
    if v["fastest"]["options"]["last_layer_subset"]:
        assert v["fastest"]["mfu_executed"] < v["fastest"]["mfu"]
    else:
        assert v["fastest"]["mfu_executed"] == pytest.approx(v["fastest"]["mfu"])
    assert record["datasheet_peak"] is None and v["fastest"]["mfu_datasheet"] is None
    assert all(v["options"]["warmup_seconds"] > 0 for v in record["variants"].values())
    # --warmup 1, but every variant first steps through every batch of the workload
    batches = record["workload"]["num_batches"]
    assert batches == 3
    assert all(v["options"]["warmup_steps"] == batches for v in record["variants"].values())


def test_each_round_is_written_before_the_next(tmp_path, monkeypatch):
    """A killed benchmark keeps what it measured: the JSON is on disk after every round."""
    sys.path.insert(0, str(ROOT))
    from bert.tools.throughput import bench as bench_throughput

    seen = []
    real_write = bench_throughput.write_json

    def spy(path, payload):
        seen.append((payload["partial"], payload["rounds_done"]))
        real_write(path, payload)

    monkeypatch.setattr(bench_throughput, "write_json", spy)
    bench_throughput.main(
        [
            *SMALL_RUN,
            "--variants",
            "reference",
            "--json",
            str(tmp_path / "b.json"),
        ]
    )
    assert seen == [(True, 1), (True, 2), (False, 2)]


def test_bad_variant_is_refused(tmp_path):
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "bench_throughput.py"),
        "--device",
        "cpu",
        "--model",
        "mini",
        "--variants",
        "fastest,nope",
        "--json",
        str(tmp_path / "x.json"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "nope" in done.stderr
    assert not (tmp_path / "x.json").exists()


def test_tiny_is_the_default_runs_model():
    """`--model tiny` benchmarks configs/tiny_cpu.yaml's model: its layers, vocabulary and
    positions."""
    from bert.config import load_config
    from bert.tools.throughput.workload import model_config

    want = load_config(ROOT / "configs" / "tiny_cpu.yaml").model
    got = model_config("tiny")
    fields = (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
    )
    assert [getattr(got, f) for f in fields] == [getattr(want, f) for f in fields]


def test_results_go_to_the_ignored_folder_unless_asked():
    import datetime as dt

    sys.path.insert(0, str(ROOT))
    from bert.tools.throughput.bench import default_path

    path = default_path("AMD EPYC", "tiny", dt.datetime(2026, 1, 2, 3, 4, 5))
    assert path.parent == ROOT / "results" / "bench"  # .gitignore: /results/
    assert subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT).returncode in (0, 128)


@pytest.mark.parametrize("kind", ["sharded"])
def test_optimizer_kinds_do_the_same_lamb_step(kind):
    """`+sharded` changes how the LAMB step runs (flat buffers), not what it computes: after
    two steps from the same weights and gradients, every parameter equals the foreach LAMB's
    (fp32 on the CPU; the fused kernels' own GPU tests hold `fusedlamb` to the same math)."""
    import torch

    from bert.tools.throughput.variants import make_optimizer

    def trained(optimizer_kind: str) -> dict:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
        )
        optimizer = make_optimizer(model, optimizer_kind, torch.device("cpu"))
        data = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
        for _ in range(2):
            optimizer.zero_grad(set_to_none=True)
            model(data).square().mean().backward()
            optimizer.step()
        return {name: p.detach().clone() for name, p in model.named_parameters()}

    reference, other = trained("lamb"), trained(kind)
    for name, value in reference.items():
        torch.testing.assert_close(other[name], value, rtol=1e-5, atol=1e-6, msg=name)


def test_unknown_optimizer_kind_is_refused():
    import torch

    from bert.tools.throughput.variants import make_optimizer

    with pytest.raises(ValueError, match="expected one of"):
        make_optimizer(torch.nn.Linear(2, 2), "adamw", torch.device("cpu"))


@pytest.mark.slow  # in the default suite and CI; out of the quick subset (README)
def test_option_sets_are_variants_of_their_own_beside_the_hf_baselines(tmp_path):
    """The GPU window's one throughput process: option sets named in --variants are each timed
    in every round, and each gets its ratio to every HF baseline from this run."""
    sys.path.insert(0, str(ROOT))
    from bert.tools.throughput import bench as bench_throughput

    payload = bench_throughput.main(
        [
            *SMALL_RUN,
            "--variants",
            "fastest,per_sequence+sharded,per_sequence+fp8,hf_eager",
            "--fastest",
            "per_sequence",
            "--json",
            str(tmp_path / "b.json"),
        ]
    )
    variants = payload["variants"]
    assert list(variants) == ["fastest", "per_sequence+sharded", "per_sequence+fp8", "hf_eager"]
    assert variants["per_sequence+sharded"]["options"]["optimizer"] == "sharded"
    # the FP8 lever, timed beside the rest (its CPU path emulates the FP8 GEMMs)
    assert variants["per_sequence+fp8"]["options"]["fp8_linear"] is True
    assert not variants["fastest"]["options"]["fp8_linear"]
    assert {"per_sequence+sharded/hf_eager", "fastest/hf_eager"} <= set(payload["ratios"])
    assert payload["variant_errors"] == {}


def test_a_bad_option_set_in_variants_is_refused():
    from bert.tools.throughput import bench as bench_throughput
    from bert.tools.throughput.settings import resolve

    with pytest.raises(SystemExit, match="nope"):
        resolve(bench_throughput.parse_args([*SMALL_RUN, "--variants", "per_sequence+nope"]))
    with pytest.raises(SystemExit, match="unknown"):
        resolve(bench_throughput.parse_args([*SMALL_RUN, "--variants", "fastest,nope"]))


def test_release_drops_the_gradients_between_blocks():
    """What lets seven BERT-Large variants share one GPU: a variant keeps no gradients while
    the others run (the timed steps set them to None first anyway)."""
    import torch

    from bert.tools.throughput.variants import training_step

    model = torch.nn.Linear(4, 2)
    step, release = training_step(model, lambda i: model(torch.ones(3, 4)).sum())
    step(0)
    assert all(p.grad is not None for p in model.parameters())
    release()
    assert all(p.grad is None for p in model.parameters())


# ---- +graphs: run.cuda_graphs in the one process ------------------------------------------------


def test_graphs_variants_run_or_are_refused_with_the_reason(tmp_path):
    """+graphs beside the others: on the CPU its eager emulation runs every shape through the
    graph cache (counted); the sets graphs refuse are left out with the reason recorded, and
    the rest of the run goes on."""
    from bert.tools.throughput import bench as bench_throughput

    payload = bench_throughput.main(
        [
            *SMALL_RUN,
            "--num-batches",
            "2",
            "--variants",
            "fastest,per_sequence+graphs,per_sequence+graphs+subset,per_sequence+sharded+graphs",
            "--fastest",
            "per_sequence",
            "--json",
            str(tmp_path / "b.json"),
        ]
    )
    graphed = payload["variants"]["per_sequence+graphs"]
    assert graphed["options"]["cuda_graphs"].startswith("emulated")
    assert payload["variants"]["fastest"]["options"]["cuda_graphs"] is False
    # warmed on both batches (one capture per shape), then 2 rounds of 1 step, all replayed
    counts = graphed["counters"]
    assert counts["graph_fallbacks"] == 0 and 1 <= counts["graph_captures"] <= 2
    assert counts["graph_replays"] == 2 + 2
    assert set(payload["variants"]) == {"fastest", "per_sequence+graphs"}
    # the graph's padding is computed, not credited
    useful = payload["workload"]["useful_flops_per_step"]
    assert graphed["executed_flops_per_step"] > useful
    assert payload["variants"]["fastest"]["executed_flops_per_step"] == pytest.approx(useful)
    refused = payload["variants_refused"]
    assert "+subset" in refused["per_sequence+graphs+subset"]
    assert "optim.sharded=true" in refused["per_sequence+sharded+graphs"]
    assert payload["variant_errors"] == {}
    assert json.loads((tmp_path / "b.json").read_text())["variants_refused"] == refused


def test_dry_run_lists_the_variants_and_builds_nothing(tmp_path, capsys):
    """The GPU window checks its throughput command with this: every flag parsed, every
    variant resolved as on the GPU (refusals included), nothing built or written."""
    from bert.tools.throughput import bench as bench_throughput

    out = tmp_path / "never.json"
    plan = bench_throughput.main(
        [
            *("--device", "cuda", "--model", "large", "--fastest", "flash_varlen"),
            *("--variants", "fastest,flash_varlen+graphs,flash_varlen+fusedlamb+graphs,hf_eager"),
            *("--json", str(out), "--dry-run"),
        ]
    )
    assert not out.exists()
    assert json.loads(capsys.readouterr().out) == plan
    variants = plan["variants"]
    assert list(variants) == [
        "fastest",
        "flash_varlen+graphs",
        "flash_varlen+fusedlamb+graphs",
        "hf_eager",
    ]
    assert variants["fastest"]["candidates"] == [
        {**variants["fastest"]["candidates"][0], "attention": "flash_varlen", "graphs": False}
    ]
    assert (
        variants["flash_varlen+graphs"]["graphs"]
        and "refused" not in variants["flash_varlen+graphs"]
    )
    assert "optim.sharded=true" in variants["flash_varlen+fusedlamb+graphs"]["refused"]
    assert plan["precision"] == "bf16" and plan["batch"] == 56


@pytest.mark.parametrize(
    "spec, refused_for",
    [
        ("flash_varlen+graphs", None),
        ("flash_varlen+fused+fp8+graphs", None),
        ("flash_varlen+graphs+subset", "model.last_layer_subset=true"),
        ("flash_varlen+fusedlamb+graphs", "optim.sharded=true"),
        ("grouped_flash+graphs", "model.attention=grouped_flash"),
        ("flash_varlen+compile+graphs", "+compile"),
        ("flash_varlen+subset", None),  # no +graphs: nothing to refuse
    ],
)
def test_graphs_refuse_what_the_trainer_refuses(spec, refused_for):
    from bert.tools.throughput.settings import graphs_refusal, named_candidate

    reason = graphs_refusal(named_candidate(spec, fusable=True), "bf16")
    if refused_for is None:
        assert reason is None
    else:
        assert refused_for in reason


def test_a_graphed_step_trains_like_the_eager_step():
    """graphed.py's step (forward and backward through the graph cache, padding included, the
    gradients kept and zeroed in place) gives the eager step's weights; the check fails when
    the kept gradients are not zeroed between steps."""
    import copy

    import numpy as np
    import torch

    from bert.model import BertForPretraining
    from bert.tools.throughput.graphed import graph_buckets, graphed_training_step
    from bert.tools.throughput.variants import training_step
    from bert.train.graphs.backends import EagerBackend
    from data.packing import pack_samples
    from data.synthetic_language import generate_samples, successor_table
    from small_model import small_config

    torch.manual_seed(0)
    # no dropout: padding moves the dropout draws, so compare without
    cfg = small_config(128, 64, hidden=32, heads=2, ffn=64, attention="per_sequence")
    samples = generate_samples(np.random.default_rng(0), successor_table(0, 128), 12, 64, 10)
    batches = [pack_samples(samples[i : i + 4]).to("cpu") for i in (0, 4, 8)]

    def trained(graphed: bool, zero_in_place: bool = True) -> dict:
        model = copy.deepcopy(reference_model)

        def forward_loss(batch):
            return sum(model.loss(*model(batch), batch))

        if graphed:
            optimizer = make_optimizer(model, "lamb", torch.device("cpu"))
            if not zero_in_place:  # the fault: gradients add up over the steps
                optimizer.zero_grad = lambda set_to_none=True: None
            buckets = graph_buckets(4, 64, 10)
            step, counts = graphed_training_step(
                model, forward_loss, batches, optimizer, buckets, EagerBackend()
            )
        else:
            step, _ = training_step(model, lambda i: forward_loss(batches[i % 3]))
        for i in range(3):
            step(i)
        if graphed:
            assert counts()["graph_replays"] == 3 and counts()["graph_fallbacks"] == 0
        return {n: p.detach().clone() for n, p in model.named_parameters()}

    from bert.tools.throughput.variants import make_optimizer

    reference_model = BertForPretraining(cfg).train()
    eager = trained(False)
    graphed = trained(True)
    for name, value in eager.items():
        torch.testing.assert_close(graphed[name], value, rtol=1e-5, atol=1e-6, msg=name)
    faulty = trained(True, zero_in_place=False)
    assert any(not torch.allclose(faulty[n], v, rtol=1e-5, atol=1e-6) for n, v in eager.items())


def test_a_variant_out_of_memory_in_a_round_is_dropped_and_the_rest_go_on(tmp_path, monkeypatch):
    """Nine BERT-Large variants fit an H200 beside HF eager's transient, not necessarily a
    smaller GPU: a variant that runs out of memory is recorded and dropped, not the run."""
    import torch

    from bert.tools.throughput import bench as bench_throughput

    real_build = bench_throughput.Bench.build

    def build(self, name, options=bench_throughput.Candidate("padded_sdpa")):
        variant = real_build(self, name, options)  # warmed up already
        if name == "reference":
            real_step, calls = variant.step, iter(range(100))

            def step(i):
                if next(calls) == 1:  # the second round's block
                    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
                real_step(i)

            variant.step = step
        return variant

    monkeypatch.setattr(bench_throughput.Bench, "build", build)
    payload = bench_throughput.main(
        [*SMALL_RUN, "--variants", "fastest,reference", "--json", str(tmp_path / "b.json")]
    )
    assert list(payload["variants"]) == ["fastest"]
    assert payload["variant_errors"]["reference"].startswith("round 2: CUDA out of memory")
    assert len(payload["variants"]["fastest"]["samples_per_s_per_round"]) == 2


def test_executed_flops_count_what_runs():
    """workload.executed_flops is train_flops on what actually runs: equal with nothing padded
    or skipped, and each departure moves it the right way by the right amount."""
    import numpy as np

    from bert.tools.throughput.workload import executed_flops, model_config, train_flops

    cfg = model_config("large")
    h, F_ = cfg.hidden_size, cfg.intermediate_size
    lengths, masked = np.array([512, 100, 37]), 90
    useful = train_flops(cfg, lengths, masked)
    assert executed_flops(cfg, lengths, masked) == pytest.approx(useful)
    # padded inside attention: every sequence computes 512 x 512 in every layer
    padded = executed_flops(cfg, lengths, masked, attention_pad=512)
    extra = 12.0 * cfg.num_hidden_layers * h * (2 * 512**2 - 100**2 - 37**2)
    assert padded - useful == pytest.approx(extra)
    # the last layer with every token a query is the full layer
    assert executed_flops(cfg, lengths, masked, queries=lengths) == pytest.approx(useful)
    queries = np.array([20, 5, 3])
    subset = executed_flops(cfg, lengths, masked, queries=queries)
    skipped = 6.0 * (2 * h * h + 2 * h * F_) * (lengths - queries).sum()
    skipped += 12.0 * h * float(((lengths - queries) * lengths).sum())
    assert useful - subset == pytest.approx(skipped)
    # a graph's padding sequence and masked rows are computed too
    assert executed_flops(cfg, np.append(lengths, 3), masked + 38) > useful


@pytest.mark.parametrize(
    "device, precision, tflops",
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
        ("NVIDIA H100 PCIe", "bf16", 756.0),
        ("NVIDIA H200", "bf16", 989.4),
        ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
        ("NVIDIA H100 80GB HBM3", "fp32", None),
        ("AMD EPYC 7B13", "bf16", None),
    ],
)
def test_datasheet_peak(device, precision, tflops):
    from bert.tools.throughput.measure import datasheet_peak

    peak = datasheet_peak(device, precision)
    assert (peak and peak["tflops"]) == tflops
