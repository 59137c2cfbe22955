#!/usr/bin/env python3
"""Phase-1 checkpoint conversion.

The command line of bert/tools/convert_checkpoint.py (`--help`).
"""

import sys

from bert.tools.convert_checkpoint import main

if __name__ == "__main__":
    sys.exit(main())
