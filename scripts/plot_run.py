#!/usr/bin/env python3
"""Command line of bert/mlperf/plot.py: eval accuracy and throughput of MLPerf runs."""
import sys

from bert.mlperf.plot import main

if __name__ == "__main__":
    sys.exit(main())
