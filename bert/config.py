"""Typed, validated configuration for one training run.

One dataclass per component; every field has a default and a docstring-like comment that
`run_pretraining.py --help-config` prints. A run's config is built from a YAML file (sections
named like the dataclasses below) plus `--set section.key=value` overrides. Unknown keys and bad
values raise `ConfigError` naming the key and value.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

import yaml


# The attention backends of bert/attention.py (kept here so config imports no torch).
ATTENTION_BACKENDS = ("padded_sdpa", "per_sequence", "flash_varlen", "grouped_flash")
# The only hidden size the kernels in kernels/ are built for (kernels.reference.HIDDEN).
FUSED_HIDDEN_SIZE = 1024


class ConfigError(ValueError):
    """A configuration key or value that cannot be used; the message names it."""


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


@dataclass
class ModelConfig:
    """BERT architecture (the fields of a Google `bert_config.json`) and model-side switches."""

    vocab_size: int = 30522  # real vocabulary; the embedding is padded to a multiple of 8
    hidden_size: int = 1024
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    intermediate_size: int = 4096
    hidden_act: str = "gelu"  # gelu (erf) or gelu_tanh
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_vocab_to_multiple_of: int = 8
    # attention implementation: "padded_sdpa" (reference: pads inside attention only, exact,
    # CPU and GPU), "per_sequence" (CPU: one sequence at a time, no work on padding; reads the
    # lengths on the host, so not for CUDA), "flash_varlen" (CUDA fp16/bf16 flash kernel on
    # packed tokens) or "grouped_flash" (seed 000: sequences grouped by length, one launch per
    # group on its own CUDA stream; flash on CUDA fp16/bf16, padded SDPA per group elsewhere).
    # flash_varlen and grouped_flash are not yet validated on a GPU, so off by default.
    attention: str = "padded_sdpa"
    # Fused CUDA kernels (kernels/), each replacing a plain-PyTorch path. NOT yet validated on a
    # GPU (kernels/VALIDATION.md), so off by default. The first two are built for hidden size
    # 1024 only. On CUDA they need the compiled extension (checked when the model is built) and
    # fp16/bf16 activations (run.precision); on CPU their PyTorch twins run (kernels/reference.py).
    fused_bias_dropout_residual_layernorm: bool = False  # end of every attention/FFN sublayer
    fused_embedding_backward: bool = False  # word-embedding gradient with packed atomics
    fused_mlm_loss: bool = False  # MLM softmax cross-entropy, its gradient made in the forward
    # cuBLASLt dense layers (kernels/dense.py), the bias, GeLU and gradient reductions in the
    # GEMMs' epilogues. NOT yet validated on a GPU, so off by default. Any hidden size, but every
    # dense layer's input and output features must be multiples of 8 (checked here, on CPU too).
    # fused_dense: GEMM + bias as one GEMM (bias gradient inside the weight-gradient GEMM) for
    # QKV, attention output, FFN (unless fused_dense_gelu), MLM transform, decoder and pooler;
    # the residual's gradient is added inside the QKV/FFN data-gradient GEMM. Fits either GeLU.
    fused_dense: bool = False
    # fused_dense_gelu: GEMM + bias + GeLU as one GEMM, and GeLU' + bias gradient inside the next
    # data-gradient GEMM: FFN and MLM transform. cuBLASLt's GeLU is the tanh approximation, so it
    # needs hidden_act=gelu_tanh: open division / experimental (MLPerf's BERT uses erf gelu).
    fused_dense_gelu: bool = False
    bert_config_file: str = ""  # optional bert_config.json; its values replace the fields above

    def __post_init__(self) -> None:
        if self.bert_config_file:
            self._load_json(self.bert_config_file)
        _check(self.hidden_size % self.num_attention_heads == 0,
               f"model.hidden_size={self.hidden_size} is not divisible by "
               f"model.num_attention_heads={self.num_attention_heads}")
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size",
                     "pad_vocab_to_multiple_of"):
            _check(getattr(self, name) > 0, f"model.{name}={getattr(self, name)} must be > 0")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            _check(0.0 <= getattr(self, name) < 1.0,
                   f"model.{name}={getattr(self, name)} must be in [0, 1)")
        _check(self.hidden_act in ("gelu", "gelu_tanh"),
               f"model.hidden_act={self.hidden_act!r}: expected 'gelu' or 'gelu_tanh'")
        _check(self.attention in ATTENTION_BACKENDS,
               f"model.attention={self.attention!r}: expected one of {ATTENTION_BACKENDS}")
        self._check_fused_shapes()

    def _check_fused_shapes(self) -> None:
        """The kernels' shape limits hold on CPU too: their twins run the same checks."""
        for name in ("fused_bias_dropout_residual_layernorm", "fused_embedding_backward"):
            _check(not getattr(self, name) or self.hidden_size == FUSED_HIDDEN_SIZE,
                   f"model.{name}=true needs model.hidden_size={FUSED_HIDDEN_SIZE} (the kernel "
                   f"is built for BERT-Large only), got {self.hidden_size}")
        _check(not self.fused_mlm_loss or self.padded_vocab_size % 8 == 0,
               f"model.fused_mlm_loss=true needs the padded vocabulary to be a multiple of 8, "
               f"got {self.padded_vocab_size} (model.pad_vocab_to_multiple_of="
               f"{self.pad_vocab_to_multiple_of})")
        self._check_fused_dense()

    def _check_fused_dense(self) -> None:
        """cuBLASLt's dense epilogues (kernels.dense.FEATURE_MULTIPLE): in and out features of
        every fused GEMM a multiple of 8. The CPU twins do not need it; checked anyway, so that
        a config tested on the CPU also runs on a GPU."""
        _check(not self.fused_dense_gelu or self.hidden_act == "gelu_tanh",
               f"model.fused_dense_gelu=true needs model.hidden_act=gelu_tanh (cuBLASLt's GeLU "
               f"epilogue is the tanh approximation), got {self.hidden_act!r}; with erf gelu "
               f"(MLPerf's reference BERT) use model.fused_dense alone")
        multiple = 8
        for flag in ("fused_dense", "fused_dense_gelu"):
            if not getattr(self, flag):
                continue
            for name in ("hidden_size", "intermediate_size"):
                _check(getattr(self, name) % multiple == 0,
                       f"model.{flag}=true needs model.{name} to be a multiple of {multiple} "
                       f"(cuBLASLt GEMM features), got {getattr(self, name)}")
        _check(not self.fused_dense or self.padded_vocab_size % multiple == 0,
               f"model.fused_dense=true needs the padded vocabulary (the MLM decoder's output "
               f"features) to be a multiple of {multiple}, got {self.padded_vocab_size} "
               f"(model.pad_vocab_to_multiple_of={self.pad_vocab_to_multiple_of})")

    def _load_json(self, path: str) -> None:
        try:
            values = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ConfigError(f"model.bert_config_file={path!r}: cannot read ({err})") from None
        known = {f.name for f in dataclasses.fields(self)}
        for key, value in values.items():
            if key in known and key != "bert_config_file":
                setattr(self, key, value)

    @property
    def padded_vocab_size(self) -> int:
        m = self.pad_vocab_to_multiple_of
        return (self.vocab_size + m - 1) // m * m

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


