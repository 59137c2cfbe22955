#!/usr/bin/env python3
"""The dense kernel against PyTorch.

The command line of bert/tools/kernel_bench/dense.py (`--help`).
"""

from bert.tools.kernel_bench.dense import main

if __name__ == "__main__":
    main()
