"""The bottom layer: what every package of the project may import, and which imports nothing of
the project itself (tests/tools/test_architecture.py). The bad-input error family (errors.py) and
atomic file writes (files.py)."""
