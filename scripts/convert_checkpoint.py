#!/usr/bin/env python3
"""Phase-1 checkpoint conversion.

The command line of bert/convert/cli.py (`--help`).
"""

import sys

from bert.convert.cli import main

if __name__ == "__main__":
    sys.exit(main())
