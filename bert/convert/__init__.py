"""Checkpoint conversion between formats (`open-bert-convert`): NVIDIA/TF phase-1 checkpoints
in, Hugging Face out."""
