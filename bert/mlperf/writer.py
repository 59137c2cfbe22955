"""MLPerf compliance logging: the only place in the project that writes `:::MLLOG` lines.

The trainer owns one `MLPerfLogger` and calls it at phase boundaries. A run that passes the
`training 5.0.0` compliance checker (closed division, benchmark `bert`) makes the calls in this
order:

    log = MLPerfLogger(path, rank)
    log.cache_clear(True)                 # page cache was flushed before the run
    log.init_start()
    log.submission_info(org, platform, division, status)   # must come before init_stop
    log.hyperparameters(cfg, run_shape, train_samples, eval_samples, seed)
    log.topology(nodes, accelerators_per_node, accelerator_model)
    log.resumed_from(step, samples)       # a resumed run only
    ... build model, load checkpoint, warm up (no training/eval data read yet) ...
    log.init_stop()                       # at most 30 min after init_start (closed)
    log.run_start()
    for each block of run_shape.eval_interval_samples samples (bert/train/run_shape.py):
        log.block_start(samples_count, first_epoch_num, epoch_count)
        ... train ...
        log.block_stop(samples_count, first_epoch_num, epoch_count)
        log.tracked_stats(step, samples_trained, {"throughput": ..., "loss": ..., "lr": ...})
        log.eval_start(samples_trained)
        ... evaluate ...
        log.eval_stop(samples_trained)
        log.eval_accuracy(mlm_accuracy, samples_trained)   # epoch_num = samples trained
        stop once mlm_accuracy >= the target (0.720)
    log.run_stop("success")               # or "aborted" if the target was never reached

Why the order matters (training_5.0.0/common.yaml): the checker's init-time limit comes from
`submission_division`, so that key must precede `init_stop`; `run_start` needs `init_stop`;
`block_start` needs `run_start`. The hyperparameter keys, `seed`, `train_samples`,
`eval_samples`, the `submission_*` keys, `init_stop`, `run_start` and `run_stop` must each appear
exactly once. This class raises `MLPerfLogError` on a repeated once-only key or a call out of the
order above, on every rank, so a bug fails fast and all ranks fail together instead of rank 0
alone producing a log that the checker rejects later.

Only rank 0 writes (the caller passes its rank so nothing here touches torch.distributed). Other
ranks, and any logger built with `enabled=False`, still validate the call order but write nothing.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from typing import Any

from bert.mlperf import constants as C
from bert.mlperf.constants import (
    ACCELERATOR_MODEL_NAME,
    ESCAPED_MARKER,
    MLLOG_MARKER,
    ACCELERATORS_PER_NODE,
    DATA_CURRICULUM,
    NUMBER_OF_NODES,
    RESUMED_FROM_CHECKPOINT,
    STOP_REASON,
    TOPOLOGY_KEYS,
    TRACKED_STATS,
)


class _Lazy:
    """A module imported on first attribute access. mlperf-logging is needed to write a log,
    not to import the trainer: the bare GPU image has no mlperf-logging, and the GPU harness
    collects every test there (kernels/VALIDATION.md)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


mllog = _Lazy("mlperf_logging.mllog")


# Keys the 5.0.0 closed rules require exactly once (REQ: EXACTLY_ONE in common.yaml and
# closed_common.yaml). A second line with the same value is only a checker warning, a different
# value a failure; both are bugs, so they are refused before they reach the file.
ONCE_KEYS = frozenset(
    {
        C.SUBMISSION_BENCHMARK,
        C.SUBMISSION_DIVISION,
        C.SUBMISSION_ORG,
        C.SUBMISSION_PLATFORM,
        C.SUBMISSION_STATUS,
        C.INIT_STOP,
        C.RUN_START,
        C.RUN_STOP,
        C.SEED,
        C.TRAIN_SAMPLES,
        C.EVAL_SAMPLES,
        C.GLOBAL_BATCH_SIZE,
        C.GRADIENT_ACCUMULATION_STEPS,
        C.OPT_BASE_LR,
        C.OPT_LAMB_EPSILON,
        C.OPT_LR_TRAINING_STEPS,
        C.OPT_LR_WARMUP_STEPS,
        C.NUM_WARMUP_STEPS,
        C.START_WARMUP_STEP,
        C.OPT_LAMB_BETA_1,
        C.OPT_LAMB_BETA_2,
        C.OPT_LAMB_WEIGHT_DECAY,
        C.MAX_SEQUENCE_LENGTH,
        C.OPT_LAMB_LR_DECAY_POLY_POWER,
    }
)
RUN_STATUSES = (C.SUCCESS, C.ABORTED)

