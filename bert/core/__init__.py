"""The bottom layer: what every package of the project may import, and which imports nothing of
the project itself (tests/tools/test_architecture.py). The bad-input error family (errors.py),
the one input rule every command's parsing uses (inputs.py), the readers of user files
(readers.py), config sections (settings.py) and atomic file writes (files.py)."""
