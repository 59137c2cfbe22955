"""Fused LAMB (kernels/lamb.py): the custom ops on CPU against the optimizer's `_foreach` step, the
sharded optimizer with the fused hooks, and (-m gpu) the CUDA kernels against the reference.

The CPU implementation of the ops is their `_foreach` twin (kernels/reference_lamb.py), the same
math as the optimizer's reference step (bert/optim/shard_update.py), so on CPU these tests check
the plumbing: the segment table, the per-group decays and lrs, the
in-place contracts and the hooks. The GPU tests compare the kernels with that reference run on the
same CUDA tensors, at fp32 rounding tolerance, on BERT-Large's parameter set.
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bert.config import ConfigError, load_config
from bert.optim import DynamicLossScaler, ShardedOptimizer, param_groups
from bert.optim import shard_update as ref
from bert.optim.config import OptimConfig
from bert.optim.registry import OPTIMIZERS, build_optimizer, shard_math
from bert.train.distributed import DistContext
from kernels import _loader
from kernels import reference_lamb as tensor_ref
from bert.tools.kernel_bench.lamb_shards import bert_large_param_groups, random_shard

TESTS = Path(__file__).resolve().parents[1]
LAMB_MATH = OPTIMIZERS["lamb"].sharded
if str(TESTS) not in sys.path:  # the sharded optimizer's test bench lives in tests/
    sys.path.insert(0, str(TESTS))
from sharded_lamb import (  # noqa: E402
    STEPS,
    agreed,
    assert_params_close,
    launch,
    local_batch,
    loss_of,
    make_model,
    make_opt,
    params_of,
    run_local,
    train_scenario,
)

BETAS, EPS, LR = (0.9, 0.999), 1e-6, 1e-3
DECAYS = [0.01, 0.0]  # group 0 decays (trust ratio), group 1 does not (biases, LayerNorm)
# Odd sizes, a 1-element parameter, both groups interleaved in the flat shard.
SHAPES = [
    torch.Size(s)
    for s in [(7, 5), (300,), (1,), (64, 40), (129,), (2, 2, 2), (1000,), (33,), (17, 3)]
]
GROUP_OF = [0, 1, 0, 0, 1, 0, 0, 1, 0]
ZERO_WEIGHT, ZERO_EVERYTHING = 5, 8  # |w| = 0 (ratio 1); w = g = m = v = 0 (u = 0, ratio 1)
HOOKS = dict(sums_fn=ref.fused_sums, update_fn=ref.fused_update)
REFERENCE = dict(sums_fn=ref.reference_sums, update_fn=ref.reference_update)


def no_reduce(t: torch.Tensor) -> torch.Tensor:
    return t  # one rank: the sums are already global


def make_shard(
    dtype=torch.float32, device="cpu", world=1, rank=0, align=8, seed=0
) -> ref.ShardBuffers:
    """A random shard of `SHAPES` with its zero-norm parameters."""
    shard = random_shard(SHAPES, GROUP_OF, DECAYS, world, rank, dtype, device, seed, align)
    for start, length, param, _ in shard.segments.tolist():
        piece = slice(start, start + length)
        if param in (ZERO_WEIGHT, ZERO_EVERYTHING):
            shard.master[piece] = 0.0
        if param == ZERO_EVERYTHING:
            for buffer in (shard.grad, shard.exp_avg, shard.exp_avg_sq):
                buffer[piece] = 0.0
    return shard


def step_inputs(
    shard: ref.ShardBuffers,
    sums: torch.Tensor,
    coef: float = 0.5,
    ok=None,
    trust_ratio: bool = True,
    step: int = 3,
) -> ref.StepInputs:
    """What ShardedOptimizer._step_inputs hands the update, for given sums and coef."""
    device = shard.master.device
    t = torch.tensor(float(step), dtype=torch.float64, device=device)
    lrs = [torch.tensor(LR, device=device), 0.5 * LR]  # a tensor lr and a float lr
    return ref.StepInputs(
        torch.tensor(coef, device=device),
        ok,
        1.0 - BETAS[0] ** t,
        1.0 - BETAS[1] ** t,
        lrs,
        sums[1:] if trust_ratio else None,
        BETAS,
        EPS,
    )


def reference_and_fused_step(shard, coef=0.5, ok=None, trust_ratio=True):
    """One step through the reference and through the ops on copies: (expected, actual)."""
    expected, actual = copy.deepcopy(shard), copy.deepcopy(shard)
    sums = ref.reference_sums(expected, trust_ratio)
    fused_sums = ref.fused_sums(actual, trust_ratio)
    inputs = step_inputs(shard, sums, coef, ok, trust_ratio)
    ref.reference_update(expected, inputs, no_reduce)
    ref.fused_update(actual, inputs, no_reduce)
    return (expected, sums), (actual, fused_sums)


STATE = ("master", "exp_avg", "exp_avg_sq", "model")


# ---- CPU: the ops' reference path is the optimizer's step -----------------------------------
@pytest.mark.parametrize("case", ["fp32", "fp16_model_copy", "bf16_model_copy", "no_clip", "adam"])
def test_ops_equal_the_reference_step(case):
    dtype = {"fp16_model_copy": torch.float16, "bf16_model_copy": torch.bfloat16}.get(
        case, torch.float32
    )
    shard = make_shard(dtype)
    assert (shard.model is None) == (dtype == torch.float32)
    (expected, sums), (actual, fused_sums) = reference_and_fused_step(
        shard, coef=1.0 if case == "no_clip" else 0.5, trust_ratio=case != "adam"
    )
    assert torch.equal(fused_sums, sums)
    assert sums.shape == ((1,) if case == "adam" else (1 + len(SHAPES),))
    for key in STATE:
        if getattr(expected, key) is not None:
            assert torch.equal(getattr(actual, key), getattr(expected, key)), key
    assert not torch.equal(actual.master, shard.master)  # the step did something


def test_zero_norm_parameters_get_trust_ratio_one():
    """|w| = 0 or |u| = 0: ratio 1, so the step is lr * u (u = 0 leaves w at 0)."""
    shard = make_shard()
    (_, sums), (actual, _) = reference_and_fused_step(shard)
    rows = {param: (start, length) for start, length, param, _ in shard.segments.tolist()}
    assert sums[1 + ZERO_WEIGHT] == 0 and sums[1 + ZERO_EVERYTHING] == 0
    start, length = rows[ZERO_EVERYTHING]
    assert (actual.master[start : start + length] == 0).all()
    # |w| = 0: w_new = -lr * u with u the plain Adam direction (wd * w = 0).
    start, length = rows[ZERO_WEIGHT]
    t = 3
    m = BETAS[0] * shard.exp_avg + (1 - BETAS[0]) * 0.5 * shard.grad
    v = BETAS[1] * shard.exp_avg_sq + (1 - BETAS[1]) * (0.5 * shard.grad) ** 2
    u = (m / (1 - BETAS[0] ** t)) / ((v / (1 - BETAS[1] ** t)).sqrt() + EPS)
    torch.testing.assert_close(
        actual.master[start : start + length], -LR * u[start : start + length], rtol=1e-5, atol=1e-9
    )


def test_no_decay_segments_get_neither_decay_nor_trust_ratio():
    """A no-decay piece moves by exactly lr * Adam direction, whatever |w| and |u| are."""
    shard = make_shard()
    _, (actual, _) = reference_and_fused_step(shard, coef=1.0)
    t = 3
    m = BETAS[0] * shard.exp_avg + (1 - BETAS[0]) * shard.grad
    v = BETAS[1] * shard.exp_avg_sq + (1 - BETAS[1]) * shard.grad**2
    u = (m / (1 - BETAS[0] ** t)) / ((v / (1 - BETAS[1] ** t)).sqrt() + EPS)
    checked = 0
    for start, length, _, group in shard.segments.tolist():
        if group == 1:
            piece = slice(start, start + length)
            torch.testing.assert_close(
                actual.master[piece],
                shard.master[piece] - 0.5 * LR * u[piece],
                rtol=1e-6,
                atol=1e-9,
            )
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_overflow_skips_the_step_bit_identically(bad):
    shard = make_shard(torch.float16)
    shard.grad[shard.segments[2, 0]] = bad
    (expected, sums), (actual, fused_sums) = reference_and_fused_step(
        shard, coef=0.0, ok=torch.tensor(False)
    )
    assert not torch.isfinite(fused_sums[0]) and torch.equal(fused_sums[1:], sums[1:])
    for key in STATE:
        assert torch.equal(getattr(actual, key), getattr(expected, key)), key
        if key != "model":
            assert torch.equal(getattr(actual, key), getattr(shard, key)), key
    assert torch.equal(actual.model, shard.master.half())  # the gathered copy is still valid


def test_sums_accumulate_and_skip_no_decay_weights():
    shard = make_shard()
    sums = torch.zeros(1 + len(SHAPES))
    for _ in range(2):
        torch.ops.bert_kernels.lamb_sums(shard.grad, shard.master, shard.segments, DECAYS, sums)
    torch.testing.assert_close(sums[0], 2 * shard.grad.square().sum())
    for start, length, param, group in shard.segments.tolist():
        w_sq = shard.master[start : start + length].square().sum()
        torch.testing.assert_close(sums[1 + param], 2 * w_sq if group == 0 else torch.tensor(0.0))


def test_custom_ops_pass_opcheck():
    shard = make_shard(torch.float16)
    n, s = len(SHAPES), shard.segments
    torch.library.opcheck(
        torch.ops.bert_kernels.lamb_sums.default,
        (shard.grad, shard.master, s, DECAYS, torch.zeros(1 + n)),
    )
    ok, f64 = torch.tensor(True), dict(dtype=torch.float64)
    torch.library.opcheck(
        torch.ops.bert_kernels.lamb_update.default,
        (
            shard.grad,
            shard.master,
            shard.exp_avg,
            shard.exp_avg_sq,
            shard.update,
            s,
            DECAYS,
            torch.tensor(0.5),
            ok,
            torch.tensor(0.1, **f64),
            torch.tensor(0.01, **f64),
            *BETAS,
            EPS,
            torch.zeros(n),
        ),
    )
    torch.library.opcheck(
        torch.ops.bert_kernels.lamb_apply.default,
        (
            shard.master,
            shard.update,
            s,
            DECAYS,
            torch.tensor([LR, LR]),
            ok,
            torch.rand(n),
            torch.rand(n),
            shard.model,
        ),
    )
    torch.library.opcheck(
        torch.ops.bert_kernels.lamb_apply.default,
        (shard.master, shard.update, s, DECAYS, torch.tensor([LR, LR]), None, None, None, None),
    )


# ---- CPU: the sharded optimizer with the fused hooks -----------------------------------------
@pytest.mark.parametrize("variant", ["fp32", "loss_scaled", "adam"])
def test_sharded_optimizer_with_fused_hooks_equals_reference(variant):
    """10 steps of the tiny BERT, hooks and all: the same weights as the reference path."""
    finals = []
    for hooks in ({}, HOOKS):
        model = make_model()
        scaler = DynamicLossScaler(init_scale=1024.0) if variant == "loss_scaled" else None
        opt = make_opt(model, loss_scaler=scaler, trust_ratio=variant != "adam", **hooks)
        run_local(opt, model, range(STEPS), scaler)
        finals.append(params_of(model))
    assert_params_close(finals[1], finals[0], f"fused hooks, {variant}", dict(rtol=0, atol=0))


def test_fp16_parameters_get_their_copy_from_the_fused_apply():
    """fp16 params: the model gets the fp16 copy that `lamb_apply` writes, overflow included."""
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 5).half()
    scaler = DynamicLossScaler(init_scale=256.0)
    opt = ShardedOptimizer(param_groups(model, 0.01), lr=0.1, loss_scaler=scaler, **HOOKS)
    shard = opt._shards[torch.float16]
    before = model.weight.detach().clone()
    for bad in (True, False):
        opt.zero_grad()
        for p in model.parameters():
            p.grad.copy_(torch.randn_like(p) * 64)
        if bad:
            model.weight.grad[0, 0] = float("inf")
        opt.step()
        assert torch.equal(model.weight, before) == bad
        assert torch.equal(model.weight, opt.layout.param_view(shard.master, 0).half())
    assert scaler.skipped_steps() == 1 and int(opt.step_count) == 1


@pytest.mark.distributed
def test_fused_hooks_on_two_gloo_ranks_equal_the_reference(tmp_path):
    """Pieces of parameters cut by the shard boundary: |w|^2 and |u|^2 summed over ranks."""
    fused = functools.partial(train_scenario, **HOOKS)  # a scenario of ours, pickled to the ranks
    results = launch(2, ["after_allreduce", "fused"], tmp_path / "w2", extra={"fused": fused})
    assert_params_close(
        agreed(results, "fused"),
        agreed(results, "after_allreduce"),
        "2 ranks, fused hooks",
        dict(rtol=0, atol=0),
    )


# ---- CPU: configuration ----------------------------------------------------------------------
def test_fused_kernel_needs_the_sharded_optimizer():
    assert not OptimConfig().fused_kernel
    with pytest.raises(ConfigError, match="optim.sharded"):
        OptimConfig(fused_kernel=True)
    OptimConfig(fused_kernel=True, sharded=True)


@pytest.mark.parametrize("fused", [False, True])
def test_build_optimizer_plugs_in_the_fused_hooks(fused):
    cfg = load_config(None, ["optim.sharded=true", f"optim.fused_kernel={fused}"])
    opt = build_optimizer(
        make_model(), cfg.optim, cfg.schedule, False, DistContext(0, 1, 0, torch.device("cpu"))
    )
    expected = HOOKS if fused else REFERENCE
    assert {name: getattr(opt.optimizer, name) for name in expected} == expected


def test_fused_hooks_fail_at_build_on_cuda_without_the_extension(monkeypatch, tmp_path):
    monkeypatch.setenv(_loader.ENV_LIB, str(tmp_path / "missing.so"))
    monkeypatch.delenv(_loader.ENV_JIT, raising=False)
    monkeypatch.setattr(_loader, "_loaded", False)
    monkeypatch.setattr(_loader, "_error", None)
    with pytest.raises(RuntimeError, match="fused kernel 'lamb' was requested"):
        shard_math(LAMB_MATH, True, torch.device("cuda"))
    assert shard_math(LAMB_MATH, True, torch.device("cpu")) == HOOKS
    assert shard_math(LAMB_MATH, False, torch.device("cuda")) == REFERENCE


@pytest.mark.slow  # in the default suite and CI; out of the quick subset (README)
def test_benchmark_runs_on_cpu(tmp_path):
    """Smoke run of scripts/bench/bench_lamb.py at a tiny size; checks the JSON record."""
    out = tmp_path / "bench_lamb.json"
    script = TESTS.parent / "scripts" / "bench" / "bench_lamb.py"
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            "--device",
            "cpu",
            "--tiny",
            "--warmup",
            "1",
            "--iters",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert {"device", "date", "commit", "command", "results"} <= set(record)
    assert {(r["world"], r["param_dtype"]) for r in record["results"]} == {
        (1, "fp32"),
        (8, "fp32"),
        (1, "fp16"),
        (8, "fp16"),
    }
    for row in record["results"]:
        assert row["torch_eager_ms"] > 0 and row["fused_ms"] > 0 and row["elements"] > 0
        # The compiled reference is timed, or why it could not be is recorded.
        assert row.get("torch_compile_ms", 0) > 0 or row["torch_compile_error"]


# ---- GPU --------------------------------------------------------------------------------------
def bert_large_shard(world: int, rank: int, dtype: torch.dtype) -> ref.ShardBuffers:
    groups = bert_large_param_groups(DECAYS[0])
    shapes = [p.shape for g in groups for p in g["params"]]
    group_of = [i for i, g in enumerate(groups) for _ in g["params"]]
    return random_shard(shapes, group_of, DECAYS, world, rank, dtype, "cuda")


def assert_state_close(actual: ref.ShardBuffers, expected: ref.ShardBuffers, what: str) -> None:
    """fp32 rounding, measured against each buffer's largest magnitude: the kernels contract
    multiply-adds (FMA) where the reference rounds twice, and sum the norms in another order
    (the trust ratio moves in its 6th-7th digit). That moves an element by an ulp or two of its
    largest term, which is more than its own ulps where the terms cancel."""
    for key in STATE:
        want, got = getattr(expected, key), getattr(actual, key)
        if want is None:
            continue
        # A w close to a 16-bit rounding boundary may round either way in the model copy.
        rtol = 1e-6 if want.dtype == torch.float32 else torch.finfo(want.dtype).eps
        torch.testing.assert_close(
            got.float(),
            want.float(),
            rtol=rtol,
            atol=1e-6 * want.abs().max().item(),
            msg=lambda m: f"{what}: {key}: {m}",
        )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("world, rank", [(1, 0), (8, 0), (8, 5)])
def test_kernels_match_reference_on_bert_large(cuda_kernels, world, rank, dtype):
    shard = bert_large_shard(world, rank, dtype)
    expected, actual = copy.deepcopy(shard), copy.deepcopy(shard)
    sums, fused_sums = ref.reference_sums(expected, True), ref.fused_sums(actual, True)
    torch.testing.assert_close(fused_sums, sums, rtol=1e-5, atol=0)
    inputs = step_inputs(shard, sums, coef=0.25, ok=torch.tensor(True, device="cuda"))
    ref.reference_update(expected, inputs, no_reduce)
    ref.fused_update(actual, inputs, no_reduce)
    assert_state_close(actual, expected, f"world {world} rank {rank} {dtype}")


@pytest.mark.gpu
def test_update_direction_and_norms_match_reference(cuda_kernels):
    """Stage (b) alone: u itself and |u|^2 per parameter (after the full step, u is scratch)."""
    shard = bert_large_shard(8, 2, torch.float32)
    expected, actual = copy.deepcopy(shard), copy.deepcopy(shard)
    inputs = step_inputs(shard, ref.reference_sums(shard, True), coef=0.25)
    tensor_ref.update_direction(
        expected.grad,
        expected.exp_avg,
        expected.exp_avg_sq,
        expected.update,
        expected.groups,
        inputs.coef,
        None,
        inputs.bc1,
        inputs.bc2,
        BETAS,
        EPS,
    )
    u_sq = tensor_ref.sum_squares(
        expected.groups, "update", shard.num_params, expected.update.device
    )
    fused_u_sq = torch.zeros_like(u_sq)
    torch.ops.bert_kernels.lamb_update(
        actual.grad,
        actual.master,
        actual.exp_avg,
        actual.exp_avg_sq,
        actual.update,
        actual.segments,
        DECAYS,
        inputs.coef,
        None,
        inputs.bc1,
        inputs.bc2,
        *BETAS,
        EPS,
        fused_u_sq,
    )
    # A few fp32 ulps of the direction's scale: u = m/(sqrt(v)+eps) + wd*w cancels to near zero
    # in places, where the kernel's and torch's roundings differ by more than any rtol allows
    # (the 2026-11-26 window: 6e-8 against atol 1e-12 on 2786 of 42M elements).
    ulps = 4 * torch.finfo(torch.float32).eps * expected.update.abs().max().item()
    torch.testing.assert_close(actual.update, expected.update, rtol=1e-5, atol=ulps)
    torch.testing.assert_close(fused_u_sq, u_sq, rtol=1e-5, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("align", [1, 3, 128])
def test_kernels_match_reference_on_odd_segments(cuda_kernels, align):
    """Unaligned starts and ends (align 1, 3), 1-element and tiny pieces, several per tile."""
    for world, rank in ((1, 0), (3, 2)):
        shard = make_shard(torch.float16, "cuda", world, rank, align)
        for trust_ratio in (True, False):
            (expected, sums), (actual, fused_sums) = reference_and_fused_step(
                shard, ok=torch.tensor(True, device="cuda"), trust_ratio=trust_ratio
            )
            torch.testing.assert_close(fused_sums, sums, rtol=1e-5, atol=0)
            assert_state_close(actual, expected, f"align {align}, {world} ranks, {trust_ratio}")


@pytest.mark.gpu
def test_overflow_skip_and_determinism_on_gpu(cuda_kernels):
    shard = bert_large_shard(8, 1, torch.float16)
    sums = ref.fused_sums(shard, True)
    assert torch.equal(sums, ref.fused_sums(shard, True))  # fixed reduction order
    shard.grad[shard.segments[3, 0]] = float("inf")
    sums = ref.fused_sums(shard, True)
    assert not torch.isfinite(sums[0])
    before = copy.deepcopy(shard)
    inputs = step_inputs(shard, sums, coef=0.0, ok=torch.tensor(False, device="cuda"))
    ref.fused_update(shard, inputs, no_reduce)
    for key in ("master", "exp_avg", "exp_avg_sq"):
        assert torch.equal(getattr(shard, key), getattr(before, key)), key
    assert torch.equal(shard.model, before.master.half())


@pytest.mark.gpu
def test_sharded_optimizer_on_cuda_with_fused_hooks(cuda_kernels):
    """The tiny BERT on the GPU for 10 steps: fused hooks vs the reference path."""
    finals = []
    for hooks in ({}, HOOKS):
        model = make_model().cuda()
        opt = make_opt(model, **hooks)
        for k in range(STEPS):
            opt.zero_grad()
            loss_of(model, local_batch(k, 0, 1).to("cuda")).backward()
            opt.step()
        finals.append(params_of(model))
    assert_params_close(finals[1], finals[0], "cuda, fused hooks", dict(rtol=1e-5, atol=1e-6))


@pytest.mark.gpu
def test_bindings_reject_bad_inputs(cuda_kernels):
    shard = make_shard(torch.float32, "cuda")
    sums = torch.zeros(1 + len(SHAPES), device="cuda")
    raw = torch.ops.bert_kernels_cuda.lamb_sums
    with pytest.raises(RuntimeError, match="segments must be a CUDA tensor"):
        raw(shard.grad, shard.master, shard.segments.cpu(), DECAYS, sums)
    with pytest.raises(RuntimeError, match="segments must be int64"):
        raw(shard.grad, shard.master, shard.segments.int(), DECAYS, sums)
    with pytest.raises(RuntimeError, match="master must be float32"):
        raw(shard.grad, shard.master.double(), shard.segments, DECAYS, sums)
    with pytest.raises(RuntimeError, match="16-byte aligned"):
        raw(shard.grad[1:], shard.master[1:], shard.segments, DECAYS, sums)
    with pytest.raises(RuntimeError, match="param groups"):
        raw(shard.grad, shard.master, shard.segments, [0.01] * 9, sums)
    with pytest.raises(RuntimeError, match="w_sq and u_sq"):
        torch.ops.bert_kernels_cuda.lamb_apply(
            shard.master,
            shard.update,
            shard.segments,
            DECAYS,
            torch.ones(2, device="cuda"),
            None,
            sums[1:],
            None,
            None,
        )
