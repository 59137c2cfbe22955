"""Candidates for a cluster: for each RCP global batch, the micro-batch that fits, the RCP
hyperparameters, memory per GPU, step time and predicted time to train; fastest first."""

from __future__ import annotations

from dataclasses import dataclass, field

from bert.core.inputs import check_float
from bert.model.config import ModelConfig
from bert.mlperf import rcp
from bert.model import flops
from bert.plan import memory, network, published_hyper, scale, timing
from bert.core.gpus import GPUKind
from bert.train.config import mlperf_eval_interval

GIB = memory.GIB


class PlanError(ValueError):
    """Input the planner cannot use (exit status 2); the message names it."""


@dataclass(frozen=True)
class Cluster:
    gpus: int
    gpus_per_node: int
    kind: GPUKind

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise PlanError(f"--gpus {self.gpus}: need at least one GPU")
        if self.gpus_per_node < 1 or self.gpus % self.gpus_per_node:
            raise PlanError(f"--gpus-per-node {self.gpus_per_node}: must divide --gpus {self.gpus}")

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node

    @property
    def link_gbs(self) -> float:
        """The slowest link of the gradient ring: NVLink in one node, else the network."""
        return self.kind.nvlink_gbs if self.nodes == 1 else self.kind.network_gbs


@dataclass(frozen=True)
class Assumptions:
    precision: str = "bf16"
    sharded: bool = False  # optim.sharded
    efficiency: float | None = None  # None: implied by the kind's throughput_basis()
    init_minutes: float = 3.0  # initialization (not scored), assumption
    eval_batch: int = 128  # eval.batch_size
    eval_samples: int = 10_000
    max_micro_batch: int = 256
    calibrate: tuple | None = None  # (gpus, samples/s per GPU[, local batch]); None: published
    sharp: bool = False  # in-network reduction between NVLink domains
    nics_per_node: int | None = None  # the network: NICs per node and their Gb/s (None: the
    nic_gbps: float | None = None  # kind's datasheet value per GPU)

    def __post_init__(self) -> None:
        # the planner's own check, for callers other than the CLI (whose parser checks too)
        check_float(self.init_minutes, "--init-minutes", PlanError, low=0.0, inclusive=True)
        if self.efficiency is not None:
            check_float(self.efficiency, "--efficiency", PlanError, low=0.0)
        if self.nic_gbps is not None:
            check_float(self.nic_gbps, "--nic-gbps", PlanError, low=0.0)
        if self.nics_per_node is not None and self.nics_per_node < 1:
            raise PlanError(f"--nics-per-node {self.nics_per_node}: must be >= 1")


@dataclass
class Candidate:
    global_batch_size: int
    micro_batch: int | None  # None: nothing fits
    accumulation: int | None
    hyper: rcp.Plan
    memory: memory.Memory | None
    step: timing.StepTime | None = None
    train: timing.TimeToTrain | None = None
    train_low: timing.TimeToTrain | None = None
    train_high: timing.TimeToTrain | None = None
    notes: list = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.micro_batch is not None

    @property
    def samples_per_s(self) -> float:
        return self.global_batch_size / self.step.step_s


@dataclass(frozen=True)
class ScaleRates:
    """The scale model's inputs (scale.py): the calibrated R and the cluster's topology."""

    peak: float
    topology: scale.Topology
    source: str
    efficiency: float = 0.0
    link_gbs: float = 0.0


def topology(
    kind: GPUKind,
    gpus: int,
    gpus_per_node: int,
    sharp: bool = False,
    network_gbs: float | None = None,
) -> scale.Topology:
    """The scale model's topology of `gpus` GPUs of `kind`: its NVLink domain is the kind's (an
    NVL72 rack) or else one node; the network per GPU is `network_gbs` where the cluster's NICs
    are known, else the kind's datasheet value."""
    domain = kind.nvlink_domain or gpus_per_node
    net = kind.network_gbs if network_gbs is None else network_gbs
    return scale.Topology(gpus, domain, kind.nvlink_gbs, net, sharp)


def row_topology(kind: GPUKind, row: dict) -> scale.Topology:
    """The topology a published result ran on: its kind's NVLink, and its own NICs and SHARP
    where its submission records them (bert/plan/network.py)."""
    per_node = row["gpus_per_node"]
    args = network.topology_args(scale.row_id(row), per_node)
    return topology(kind, row["gpus"], per_node, **args)


def cluster_network_gbs(a: Assumptions, gpus_per_node: int, kind: GPUKind) -> float | None:
    """Per-GPU network GB/s from --nics-per-node and --nic-gbps (either alone: the other is one
    NIC per GPU, or the kind's rate); None when neither is given."""
    if a.nics_per_node is None and a.nic_gbps is None:
        return None
    nics = a.nics_per_node or gpus_per_node
    rate = a.nic_gbps or kind.network_gbs * 8
    return network.per_gpu_gbs(nics, rate, gpus_per_node)


