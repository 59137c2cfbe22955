#!/usr/bin/env python3
"""The GPU window's fused-vs-reference training comparison.

The command line of bert/tools/gpu/train_compare.py (`--help`).
"""

import sys

from bert.tools.gpu.train_compare import main

if __name__ == "__main__":
    sys.exit(main())
