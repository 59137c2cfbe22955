#!/usr/bin/env python3
"""Varlen attention paths timed and checked against an fp64 yardstick.

The command line of bert/tools/gpu/probe_attention.py (`--help`).
"""

import sys

from bert.tools.gpu.probe_attention import main

if __name__ == "__main__":
    sys.exit(main())
