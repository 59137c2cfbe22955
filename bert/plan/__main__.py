"""python -m bert.plan: see bert/plan/cli.py."""

import sys

from bert.plan.cli import main

sys.exit(main())
