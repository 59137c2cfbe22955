#!/usr/bin/env python3
"""The GPU window's learning proof: runs that reach MLPerf's 0.720 on the device.

The command line of bert/tools/gpu/learning_proof.py (`--help`).
"""

import sys

from bert.tools.gpu.learning_proof import main

if __name__ == "__main__":
    sys.exit(main())
