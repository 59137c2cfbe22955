"""Raw MLCommons BERT inputs -> the files training reads.

The steps, each a module with one job and a subcommand of `scripts/prepare_data.py`:

    examples      text shards -> fixed-length HDF5 (create_examples.py; reading and
                  WordPiece in wordpiece.py, Google's basic tokenizer in bert_text.py, both
                  exact: docs/tokenization.md; Google's instance/masking semantics in
                  instances.py, draw for draw in a compiled loop in instance_loop.py, the
                  fixed format in fixed.py)
    to-varlen     fixed-length HDF5 -> the variable-length format of data/sources/shards.py
                  (to_varlen.py)
    reshard       any number of input files -> N shards with a seeded global shuffle in
                  bounded memory (reshard.py)
    pick-eval     the 10,000 eval samples picked evenly from the processed eval text (eval_pick.py)
    checksums     sha256 manifest: write or verify (checksums.py)
    content hash  NVIDIA's per-file content hash of variable-length data, compared with its
                  published eval-set value (content_hash.py, python -m data.prepare.content_hash)
    check-distinct  no two shards start with the same samples (distinct.py; the known trap of
                  REFERENCE 2: identical shards capped accuracy near 0.62)

Every output is written under a temporary name and renamed when complete, so an interrupted
step leaves no half-written file and a rerun skips what is already there. Bad input raises
data.sources.shards.DataError naming the file, the field and the value.

(The phase-1 checkpoint's name mappings live with the model: bert/model/weights.py.)
"""
