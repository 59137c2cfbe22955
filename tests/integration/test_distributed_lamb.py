"""ShardedOptimizer: flat layout, loss scaler, single-process parity, and 1/2/4 gloo ranks.

Oracles: the single-process `bert.optim.LAMB` (checked against a float64 reference in
test_lamb.py) fed the averaged gradient of the ranks' data slices. For the clip modes that change
the gradient before the all-reduce, the test clips each rank's gradient itself (by its global
norm for "before_allreduce"; each bucket to c / sqrt(B) for "bucketwise", [Kim] Algorithm 1)
and runs LAMB without clipping on the average. "adam" is checked against torch.optim.AdamW.

Every sample has exactly one masked token, so the pretraining loss (token-weighted MLM + NSP) is
a per-sample mean and the average of equal slices' gradients is the whole batch's gradient, for
any number of ranks. Multi-process tests spawn gloo ranks once per world size and run several
scenarios in each (process start-up dominates their cost).
The bench (the tiny BERT, its batches, the gloo ranks and their scenarios) is
tests/sharded_lamb.py, shared with the fused LAMB's tests.
"""

from __future__ import annotations

import copy
import functools
import math

import pytest
import torch

from bert.optim import LAMB, DynamicLossScaler, ShardedOptimizer, lr_at, param_groups
from bert.optim.flat import FlatLayout

from sharded_lamb import (
    BETAS,
    CAP_MB,
    EPS,
    LR,
    MAX_NORM,
    STEPS,
    WD,
    agreed,
    assert_params_close,
    launch,
    local_batch,
    loss_of,
    lr_schedule_of,
    make_model,
    make_opt,
    params_of,
    run_local,
)

# AdamW rounds differently (sqrt(v) / sqrt(bc2) vs sqrt(v / bc2)). The attention key bias has a
# zero true gradient (softmax ignores it), so its gradient is rounding noise that follows the
# weights chaotically and that Adam's per-element scaling blows up to ~1e-5 differences.
ADAM_TOL = dict(rtol=1e-4, atol=2e-5)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny ops are far faster on one thread, and the CI machine has only 2 cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------- references


def names_in_order(model: torch.nn.Module) -> list[str]:
    """Parameter names in optimizer order (param_groups order)."""
    return [name for group in param_groups(model, WD) for name in group["names"]]


def rank_grads(model, step: int, world: int) -> list[dict[str, torch.Tensor]]:
    """Each rank's local gradient at the model's current weights."""
    out = []
    for rank in range(world):
        model.zero_grad(set_to_none=True)
        loss_of(model, local_batch(step, rank, world)).backward()
        out.append({n: p.grad.clone() for n, p in model.named_parameters()})
    return out


def clip_(grads: dict, names: list[str], threshold: float) -> bool:
    """Clips grads[names] to L2 norm `threshold` in place; True if it had to."""
    norm = math.sqrt(sum(float(grads[n].double().square().sum()) for n in names))
    if norm > threshold:
        for n in names:
            grads[n].mul_(threshold / norm)
    return norm > threshold


def reference_run(mode: str, world: int, buckets=None, lr_of=lambda k: LR, steps=STEPS):
    """Final weights of single-process LAMB (or AdamW) on the averaged, mode-clipped gradients."""
    model = make_model()
    names = names_in_order(model)
    if mode == "adam":
        opt = torch.optim.AdamW(
            [
                {"params": g["params"], "weight_decay": g["weight_decay"]}
                for g in param_groups(model, WD)
            ],
            lr=LR,
            betas=BETAS,
            eps=EPS,
        )
    else:
        clip_norm = MAX_NORM if mode == "after_allreduce" else 0.0
        opt = LAMB(
            param_groups(model, WD),
            lr=LR,
            betas=BETAS,
            eps=EPS,
            weight_decay=WD,
            max_grad_norm=clip_norm,
        )
    clipped = []
    for k in range(steps):
        per_rank = rank_grads(model, k, world)
        for grads in per_rank:
            if mode == "before_allreduce":
                clipped.append(clip_(grads, names, MAX_NORM))
            if mode == "bucketwise":
                clipped += [
                    clip_(grads, [names[i] for i in bucket], MAX_NORM / math.sqrt(len(buckets)))
                    for bucket in buckets
                ]
        for name, p in model.named_parameters():
            p.grad = sum(g[name] for g in per_rank) / world
        if mode == "adam":
            clipped.append(clip_({n: p.grad for n, p in model.named_parameters()}, names, MAX_NORM))
        for group in opt.param_groups:
            group["lr"] = lr_of(k)
        opt.step()
    if mode != "after_allreduce":
        assert any(clipped), f"{mode}: the test data never triggers clipping"
    return params_of(model)


