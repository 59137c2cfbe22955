#!/usr/bin/env python3
"""The lamb kernel against PyTorch.

The command line of bert/tools/kernel_bench/lamb.py (`--help`).
"""

from bert.tools.kernel_bench.lamb import main

if __name__ == "__main__":
    main()
