"""The sharded optimizer's test bench: a tiny BERT, its deterministic batches, and gloo ranks.

Used by tests/integration/test_distributed_lamb.py (the optimizer against single-process LAMB)
and tests/kernels/test_lamb_kernel.py (the fused hooks against the reference update).

- `make_model`, `make_opt`: the 2-layer, width-32 BERT and its ShardedOptimizer (~20 KB
  buckets, so the model gets 4 of them);
- `global_batch(step)`, `local_batch(step, rank, world, ...)`: GLOBAL_BATCH samples with one
  masked token each, so the loss is a per-sample mean and the average of equal slices'
  gradients is the whole batch's gradient for any number of ranks;
- `launch(world, names, out_dir)`: spawns `world` gloo ranks that each run the named
  SCENARIOS (plus the caller's `extra` ones) and returns every rank's results.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from datetime import timedelta
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bert.model import BertForPretraining, pretraining_loss
from bert.optim import ShardedOptimizer, lr_at, param_groups
from data.packing import Sample, pack_samples

from small_model import small_config

BETAS, EPS, WD, LR = (0.9, 0.999), 1e-6, 0.01, 0.02
MAX_NORM = 3.7  # the tiny model's gradient norms are ~3.5-7.5: clipping sometimes triggers
CAP_MB = 0.02  # ~20 KB buckets: the tiny BERT (25k parameters) gets 4 of them
STEPS, GLOBAL_BATCH, VOCAB = 10, 8, 64
TOL = dict(rtol=1e-5, atol=2e-6)  # fp32: the two sides differ only in summation order
# a scenario: (rank, world, out_dir, ckpt) -> what the rank saves
Scenario = Callable[[int, int, str, "str | None"], dict]


# ----------------------------------------------------------------------------- model and data


def make_model(seed: int = 0) -> BertForPretraining:
    torch.manual_seed(seed)
    return BertForPretraining(small_config(VOCAB, 32, hidden=32, heads=2, ffn=64))


def make_opt(model: torch.nn.Module, **kwargs) -> ShardedOptimizer:
    args = dict(
        lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, max_grad_norm=MAX_NORM, bucket_cap_mb=CAP_MB
    )
    args.update(kwargs)
    return ShardedOptimizer(param_groups(model, WD), **args)


def global_batch(step: int) -> list[Sample]:
    """GLOBAL_BATCH samples of 6-16 tokens, one masked token each (deterministic per step)."""
    rng = np.random.default_rng(1000 + step)
    samples = []
    for _ in range(GLOBAL_BATCH):
        n = int(rng.integers(6, 17))
        samples.append(
            Sample(
                rng.integers(5, VOCAB, n).astype(np.int16),
                (np.arange(n) >= n // 2).astype(np.int8),
                rng.integers(1, n - 1, 1).astype(np.int16),
                rng.integers(0, VOCAB, 1).astype(np.int16),
                int(rng.integers(0, 2)),
            )
        )
    return samples


def local_batch(step: int, rank: int, world: int, micro: int = 0, micros: int = 1):
    """Rank `rank`'s slice of the step's global batch, optionally one of `micros` parts of it."""
    size = GLOBAL_BATCH // (world * micros)
    start = (rank * micros + micro) * size
    return pack_samples(global_batch(step)[start : start + size]).to("cpu")


def loss_of(model: torch.nn.Module, batch) -> torch.Tensor:
    mlm, nsp = pretraining_loss(*model(batch), batch, VOCAB)
    return mlm + nsp


def params_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def assert_params_close(actual: dict, expected: dict, what: str, tol=TOL) -> None:
    for name, value in expected.items():
        torch.testing.assert_close(actual[name], value, **tol, msg=lambda m: f"{what}: {name}: {m}")


def run_local(opt, model, steps, scaler=None) -> None:
    """One process, no group: `steps` whole global batches."""
    for k in steps:
        opt.zero_grad()
        loss = loss_of(model, local_batch(k, 0, 1))
        (loss if scaler is None else scaler.scale_loss(loss)).backward()
        opt.step()


# ----------------------------------------------------------------------------- gloo ranks


def train_rank(rank: int, world: int, steps, accum: int = 1, model=None, opt=None, **opt_kwargs):
    """Trains on this rank's slices; returns (model, optimizer)."""
    if model is None:
        model = make_model()
        opt = make_opt(model, **opt_kwargs)
    for k in steps:
        opt.zero_grad()
        for micro in range(accum):
            last = micro == accum - 1
            with contextlib.nullcontext() if last else opt.no_sync():
                (loss_of(model, local_batch(k, rank, world, micro, accum)) / accum).backward()
        opt.step()
    return model, opt