# This project's own keys (constants.py), once per run as well.
OWN_ONCE_KEYS = frozenset({RESUMED_FROM_CHECKPOINT, *TOPOLOGY_KEYS})

# mllog records the caller's file and line in each line's metadata. Frames between its
# get_caller() and the trainer: _log_helper, start/end/event, _emit, our public method.
_STACK_OFFSET = 3

# Paths in the metadata are shown relative to the project root.
_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class MLPerfLogError(RuntimeError):
    """A compliance-logging call that would make the log fail the checker."""


class _GlobalSink:
    """Which handlers of mllog's process-global logger belong to which MLPerfLogger.

    `mllog.config(filename=...)` only ever adds a FileHandler to one shared `logging.Logger`, so
    a second logger in the same process (tests, repeated runs) would also write into the first
    one's file. The newest writer takes the shared logger over: earlier handlers are removed and
    the earlier writer is retired so it cannot write into the new file by mistake.
    """

    owner: "MLPerfLogger | None" = None
    handlers: list[logging.Handler] = []

    @classmethod
    def take_over(
        cls, new_owner: "MLPerfLogger", path: str | None, echo: bool, append: bool
    ) -> None:
        cls.release(cls.owner)
        base = mllog.get_mllogger().logger
        # The default logger ships with a stdout handler; drop it so echo is opt-in.
        for handler in list(base.handlers):
            base.removeHandler(handler)
        if path is not None:
            cls._configure_file(base, path, append)
        if echo:
            stream = logging.StreamHandler(stream=sys.stdout)
            stream.setLevel(logging.INFO)
            base.addHandler(stream)
        cls.handlers = list(base.handlers)
        cls.owner = new_owner

    @staticmethod
    def _configure_file(base: logging.Logger, path: str, append: bool) -> None:
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        if not append:
            # mllog's FileHandler appends; a leftover file from an earlier run would repeat
            # once-only keys, so start a fresh one unless the caller asked otherwise.
            open(path, "w").close()
        mllog.config(filename=path, root_dir=_PROJECT_ROOT)

    @classmethod
    def release(cls, owner: "MLPerfLogger | None") -> None:
        if owner is None or cls.owner is not owner:
            return
        base = mllog.get_mllogger().logger
        for handler in cls.handlers:
            base.removeHandler(handler)
            handler.close()
        cls.handlers = []
        cls.owner = None
        owner._retired = True


