#!/usr/bin/env python3
"""Pytest with one module unimportable.

The command line of bert/tools/gpu/pytest_without.py (`--help`).
"""

import sys

from bert.tools.gpu.pytest_without import main

if __name__ == "__main__":
    sys.exit(main())
