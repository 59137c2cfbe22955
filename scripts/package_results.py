#!/usr/bin/env python3
"""Logs laid out as a submission, checked, scored.

The command line of bert/mlperf/package.py (`--help`).
"""

import sys

from bert.mlperf.package import main

if __name__ == "__main__":
    sys.exit(main())
