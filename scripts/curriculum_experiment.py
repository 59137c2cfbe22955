#!/usr/bin/env python3
"""Bucket curricula on the tiny CPU BERT.

The command line of bert/tools/curriculum_experiment.py (`--help`).
"""

from bert.tools.curriculum_experiment import main

if __name__ == "__main__":
    main()
