"""The data pipeline's own config: where the data is, how batches are drawn, dealt and ordered.

`DataConfig` (the `data:` section of a run's YAML) with its sub-sections `synthetic:` and
`curriculum:`, and `BatchGeometry`, the per-rank batch sizes derived once from the run's global
batch and the world size. The root config (bert/config.py) composes these; the pipeline
(data/pipeline.py) takes a DataConfig and a BatchGeometry, nothing else of the run's config.
Every check raises `ConfigError` naming the key and the value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from bert.core.errors import ConfigError, check  # noqa: F401 - ConfigError: re-exported
from bert.core.settings import ExpandedPath, F, RegistryName, section
from data.order import curricula
from data.order.exp3s import TRAINED_REWARDS
from data.order.lengths import strata_edges
from data.order.strategies import STRATEGIES


# Names read from the registries when a config is validated (and listed by --help-config).
StrategyName = RegistryName(lambda: STRATEGIES)
CurriculumName = RegistryName(lambda: ("none", *curricula.CURRICULA))
RewardName = RegistryName(
    lambda: TRAINED_REWARDS,
    " (prediction_gain needs a second forward of every batch after the optimizer step, "
    "which the trainer does not run; docs/curriculum.md)",
)


@section("data.synthetic")
class SyntheticConfig:
    """Synthetic MLPerf-format data made on first use (the tiny CPU default run)."""

    enabled: bool = F(
        False,
        "train on synthetic data: with data.train_dir empty, made on first "
        "use in cache_dir; a data.train_dir that is set must already hold "
        "it (python -m data.synthetic --out DIR)",
    )
    num_shards: int = F(4, "training shards generated", gt=0)
    samples_per_shard: int = F(4096, "samples in each generated shard", gt=0)
    eval_samples: int = F(2000, "samples in the generated eval.hdf5", gt=0)
    seed: int = F(12345, "seed of the generated data (not of the run)", ge=0, lt=2**32)
    cache_dir: ExpandedPath = F(
        "~/.cache/open-bert/synthetic",
        "one subfolder per settings "
        "(never regenerated in place); a folder holding files this "
        "program did not write is refused",
        min_length=1,
    )


@section("data.curriculum")
class CurriculumConfig:
    """Length bucketing + a bucket-order curriculum ([Zhang], docs/curriculum.md), open
    division only. On: every step's batch comes from one length bucket, the same on every rank."""

    name: CurriculumName = F("none", "the order of the length buckets (none: off)")
    bucket_boundaries: list[int] = F(
        factory=list,
        doc="bucket upper edges, increasing, the "
        "last one data.max_seq_length; empty: [Kim]'s four "
        "strata scaled to max_seq_length (128,256,384,512 at 512), "
        "filled in when the config loads",
    )
    round_batches: int = F(100, "fixed orders: steps per round, split by bucket share", gt=0)
    loss_targets: list[float] = F(factory=lambda: [2.0], doc="loss_controlled: 1 or M")
    loss_window: int = F(10, "loss_controlled: steps averaged against the target", ge=1)
    max_batches: int = F(0, "loss_controlled: longest stay on one bucket; 0: no cap", ge=0)
    eta: float = F(0.1, "exp3s step size", gt=0)
    gamma: float = F(0.1, "exp3s exploration share", gt=0, le=1)
    alpha: float | Literal["1/t"] = F(0.01, "exp3s weight sharing: a number in [0, 1], or 1/t")
    reward: RewardName = F(
        "visit_gain",
        "exp3s reward: visit_gain (loss drop since the bucket's last "
        "batch); prediction_gain needs a second forward per step, "
        "which the trainer does not run",
    )

    @property
    def enabled(self) -> bool:
        return self.name != "none"

    def __post_init__(self) -> None:
        k = "data.curriculum"
        if not self.enabled:
            check(
                not self.bucket_boundaries,
                f"{k}.bucket_boundaries={self.bucket_boundaries}"
                f" needs a {k}.name (the order of the buckets; shuffled for a random one)",
            )
            return
        edges = self.bucket_boundaries
        check(
            not edges or edges[0] >= 1 and all(a < b for a, b in zip(edges, edges[1:])),
            f"{k}.bucket_boundaries={edges}: edges must be positive and strictly increasing",
        )
        check(
            self.loss_targets and min(self.loss_targets) > 0,
            f"{k}.loss_targets={self.loss_targets}: expected positive losses",
        )
        check(
            self.alpha == "1/t" or 0 <= self.alpha <= 1,
            f"{k}.alpha={self.alpha!r}: expected a number in [0, 1] or 1/t",
        )

    def resolve(self, max_seq_length: int) -> None:
        """Fill in the default boundaries (the one change a frozen section gets, while the
        config is built) and check them and the targets against them."""
        k = "data.curriculum"
        if not self.bucket_boundaries:
            edges = [int(e) for e in strata_edges(max_seq_length)[1:]]
            object.__setattr__(self, "bucket_boundaries", edges)
        edges = self.bucket_boundaries
        check(
            edges[-1] == max_seq_length,
            f"{k}.bucket_boundaries={edges}: the last edge must "
            f"equal data.max_seq_length={max_seq_length}",
        )
        check(
            self.round_batches >= len(edges),
            f"{k}.round_batches={self.round_batches} must be >= the {len(edges)} buckets",
        )
        check(
            len(self.loss_targets) in (1, len(edges)),
            f"{k}.loss_targets="
            f"{self.loss_targets}: expected one positive loss or {len(edges)} (one per bucket)",
        )


