"""The registries are the single truth: a new balance strategy, attention backend or optimizer
is one record in one file (an optimizer on the sharded path: its record plus its update
function), and the whole program picks it up. Each dummy here is registered the way a new entry
would be and trains 2 steps through the Trainer on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bert.config import load_config
from bert.model import attention
from bert.optim import registry, shard_update
from bert.train.trainer import Trainer
from data.order import strategies
from data.synthetic import generate
from kernels.reference_lamb import apply_update


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("registry_data")
    generate(
        folder,
        num_shards=2,
        samples_per_shard=32,
        eval_samples=16,
        max_seq_length=32,
        max_predictions=5,
        vocab_size=128,
        seed=3,
    )
    return folder


def train_two_steps(data_dir, tmp_path, *extra) -> Trainer:
    cfg = load_config(
        None,
        [
            "model.vocab_size=128",
            "model.hidden_size=16",
            "model.num_hidden_layers=1",
            "model.num_attention_heads=2",
            "model.intermediate_size=32",
            "model.max_position_embeddings=32",
            "data.max_seq_length=32",
            "data.max_predictions_per_seq=5",
            f"data.train_dir={data_dir}",
            f"data.eval_file={data_dir / 'eval.hdf5'}",
            "run.global_batch_size=4",
            "run.max_steps=2",
            "eval.interval_samples=8",
            "eval.samples=16",
            "run.device=cpu",
            "run.seed=1",
            f"run.output_dir={tmp_path}",
            "log.quiet=true",
            "schedule.total_steps=10",
            *extra,
        ],
    )
    trainer = Trainer(cfg)
    before = [p.detach().clone() for p in trainer.raw_model.parameters()]
    result = trainer.train()
    assert result.steps == 2 and np.isfinite(result.eval_accuracy)
    moved = [not torch.equal(a, b) for a, b in zip(before, trainer.raw_model.parameters())]
    assert any(moved)
    return trainer


def test_a_new_balance_strategy_is_one_record(data_dir, tmp_path, monkeypatch):
    dealt = []

    def deal_reversed(lengths, world_size, ranks_per_node):
        dealt.append(len(lengths))
        order = np.argsort(-np.asarray(lengths), kind="stable")
        return order.reshape(world_size, -1)

    monkeypatch.setitem(
        strategies.STRATEGIES,
        "longest_first",
        strategies.Strategy(deal_reversed, source="shards", scope="world"),
    )
    train_two_steps(data_dir, tmp_path, "data.balance=longest_first")
    assert dealt  # the pipeline dealt with the new record's function


def test_a_new_attention_backend_is_one_record(data_dir, tmp_path, monkeypatch):
    calls = []

    def attend(q, k, v, batch, dropout_p):
        calls.append(q.shape[0])
        return attention.per_sequence_attention(q, k, v, batch.cu_seqlens, dropout_p)

    backend = attention.AttentionBackend("counted", attend, attend)
    monkeypatch.setitem(attention.BACKENDS, "counted", backend)
    train_two_steps(data_dir, tmp_path, "model.attention=counted")
    assert calls


def sgd_update(shard, inputs, reduce_sums) -> None:
    """Plain SGD on one shard: w -= lr * (unscaled, clipped) g; the overflow skip kept."""
    shard.update.copy_(shard.grad.float() * inputs.coef)
    apply_update(shard.groups, inputs.lrs, inputs.ok, None)
    if shard.model is not None:
        shard.model.copy_(shard.master)


@pytest.mark.parametrize("sharded", [False, True], ids=["replicated", "sharded"])
def test_a_new_optimizer_is_one_record(data_dir, tmp_path, monkeypatch, sharded):
    spec = registry.OptimizerSpec(
        replicated=lambda groups, o: torch.optim.SGD(groups, lr=o.lr),
        sharded=registry.ShardMath(False, shard_update.reference_sums, sgd_update),
        closed_division=False,
    )
    monkeypatch.setitem(registry.OPTIMIZERS, "sgd", spec)
    trainer = train_two_steps(
        data_dir,
        tmp_path,
        "optim.name=sgd",
        f"optim.sharded={sharded}",
        "submission.division=open",
        "optim.lr=0.1",
    )
    inner = trainer.optim.optimizer
    assert isinstance(inner, torch.optim.SGD) or inner.update_fn is sgd_update