@dataclass
class SyntheticConfig:
    """Synthetic MLPerf-format data made on first use (the tiny CPU default run)."""

    enabled: bool = False  # generate train/eval data under data.train_dir if it is missing
    num_shards: int = 4
    samples_per_shard: int = 4096
    eval_samples: int = 2000
    seed: int = 12345

    def __post_init__(self) -> None:
        for name in ("num_shards", "samples_per_shard", "eval_samples"):
            _check(getattr(self, name) > 0,
                   f"data.synthetic.{name}={getattr(self, name)} must be > 0")


@dataclass
class DataConfig:
    """Where the MLPerf variable-length HDF5 data lives and how it is shaped."""

    train_dir: str = ""  # folder of part_*.hdf5 training shards
    eval_file: str = ""  # HDF5 eval file (10,000 samples for MLPerf)
    max_seq_length: int = 512
    max_predictions_per_seq: int = 76
    # how samples are dealt to ranks (data/balance.py): none | global_presort | serpentine |
    # stratified | stratified_local_presort | stratified_local_snake
    balance: str = "none"
    ranks_per_node: int = 0  # node size for the stratified_local_* strategies; 0: LOCAL_WORLD_SIZE
    prefetch_depth: int = 2  # optimizer steps prepared ahead by the data thread
    # length bucketing + bucket-order curriculum (seed 002, docs/curriculum.md), open division
    # only: none (off) | shuffled | random | increasing | decreasing | loss_controlled | exp3s.
    # On: every step's batch comes from one length bucket, the same on every rank.
    curriculum: str = "none"
    # bucket upper edges, comma-separated and increasing, the last one max_seq_length;
    # "": seed 001's four strata scaled to max_seq_length (128,256,384,512 at 512)
    bucket_boundaries: str = ""
    curriculum_round_batches: int = 100  # fixed orders: steps per round, split by bucket share
    curriculum_loss_targets: str = "2.0"  # loss_controlled: one loss target, or one per bucket
    curriculum_loss_window: int = 10  # loss_controlled: steps averaged against the target
    curriculum_max_batches: int = 0  # loss_controlled: longest stay on one bucket; 0: no cap
    curriculum_eta: float = 0.1  # exp3s step size
    curriculum_gamma: float = 0.1  # exp3s exploration share
    curriculum_alpha: str = "0.01"  # exp3s weight sharing: a number in [0, 1], or 1/t
    # exp3s reward: visit_gain (loss drop since the bucket's last batch); prediction_gain
    # needs a second forward per step, which the trainer does not run
    curriculum_reward: str = "visit_gain"
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)

    def __post_init__(self) -> None:
        from data.balance import STRATEGIES  # the strategies' single source of truth

        _check(self.max_seq_length > 1, f"data.max_seq_length={self.max_seq_length} must be > 1")
        _check(self.max_predictions_per_seq > 0,
               f"data.max_predictions_per_seq={self.max_predictions_per_seq} must be > 0")
        _check(self.balance in STRATEGIES, f"data.balance={self.balance!r}: expected one of "
               f"{', '.join(STRATEGIES)}")
        _check(self.ranks_per_node >= 0,
               f"data.ranks_per_node={self.ranks_per_node} must be >= 0 (0: LOCAL_WORLD_SIZE)")
        _check(self.prefetch_depth >= 1,
               f"data.prefetch_depth={self.prefetch_depth} must be >= 1")
        self._check_curriculum()

    def _check_curriculum(self) -> None:
        from data.balance import STRATIFIED
        from data.curriculum import CURRICULA

        _check(self.curriculum in ("none", *CURRICULA), f"data.curriculum={self.curriculum!r}: "
               f"expected none or one of {', '.join(CURRICULA)}")
        if self.curriculum == "none":
            _check(not self.bucket_boundaries, f"data.bucket_boundaries="
                   f"{self.bucket_boundaries!r} needs a data.curriculum (the order of the "
                   f"buckets; shuffled for a random one)")
            return
        _check(self.balance not in STRATIFIED, f"data.balance={self.balance} draws fixed "
               f"per-stratum counts, but data.curriculum={self.curriculum} draws every batch "
               f"from one length bucket; use data.balance none, global_presort or serpentine")
        edges = self.bucket_edges  # parses and checks
        _check(self.curriculum_round_batches >= len(edges), f"data.curriculum_round_batches="
               f"{self.curriculum_round_batches} must be >= the {len(edges)} buckets")
        _check(len(self.loss_targets) in (1, len(edges)) and min(self.loss_targets) > 0,
               f"data.curriculum_loss_targets={self.curriculum_loss_targets!r}: expected one "
               f"positive loss or {len(edges)} (one per bucket)")
        _check(self.curriculum_loss_window >= 1 and self.curriculum_max_batches >= 0,
               f"data.curriculum_loss_window={self.curriculum_loss_window} must be >= 1 and "
               f"data.curriculum_max_batches={self.curriculum_max_batches} >= 0")
        _check(self.curriculum_eta > 0 and 0 < self.curriculum_gamma <= 1,
               f"data.curriculum_eta={self.curriculum_eta} must be > 0 and "
               f"data.curriculum_gamma={self.curriculum_gamma} in (0, 1]")
        alpha = self.curriculum_alpha
        _check(alpha == "1/t" or self._is_number(alpha) and 0 <= float(alpha) <= 1,
               f"data.curriculum_alpha={alpha!r}: expected a number in [0, 1] or 1/t")
        _check(self.curriculum_reward == "visit_gain", f"data.curriculum_reward="
               f"{self.curriculum_reward!r}: only visit_gain is supported in training; "
               f"prediction_gain needs a second forward of every batch after the optimizer "
               f"step, which the trainer does not run (docs/curriculum.md)")

    @property
    def bucket_edges(self) -> list[int]:
        """Bucket upper edges (M,): data.bucket_boundaries, or the four strata by default."""
        if not self.bucket_boundaries:
            from data.balance import strata_edges
            return [int(e) for e in strata_edges(self.max_seq_length)[1:]]
        text, key = self.bucket_boundaries, "data.bucket_boundaries"
        parts = [p.strip() for p in text.split(",")]
        _check(all(p.lstrip("-").isdigit() for p in parts),
               f"{key}={text!r}: expected comma-separated integers such as 128,256,384,512")
        edges = [int(p) for p in parts]
        _check(edges[0] >= 1 and all(a < b for a, b in zip(edges, edges[1:])),
               f"{key}={text!r}: edges must be positive and strictly increasing")
        _check(edges[-1] == self.max_seq_length, f"{key}={text!r}: the last edge must equal "
               f"data.max_seq_length={self.max_seq_length}")
        return edges

    @property
    def loss_targets(self) -> list[float]:
        """data.curriculum_loss_targets as numbers (1 or M)."""
        parts = [p.strip() for p in self.curriculum_loss_targets.split(",")]
        _check(all(self._is_number(p) for p in parts), f"data.curriculum_loss_targets="
               f"{self.curriculum_loss_targets!r}: expected comma-separated numbers")
        return [float(p) for p in parts]

    @staticmethod
    def _is_number(text: str) -> bool:
        try:
            float(text)
        except ValueError:
            return False
        return True


