"""model.compile_sublayers: the attention-output and FFN sublayers under torch.compile.

The compiled model must be the eager model (same losses and gradients, to fp32 rounding: the
compiler may reorder a reduction), must compile once for every layer and every token count
(dynamic shapes; a recompile per batch would cost more than it saves), and must train through
the Trainer. On the CPU the compiler is inductor's C++ backend; its GPU speed is measured by
scripts/bench_throughput.py `--fastest flash_varlen+sublayers` (kernels/VALIDATION.md).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from bert.config import ConfigError
from bert.model import BertForPretraining, ModelConfig, pretraining_loss
from bert.train.trainer import Trainer
from data.packing import pack_samples

from small_model import masked_sample, small_config
from tiny_run import trainer_config

VOCAB = 101
# fp32 rounding of a reordered reduction over a few hundred terms, not a loose bound:
# torch.testing's fp32 defaults (rtol 1.3e-6, atol 1e-5), widened for gradients summed over
# every token of the batch.
RTOL, ATOL = 1e-5, 1e-5


def config(**overrides) -> ModelConfig:
    return small_config(VOCAB, 128, layers=3, **overrides)


def batch(seed: int, lengths: tuple[int, ...]):
    rng = np.random.default_rng(seed)
    samples = []
    for i, n in enumerate(lengths):
        positions = np.sort(rng.choice(np.arange(1, n), size=max(1, n // 7), replace=False))
        samples.append(masked_sample(rng, n, VOCAB, positions, i % 2))
    return pack_samples(samples).to("cpu")


def loss_and_grads(model: BertForPretraining, packed) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    mlm, nsp = pretraining_loss(*model(packed), packed, VOCAB)
    (mlm + nsp).backward()
    return (mlm + nsp).detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("attention", ["padded_sdpa", "per_sequence"])
def test_compiled_sublayers_equal_the_eager_model(fresh_dynamo, attention):
    torch.manual_seed(0)
    eager = BertForPretraining(config(attention=attention)).train()
    compiled = BertForPretraining(config(attention=attention, compile_sublayers=True)).train()
    compiled.load_state_dict(eager.state_dict())
    assert list(compiled.state_dict()) == list(eager.state_dict())  # same parameter names
    for seed, lengths in ((0, (9, 30, 17, 5, 64)), (1, (40, 3, 22))):  # 125 and 65 tokens
        packed = batch(seed, lengths)
        loss, grads = loss_and_grads(eager, packed)
        loss_c, grads_c = loss_and_grads(compiled, packed)
        torch.testing.assert_close(loss_c, loss, rtol=RTOL, atol=ATOL)
        for name, grad in grads.items():
            torch.testing.assert_close(grads_c[name], grad, rtol=RTOL, atol=ATOL, msg=name)


def test_one_graph_per_sublayer_for_every_layer_and_token_count(fresh_dynamo):
    torch.manual_seed(0)
    model = BertForPretraining(config(compile_sublayers=True, hidden_dropout_prob=0.1)).train()
    for seed, lengths in enumerate(((9, 30, 17, 5, 64), (40, 3, 22), (11, 12), (7, 50, 33))):
        loss, _ = loss_and_grads(model, batch(seed, lengths))
        assert math.isfinite(float(loss))
    # two functions (attention output, FFN), each traced once: 3 layers x 4 token counts
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])


def test_compile_and_the_fused_sublayer_kernels_are_exclusive():
    for flag in ("fused_dense", "fused_bias_dropout_residual_layernorm"):
        with pytest.raises(ConfigError, match=f"compile_sublayers=true .*model.{flag}"):
            config(hidden_size=1024, num_attention_heads=16, compile_sublayers=True, **{flag: True})
    config(compile_sublayers=True, fused_mlm_loss=True)  # not a sublayer: combines


def test_trainer_trains_with_compiled_sublayers(fresh_dynamo, tiny_data, tmp_path):
    trainer = Trainer(trainer_config(tiny_data, tmp_path, "model.compile_sublayers=true"))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    result = trainer.train()
    assert result.steps == 4 and 0.0 <= result.eval_accuracy <= 1.0
    assert all(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
