#!/usr/bin/env python3
"""Prepare the MLPerf BERT data: text shards -> training shards and the eval set.

The command line of data/prepare/cli.py (`--help`).
"""

import sys

from data.prepare.cli import main

if __name__ == "__main__":
    sys.exit(main())
