#!/usr/bin/env bash
# Flush this node's page cache, as MLPerf requires before each run.
# Exit status 0 if flushed, 1 if not allowed here (not root, read-only /proc/sys in a container).
# CLEAR_CACHE_SUDO=1 tries passwordless sudo when not root.
set -u
sync
if { echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null; then
  exit 0
fi
if [[ "${CLEAR_CACHE_SUDO:-0}" == 1 ]] \
  && sudo -n sh -c 'echo 3 > /proc/sys/vm/drop_caches' 2>/dev/null; then
  exit 0
fi
echo "drop_caches: cannot write /proc/sys/vm/drop_caches on $(hostname) (needs root, or" \
  "CLEAR_CACHE_SUDO=1 with passwordless sudo); the run will log cache_clear false" >&2
exit 1
