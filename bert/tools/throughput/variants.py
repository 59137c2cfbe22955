"""The training steps bench_throughput.py compares, each a full step on its own model copy.

A variant owns a model, a LAMB optimizer (bert.optim, same hyperparameters everywhere) and a
`step(i)` that trains on batch i of the shared workload: zero_grad, forward (under autocast
for bf16), loss, backward, optimizer step. All variants start from the same weights (the HF
model's random init, loaded into ours through bert/model/weights.py).

- ours:  this project's unpadded BertForPretraining on packed tokens; options pick the
         attention backend (bert/model/attention.py), whether every fused kernel valid for the
         model (model.fused_*, as `admissible_fused_flags` rules) is on, whether the model is
         torch.compile'd, and whether forward and backward replay as CUDA graphs
         (run.cuda_graphs: graphed.py).
- hf:    HuggingFace BertForPreTraining on padded batches, SDPA attention, HF's own MLM + NSP
         loss (logits over every padded position, as HF computes it), eager or compiled.

The optimizer is the same LAMB math for every variant; `optimizer` picks its implementation for
ours: `lamb` (bert.optim.LAMB, torch's foreach ops per tensor; also HF's), `sharded`
(ShardedOptimizer, the same math on flat buffers, optim.sharded) or `fusedlamb` (its CUDA
kernels, optim.fused_kernel). On one H100 (2026-11-26) the foreach LAMB step took about a fifth
of BERT-Large's training step.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch
from torch.profiler import record_function

from bert.model import BertForPretraining
from bert.model import fused as ops
from bert.model.weights import load_into_model
from bert.optim import LAMB, param_groups
from bert.optim.registry import OPTIMIZERS, shard_math
from bert.optim.sharded import ShardedOptimizer
from bert.tools.throughput.graphed import backend_for, graph_buckets, graphed_training_step
from bert.tools.throughput.workload import MAX_PREDICTIONS, Workload, hf_config, model_config

LR = 1e-4  # any constant: the learning rate does not change the work of a step
WEIGHT_DECAY = 0.01
OPTIMIZER_KINDS = ("lamb", "sharded", "fusedlamb")


@dataclass
class Variant:
    name: str
    options: dict
    step: Callable[[int], None]  # one training step on batch i (mod the number of batches)
    # Drops the gradients between timed blocks (outside them). Each step already sets them to
    # None before its backward, so the timed steps are unchanged; what changes is what a variant
    # keeps while the others run: BERT-Large's fp32 gradients are 1.4 GB a variant, and the
    # window's one throughput process holds seven variants beside HF eager's ~39 GB transient
    # (2026-11-28 throughput_eager.json: peak 44.3 GB, resident 5.4 GB).
    release: Callable[[], None] = lambda: None
    # Counts the variant keeps while it runs, reported with its figures (the graphed variants'
    # graph_captures, graph_replays, graph_fallbacks); read when the JSON is written.
    counters: Callable[[], dict] = dict


def autocast_for(device: torch.device, precision: str, cache: bool = True):
    """A context factory: autocast to bf16, or nothing for fp32. cache=False: without the
    cast cache, which a CUDA graph would keep reading after the weights changed."""
    if precision == "fp32":
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache)


def init_state(size: str, seed: int) -> dict[str, torch.Tensor]:
    """One random HF-format state dict that every variant starts from (on the CPU)."""
    import transformers

    torch.manual_seed(seed)
    model = transformers.BertForPreTraining(hf_config(model_config(size)))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def make_optimizer(
    model: torch.nn.Module, kind: str, device: torch.device
) -> torch.optim.Optimizer:
    """LAMB (lr LR, weight decay WEIGHT_DECAY, the other hyperparameters at their defaults) in
    one of OPTIMIZER_KINDS. `fusedlamb` raises RuntimeError when its kernels are not built."""
    groups = param_groups(model, WEIGHT_DECAY)
    if kind == "lamb":
        return LAMB(groups, lr=LR)
    if kind not in OPTIMIZER_KINDS:
        raise ValueError(f"optimizer {kind!r}: expected one of {OPTIMIZER_KINDS}")
    spec = OPTIMIZERS["lamb"].sharded
    return ShardedOptimizer(
        groups,
        lr=LR,
        weight_decay=WEIGHT_DECAY,
        trust_ratio=spec.weight_norms,
        **shard_math(spec, kind == "fusedlamb", device),
    )


def training_step(
    model: torch.nn.Module, loss_of: Callable[[int], torch.Tensor], optimizer_kind: str = "lamb"
) -> tuple[Callable[[int], None], Callable[[], None]]:
    """Step i of a variant: loss_of(i), backward, a LAMB step, each phase named for the
    profile (the same optimizer math and phases for every variant); and the release of its
    gradients (Variant.release)."""
    device = next(model.parameters()).device
    optimizer = make_optimizer(model, optimizer_kind, device)

    def step(i: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        with record_function("bench::forward"):
            loss = loss_of(i)
        with record_function("bench::backward"):
            loss.backward()
        with record_function("bench::optimizer"):
            optimizer.step()

    def release() -> None:
        optimizer.zero_grad(set_to_none=True)

    return step, release


def build_ours(
    size: str,
    attention: str,
    compiled: bool,
    state: dict,
    workload: Workload,
    device: torch.device,
    precision: str,
    name: str,
    fused: bool = False,
    subset: bool = False,
    sublayers: bool = False,
    optimizer: str = "lamb",
    fp8: bool = False,
    graphs: bool = False,
) -> Variant:
    """The unpadded model with the given attention backend, optionally with every fused kernel
    valid for it (with fp8, those that do not replace its GEMMs), its encoder GEMMs in FP8
    (model.fp8_linear), the last layer on [CLS] and masked tokens only
    (model.last_layer_subset), its sublayers torch.compile'd (model.compile_sublayers), the
    whole model torch.compile'd, and forward and backward replayed as CUDA graphs (graphed.py;
    the combinations graphs refuse are never built: settings.graphs_refusal).
    A fused kernel that cannot be loaded raises here (RuntimeError)."""
    cfg = dataclasses.replace(
        model_config(size, attention), last_layer_subset=subset, compile_sublayers=sublayers
    )
    if fp8:  # FP8 replaces the encoder GEMMs fused_dense would: the rule leaves those out
        cfg = dataclasses.replace(cfg, fp8_linear=True)
    flags = ops.admissible_fused_flags(cfg) if fused else []
    if flags:
        cfg = dataclasses.replace(cfg, **{flag: True for flag in flags})
    model = BertForPretraining(cfg, device=device)
    load_into_model(model, dict(state), source="benchmark init")
    model.to(device).train()
    runner = torch.compile(model) if compiled else model
    autocast = autocast_for(device, precision, cache=not graphs)
    batches = workload.packed

    def forward_loss(batch) -> torch.Tensor:
        with autocast():
            mlm_logits, nsp_logits = runner(batch)
        mlm, nsp = model.loss(mlm_logits, nsp_logits, batch)
        return mlm + nsp

    counters = dict
    if graphs:
        # the same tensors without the host layouts only other variants read (length groups,
        # the query subset), which the static buffers do not pad
        plain = [dataclasses.replace(b, groups=None, query_subset=None) for b in batches]
        step, counters = graphed_training_step(
            model,
            forward_loss,
            plain,
            make_optimizer(model, optimizer, device),
            graph_buckets(workload.batch_size, workload.max_length, MAX_PREDICTIONS),
            backend_for(device),
        )
        release = keep_gradients
    else:
        step, release = training_step(
            model, lambda i: forward_loss(batches[i % len(batches)]), optimizer
        )
    options = {
        "model": "unpadded BertForPretraining",
        "attention": attention,
        "compile": compiled,
        "fused": fused,
        "fused_flags": flags,
        "last_layer_subset": subset,
        "compile_sublayers": sublayers,
        "fp8_linear": fp8,
        "optimizer": optimizer,
        "precision": precision,
        "cuda_graphs": graphs_mode(graphs, device),
    }
    return Variant(name, options, step, release, counters)


def keep_gradients() -> None:
    """A graphed variant's release: its graphs add into the gradients' fixed addresses, so
    they stay allocated between timed blocks."""


def graphs_mode(graphs: bool, device: torch.device) -> str | bool:
    """What the JSON says of a variant's graphs: False, or how they ran."""
    if not graphs:
        return False
    if device.type == "cuda":
        return "captured (torch.cuda.CUDAGraph)"
    return f"emulated: no CUDA graphs on {device.type}, every replay runs eagerly (EagerBackend)"


def build_hf(
    size: str,
    compiled: bool,
    state: dict,
    workload: Workload,
    device: torch.device,
    precision: str,
    name: str,
) -> Variant:
    """HF BertForPreTraining on the padded batches (same weights, optimizer and precision)."""
    import transformers

    model = transformers.BertForPreTraining(hf_config(model_config(size)))
    model.load_state_dict(state)
    model.to(device).train()
    runner = torch.compile(model) if compiled else model
    autocast = autocast_for(device, precision)
    batches = workload.padded

    def loss_of(i: int) -> torch.Tensor:
        with autocast():
            return runner(**batches[i % len(batches)]).loss

    step, release = training_step(model, loss_of)
    options = {
        "model": "transformers BertForPreTraining (padded)",
        "attention": model.config._attn_implementation,
        "compile": compiled,
        "precision": precision,
        "padding": workload.padding,
        "transformers": transformers.__version__,
    }
    return Variant(name, options, step, release)