# ----------------------------------------------------------------------------- layout

SPECS = [
    ((7, 5), torch.float32),
    ((300,), torch.float32),
    ((3,), torch.float16),
    ((64, 40), torch.float32),
    ((1,), torch.float32),
    ((129,), torch.float16),
    ((2, 2, 2), torch.float32),
]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_layout_is_aligned_and_shards_cover_each_param_once(world):
    layout = FlatLayout(SPECS, world, bucket_cap_bytes=2048, align=16)
    for slot in layout.slots:
        assert slot.start % 16 == 0 and slot.numel == math.prod(SPECS[slot.index][0])
    for bucket in layout.buckets:
        assert bucket.size % (world * 16) == 0 and bucket.start % (world * 16) == 0
        assert all(layout.slots[i].dtype == bucket.dtype for i in bucket.params)
    for dtype, numel in layout.numel.items():
        assert numel % world == 0 and layout.shard_numel[dtype] * world == numel
    covered = {i: torch.zeros(slot.numel, dtype=torch.int64) for i, slot in enumerate(layout.slots)}
    for rank in range(world):
        for segments in layout.segments(rank).values():
            for seg in segments:
                covered[seg.index][seg.param_start : seg.param_start + seg.length] += 1
    assert all(bool((c == 1).all()) for c in covered.values())


def test_buckets_fill_in_reverse_parameter_order():
    layout = FlatLayout(SPECS, 2, bucket_cap_bytes=2048, align=16)
    fp32 = [b.params for b in layout.buckets if b.dtype == torch.float32]
    assert fp32[0][0] == len(SPECS) - 1  # the last parameter's gradient is ready first
    flat_order = [i for members in fp32 for i in members]
    assert flat_order == sorted(flat_order, reverse=True)
    # (64, 40) fp32 = 10 KB exceeds the 2 KB cap: it closes a bucket with itself as last member.
    assert any(members[-1] == 3 for members in fp32)


def test_unshard_inverts_sharding():
    world = 4
    layout = FlatLayout(SPECS, world, bucket_cap_bytes=2048, align=8)
    for dtype, numel in layout.numel.items():
        flat = torch.randn(numel).to(dtype)
        shards = [torch.zeros(layout.shard_numel[dtype], dtype=dtype) for _ in range(world)]
        for bucket in (b for b in layout.buckets if b.dtype == dtype):
            for rank in range(world):
                lo = bucket.chunk_start(rank)
                shards[rank][bucket.shard_start : bucket.shard_start + bucket.chunk] = flat[
                    lo : lo + bucket.chunk
                ]
        assert torch.equal(layout.unshard(dtype, shards), flat)


# ----------------------------------------------------------------------------- one process


def test_params_and_grads_are_views_into_flat_buffers():
    model = make_model()
    opt = make_opt(model)
    params, grads = opt.flat.params[torch.float32], opt.flat.grads[torch.float32]
    for p in model.parameters():
        assert p.untyped_storage().data_ptr() == params.untyped_storage().data_ptr()
        assert p.grad.untyped_storage().data_ptr() == grads.untyped_storage().data_ptr()
    loss_of(model, local_batch(0, 0, 1)).backward()
    assert float(grads.abs().sum()) > 0  # backward wrote straight into the flat buffer
    model.zero_grad(set_to_none=True)  # detaches the views ...
    opt.zero_grad()  # ... which the optimizer re-attaches, zeroed
    assert float(grads.abs().sum()) == 0
    assert model.embeddings.word_embeddings.weight.grad.data_ptr() >= grads.data_ptr()


@pytest.mark.parametrize("mode", ["after_allreduce", "bucketwise", "before_allreduce"])
def test_buckets_are_reduced_during_backward(mode):
    """Overlap: hooks start every bucket's reduction before step(); not under no_sync()."""
    model = make_model()
    opt = make_opt(model, clip_mode=mode)
    with opt.no_sync():
        loss_of(model, local_batch(0, 0, 1, 0, 2)).backward()
    assert opt.launched_buckets == 0
    loss_of(model, local_batch(0, 0, 1, 1, 2)).backward()
    # Before-all-reduce clipping needs the whole local gradient first: nothing can overlap.
    expected = 0 if mode == "before_allreduce" else len(opt.layout.buckets)
    assert opt.launched_buckets == expected
    opt.step()
    assert opt.launched_buckets == 0


