"""The GPU window's attention probe in its CPU mode (bert/tools/gpu/probe_attention.py): every
path recorded, run or unavailable; its check fails on wrong attention (injected kernels); the
JSON after every case; and `pick`, the rule that reads its records
(bert/model/attention_backends.py)."""

from __future__ import annotations

import json

import pytest
import torch

from bert.model import attention_backends
from bert.model.attention_backends import AttentionBackend, pick
from bert.tools.gpu import probe_attention as probe
from bert.tools.gpu.report import attention_verdicts

SMALL = ["--device", "cpu", "--batch", "4", "--max-length", "48", "--iters", "1"]


def run(tmp_path, paths=None, dtypes="bf16"):
    args = probe.parse_args([*SMALL, "--dtypes", dtypes, "--out", str(tmp_path / "p.json")])
    return probe.run_probe(args, paths)


def case_of(record, path, dtype="bf16"):
    return next(c for c in record["cases"] if c["path"] == path and c["dtype"] == dtype)


def test_cpu_mode_records_every_path_run_or_unavailable(tmp_path, monkeypatch):
    writes = []
    real = probe.write_json
    monkeypatch.setattr(
        probe, "write_json", lambda p, r: (writes.append(len(r["cases"])), real(p, r))
    )
    record = run(tmp_path)
    assert [c["path"] for c in record["cases"]] == [p.name for p in probe.PATHS]
    # the model's CUDA-only kernels have no CPU path: recorded, not crashed
    flash = case_of(record, "flash_varlen")
    assert not flash["available"] and "CUDA" in flash["reason"]
    for name in ("padded_sdpa", "per_sequence", "grouped_flash", "njt_math"):
        case = case_of(record, name)
        assert case["available"] and case["check"]["passed"], case
        assert case["forward_ms"] > 0 and case["train_ms"] > 0 and case["forward_tflops"] > 0
    # rewritten after every case, so a killed probe keeps what it finished
    assert writes[: len(probe.PATHS)] == list(range(1, len(probe.PATHS) + 1))
    assert json.loads((tmp_path / "p.json").read_text())["pick"] == record["pick"]
    assert record["pick"]["bf16"] in ("padded_sdpa", "per_sequence", "grouped_flash")


def across_sequences(q, k, v, packed, dropout_p):
    """Wrong: the packed tokens attend to each other as one sequence."""
    qh, kh, vh = (t.transpose(0, 1) for t in (q, k, v))
    return torch.nn.functional.scaled_dot_product_attention(qh, kh, vh).transpose(0, 1)


def no_key_gradient(q, k, v, packed, dropout_p):
    """Wrong backward only: the output is right, the keys get no gradient."""
    k = k.detach() + 0 * k  # used, so autograd still returns a (zero) gradient for it
    return probe.backend_path("padded_sdpa").run(q, k, v, packed, dropout_p)


def test_the_check_fails_on_wrong_attention(tmp_path):
    paths = (
        probe.backend_path("padded_sdpa"),
        probe.AttentionPath("across_sequences", across_sequences),
        probe.AttentionPath("no_key_gradient", no_key_gradient),
    )
    record = run(tmp_path, paths, dtypes="bf16,fp16")
    for dtype in ("bf16", "fp16"):
        assert case_of(record, "padded_sdpa", dtype)["check"]["passed"]
        wrong = case_of(record, "across_sequences", dtype)["check"]
        assert not wrong["passed"] and not wrong["tensors"]["out"]["max_error"] <= 1e-3
        backward = case_of(record, "no_key_gradient", dtype)["check"]
        assert (
            not backward["passed"]
            and backward["tensors"]["out"]["max_error"] <= (backward["tensors"]["out"]["bound"])
        )
        assert backward["tensors"]["dk"]["max_error"] > backward["tensors"]["dk"]["bound"]
    assert probe.wrong_backends(record) == []
    assert [line.split(":")[0] for line in attention_verdicts(record)] == ["bf16", "fp16"]
    assert "across_sequences WRONG" in attention_verdicts(record)[0]


