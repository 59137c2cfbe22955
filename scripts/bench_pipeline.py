#!/usr/bin/env python3
"""Host cost of one local batch per strategy.

The command line of bert/tools/bench_pipeline.py (`--help`).
"""

import sys

from bert.tools.bench_pipeline import main

if __name__ == "__main__":
    sys.exit(main())
