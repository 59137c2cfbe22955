#!/usr/bin/env python3
"""The official compliance checker on result logs.

The command line of bert/submission/compliance.py (`--help`).
"""

import sys

from bert.submission.compliance import main

if __name__ == "__main__":
    sys.exit(main())