def test_a_wrong_backend_fails_the_probe(tmp_path, monkeypatch):
    """A wrong candidate path is reported; a wrong backend, which a config may be running,
    also fails the window's step (exit status 1)."""
    wrong = probe.AttentionPath("padded_sdpa", across_sequences, backend="padded_sdpa")
    monkeypatch.setattr(probe, "PATHS", (wrong,))
    assert probe.main([*SMALL, "--dtypes", "bf16", "--out", str(tmp_path / "p.json")]) == 1
    record = json.loads((tmp_path / "p.json").read_text())
    assert probe.wrong_backends(record) == ["padded_sdpa bf16"]


def test_bad_arguments_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        probe.parse_args([*SMALL, "--dtypes", "fp8", "--out", str(tmp_path / "p.json")])
    assert stop.value.code == 2 and "--dtypes" in capsys.readouterr().err


# ---- pick ----------------------------------------------------------------------------------------


def case(path, ms, passed=True, dtype="bf16", backend=...):
    return {
        "path": path,
        "backend": path if backend is ... else backend,
        "dtype": dtype,
        "available": True,
        "check": {"passed": passed},
        "train_ms": ms,
    }


def record(device, date, *cases):
    return {"device": device, "date": date, "cases": list(cases)}


H200 = "NVIDIA H200"


def test_pick_prefers_the_fastest_passing_backend_of_the_newest_record():
    older = record(H200, "2030-01-01T00:00", case("grouped_flash", 1.0), case("flash_varlen", 2.0))
    newer = record(H200, "2030-01-02T00:00", case("grouped_flash", 3.0), case("flash_varlen", 2.0))
    assert pick([newer, older], H200, "padded_sdpa") == "flash_varlen"
    assert pick([older], H200, "padded_sdpa") == "grouped_flash"


def test_pick_skips_wrong_paths_others_and_other_devices_and_dtypes():
    probe_record = record(
        H200,
        "2030-01-01T00:00",
        case("grouped_flash", 1.0, passed=False),  # fastest, but wrong
        case("njt_cudnn", 0.5, backend=None),  # no backend: a candidate to add, not to pick
        case("flash_varlen", 3.0, dtype="fp16"),
        case("padded_sdpa", 4.0),
    )
    assert pick([probe_record], H200, "flash_varlen") == "padded_sdpa"
    assert pick([probe_record], H200, "flash_varlen", dtype="fp16") == "flash_varlen"
    assert pick([probe_record], "NVIDIA H100 80GB HBM3", "flash_varlen") == "flash_varlen"
    assert pick([], H200, "flash_varlen") == "flash_varlen"  # no record: nothing changes


def test_pick_never_names_a_backend_no_window_validated(monkeypatch):
    unvalidated = AttentionBackend("new_attention", "x:attend", "x:attend_subset")
    monkeypatch.setitem(attention_backends.BACKENDS, "new_attention", unvalidated)
    probe_record = record(
        H200, "2030-01-01T00:00", case("new_attention", 0.5), case("flash_varlen", 2.0)
    )
    assert pick([probe_record], H200, "padded_sdpa") == "flash_varlen"


def test_picked_reads_the_committed_windows(tmp_path):
    folder = tmp_path / "2030-01-01_window"
    folder.mkdir()
    summary = {"date": "2030-01-01T00:00", "device": H200, "commit": "a" * 40, "steps": []}
    (folder / "summary.json").write_text(json.dumps(summary))
    assert probe.picked(H200, "flash_varlen", root=tmp_path) == "flash_varlen"
    probe_record = record(H200, "2030-01-01T00:00", case("grouped_flash", 1.0))
    (folder / "attention_probe.json").write_text(json.dumps(probe_record))
    assert probe.picked(H200, "flash_varlen", root=tmp_path) == "grouped_flash"