@dataclass
class OptimConfig:
    """LAMB hyperparameters (MLPerf names in comments)."""

    name: str = "lamb"  # lamb; adam (AdamW, open division only; needs optim.sharded)
    lr: float = 4.25e-4  # opt_base_learning_rate
    beta1: float = 0.9  # opt_lamb_beta_1
    beta2: float = 0.999  # opt_lamb_beta_2
    eps: float = 1e-6  # opt_lamb_epsilon
    weight_decay: float = 0.01  # opt_lamb_weight_decay_rate
    max_grad_norm: float = 1.0  # global gradient-norm clip
    # DistributedFusedLAMB: sharded fp32 state (ZeRO-2), bucketed reduce-scatter overlapping the
    # backward, LR and fp16 loss scaling on the device. Tested on gloo ranks; not yet on GPUs.
    sharded: bool = False
    # where the gradient norm is clipped (sharded only): after_allreduce (exact global norm),
    # before_allreduce (each rank's local norm, as 1-node MLPerf runs do) or bucketwise (seed
    # 001: each bucket to max_grad_norm/sqrt(buckets) before its reduction)
    clip_mode: str = "after_allreduce"
    bucket_cap_mb: float = 25.0  # gradient bucket size for the sharded optimizer
    # Sharded optimizer's norms and update as fused CUDA kernels (kernels/lamb.py: five launches
    # over the flat shard instead of dozens of _foreach ops). Compiles, but NOT yet validated on
    # a GPU (kernels/VALIDATION.md), so off by default. On CUDA it needs the compiled extension
    # (checked when the optimizer is built); on CPU the ops run their _foreach reference.
    fused_kernel: bool = False

    def __post_init__(self) -> None:
        _check(self.name in ("lamb", "adam"), f"optim.name={self.name!r}: expected lamb or adam")
        _check(self.sharded or not self.fused_kernel,
               "optim.fused_kernel=true needs optim.sharded=true (it updates the flat shards)")
        _check(self.name == "lamb" or self.sharded,
               "optim.name=adam needs optim.sharded=true (the replicated path is LAMB only)")
        _check(self.clip_mode in ("after_allreduce", "before_allreduce", "bucketwise"),
               f"optim.clip_mode={self.clip_mode!r}: expected after_allreduce, "
               f"before_allreduce or bucketwise")
        _check(self.sharded or self.clip_mode == "after_allreduce",
               f"optim.clip_mode={self.clip_mode!r} needs optim.sharded=true")
        _check(self.bucket_cap_mb > 0, f"optim.bucket_cap_mb={self.bucket_cap_mb} must be > 0")
        _check(self.lr > 0, f"optim.lr={self.lr} must be > 0")
        for name in ("beta1", "beta2"):
            _check(0.0 <= getattr(self, name) < 1.0,
                   f"optim.{name}={getattr(self, name)} must be in [0, 1)")
        _check(self.eps > 0, f"optim.eps={self.eps} must be > 0")
        _check(self.weight_decay >= 0, f"optim.weight_decay={self.weight_decay} must be >= 0")
        _check(self.max_grad_norm > 0, f"optim.max_grad_norm={self.max_grad_norm} must be > 0")


