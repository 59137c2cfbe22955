#!/usr/bin/env python3
"""The official compliance checker on result logs.

The command line of bert/mlperf/compliance.py (`--help`).
"""

import sys

from bert.mlperf.compliance import main

if __name__ == "__main__":
    sys.exit(main())