class MLPerfLogger:
    """Writes the MLPerf training log of one run (rank 0 only); see the module docstring."""

    def __init__(
        self,
        path: str | None,
        rank: int,
        enabled: bool = True,
        echo: bool = False,
        append: bool = False,
    ) -> None:
        """`path`: the result file (None: stdout only). `echo`: also print lines to stdout.
        `append`: keep an existing file's lines instead of starting it empty."""
        self.rank = rank
        self.writes = bool(enabled) and rank == 0
        self._logged: set[str] = set()
        self._retired = False
        if self.writes:
            _GlobalSink.take_over(self, path, echo or path is None, append)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and detach this logger's handlers; later calls raise."""
        if self.writes:
            _GlobalSink.release(self)
        self._retired = True

    def __enter__(self) -> "MLPerfLogger":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def run_started(self) -> bool:
        return C.RUN_START in self._logged

    @property
    def run_stopped(self) -> bool:
        """Lets an error path decide whether `run_stop("aborted")` is still needed."""
        return C.RUN_STOP in self._logged

    # -- phase boundaries --------------------------------------------------------------------

    def cache_clear(self, value: bool = True) -> None:
        self._emit("event", C.CACHE_CLEAR, bool(value))

    def init_start(self) -> None:
        self._require_absent(C.INIT_STOP, C.INIT_START)
        self._emit("start", C.INIT_START)

    def submission_info(self, org: str, platform: str, division: str, status: str) -> None:
        if division not in ("closed", "open"):
            raise MLPerfLogError(f"submission_division={division!r}: expected closed or open")
        self._emit("event", C.SUBMISSION_BENCHMARK, C.BERT)
        self._emit("event", C.SUBMISSION_DIVISION, division)
        self._emit("event", C.SUBMISSION_ORG, org)
        self._emit("event", C.SUBMISSION_PLATFORM, platform)
        self._emit("event", C.SUBMISSION_STATUS, status)

    def hyperparameters(
        self, cfg: Any, shape: Any, train_samples: int | None, eval_samples: int, seed: int
    ) -> None:
        """Log the tunable hyperparameters of `cfg` (a bert.config.Config) once each, the batch
        as the run shape (bert/train/run_shape.py, RunShape) fixed it.

        `train_samples` may be None when it is only known at the end of the run (samples
        trained); the trainer then logs it with `train_samples()` before `run_stop`.
        """
        values = hyperparameter_values(cfg, shape, train_samples, eval_samples, seed)
        # Refuse the whole set up front so a repeat call leaves no partial second copy.
        repeated = sorted(self._logged.intersection(values))
        if repeated:
            raise MLPerfLogError(f"hyperparameters already logged: {', '.join(repeated)}")
        for key, value in values.items():
            self._emit("event", key, value)

    def topology(self, nodes: int, accelerators_per_node: int, accelerator_model: str) -> None:
        """Where the run ran (init phase); bert/submission/package.py fills the system
        description from it."""
        self._require_init_phase(NUMBER_OF_NODES)
        self._emit("event", NUMBER_OF_NODES, int(nodes))
        self._emit("event", ACCELERATORS_PER_NODE, int(accelerators_per_node))
        self._emit("event", ACCELERATOR_MODEL_NAME, str(accelerator_model))

    def resumed_from(self, step: int, samples: int) -> None:
        """Marks the log of a run resumed from a checkpoint (init phase): it times only the
        part after the resume, so bert/submission/package.py refuses it."""
        self._require_init_phase(RESUMED_FROM_CHECKPOINT)
        self._emit("event", RESUMED_FROM_CHECKPOINT, int(step), metadata={"samples": int(samples)})

    def init_stop(self) -> None:
        self._require(C.INIT_START, C.INIT_STOP)
        # The checker's init-time limit is set by submission_division; without it first the
        # limit is 0 minutes and init_stop always fails.
        self._require(C.SUBMISSION_DIVISION, C.INIT_STOP)
        self._emit("end", C.INIT_STOP)

    def run_start(self) -> None:
        self._require(C.INIT_STOP, C.RUN_START)
        self._emit("start", C.RUN_START)

    def block_start(self, samples_count: int, first_epoch_num: int, epoch_count: int) -> None:
        self._require(C.RUN_START, C.BLOCK_START)
        if epoch_count <= 0:
            raise MLPerfLogError(f"block_start epoch_count={epoch_count}: must be > 0")
        self._emit(
            "start",
            C.BLOCK_START,
            metadata=_block_metadata(samples_count, first_epoch_num, epoch_count),
        )

    def block_stop(
        self, samples_count: int, first_epoch_num: int, epoch_count: int | None = None
    ) -> None:
        self._require(C.RUN_START, C.BLOCK_STOP)
        self._emit(
            "end",
            C.BLOCK_STOP,
            metadata=_block_metadata(samples_count, first_epoch_num, epoch_count),
        )

    def eval_start(self, samples: int) -> None:
        self._require(C.RUN_START, C.EVAL_START)
        self._emit("start", C.EVAL_START, metadata={C.EPOCH_NUM: int(samples)})

    def eval_stop(self, samples: int) -> None:
        self._require(C.RUN_START, C.EVAL_STOP)
        self._emit("end", C.EVAL_STOP, metadata={C.EPOCH_NUM: int(samples)})

    def eval_accuracy(self, accuracy: float, samples_trained: int) -> None:
        """MLM accuracy; BERT's rules want epoch_num = samples trained so far (REFERENCE 1)."""
        self._require(C.RUN_START, C.EVAL_ACCURACY)
        self._emit(
            "event", C.EVAL_ACCURACY, float(accuracy), metadata={C.EPOCH_NUM: int(samples_trained)}
        )

    def run_stop(self, status: str, stop_reason: str | None = None) -> None:
        """`stop_reason`: set when the run did not end by itself (a signal, an error, a
        diverged loss): such a log is no timed result (scripts/run_logs.py refuses it)."""
        if status not in RUN_STATUSES:
            raise MLPerfLogError(f"run_stop status={status!r}: expected one of {RUN_STATUSES}")
        self._require(C.RUN_START, C.RUN_STOP)
        metadata = {C.STATUS: status}
        if stop_reason is not None:
            metadata[STOP_REASON] = str(stop_reason)[:300]
        self._emit("end", C.RUN_STOP, metadata=metadata)

    def tracked_stats(self, step: int, samples: int, stats: dict[str, float]) -> None:
        """Training statistics at an eval point (throughput in samples/s, loss, lr), as
        NVIDIA's submissions log them; the checker has no rule for the key and passes it."""
        self._require(C.RUN_START, TRACKED_STATS)
        value = {k: None if v is None else float(v) for k, v in stats.items()}  # None: not finite
        self._emit(
            "event",
            TRACKED_STATS,
            value,
            metadata={"step": int(step), C.SAMPLES_COUNT: int(samples)},
        )

    def train_samples(self, samples: int) -> None:
        """Samples trained, when it was not known at hyperparameter time."""
        self._emit("event", C.TRAIN_SAMPLES, int(samples))

    def data_curriculum(self, name: str, metadata: dict) -> None:
        """The length bucketing and curriculum the run trains with (open division)."""
        self._emit("event", DATA_CURRICULUM, name, metadata)

    def event(self, key: str, value: Any = None, metadata: dict | None = None) -> None:
        """Any other key (POINT_IN_TIME); once-only keys are still refused the second time."""
        self._emit("event", key, value, metadata)

    # -- internals ---------------------------------------------------------------------------

    def _require(self, earlier: str, key: str) -> None:
        if earlier not in self._logged:
            raise MLPerfLogError(
                f"{key} logged before {earlier}; see bert/mlperf/writer.py for the order"
            )

    def _require_init_phase(self, key: str) -> None:
        self._require(C.INIT_START, key)
        self._require_absent(C.INIT_STOP, key)

    def _require_absent(self, later: str, key: str) -> None:
        if later in self._logged:
            raise MLPerfLogError(f"{key} logged after {later}")

    def _emit(self, kind: str, key: str, value: Any = None, metadata: dict | None = None) -> None:
        """Validate on every rank, write on rank 0 only."""
        if self._retired:
            raise MLPerfLogError(
                f"{key}: this MLPerfLogger was closed or replaced by a newer one in this process"
            )
        if (key in ONCE_KEYS or key in OWN_ONCE_KEYS) and key in self._logged:
            raise MLPerfLogError(f"{key} may be logged only once per run")
        value, metadata = escape_marker(value), escape_marker(metadata)
        try:  # the log is JSON lines: NaN or Infinity would make a line unreadable
            json.dumps([value, metadata], allow_nan=False)
        except (TypeError, ValueError) as err:
            raise MLPerfLogError(f"{key}: {value!r} cannot be logged ({err})") from None
        self._logged.add(key)
        if self.writes:
            write = getattr(mllog.get_mllogger(), kind)
            write(key=key, value=value, metadata=metadata, stack_offset=_STACK_OFFSET)


