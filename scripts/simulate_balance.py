#!/usr/bin/env python3
"""Per-rank token balance of each strategy.

The command line of bert/tools/simulate_balance.py (`--help`).
"""

import sys

from bert.tools.simulate_balance import main

if __name__ == "__main__":
    sys.exit(main())
