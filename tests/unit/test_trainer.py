"""The Trainer in-process on tiny data: precisions, accumulation, quiet mode, eval counting."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from bert.train.trainer import Trainer

from tiny_run import trainer_config


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("sharded", [False, True], ids=["replicated", "sharded"])
def test_train_runs_and_evaluates(tiny_data, tmp_path, precision, sharded, capsys):
    trainer = Trainer(
        trainer_config(
            tiny_data, tmp_path, f"run.precision={precision}", f"optim.sharded={sharded}"
        )
    )
    before = [p.detach().clone() for p in trainer.model.parameters()]
    result = trainer.train()
    assert result.steps == 4 and result.samples == 32 and result.status == "aborted"
    assert 0.0 <= result.eval_accuracy <= 1.0
    changed = [not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters())]
    assert all(changed)
    log = (tmp_path / "mlperf.log").read_text()
    assert log.count('"key": "eval_accuracy"') == 2  # at 16 and 32 samples
    printed = capsys.readouterr().out.splitlines()  # quiet: the outcome line only
    # a log line: time, rank, level, then the message (bert/obs/logs.py)
    assert len(printed) == 1 and " rank 0 INFO run_stop aborted:" in printed[0], printed


def test_gradient_accumulation_geometry(tiny_data, tmp_path):
    trainer = Trainer(trainer_config(tiny_data, tmp_path, "run.gradient_accumulation_steps=2"))
    assert trainer.geometry.micro_batch_size == 4
    pipeline, _ = trainer._open_data()
    trainer.mllog.run_start()
    loss = trainer.train_step(pipeline)
    assert loss.shape == () and math.isfinite(float(loss))
    assert pipeline.state_dict()["source"]["offset"] == 8  # two micro-batches of 4 consumed
    trainer._close_data()


def test_evaluate_is_token_weighted(tiny_data, tmp_path):
    """Accuracy = correct / all masked tokens of the eval set, whatever the batch split."""
    trainer = Trainer(trainer_config(tiny_data, tmp_path))
    _, eval_set = trainer._open_data()
    trainer._close_data()
    first = trainer.evaluate(eval_set)
    trainer.cfg = dataclasses.replace(
        trainer.cfg, eval=dataclasses.replace(trainer.cfg.eval, batch_size=7)
    )
    assert trainer.evaluate(eval_set) == pytest.approx(first)


def test_sharded_optimizer_trains_like_replicated(tiny_data, tmp_path):
    """Same seed, same data: ShardedOptimizer (world 1) ends where LAMB ends."""
    weights = []
    for sharded in (False, True):
        trainer = Trainer(
            trainer_config(tiny_data, tmp_path / str(sharded), f"optim.sharded={sharded}")
        )
        trainer.train()
        weights.append({k: v.detach().clone() for k, v in trainer.raw_model.state_dict().items()})
    for name, tensor in weights[0].items():
        torch.testing.assert_close(weights[1][name], tensor, rtol=1e-5, atol=1e-6, msg=name)


def test_fused_mlm_loss_flag_reaches_the_training_loss(tiny_data, tmp_path, monkeypatch):
    """model.fused_mlm_loss must switch the trainer's loss, not only the model's default."""
    import dataclasses

    import bert.model.fused as ops
    from bert.model.fused_functions import fused_mlm_cross_entropy

    calls = []
    record = ops.FUSED_OPS["fused_mlm_loss"]

    def counted(logits, labels, vocab_size):
        calls.append(len(labels))
        return fused_mlm_cross_entropy(logits, labels, vocab_size)

    monkeypatch.setitem(
        ops.FUSED_OPS,
        "fused_mlm_loss",
        dataclasses.replace(record, replaces={"mlm_cross_entropy": counted}),
    )
    Trainer(
        trainer_config(tiny_data, tmp_path, "model.fused_mlm_loss=true", "run.max_steps=1")
    ).train()
    assert calls