@dataclass
class ScheduleConfig:
    """Linear warmup, then polynomial (power 1) decay to zero."""

    total_steps: int = 6700  # opt_learning_rate_training_steps
    warmup_steps: int = 0  # opt_learning_rate_warmup_steps / num_warmup_steps
    start_warmup_step: int = 0
    power: float = 1.0

    def __post_init__(self) -> None:
        _check(self.total_steps > 0, f"schedule.total_steps={self.total_steps} must be > 0")
        _check(0 <= self.warmup_steps <= self.total_steps,
               f"schedule.warmup_steps={self.warmup_steps} must be in [0, total_steps]")


@dataclass
class RunConfig:
    """Batching, evaluation, precision, device and logging for one run."""

    global_batch_size: int = 448
    gradient_accumulation_steps: int = 1
    max_steps: int = 0  # 0: schedule.total_steps
    max_samples: int = 0  # 0: no limit beyond max_steps
    seed: int = -1  # -1: drawn from os.urandom and logged
    target_mlm_accuracy: float = 0.720
    eval_interval_samples: int = 0  # 0: the MLPerf formula (150,000 for GBS <= 2048)
    eval_samples: int = 10000  # 0: the whole eval file
    eval_batch_size: int = 128  # per rank
    precision: str = "fp32"  # fp32 | bf16 | fp16 (autocast)
    device: str = "auto"  # auto | cpu | cuda
    init_checkpoint: str = ""  # phase-1 checkpoint (.pt, project or NVIDIA naming)
    cache_cleared: bool = False  # the launcher flushed the page cache before this run (logged)
    output_dir: str = "results/run"
    log_interval_s: float = 10.0  # seconds between progress lines
    quiet: bool = False
    threads: int = 0  # torch intra-op threads on CPU; 0: leave PyTorch's default
    submission_org: str = "open-bert"
    submission_platform: str = "cpu"
    submission_division: str = "closed"
    submission_status: str = "onprem"
    record_samples_dir: str = ""  # audit trail: DIR/rank<R>.txt, `step shard index` per sample
    # training checkpoints (bert/train_state.py) under output_dir/checkpoints, every N optimizer
    # steps and at the end of the run; 0: none. Each costs a host copy of the model and the
    # full optimizer state, so MLPerf timing runs leave it off.
    checkpoint_interval_steps: int = 0
    checkpoint_keep: int = 2  # newest complete checkpoints kept; 0: keep all
    # "" start fresh; "auto" continue from the newest complete checkpoint under output_dir (a
    # fresh start when there is none); or a checkpoint folder (.../checkpoints/step_N)
    resume: str = ""
    # evaluate the initial model (init_checkpoint) once and stop: the starting accuracy
    # (about 0.34085 for the MLPerf phase-1 checkpoint, REFERENCE 2); no training data is read
    eval_only: bool = False

    def __post_init__(self) -> None:
        _check(self.global_batch_size > 0,
               f"run.global_batch_size={self.global_batch_size} must be > 0")
        _check(self.gradient_accumulation_steps > 0,
               f"run.gradient_accumulation_steps={self.gradient_accumulation_steps} must be > 0")
        _check(self.precision in ("fp32", "bf16", "fp16"),
               f"run.precision={self.precision!r}: expected fp32, bf16 or fp16")
        _check(self.device in ("auto", "cpu", "cuda"),
               f"run.device={self.device!r}: expected auto, cpu or cuda")
        _check(0.0 < self.target_mlm_accuracy <= 1.0,
               f"run.target_mlm_accuracy={self.target_mlm_accuracy} must be in (0, 1]")
        _check(self.eval_batch_size > 0, f"run.eval_batch_size={self.eval_batch_size} must be > 0")
        _check(self.submission_division in ("closed", "open"),
               f"run.submission_division={self.submission_division!r}: expected closed or open")
        for name in ("max_steps", "max_samples", "eval_interval_samples", "eval_samples",
                     "checkpoint_interval_steps", "checkpoint_keep"):
            _check(getattr(self, name) >= 0, f"run.{name}={getattr(self, name)} must be >= 0")


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def __post_init__(self) -> None:
        _check(self.optim.name == "lamb" or self.run.submission_division == "open",
               f"optim.name={self.optim.name!r}: the closed division requires LAMB "
               f"(REFERENCE 1); set run.submission_division=open")
        from data.curriculum import division_error  # the division rule's single source

        problem = division_error(self.data.curriculum, self.run.submission_division)
        _check(problem is None, problem or "")
        _check(self.data.max_seq_length <= self.model.max_position_embeddings,
               f"data.max_seq_length={self.data.max_seq_length} exceeds "
               f"model.max_position_embeddings={self.model.max_position_embeddings}")

    @property
    def max_steps(self) -> int:
        return self.run.max_steps or self.schedule.total_steps

    @property
    def eval_interval_samples(self) -> int:
        """MLPerf eval spacing (REFERENCE 1) unless the run overrides it."""
        if self.run.eval_interval_samples:
            return self.run.eval_interval_samples
        return mlperf_eval_interval(self.run.global_batch_size)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def mlperf_eval_interval(global_batch_size: int) -> int:
    """Samples between evals by the MLPerf BERT rule: floor(0.05*(230.23*GBS+3e6)/25e3)*25e3."""
    return int(math.floor(0.05 * (230.23 * global_batch_size + 3_000_000) / 25_000) * 25_000)


