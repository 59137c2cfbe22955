"""The MLPerf logger moved to bert/mlperf/writer.py. This name stays only for
bert/train/trainer.py, which another branch is changing; it imports bert.mlperf.writer once that
branch lands, and this file goes."""
from bert.mlperf.writer import MLPerfLogError, MLPerfLogger  # noqa: F401
