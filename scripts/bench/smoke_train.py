#!/usr/bin/env python3
"""The GPU window's end-to-end smoke.

The command line of bert/tools/gpu/smoke_train.py (`--help`).
"""

import sys

from bert.tools.gpu.smoke_train import main

if __name__ == "__main__":
    sys.exit(main())
