"""Repository root on sys.path, so tests import `bert`, `data` and `kernels` as a user would."""