@dataclass(frozen=True)
class BatchGeometry:
    """Per-rank batch sizes derived once from the global batch and the world size."""

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

    @classmethod
    def build(cls, run: RunConfig, world_size: int) -> "BatchGeometry":
        gbs, accum = run.global_batch_size, run.gradient_accumulation_steps
        _check(gbs % world_size == 0,
               f"run.global_batch_size={gbs} is not divisible by the world size {world_size}")
        _check((gbs // world_size) % accum == 0,
               f"per-rank batch {gbs // world_size} (run.global_batch_size={gbs} / {world_size} "
               f"ranks) is not divisible by run.gradient_accumulation_steps={accum}")
        return cls(world_size, gbs, accum)


# ---------------------------------------------------------------------------------------------
# Building a Config from YAML and overrides


def _coerce(value: Any, typ: Any, key: str) -> Any:
    """Convert a YAML or command-line value to the annotated field type, or raise."""
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{key}={value!r}: expected true or false")
    if typ is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}={value!r}: expected an integer")
        try:
            as_float = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}={value!r}: expected an integer") from None
        if not as_float.is_integer():
            raise ConfigError(f"{key}={value!r}: expected an integer")
        return int(as_float)
    if typ is float:
        if isinstance(value, bool):
            raise ConfigError(f"{key}={value!r}: expected a number")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}={value!r}: expected a number") from None
    if typ is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{key}={value!r}: expected a string")
        return str(value)
    raise ConfigError(f"{key}: unsupported field type {typ}")


