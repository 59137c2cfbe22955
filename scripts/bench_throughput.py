#!/usr/bin/env python3
"""Training throughput and MFU against HF, one process.

The command line of bert/tools/throughput/bench.py (`--help`).
"""

from bert.tools.throughput.bench import main

if __name__ == "__main__":
    main()
