#!/usr/bin/env python3
"""Logs laid out as a submission, checked, scored.

The command line of bert/submission/package.py (`--help`).
"""

import sys

from bert.submission.package import main

if __name__ == "__main__":
    sys.exit(main())
