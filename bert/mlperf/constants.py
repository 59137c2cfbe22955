"""What the writer of the MLPerf log (writer.py) and its readers (reader.py, compliance.py,
package.py, plot.py, the planner's and the tools' log readers) must agree on, stated once: the
rules version, the line marker, the official keys they write and read, this project's own keys
and the names its log files get.

Nothing here imports mlperf-logging: the bare GPU image has none (kernels/VALIDATION.md). The
official keys carry mlperf_logging.mllog.constants' names and values
(tests/unit/test_mlperf.py compares them where the package is installed).
"""

from __future__ import annotations

import re

RULESET = "5.0.0"  # the MLPerf training rules the logs follow (REFERENCE 1)
USAGE = "training"
BENCHMARK = "bert"
TARGET_MLM_ACCURACY = 0.720  # eval accuracy that ends a run (REFERENCE 1)
MLLOG_MARKER = ":::MLLOG"  # what starts the JSON of each log line
# What writer.py writes for a marker inside a logged string: no line may hold a second marker.
ESCAPED_MARKER = ":::_MLLOG"
# What the readers accept before the official parser sees a line (its per-line regex is
# quadratic in the line's length, and json recursion is unbounded): real lines are < 1 KiB.
MAX_LINE_CHARS = 64 * 1024
MAX_JSON_DEPTH = 16

# ---- the official keys and values this project writes or reads ------------------------------
# the phases
CACHE_CLEAR = "cache_clear"
INIT_START = "init_start"
INIT_STOP = "init_stop"
RUN_START = "run_start"
RUN_STOP = "run_stop"
BLOCK_START = "block_start"
BLOCK_STOP = "block_stop"
EPOCH_START = "epoch_start"  # older logs' block (read only)
EVAL_START = "eval_start"
EVAL_STOP = "eval_stop"
EVAL_ACCURACY = "eval_accuracy"
# the submission
SUBMISSION_BENCHMARK = "submission_benchmark"
SUBMISSION_DIVISION = "submission_division"
SUBMISSION_ORG = "submission_org"
SUBMISSION_PLATFORM = "submission_platform"
SUBMISSION_STATUS = "submission_status"
BERT = BENCHMARK  # submission_benchmark's value
# the hyperparameters
SEED = "seed"
TRAIN_SAMPLES = "train_samples"
EVAL_SAMPLES = "eval_samples"
GLOBAL_BATCH_SIZE = "global_batch_size"
GRADIENT_ACCUMULATION_STEPS = "gradient_accumulation_steps"
MAX_SEQUENCE_LENGTH = "max_sequence_length"
OPT_BASE_LR = "opt_base_learning_rate"
OPT_LAMB_EPSILON = "opt_lamb_epsilon"
OPT_LAMB_BETA_1 = "opt_lamb_beta_1"
OPT_LAMB_BETA_2 = "opt_lamb_beta_2"
OPT_LAMB_WEIGHT_DECAY = "opt_lamb_weight_decay_rate"
OPT_LR_TRAINING_STEPS = "opt_learning_rate_training_steps"
OPT_LR_WARMUP_STEPS = "opt_learning_rate_warmup_steps"
NUM_WARMUP_STEPS = "num_warmup_steps"
START_WARMUP_STEP = "start_warmup_step"
OPT_LAMB_LR_DECAY_POLY_POWER = "opt_lamb_learning_rate_decay_poly_power"
# the metadata
EPOCH_NUM = "epoch_num"
FIRST_EPOCH_NUM = "first_epoch_num"
EPOCH_COUNT = "epoch_count"
SAMPLES_COUNT = "samples_count"
STATUS = "status"  # run_stop's: SUCCESS or ABORTED
SUCCESS = "success"
ABORTED = "aborted"
# Every official name above (mlperf_logging.mllog.constants has each, with the same value).
OFFICIAL = (
    "CACHE_CLEAR INIT_START INIT_STOP RUN_START RUN_STOP BLOCK_START BLOCK_STOP EPOCH_START "
    "EVAL_START EVAL_STOP EVAL_ACCURACY SUBMISSION_BENCHMARK SUBMISSION_DIVISION SUBMISSION_ORG "
    "SUBMISSION_PLATFORM SUBMISSION_STATUS BERT SEED TRAIN_SAMPLES EVAL_SAMPLES GLOBAL_BATCH_SIZE "
    "GRADIENT_ACCUMULATION_STEPS MAX_SEQUENCE_LENGTH OPT_BASE_LR OPT_LAMB_EPSILON OPT_LAMB_BETA_1 "
    "OPT_LAMB_BETA_2 OPT_LAMB_WEIGHT_DECAY OPT_LR_TRAINING_STEPS OPT_LR_WARMUP_STEPS "
    "NUM_WARMUP_STEPS START_WARMUP_STEP OPT_LAMB_LR_DECAY_POLY_POWER EPOCH_NUM FIRST_EPOCH_NUM "
    "EPOCH_COUNT SAMPLES_COUNT STATUS SUCCESS ABORTED"
).split()

# This project's own keys (POINT_IN_TIME, init phase, once per run); the compliance checker
# ignores keys it has no rule for, reader.py reads them.
# A resumed run's mark: value the checkpoint's step, metadata {"samples": samples at that step}.
RESUMED_FROM_CHECKPOINT = "resumed_from_checkpoint"
# How the run is spread over the machine, named after the system-description fields they fill
# (system_desc.py): int, int, str ("N/A" and 0 accelerators on a CPU run).
NUMBER_OF_NODES = "number_of_nodes"
ACCELERATORS_PER_NODE = "accelerators_per_node"
ACCELERATOR_MODEL_NAME = "accelerator_model_name"
TOPOLOGY_KEYS = (NUMBER_OF_NODES, ACCELERATORS_PER_NODE, ACCELERATOR_MODEL_NAME)

# The trainer's log names in a run's output_dir. A resumed run times only the part after the
# resume, so its log has a name of its own that the readers recognise and refuse to score.
LOG_NAME = "mlperf.log"
EVAL_ONLY_LOG_NAME = "mlperf_eval_only.log"
RESUMED_LOG_NAME = "mlperf_resumed_step_{step}.log"
RESUMED_NAME = re.compile(r"mlperf_resumed_step_(\d+)\.log$")
# The checkers' own report files; never result logs.
CHECKER_REPORT_NAME = "compliance_checker.log"
NOT_LOGS = frozenset({CHECKER_REPORT_NAME, "package_checker.log", "rcp_checker.log"})


def resumed_log_name(step: int) -> str:
    """The log name of a run resumed from the checkpoint of `step`."""
    return RESUMED_LOG_NAME.format(step=int(step))


# Statistics of the block just trained, at each eval point (value: {throughput, loss, lr}), as
# NVIDIA's submissions log them; the compliance checker has no rule for it.
TRACKED_STATS = "tracked_stats"

# The bucketing and curriculum a run uses (open division; docs/curriculum.md): value the
# curriculum's name, metadata its bucket boundaries and settings.
DATA_CURRICULUM = "data_curriculum"

# run_stop's metadata on a run stopped from outside its loop (SIGTERM, an error, a diverged
# loss): why. Its status stays "aborted" (the checker's), and the log is no timed result
# (bert/submission/reader.py refuses it).
STOP_REASON = "stop_reason"
