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

Every output is written under a hidden temporary name and renamed when complete, so a killed
step leaves no half-written file under a final name, and rerunning the same command resumes:
examples and to-varlen skip outputs that exist; reshard skips inputs already split (a
done-marker each) and shards already written, and refuses a rerun with other inputs or
parameters; pick-eval, checksums and the content hashes are cheap and redone (same bytes);
`all` is these in order. A rerun deletes the temporary files of writers no longer running
(bert.core.files.remove_stale_temps). tests/integration/test_prepare_resume.py kills `all`
with SIGKILL mid-run and checks that the rerun's files are byte-identical to an uninterrupted run's.

Each step prints progress on stderr, one line per finished file (files done/total, samples,
rate, ETA: progress.py), and first the bytes it will write; it refuses (DiskSpaceError: exit
status 2) when the output filesystem lacks them (disk.py says how each is estimated; the
environment variable BERT_PREPARE_FREE_BYTES fakes the free space for tests). `--quiet`
silences stderr; stdout keeps the result lines. Bad input raises
data.sources.shards.DataError naming the file, the field and the value.

(The phase-1 checkpoint's name mappings live with the model: bert/model/weights.py.)
"""