def _build(cls: type, values: dict[str, Any], prefix: str) -> Any:
    if not isinstance(values, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {values!r}")
    hints = get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        full = f"{prefix}{key}"
        if key not in names:
            raise ConfigError(f"unknown config key {full!r} (known: {', '.join(names)})")
        typ = hints[key]
        if dataclasses.is_dataclass(typ):
            kwargs[key] = _build(typ, value or {}, f"{full}.")
        else:
            kwargs[key] = _coerce(value, typ, full)
    return cls(**kwargs)


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {dotted}: {part!r} is not a section")
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    return key.strip(), value.strip()


def load_config(path: str | os.PathLike | None = None,
                overrides: typing.Sequence[str] = ()) -> Config:
    """Read a YAML config (or the defaults when `path` is None) and apply `key=value` overrides."""
    tree: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as err:
            raise ConfigError(f"config file {str(path)!r}: {err.strerror}") from None
        try:
            tree = yaml.safe_load(text) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"config file {str(path)!r}: invalid YAML ({err})") from None
        if not isinstance(tree, dict):
            raise ConfigError(f"config file {str(path)!r}: top level must be a mapping")
    for item in overrides:
        key, value = parse_override(item)
        _set_dotted(tree, key, value)
    return _build(Config, tree, "")


def describe_fields(cls: type = Config, prefix: str = "") -> list[str]:
    """`section.key (type) = default` lines for --help-config."""
    lines = []
    hints = get_type_hints(cls)
    defaults = cls()
    for f in dataclasses.fields(cls):
        typ = hints[f.name]
        if dataclasses.is_dataclass(typ):
            lines += describe_fields(typ, f"{prefix}{f.name}.")
        else:
            lines.append(f"{prefix}{f.name} ({typ.__name__}) = {getattr(defaults, f.name)!r}")
    return lines
