#!/usr/bin/env python3
"""The tiny run's training time against run.threads.

The command line of bert/tools/bench_threads.py (`--help`).
"""

import sys

from bert.tools.bench_threads import main

if __name__ == "__main__":
    sys.exit(main())