def result_of(model, opt) -> dict:
    return {"params": params_of(model), "buckets": [list(b.params) for b in opt.layout.buckets]}


def train_scenario(rank: int, world: int, out_dir: str, ckpt, accum: int = 1, **opt_kwargs):
    """STEPS steps with these optimizer arguments (bind them with functools.partial)."""
    return result_of(*train_rank(rank, world, range(STEPS), accum=accum, **opt_kwargs))


def _scenario_after(rank, world, out_dir, ckpt):
    """After-all-reduce, gloo fallback collectives; rank 0 saves a checkpoint after 5 steps."""
    model, opt = train_rank(rank, world, range(5), tensor_collectives=False)
    state = opt.state_dict()  # a collective: every rank calls it
    if rank == 0 and ckpt is None:
        torch.save({"model": model.state_dict(), "opt": state}, Path(out_dir) / "ckpt.pt")
    train_rank(rank, world, range(5, STEPS), model=model, opt=opt)
    return result_of(model, opt)


def _scenario_resume(rank, world, out_dir, ckpt):
    """Loads the 2-rank checkpoint at this world size; re-saves it; trains steps 5..9."""
    saved = torch.load(ckpt)
    model = make_model(seed=123)
    opt = make_opt(model, lr=torch.tensor(0.0))
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    resaved = opt.state_dict()
    train_rank(rank, world, range(5, STEPS), model=model, opt=opt)
    return {"params": params_of(model), "resaved": resaved, "saved": saved["opt"]}


def _scenario_two_by_two(rank, world, out_dir, ckpt):
    """4 ranks as 2 'nodes' x 2: shard within {0,1} / {2,3}, replicas across {0,2} / {1,3}."""
    shard_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    replica_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    model, opt = train_rank(
        rank,
        world,
        range(STEPS),
        shard_group=shard_groups[rank // 2],
        replica_group=replica_groups[rank % 2],
    )
    return result_of(model, opt)


def lr_schedule_of(k):
    return lr_at(k, LR, total_steps=20, warmup_steps=3)


SCENARIOS: dict[str, Scenario] = {
    "after_allreduce": _scenario_after,
    "resume": _scenario_resume,
    "two_by_two": _scenario_two_by_two,
    # reduce_scatter_tensor / all_gather_into_tensor (the NCCL path) on gloo, 2 micro-batches
    "after_tensor_accum": functools.partial(train_scenario, accum=2, tensor_collectives=True),
    "before_allreduce": functools.partial(train_scenario, clip_mode="before_allreduce"),
    "bucketwise": functools.partial(
        train_scenario,
        clip_mode="bucketwise",
        lr_schedule=functools.partial(lr_at, total_steps=20, warmup_steps=3),
    ),
    "adam": functools.partial(train_scenario, trust_ratio=False, overlap=False),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out_dir: str, names: list[str], ckpt, extra) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=120),
    )
    scenarios = {**SCENARIOS, **extra}
    try:
        results = {name: scenarios[name](rank, world, out_dir, ckpt) for name in names}
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
        # No rank tears gloo down while a peer still talks to it: a CI run (2 cores) had one
        # rank abort in teardown ("terminate called without an active exception") after the
        # scenarios were done. Not after an error: the peers may be gone.
        dist.barrier()
    finally:
        dist.destroy_process_group()


def launch(
    world: int,
    names: list[str],
    out_dir: Path,
    ckpt=None,
    extra: dict[str, Scenario] | None = None,
) -> list[dict]:
    """Runs the scenarios `names` on `world` spawned gloo ranks; returns each rank's results.
    `extra` adds scenarios of the caller's: module-level functions or partials of them (they
    travel to the ranks pickled)."""
    out_dir.mkdir()
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # children inherit it; 4 ranks share 2 cores
    try:
        mp.start_processes(
            _worker,
            args=(world, _free_port(), str(out_dir), names, ckpt, extra or {}),
            nprocs=world,
            start_method="spawn",
            join=True,
        )
    finally:
        if previous is None:
            os.environ.pop("OMP_NUM_THREADS")
        else:
            os.environ["OMP_NUM_THREADS"] = previous
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(world)]


def agreed(results: list[dict], scenario: str) -> dict:
    """The scenario's final weights, after checking every rank holds the very same ones."""
    first = results[0][scenario]["params"]
    for other in results[1:]:
        assert all(torch.equal(first[n], other[scenario]["params"][n]) for n in first)
    return first