@section("data")
class DataConfig:
    """Where the MLPerf variable-length HDF5 data lives and how it is drawn and dealt."""

    train_dir: ExpandedPath = F("", "folder of part_*.hdf5 training shards")
    eval_file: ExpandedPath = F(
        "", "HDF5 eval file (10,000 samples for MLPerf); synthetic: the data's own"
    )
    max_seq_length: int = F(
        512, "longest sample, in tokens; longer ones are a data error", gt=1, le=32767
    )
    max_predictions_per_seq: int = F(76, "most masked positions per sample", gt=0, le=32767)
    balance: StrategyName = F(
        "none",
        "how samples are dealt to ranks (data/order/strategies.py; docs/balance_at_scale.md)",
    )
    ranks_per_node: int = F(
        0,
        "node size for the node-local strategies and node_swap's nodes; 0: LOCAL_WORLD_SIZE",
        ge=0,
    )
    prefetch_depth: int = F(2, "optimizer steps prepared ahead by the data thread", ge=1)
    synthetic: SyntheticConfig = F(factory=SyntheticConfig, doc="")
    curriculum: CurriculumConfig = F(factory=CurriculumConfig, doc="")

    def __post_init__(self) -> None:
        if self.curriculum.enabled:
            self._check_curriculum_source()
            self.curriculum.resolve(self.max_seq_length)

    def _check_curriculum_source(self) -> None:
        source = STRATEGIES[self.balance].source
        shards_only = [name for name, s in STRATEGIES.items() if s.source == "shards"]
        check(
            source == "shards",
            f"data.balance={self.balance} draws from the {source} source, "
            f"but data.curriculum.name={self.curriculum.name} draws every batch from one length "
            f"bucket; use data.balance {', '.join(shards_only[:-1])} or {shards_only[-1]}",
        )


@dataclass(frozen=True)
class BatchGeometry:
    """Per-rank batch sizes, derived once (`build`) from the global batch and the world size and
    passed down: the trainer, the data pipeline and the logs all read them from here."""

    world_size: int
    global_batch_size: int
    gradient_accumulation_steps: int

    @property
    def local_batch_size(self) -> int:
        """Samples one rank trains per optimizer step (all micro-batches)."""
        return self.global_batch_size // self.world_size

    @property
    def micro_batch_size(self) -> int:
        """Samples one rank feeds the model per forward/backward."""
        return self.local_batch_size // self.gradient_accumulation_steps

    def micro_batches(self, samples: list) -> list[list]:
        """A rank's local batch split into its `gradient_accumulation_steps` micro-batches."""
        micro = self.micro_batch_size
        return [
            samples[i * micro : (i + 1) * micro] for i in range(self.gradient_accumulation_steps)
        ]

    @classmethod
    def build(cls, batch, world_size: int) -> "BatchGeometry":
        """`batch`: the run config's global_batch_size and gradient_accumulation_steps."""
        gbs, accum = batch.global_batch_size, batch.gradient_accumulation_steps
        check(
            gbs % world_size == 0,
            f"run.global_batch_size={gbs} is not divisible by the world size {world_size}",
        )
        check(
            (gbs // world_size) % accum == 0,
            f"per-rank batch {gbs // world_size} (run.global_batch_size={gbs} / {world_size} "
            f"ranks) is not divisible by run.gradient_accumulation_steps={accum}",
        )
        return cls(world_size, gbs, accum)


class JobShape(Protocol):
    """What the data pipeline reads of the run shape (bert/train/run_shape.py, RunShape, one
    floor up), which derives both once from the config and the job's size."""

    @property
    def geometry(self) -> BatchGeometry: ...

    @property
    def ranks_per_node(self) -> int:  # the node size the node-local strategies deal within
        ...
