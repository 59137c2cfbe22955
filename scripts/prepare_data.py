#!/usr/bin/env python3
"""Prepare the MLPerf BERT data: text shards -> training shards and the eval set.

`open-bert-prepare` in a checkout: data/prepare/cli.py's command line (`--help`), with its
--config read by bert/prepare.py.
"""

import sys

from bert.prepare import main

if __name__ == "__main__":
    sys.exit(main())
