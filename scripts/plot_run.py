#!/usr/bin/env python3
"""Eval accuracy and throughput of MLPerf runs.

The command line of bert/submission/plot.py (`--help`).
"""

import sys

from bert.submission.plot import main

if __name__ == "__main__":
    sys.exit(main())
