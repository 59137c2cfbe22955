#!/usr/bin/env python3
"""The softmax_cross_entropy kernel against PyTorch.

The command line of bert/tools/kernel_bench/softmax_cross_entropy.py (`--help`).
"""

from bert.tools.kernel_bench.softmax_cross_entropy import main

if __name__ == "__main__":
    main()
