"""Atomic file writing lives in the bottom layer, bert/core/files.py; this name stays for the
data-preparation modules that still import it from here."""
from bert.core.files import atomic_path, temp_name, write_text_atomic  # noqa: F401
