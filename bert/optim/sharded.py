"""ZeRO-2 over flat buffers: sharded fp32 state, bucketed gradient reduction, param all-gather.

The data-parallel replacement for `DistributedDataParallel + LAMB` (REFERENCE.md section 5, what
NVIDIA's apex DistributedFusedLAMB does; [Zeng] IV-C-2 for the contiguous buffers):

1. The model's parameters and gradients are views into flat per-dtype buffers (`flat.py`).
2. Backward: a post-accumulate-grad hook per parameter counts down its bucket; a complete bucket
   (and every bucket before it, so all ranks issue collectives in the same order) is reduced at
   once, asynchronously, so communication overlaps the rest of backward. Rank r keeps chunk r:
   `reduce_scatter_tensor` on NCCL; gloo (older PyTorch has no reduce-scatter there) all-reduces
   the bucket and keeps its slice. Gradients are averaged by pre-dividing by the world size.
3. `step()` waits for the reductions, then updates only this rank's shard: fp32 master weights and
   LAMB moments exist for 1/W of the model. Trust ratios need per-tensor norms of tensors cut by
   shard boundaries, so each rank sums squares per tensor over its pieces and one small
   all-reduce of the (n_params,) vector completes them.
4. The updated shard is all-gathered per bucket straight into the model's flat parameter buffer.

Clipping (`clip_mode`, threshold c = max_grad_norm):
- "after_allreduce": clip the averaged gradient by its global norm. Exact MLPerf LAMB semantics
  (equals single-process `LAMB` on the whole batch). Overlaps with backward.
- "before_allreduce": each rank clips its local gradient by its local norm, then averages (the
  one-node MLPerf runs). Needs the whole local gradient first, so nothing overlaps backward.
- "bucketwise": [Kim]: each bucket is clipped to c / sqrt(B) (B buckets) on each rank as soon
  as it is complete, then reduced. Overlaps like "after_allreduce".

Multi-node layout: `shard_group` (e.g. the GPUs of one node) splits the optimizer state and does
the reduce-scatter / all-gather over fast links; `replica_group` (the ranks holding the same shard
on the other nodes) all-reduces each reduced shard chunk. Every replica then applies the identical
update to its identical shard. Default: the whole `process_group` is one shard group.

Nothing in `step()` reads a device value on the host: clip factor, loss scale, overflow flag,
step counter, bias corrections and lr are device tensors; an fp16 overflow is skipped by masking.
The shard math (`shard_update.py`: `reference_sums`, `reference_update`, `_foreach` ops) is the
default, unfused path; the fused CUDA kernels of kernels/lamb.py (norms, moments and update,
apply, in five launches) plug in as `sums_fn` and `update_fn` (`fused_sums`, `fused_update`).
They compile but are not yet validated on a GPU (kernels/VALIDATION.md), so the trainer uses
them only with `optim.fused_kernel=true`.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterable, Iterator, Optional, Union

import torch
from torch import Tensor

from bert.core.ranges import named
from bert.optim.collectives import ShardComm
from bert.optim.flat import Bucket, FlatLayout, FlatParams
from bert.optim.lamb import LambHparams, _clip_coef, closure_loss
from bert.optim.loss_scale import DynamicLossScaler
from bert.optim.shard_update import (
    LR,
    ShardBuffers,
    StepInputs,
    SumsFn,
    UpdateFn,
    build_shard,
    reference_sums,
    reference_update,
)

CLIP_MODES = ("after_allreduce", "before_allreduce", "bucketwise")
STATE_KEYS = ("master", "exp_avg", "exp_avg_sq")


# ----------------------------------------------------------------------------- optimizer


class ShardedOptimizer(torch.optim.Optimizer):
    """Sharded (ZeRO-2) LAMB or AdamW with bucketed, overlapped gradient reduction.

    The update is LAMB's (with `trust_ratio`) or AdamW's, computed by the reference `_foreach`
    math unless fused kernels are plugged in (`sums_fn`, `update_fn`).

    Args (as `LAMB`): params or param groups (a group may override lr and weight_decay; betas and
    eps must be the same in all groups) and, by name, `LambHparams`' fields (lr, betas, eps,
    weight_decay, max_grad_norm).
    Keyword args:
        process_group: ranks that average gradients (default: the whole world). Without an
            initialized process group the optimizer runs single-process.
        shard_group / replica_group: node-local sharding plus cross-node reduction (module doc);
            default: shard over the whole process group.
        bucket_cap_mb: gradient bucket size (MiB); align: element alignment of shard chunks.
        clip_mode: "after_allreduce" | "before_allreduce" | "bucketwise" (module doc).
        overlap: reduce buckets from backward hooks; False reduces everything in `step()`.
        trust_ratio: True for LAMB; False for AdamW (open division only).
        loss_scaler: a `DynamicLossScaler` for fp16 (None for fp32 / bf16).
        lr_schedule: optional `f(step, base_lr) -> lr` evaluated on the device step counter
            (updates applied so far, 0-based), e.g. `functools.partial(lr_at, total_steps=...,
            warmup_steps=...)`; base_lr is each group's `initial_lr`. None: use group["lr"].
        sums_fn / update_fn: replace `reference_sums` / `reference_update` (same signatures),
            e.g. with the fused kernels' `fused_sums` / `fused_update` (shard_update.py).
        tensor_collectives: use reduce_scatter_tensor / all_gather_into_tensor (default: on
            NCCL only; gloo uses all_reduce + slice and all_gather into a list).

    The model's parameters become views into `self.flat`: move the model to its device (and load
    any initial weights) first, and use this optimizer's `zero_grad()`. Unlike `LAMB`, which
    skips a parameter without a gradient, a parameter that got none this step is updated with a
    zero gradient (as apex does): the flat buffer has no "missing" state. After `step()`,
    `last_grad_norm` holds the norm of
    the averaged (unscaled) gradient before any after-all-reduce clipping, `step_count` the
    number of applied updates; both are 0-dim device tensors.
    """

    def __init__(
        self,
        params: Iterable,
        *,
        process_group=None,
        shard_group=None,
        replica_group=None,
        bucket_cap_mb: float = 25.0,
        align: int = 128,
        clip_mode: str = "after_allreduce",
        overlap: bool = True,
        trust_ratio: bool = True,
        loss_scaler: Optional[DynamicLossScaler] = None,
        lr_schedule: Optional[Callable[[Tensor, float], Tensor]] = None,
        sums_fn: Optional[SumsFn] = None,
        update_fn: Optional[UpdateFn] = None,
        tensor_collectives: Optional[bool] = None,
        **hparams: Any,
    ):
        hp = LambHparams(**hparams)
        if clip_mode not in CLIP_MODES:
            raise ValueError(f"clip_mode must be one of {CLIP_MODES} (got {clip_mode!r})")
        super().__init__(params, hp.group_defaults())
        self.max_grad_norm, self.clip_mode = float(hp.max_grad_norm), clip_mode
        self.trust_ratio = trust_ratio
        self.loss_scaler, self.lr_schedule = loss_scaler, lr_schedule
        self.sums_fn: SumsFn = sums_fn or reference_sums
        self.update_fn: UpdateFn = update_fn or reference_update
        plist = self._check_groups()
        self._comm = ShardComm(process_group, shard_group, replica_group, tensor_collectives)
        self.layout = FlatLayout(
            [(p.shape, p.dtype) for p in plist],
            self._comm.shard_world,
            int(bucket_cap_mb * 2**20),
            align,
        )
        self.flat = FlatParams(plist, self.layout)
        for buffer in self.flat.params.values():
            self._comm.broadcast(buffer)
        self._shards = self._build_shards(plist)
        device = plist[0].device
        self.step_count = torch.zeros((), dtype=torch.int64, device=device)
        self.last_grad_norm = torch.zeros((), dtype=torch.float32, device=device)
        self._inv_scale = loss_scaler.inv_scale() if loss_scaler else None
        self._bucket_of = [slot.bucket for slot in self.layout.slots]
        self._sync, self._hooks, self._local_coef = True, [], None
        self._reset_reduction()
        if overlap and clip_mode != "before_allreduce":
            self._hooks = [
                p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(plist)
            ]

    # -- construction -------------------------------------------------------------------------

    def _check_groups(self) -> list[torch.nn.Parameter]:
        first = self.param_groups[0]
        for group in self.param_groups:
            if group["betas"] != first["betas"] or group["eps"] != first["eps"]:
                raise ValueError("ShardedOptimizer needs the same betas and eps in all groups")
            if self.lr_schedule is not None:
                group.setdefault("initial_lr", float(group["lr"]))  # host read: init only
        plist = [p for group in self.param_groups for p in group["params"]]
        if not plist or not all(p.requires_grad for p in plist):
            raise ValueError("ShardedOptimizer needs parameters, all with requires_grad")
        return plist

    def _build_shards(self, plist: list) -> dict[torch.dtype, ShardBuffers]:
        group_of = [g for g, group in enumerate(self.param_groups) for _ in group["params"]]
        decays = [group["weight_decay"] for group in self.param_groups]
        segments = self.layout.segments(self._comm.shard_rank)
        alias = self._comm.shard_world == 1
        return {
            dtype: build_shard(
                self.layout,
                self.flat,
                dtype,
                segments[dtype],
                group_of,
                decays,
                self._comm.shard_rank,
                alias,
            )
            for dtype in self.layout.dtypes
        }

    def add_param_group(self, param_group: dict) -> None:
        if hasattr(self, "flat"):
            raise RuntimeError("ShardedOptimizer: parameters are fixed at construction")
        super().add_param_group(param_group)

    # -- gradient reduction (runs inside backward) -----------------------------------------

    def _hook(self, index: int) -> Callable[[Tensor], None]:
        return lambda _param: self._grad_ready(index)

    @torch.no_grad()
    def _grad_ready(self, index: int) -> None:
        """Backward finished accumulating parameter `index`: count down, launch what is ready."""
        if not self._sync:
            return
        if self._seen[index]:
            raise RuntimeError(
                "gradient accumulated twice in one step: run all but the last "
                "micro-batch under optimizer.no_sync()"
            )
        self._seen[index] = True
        self._pending[self._bucket_of[index]] -= 1
        self._launch_ready(force=False)

    def _launch_ready(self, force: bool) -> None:
        """Launches complete buckets in bucket order (all ranks must issue the same sequence)."""
        buckets = self.layout.buckets
        while self._next < len(buckets) and (force or self._pending[self._next] == 0):
            self._launch(buckets[self._next])
            self._next += 1

    def _launch(self, bucket: Bucket) -> None:
        grads = self.flat.bucket(self.flat.grads, bucket)
        factor = self._pre_reduce_factor(grads)
        if factor is not None:
            grads.mul_(factor)
        shard = self._shards[bucket.dtype]
        out = shard.grad[bucket.shard_start : bucket.shard_start + bucket.chunk]
        self._finishers.append(self._comm.reduce_scatter(grads, out))

    def _pre_reduce_factor(self, grads: Tensor) -> Optional[Union[float, Tensor]]:
        """1 / world (to average), times this rank's clip factor in the before-reduce modes."""
        average = 1.0 / self._comm.world
        if self.clip_mode == "before_allreduce" and self.max_grad_norm > 0:
            return self._local_coef * average
        if self.clip_mode == "bucketwise" and self.max_grad_norm > 0:
            threshold = self.max_grad_norm / math.sqrt(len(self.layout.buckets))
            return _clip_coef(self._unscaled_norm([grads]), threshold) * average
        return average if self._comm.world > 1 else None

    def _unscaled_norm(self, tensors: list[Tensor]) -> Tensor:
        """Global L2 norm (fp32, ()) of loss-scaled tensors, divided by the loss scale."""
        norms = torch.stack([torch.linalg.vector_norm(t, dtype=torch.float32) for t in tensors])
        norm = torch.linalg.vector_norm(norms)
        return norm if self._inv_scale is None else norm * self._inv_scale

    def _finish_reduction(self) -> None:
        """Launches what backward did not, waits for all of it; the shards then hold the grads."""
        if self.clip_mode == "before_allreduce" and self.max_grad_norm > 0:
            local = self._unscaled_norm(list(self.flat.grads.values()))
            self._local_coef = _clip_coef(local, self.max_grad_norm)
        self._launch_ready(force=True)
        for finish in self._finishers:
            finish()
        self._reset_reduction()

    def _reset_reduction(self) -> None:
        self._pending = [len(bucket.params) for bucket in self.layout.buckets]
        self._seen = [False] * len(self.layout.slots)
        self._next, self._finishers = 0, []

    @property
    def launched_buckets(self) -> int:
        """Buckets whose reduction has started since the last step (host counter, no sync)."""
        return self._next

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Gradient accumulation: backward passes inside only accumulate, like DDP.no_sync()."""
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zeroes the flat gradient buffer. Gradients are never set to None (they are views)."""
        self.flat.zero_grad()

    # -- the step ------------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Tensor]] = None) -> Optional[Tensor]:
        loss = closure_loss(closure)
        with named("exchange"):  # profiler ranges (bert/core/ranges.py): free when off
            self._finish_reduction()
        inputs = self._step_inputs()
        for shard in self._shards.values():
            self.update_fn(shard, inputs, self._comm.all_reduce_sum)
        self._advance(inputs.ok)
        with named("exchange"):
            self._gather_params()
        return loss

    def _step_inputs(self) -> StepInputs:
        grad_sq, w_sq = self._global_sums()
        norm = grad_sq.sqrt()
        if self._inv_scale is not None:
            norm = norm * self._inv_scale
        self.last_grad_norm = norm
        clip = self.clip_mode == "after_allreduce"
        coef = _clip_coef(norm, self.max_grad_norm) if clip else torch.ones_like(norm)
        if self._inv_scale is not None:
            coef = coef * self._inv_scale
        ok = torch.isfinite(norm) if self.loss_scaler is not None else None
        beta1, beta2 = self.param_groups[0]["betas"]
        t = (self.step_count + 1).to(torch.float64)  # fp64: 1 - 0.999^t loses digits in fp32
        return StepInputs(
            coef,
            ok,
            1.0 - torch.pow(beta1, t),
            1.0 - torch.pow(beta2, t),
            self._lrs(),
            w_sq,
            (beta1, beta2),
            self.param_groups[0]["eps"],
        )

    def _global_sums(self) -> tuple[Tensor, Optional[Tensor]]:
        """|reduced grad|^2 and, for LAMB, |w|^2 per parameter: one all-reduce for both.

        A non-finite gradient anywhere makes the first entry inf/nan on every rank, which is
        the overflow flag every rank agrees on.
        """
        sums = sum(self.sums_fn(s, self.trust_ratio) for s in self._shards.values())
        sums = self._comm.all_reduce_sum(sums)
        return sums[0], (sums[1:] if self.trust_ratio else None)

    def _lrs(self) -> list[LR]:
        if self.lr_schedule is None:
            return [group["lr"] for group in self.param_groups]
        return [
            self.lr_schedule(self.step_count, group["initial_lr"]) for group in self.param_groups
        ]

    def _advance(self, ok: Optional[Tensor]) -> None:
        """Step counter and loss scale, on the device."""
        if ok is None:
            self.step_count.add_(1)
            return
        self.step_count.add_(ok.to(self.step_count.dtype))
        self.loss_scaler.update(~ok)
        self._inv_scale = self.loss_scaler.inv_scale()

    def _gather_params(self) -> None:
        """All-gathers every bucket's updated chunks into the model's flat parameter buffer."""
        sources = {
            dtype: shard.master if shard.model is None else shard.model
            for dtype, shard in self._shards.items()
        }
        waits = []
        for bucket in self.layout.buckets:
            chunk = sources[bucket.dtype][bucket.shard_start : bucket.shard_start + bucket.chunk]
            waits.append(self._comm.all_gather(self.flat.bucket(self.flat.params, bucket), chunk))
        for wait in waits:
            wait()

    @property
    def skipped_steps(self) -> Tensor:
        """Steps skipped for overflow, () int64 on the device (0 without a loss scaler)."""
        if self.loss_scaler is None:
            return torch.zeros_like(self.step_count)
        return self.loss_scaler.skipped

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Full, unsharded state, the same on every rank; a collective: call it on all ranks.

        Format (independent of world size and bucket layout): "state"[i] holds fp32 CPU tensors
        "master", "exp_avg", "exp_avg_sq" shaped like parameter i (optimizer order);
        "param_groups" as torch.optim (params as indices); "step" (applied updates);
        "loss_scaler". Rank 0 saves it; any world size can load it. Costs a full fp32 copy of
        the three states in host memory on every rank (gathered with all_gather for simplicity).
        """
        full = {key: self._unshard(key) for key in STATE_KEYS}
        state = {i: {key: full[key][i] for key in STATE_KEYS} for i in range(len(self._bucket_of))}
        groups, start = [], 0
        for group in self.param_groups:
            saved = {
                k: (v.detach().cpu().clone() if isinstance(v, Tensor) else v)
                for k, v in group.items()
                if k != "params"
            }
            saved["params"] = list(range(start, start + len(group["params"])))
            start += len(group["params"])
            groups.append(saved)
        scaler = self.loss_scaler.state_dict() if self.loss_scaler else None
        return {
            "state": state,
            "param_groups": groups,
            "step": self.step_count.cpu().clone(),
            "loss_scaler": scaler,
        }

    def _unshard(self, key: str) -> list[Tensor]:
        """Per parameter, the full fp32 tensor of state `key` gathered from every shard."""
        out: list[Optional[Tensor]] = [None] * len(self._bucket_of)
        for dtype, shard in self._shards.items():
            pieces = [t.cpu() for t in self._comm.gather_shards(getattr(shard, key))]
            flat = self.layout.unshard(dtype, pieces)
            for slot in self.layout.slots:
                if slot.dtype == dtype:
                    out[slot.index] = self.layout.param_view(flat, slot.index).clone()
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a `state_dict()` saved at any world size; also sets the model's parameters.

        Each rank copies its own pieces out of the full tensors (no communication). Tensor lrs
        are written in place, so a schedule holding them keeps working.
        """
        self._load_groups(state_dict["param_groups"])
        saved = state_dict["state"]
        segments = self.layout.segments(self._comm.shard_rank)
        for dtype, shard in self._shards.items():
            for seg in segments[dtype]:
                for key in STATE_KEYS:
                    source = saved[seg.index][key].reshape(-1)
                    getattr(shard, key)[seg.shard_start : seg.shard_start + seg.length].copy_(
                        source[seg.param_start : seg.param_start + seg.length]
                    )
        for slot in self.layout.slots:
            self.layout.param_view(self.flat.params[slot.dtype], slot.index).copy_(
                saved[slot.index]["master"].view(slot.shape)
            )
        self.step_count.copy_(state_dict["step"])
        if self.loss_scaler is not None and state_dict.get("loss_scaler") is not None:
            self.loss_scaler.load_state_dict(state_dict["loss_scaler"])
            self._inv_scale = self.loss_scaler.inv_scale()

    def _load_groups(self, saved_groups: list[dict]) -> None:
        sizes = [len(g["params"]) for g in self.param_groups]
        if sizes != [len(g["params"]) for g in saved_groups]:
            raise ValueError(
                f"checkpoint param groups {[len(g['params']) for g in saved_groups]}"
                f" do not match the optimizer's {sizes}"
            )
        for group, saved in zip(self.param_groups, saved_groups):
            for key, value in saved.items():
                if key == "params":
                    continue
                if key == "lr" and isinstance(group["lr"], Tensor):
                    group["lr"].copy_(torch.as_tensor(value))
                else:
                    group[key] = value
