#!/usr/bin/env python3
"""Command line of bert/mlperf/package.py: logs laid out as a submission, checked, scored."""
import sys

from bert.mlperf.package import main

if __name__ == "__main__":
    sys.exit(main())
