#!/usr/bin/env bash
# Fetch and verify the MLCommons BERT inputs (docs/data_download.md): a front end for
#   python -m data.download [OUT] [--metadata URL ...] [--all]
# (PYTHON picks the interpreter; the package must be importable: pip install -e .)
exec "${PYTHON:-python3}" -m data.download "$@"
