#!/usr/bin/env python3
"""SDPA backends against an fp64 reference.

The command line of bert/tools/gpu/probe_sdpa.py (`--help`).
"""

import sys

from bert.tools.gpu.probe_sdpa import main

if __name__ == "__main__":
    sys.exit(main())