def scale_rates(cluster: Cluster, cfg: ModelConfig, a: Assumptions) -> ScaleRates | None:
    kind = cluster.kind
    params = memory.parameter_count(cfg)
    net = cluster_network_gbs(a, cluster.gpus_per_node, kind)
    try:
        if a.calibrate is not None:
            gpus, rate, *rest = a.calibrate
            # 96: the per-GPU batch of the published 8-GPU results (768 over 8)
            local = rest[0] if rest else 96.0
            point = scale.Point(gpus, rate, local, "given (--calibrate)")
            per_node = min(gpus, cluster.gpus_per_node)
            topo = topology(kind, gpus, per_node, a.sharp, net)
            peak = scale.calibrate(point.samples_per_s, point.local_batch, params, topo)
        elif kind.calibration:
            point, peak, _ = scale.published_point(
                kind.calibration,
                params,
                lambda row: row_topology(kind, row),
            )
        else:
            return None
    except ValueError as err:
        given = "--calibrate" if a.calibrate is not None else f"--gpu {kind.name}"
        raise PlanError(f"{given}: {err}") from None
    source = (
        f"calibrated at {point.gpus} GPUs, {point.samples_per_s:.1f} samples/s per GPU, "
        f"local batch {point.local_batch:g}: {point.source}"
    )
    cluster_topo = topology(kind, cluster.gpus, cluster.gpus_per_node, a.sharp, net)
    return ScaleRates(peak, cluster_topo, source, link_gbs=cluster.link_gbs)


def default_rates(cluster: Cluster, cfg: ModelConfig, assumptions: Assumptions):
    efficiency = assumptions.efficiency
    if efficiency is None:
        found = scale_rates(cluster, cfg, assumptions)
        if found is not None:
            return found
        per_gpu, _ = cluster.kind.throughput_basis()
        if not per_gpu:
            raise PlanError(
                f"--gpu {cluster.kind.name}: no published result to calibrate on; give "
                f"--calibrate GPUS:SAMPLES_PER_S_PER_GPU (a measured point), or --efficiency "
                f"(e.g. 0.3) for the FLOP model"
            )
        efficiency = timing.implied_efficiency(
            per_gpu, flops.training_flops(cfg, flops.LengthMix.mlperf()), cluster.kind.bf16_tflops
        )
    if not 0 < efficiency <= 1:
        raise PlanError(f"--efficiency {efficiency}: must be in (0, 1]")
    link = cluster.link_gbs
    net = cluster_network_gbs(assumptions, cluster.gpus_per_node, cluster.kind)
    if net is not None and cluster.nodes > 1:  # the FLOP model's ring crosses the given NICs
        link = net
    return timing.Rates(cluster.kind.bf16_tflops, efficiency, link)


def candidate_batches(cluster: Cluster, target: int | None) -> list[int]:
    if target is not None:
        if target < 1 or target % cluster.gpus:
            raise PlanError(
                f"--batch {target}: not a multiple of the {cluster.gpus} GPUs, so no "
                f"micro-batch divides it evenly"
            )
        return [target]
    batches = sorted({r.global_batch_size for r in rcp.table()} | set(published_hyper.published()))
    return [b for b in batches if b % cluster.gpus == 0]


def plan(
    cluster: Cluster, cfg: ModelConfig, assumptions: Assumptions, target: int | None = None
) -> tuple[list[Candidate], timing.Rates]:
    """Every candidate, the fastest fitting one first (then the ones that do not fit)."""
    rates = default_rates(cluster, cfg, assumptions)
    found = []
    for gbs in candidate_batches(cluster, target):
        try:
            hyper = rcp.plan_for(gbs, published_hyper.published())
        except rcp.RCPError as err:
            if target is not None:
                raise PlanError(f"--batch {target}: {err}") from None
            continue
        found.append(_candidate(cluster, cfg, assumptions, rates, hyper))
    if not found:
        raise PlanError(
            f"--gpus {cluster.gpus}: no RCP global batch is a multiple of the GPU "
            f"count; give --batch"
        )
    found.sort(key=lambda c: (not c.fits, c.train.score_min if c.fits else 0.0))
    return found, rates


def _candidate(
    cluster: Cluster, cfg: ModelConfig, a: Assumptions, rates: timing.Rates, hyper: rcp.Plan
) -> Candidate:
    local = hyper.global_batch_size // cluster.gpus
    capacity = cluster.kind.memory_gib * GIB
    micro, mem = None, None
    for size in sorted((d for d in range(1, local + 1) if local % d == 0), reverse=True):
        if size > a.max_micro_batch:
            continue
        mem = memory.estimate(cfg, a.precision, size, cluster.gpus, a.sharded, a.eval_batch)
        if mem.total(worst=True) <= capacity:
            micro = size
            break
    if micro is None:
        return Candidate(
            hyper.global_batch_size,
            None,
            None,
            hyper,
            mem,
            notes=["does not fit even one sequence per micro-batch"],
        )
    accumulation = local // micro
    per_sample = flops.training_flops(cfg, flops.LengthMix.mlperf())
    params = memory.parameter_count(cfg)
    interval = mlperf_eval_interval(hyper.global_batch_size)
    if isinstance(rates, ScaleRates):
        one = scale.step(local, params, rates.topology, rates.peak)
        step = timing.StepTime(one.compute_s, one.communication_s, one.exposed_s)
        throughput = hyper.global_batch_size / step.step_s
        one_eval = scale.eval_seconds(a.eval_samples, cluster.gpus, rates.peak)

        def train(samples: float) -> timing.TimeToTrain:
            evals = max(1, -(-int(samples) // interval))
            return timing.TimeToTrain(samples / throughput, evals, evals * one_eval)

    else:
        step = timing.step_time(
            local, accumulation, per_sample, params, cluster.gpus, a.sharded, rates
        )
        throughput = hyper.global_batch_size / step.step_s

        def train(samples: float) -> timing.TimeToTrain:
            return timing.time_to_train(
                samples, throughput, interval, a.eval_samples, cluster.gpus, per_sample / 3, rates
            )

    return Candidate(
        hyper.global_batch_size,
        micro,
        accumulation,
        hyper,
        mem,
        step,
        train(hyper.samples_mean),
        train(hyper.samples_low),
        train(hyper.samples_high),
    )
