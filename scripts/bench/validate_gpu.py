#!/usr/bin/env python3
"""The GPU harness, run by validate_gpu.sh.

The command line of bert/tools/gpu/validate.py (`--help`).
"""

import sys

from bert.tools.gpu.validate import main

if __name__ == "__main__":
    sys.exit(main())
