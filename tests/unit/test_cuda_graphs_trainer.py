"""run.cuda_graphs in the config and the trainer: refused where it cannot run (a CPU, and the
settings it does not support yet), and on the CPU, with the eager backend standing in for the
capture (bert/train/graphs/backends.py), the trainer's run equals the eager run. Marked gpu:
the same comparison with the real CUDA graphs."""

from __future__ import annotations

import json

import pytest
import torch

from bert.config import ConfigError, load_config
from bert.train.graphs.backends import EagerBackend
from bert.train.graphs.build import build_graphs
from bert.train.graphs.static_batch import StaticBatch
from bert.train.trainer import Trainer
from gpu_gate import require_cuda
from tiny_run import trainer_config

# no dropout (padding moves the dropout draws); buckets small enough for several shapes
GRAPHED = (
    "model.hidden_dropout_prob=0",
    "model.attention_probs_dropout_prob=0",
    "run.graph_token_bucket=64",
    "run.graph_masked_bucket=8",
    "run.gradient_accumulation_steps=2",
)


def test_cuda_graphs_on_a_cpu_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"run.cuda_graphs=true needs CUDA .* run.device=cpu"):
        load_config(None, ["run.cuda_graphs=true", "run.device=cpu"])


@pytest.mark.parametrize(
    "setting",
    [
        "run.precision=fp16",
        "optim.sharded=true",
        "model.attention=grouped_flash",
        "model.last_layer_subset=true",
    ],
)
def test_cuda_graphs_refuse_what_they_cannot_capture_yet(setting):
    base = ["run.cuda_graphs=true", "run.device=cuda", "run.precision=bf16"]
    assert load_config(None, base).run.cuda_graphs  # the same without `setting` loads
    with pytest.raises(ConfigError, match=f"cannot run with {setting} yet"):
        load_config(None, [*base, setting])


def trained(cfg, backend=None) -> tuple[dict, Trainer]:
    trainer = Trainer(cfg)
    if backend is not None:
        trainer.graphs = build_graphs(trainer, backend)
    trainer.train()
    weights = {k: v.detach().clone() for k, v in trainer.raw_model.state_dict().items()}
    return weights, trainer


def metrics(folder) -> list[dict]:
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]


@pytest.fixture(scope="module")
def eager_run(tiny_data, tmp_path_factory):
    """The eager run's final weights and its folder (metrics.jsonl)."""
    folder = tmp_path_factory.mktemp("eager")
    return trained(trainer_config(tiny_data, folder, *GRAPHED))[0], folder


def assert_same_weights(got: dict, want: dict) -> None:
    for name, tensor in want.items():
        torch.testing.assert_close(got[name], tensor, rtol=1e-5, atol=1e-6, msg=name)


def test_trainer_with_emulated_graphs_trains_like_eager(tiny_data, tmp_path, eager_run):
    """4 steps of 2 micro-batches: the padded, replayed steps end at the eager weights."""
    eager, eager_dir = eager_run
    backend = EagerBackend()
    graphed, trainer = trained(trainer_config(tiny_data, tmp_path / "graphs", *GRAPHED), backend)
    counts = trainer.graphs.counts
    assert counts.replays == 8 and counts.fallbacks == 0
    assert counts.captures == len(backend.captures) == len(set(backend.captures)) > 1
    assert_same_weights(graphed, eager)
    loss = [r["loss"] for r in metrics(eager_dir)]
    assert [r["loss"] for r in metrics(tmp_path / "graphs")] == pytest.approx(loss, rel=1e-5)
    last = metrics(tmp_path / "graphs")[-1]
    assert last["graph_replays"] == 8 and last["graph_fallbacks"] == 0
    assert "graph_replays" not in metrics(eager_dir)[-1]


def test_the_weight_check_fails_on_a_wrong_copy(tiny_data, tmp_path, eager_run, monkeypatch):
    """Positive control: cu_seqlens left from the shape's previous batch change the run."""
    load = StaticBatch.load

    def stale_load(self, batch):
        stale = self.batch.cu_seqlens.clone()
        load(self, batch)
        if self.loaded:
            self.batch.cu_seqlens.copy_(stale)
        self.loaded = True

    monkeypatch.setattr(StaticBatch, "loaded", False, raising=False)
    monkeypatch.setattr(StaticBatch, "load", stale_load)
    graphed, _ = trained(trainer_config(tiny_data, tmp_path, *GRAPHED), EagerBackend())
    with pytest.raises(AssertionError):
        assert_same_weights(graphed, eager_run[0])


def test_a_batch_no_graph_fits_runs_eagerly_in_the_trainer(tiny_data, tmp_path, eager_run):
    """max_shapes=1: the first shape is replayed, every other runs eagerly; still eager's run."""
    cfg = trainer_config(tiny_data, tmp_path / "graphs", *GRAPHED, "run.graph_max_shapes=1")
    graphed, trainer = trained(cfg, EagerBackend())
    counts = trainer.graphs.counts
    assert counts.captures == 1 and counts.fallbacks > 0
    assert counts.replays + counts.fallbacks == 8
    assert_same_weights(graphed, eager_run[0])


@pytest.mark.gpu
def test_trainer_with_cuda_graphs_trains_like_eager_on_cuda(tiny_data, tmp_path):
    """The real capture in the trainer (fp32, padded_sdpa: a tight comparison)."""
    require_cuda()
    cuda = ("run.device=cuda", *GRAPHED)
    eager, _ = trained(trainer_config(tiny_data, tmp_path / "eager", *cuda))
    cfg = trainer_config(tiny_data, tmp_path / "graphs", *cuda, "run.cuda_graphs=true")
    graphed, trainer = trained(cfg)
    assert trainer.graphs.counts.replays == 8 and trainer.graphs.counts.captures > 1
    for name, tensor in eager.items():
        torch.testing.assert_close(graphed[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
