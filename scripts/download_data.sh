#!/usr/bin/env bash
# Fetch the MLCommons BERT inputs onto this machine (run by hand; tests never run it).
#
#   TEXT_SHARDS=... EVAL_TEXT=... VOCAB=... CHECKPOINT=... scripts/download_data.sh [OUT]
#
# The four inputs (REFERENCE 2):
#   TEXT_SHARDS  the 500 cleaned Wikipedia 2020-01-01 text shards (part-00000-of-00500 ...):
#                an archive (.tar, .tar.gz, .tgz) or a folder
#   EVAL_TEXT    eval.txt, the 10,000 held-out articles
#   VOCAB        vocab.txt, the uncased BERT WordPiece vocabulary (30522 tokens)
#   CHECKPOINT   a folder (or base URL) holding the phase-1 TF1 checkpoint model.ckpt-28252
#                (.index and .data-00000-of-00001) and its bert_config.json
# Each is an http(s):// URL (curl, resumable), a gs:// URL (gsutil) or a local path. The
# locations are published in the BERT README of the MLCommons training repository
# (language_model/tensorflow/bert); this script does not hard-code them, as they have moved
# over time. OUT defaults to /data/bert; the files land in OUT/download/.
#
# Next steps (printed at the end):
#   python scripts/prepare_data.py all --train-text OUT/download/text --eval-text ... --out OUT
#   python scripts/convert_checkpoint.py tf OUT/download/phase1/model.ckpt-28252 ...

set -euo pipefail

OUT="${1:-/data/bert}"
DL="$OUT/download"
README_HINT="see the BERT README of the MLCommons training repository"
README_HINT+=" (language_model/tensorflow/bert)"

need() {
  local name="$1"
  if [[ -z "${!name:-}" ]]; then
    echo "download_data.sh: set $name to its location; $README_HINT" >&2
    exit 2
  fi
}

# fetch SRC DEST: one file from a URL or a local path; a partial download is resumed.
fetch() {
  local src="$1" dest="$2"
  mkdir -p "$(dirname "$dest")"
  case "$src" in
    http://* | https://*)
      curl -fL --retry 5 -C - -o "$dest.part" "$src" && mv "$dest.part" "$dest" ;;
    gs://*) gsutil cp "$src" "$dest" ;;
    *) cp "$src" "$dest" ;;
  esac
}

fetch_text_shards() {
  local dest="$DL/text"
  if [[ -d "$TEXT_SHARDS" ]]; then
    mkdir -p "$dest" && cp -r "$TEXT_SHARDS"/. "$dest"/
    return
  fi
  local archive="$DL/$(basename "$TEXT_SHARDS")"
  [[ -f "$archive" ]] || fetch "$TEXT_SHARDS" "$archive"
  mkdir -p "$dest" && tar -xf "$archive" -C "$dest"
}

fetch_checkpoint() {
  local name
  for name in model.ckpt-28252.index model.ckpt-28252.data-00000-of-00001 bert_config.json; do
    [[ -f "$DL/phase1/$name" ]] || fetch "${CHECKPOINT%/}/$name" "$DL/phase1/$name"
  done
}

main() {
  for name in TEXT_SHARDS EVAL_TEXT VOCAB CHECKPOINT; do need "$name"; done
  mkdir -p "$DL"
  fetch_text_shards
  [[ -f "$DL/eval.txt" ]] || fetch "$EVAL_TEXT" "$DL/eval.txt"
  [[ -f "$DL/vocab.txt" ]] || fetch "$VOCAB" "$DL/vocab.txt"
  fetch_checkpoint

  local shards vocab_lines text_dir
  shards=$(find "$DL/text" -type f -name 'part-*' | wc -l)
  text_dir=$(dirname "$(find "$DL/text" -type f -name 'part-*' | sort | head -n 1)")
  vocab_lines=$(wc -l < "$DL/vocab.txt")
  echo "text shards: $shards in $text_dir (expected 500);" \
    "vocab: $vocab_lines tokens (expected 30522)"
  cat <<EOF
next:
  python scripts/prepare_data.py all --train-text $text_dir --eval-text $DL/eval.txt \\
      --vocab $DL/vocab.txt --out $OUT --num-shards 4320 --workers \$(nproc)
  pip install tensorflow-cpu   # only for the one-time checkpoint conversion
  python scripts/convert_checkpoint.py tf $DL/phase1/model.ckpt-28252 \\
      --bert-config $DL/phase1/bert_config.json --out $OUT/phase1/model.ckpt-28252.pt
EOF
}

main
