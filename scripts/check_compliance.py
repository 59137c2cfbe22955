#!/usr/bin/env python3
"""Command line of bert/mlperf/compliance.py: the official compliance checker on result logs."""
import sys

from bert.mlperf.compliance import main

if __name__ == "__main__":
    sys.exit(main())