def escape_marker(obj: Any) -> Any:
    """`obj` with every string (dict keys too) free of the MLLOG marker. The official parser
    cuts each line at its last marker, so a config string holding one (an org name, a platform
    pasted from a log) would turn our own line into a parse error or a forged record."""
    if isinstance(obj, str):
        return obj.replace(MLLOG_MARKER, ESCAPED_MARKER)
    if isinstance(obj, dict):
        return {escape_marker(k): escape_marker(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [escape_marker(v) for v in obj]
    return obj


def _block_metadata(
    samples_count: int, first_epoch_num: int, epoch_count: int | None
) -> dict[str, int]:
    meta = {C.SAMPLES_COUNT: int(samples_count), C.FIRST_EPOCH_NUM: int(first_epoch_num)}
    if epoch_count is not None:
        meta[C.EPOCH_COUNT] = int(epoch_count)
    return meta


def hyperparameter_values(
    cfg: Any, shape: Any, train_samples: int | None, eval_samples: int, seed: int
) -> dict[str, Any]:
    """MLPerf key -> value for one run; plain int/float so json never sees numpy or tensors.
    The batch is the run shape's (`shape.geometry`): what the run trains, derived once."""
    optim, schedule, geometry = cfg.optim, cfg.schedule, shape.geometry
    values = {
        C.SEED: int(seed),
        C.GLOBAL_BATCH_SIZE: int(geometry.global_batch_size),
        C.GRADIENT_ACCUMULATION_STEPS: int(geometry.gradient_accumulation_steps),
        C.MAX_SEQUENCE_LENGTH: int(cfg.data.max_seq_length),
        C.OPT_BASE_LR: float(optim.lr),
        C.OPT_LAMB_EPSILON: float(optim.eps),
        C.OPT_LAMB_BETA_1: float(optim.beta1),
        C.OPT_LAMB_BETA_2: float(optim.beta2),
        C.OPT_LAMB_WEIGHT_DECAY: float(optim.weight_decay),
        C.OPT_LR_TRAINING_STEPS: int(schedule.total_steps),
        # The reference logs the same warmup length under both names.
        C.OPT_LR_WARMUP_STEPS: int(schedule.warmup_steps),
        C.NUM_WARMUP_STEPS: int(schedule.warmup_steps),
        C.START_WARMUP_STEP: int(schedule.start_warmup_step),
        C.OPT_LAMB_LR_DECAY_POLY_POWER: float(schedule.power),
        C.EVAL_SAMPLES: int(eval_samples),
    }
    if train_samples is not None:
        values[C.TRAIN_SAMPLES] = int(train_samples)
    return values