def test_second_backward_without_no_sync_is_an_error():
    model = make_model()
    make_opt(model)  # its hooks are what refuses the second backward
    loss_of(model, local_batch(0, 0, 1)).backward()
    with pytest.raises(RuntimeError, match="no_sync"):
        loss_of(model, local_batch(1, 0, 1)).backward()


def test_four_rank_layout_cuts_parameters_across_shards():
    """So the 4-rank runs check trust ratios whose norms span several ranks."""
    model = make_model()
    params = [p for g in param_groups(model, WD) for p in g["params"]]
    layout = FlatLayout([(p.shape, p.dtype) for p in params], 4, int(CAP_MB * 2**20))
    owners: dict[int, set[int]] = {}
    for rank in range(4):
        for seg in layout.segments(rank)[torch.float32]:
            owners.setdefault(seg.index, set()).add(rank)
    assert sum(len(ranks) > 1 for ranks in owners.values()) >= 3


@pytest.mark.parametrize("scaled", [False, True])
def test_single_process_matches_lamb(scaled):
    """No process group: one rank, hooks and all. A power-of-2 loss scale changes nothing."""
    model = make_model()
    scaler = DynamicLossScaler(init_scale=1024.0) if scaled else None
    opt = make_opt(model, loss_scaler=scaler)
    run_local(opt, model, range(STEPS), scaler)
    assert_params_close(params_of(model), reference_run("after_allreduce", 1), "1 process")
    assert int(opt.step_count) == STEPS


def test_state_dict_round_trip_resumes_bit_identically():
    model_a = make_model()
    opt_a = make_opt(model_a, lr=torch.tensor(LR))
    run_local(opt_a, model_a, range(4))
    saved = copy.deepcopy(opt_a.state_dict())
    run_local(opt_a, model_a, range(4, 7))

    model_b = make_model(seed=123)  # everything must come from the checkpoint
    lr_b = torch.tensor(0.0)
    opt_b = make_opt(model_b, lr=lr_b)
    opt_b.load_state_dict(saved)
    assert opt_b.param_groups[0]["lr"] is lr_b and float(lr_b) == pytest.approx(LR)
    for key, value in opt_b.state_dict()["state"][5].items():
        assert torch.equal(value, saved["state"][5][key])
    run_local(opt_b, model_b, range(4, 7))
    for a, b in zip(model_a.parameters(), model_b.parameters()):
        assert torch.equal(a, b)


def fp16_linear() -> tuple[torch.nn.Module, ShardedOptimizer, DynamicLossScaler]:
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 5).half()
    scaler = DynamicLossScaler(init_scale=256.0, growth_interval=3)
    opt = ShardedOptimizer(param_groups(model, WD), lr=0.1, loss_scaler=scaler)
    return model, opt, scaler


def test_fp16_overflow_skips_the_step_and_backs_off():
    model, opt, scaler = fp16_linear()
    before = params_of(model)
    moments = [s.exp_avg.clone() for s in opt._shards.values()]
    for p in model.parameters():
        p.grad.copy_(torch.randn_like(p))
    model.weight.grad[0, 0] = float("inf")
    opt.step()
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    assert all(torch.equal(s.exp_avg, m) for s, m in zip(opt._shards.values(), moments))
    assert int(opt.step_count) == 0 and scaler.skipped_steps() == 1
    assert float(scaler.scale) == 128.0 and not torch.isfinite(opt.last_grad_norm)

    opt.zero_grad()
    for p in model.parameters():
        p.grad.copy_(torch.randn_like(p) * 128)
    opt.step()
    assert not torch.equal(model.weight, before["weight"])
    assert int(opt.step_count) == 1 and scaler.skipped_steps() == 1
    master = next(iter(opt._shards.values())).master  # fp32 master, model holds its fp16 copy
    assert master.dtype == torch.float32 and model.weight.dtype == torch.float16


def test_loss_scale_grows_after_a_streak_and_backs_off():
    scaler = DynamicLossScaler(init_scale=8.0, growth_interval=3)
    good, bad = torch.tensor(False), torch.tensor(True)
    trace = []
    for flag in [good, good, good, good, bad, good, good, good]:
        scaler.update(flag)
        trace.append(float(scaler.scale))
    assert trace == [8, 8, 16, 16, 8, 8, 8, 16]
    assert scaler.skipped_steps() == 1
    assert float(scaler.scale_loss(torch.tensor(0.5))) == 8.0
    restored = DynamicLossScaler()
    restored.load_state_dict(scaler.state_dict())
    assert float(restored.scale) == 16.0 and int(restored.good_steps) == 0


