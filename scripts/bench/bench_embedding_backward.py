#!/usr/bin/env python3
"""The embedding_backward kernel against PyTorch.

The command line of bert/tools/kernel_bench/embedding_backward.py (`--help`).
"""

from bert.tools.kernel_bench.embedding_backward import main

if __name__ == "__main__":
    main()
