"""The file names of a training checkpoint folder, stated once: the checkpoint package writes
them (bert/train/checkpoint/layout.py), and the readers below it recognise a folder by them
(bert/model/weights.py: a folder passed as an init checkpoint; bert/convert/formats.py: the
weights of a checkpoint to export)."""

MANIFEST = "manifest.json"  # what the folder holds: step, samples, seed, format version
TRAINER_FILE = "trainer.pt"  # the shared state: model, optimizer, progress