def test_step_has_no_host_sync(monkeypatch):
    """No .item()/float()/bool() on tensors in backward hooks or step(): GPU syncs."""
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
    )
    scaler = DynamicLossScaler(init_scale=4.0)
    schedule = functools.partial(lr_at, total_steps=10, warmup_steps=2)
    opt = ShardedOptimizer(
        param_groups(model, WD),
        lr=0.1,
        bucket_cap_mb=0.001,
        clip_mode="bucketwise",
        loss_scaler=scaler,
        lr_schedule=schedule,
    )
    x = torch.randn(3, 8)

    def forbidden(*_args, **_kwargs):
        raise AssertionError("host read of a tensor value in the optimizer")

    for attr in ("item", "tolist", "__bool__", "__float__", "__int__"):
        monkeypatch.setattr(torch.Tensor, attr, forbidden)
    for _ in range(3):
        opt.zero_grad()
        scaler.scale_loss(model(x).square().mean()).backward()
        opt.step()
    monkeypatch.undo()
    assert int(opt.step_count) == 3 and len(opt.layout.buckets) > 1


def test_bad_arguments_are_rejected():
    model = make_model()
    with pytest.raises(ValueError, match="clip_mode"):
        make_opt(model, clip_mode="sometimes")
    groups = param_groups(make_model(), WD)
    groups[1]["betas"] = (0.8, 0.999)
    with pytest.raises(ValueError, match="betas"):
        ShardedOptimizer(groups, lr=LR, betas=BETAS)


# ----------------------------------------------------------------------------- gloo ranks


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[int, list[dict]]:
    base = tmp_path_factory.mktemp("distributed_lamb")
    out = {
        2: launch(
            2,
            ["after_allreduce", "after_tensor_accum", "before_allreduce", "bucketwise", "adam"],
            base / "w2",
        )
    }
    ckpt = str(base / "w2" / "ckpt.pt")
    out[1] = launch(1, ["after_allreduce", "resume"], base / "w1", ckpt)
    out[4] = launch(4, ["after_allreduce", "bucketwise", "two_by_two", "resume"], base / "w4", ckpt)
    return out


@pytest.fixture(scope="module")
def after_reference() -> dict:
    return reference_run("after_allreduce", 2)


@pytest.mark.distributed
@pytest.mark.parametrize("world", [1, 2, 4])
def test_after_allreduce_equals_lamb_on_the_whole_batch(runs, after_reference, world):
    assert_params_close(agreed(runs[world], "after_allreduce"), after_reference, f"{world} ranks")


@pytest.mark.distributed
def test_nccl_style_collectives_with_accumulation_equal_lamb(runs, after_reference):
    assert_params_close(agreed(runs[2], "after_tensor_accum"), after_reference, "tensor+accum")


@pytest.mark.distributed
def test_node_sharding_with_replicas_equals_lamb(runs, after_reference):
    assert_params_close(agreed(runs[4], "two_by_two"), after_reference, "2x2")


@pytest.mark.distributed
def test_before_allreduce_clips_each_rank_locally(runs):
    assert_params_close(
        agreed(runs[2], "before_allreduce"), reference_run("before_allreduce", 2), "before"
    )


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
def test_bucketwise_clips_each_bucket_to_c_over_sqrt_b(runs, world):
    buckets = runs[world][0]["bucketwise"]["buckets"]
    assert len(buckets) > 1
    expected = reference_run("bucketwise", world, buckets, lr_of=lr_schedule_of)
    assert_params_close(agreed(runs[world], "bucketwise"), expected, f"bucketwise {world}")


@pytest.mark.distributed
def test_adam_equals_adamw(runs):
    assert_params_close(agreed(runs[2], "adam"), reference_run("adam", 2), "adam", ADAM_TOL)


@pytest.mark.distributed
@pytest.mark.parametrize("world", [1, 4])
def test_checkpoint_from_2_ranks_loads_and_continues(runs, world):
    resumed = runs[world][0]["resume"]
    for i, state in resumed["saved"]["state"].items():
        for key, value in state.items():
            assert torch.equal(resumed["resaved"]["state"][i][key], value), (i, key)
    assert torch.equal(resumed["resaved"]["step"], resumed["saved"]["step"])
    assert int(resumed["saved"]["step"]) == 5
    assert_params_close(
        agreed(runs[world], "resume"), agreed(runs[2], "after_allreduce"), f"resume at {world}"
    )
