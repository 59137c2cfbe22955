#!/usr/bin/env python3
"""Step time with and without a profiler window configured, and the host cost per step of the
metrics and ranges (bert/tools/bench_overhead.py; writes JSON under benchmarks/results/)."""

import sys

from bert.tools.bench_overhead import main

if __name__ == "__main__":
    sys.exit(main())
