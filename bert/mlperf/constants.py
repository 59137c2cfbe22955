"""What the writer of the MLPerf log (writer.py) and its readers (reader.py, compliance.py,
package.py, plot.py) must agree on, stated once: the rules version, the line marker, this
project's own keys and the names its log files get.

Nothing here imports mlperf-logging: the bare GPU image has none (kernels/VALIDATION.md).
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

# run_stop's metadata on a run stopped from outside its loop (SIGTERM, an error, a diverged
# loss): why. Its status stays "aborted" (the checker's), and the log is no timed result
# (bert/submission/reader.py refuses it).
STOP_REASON = "stop_reason"
