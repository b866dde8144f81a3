#!/bin/bash
# The search tests' "python": runs tests/chain/search_payload.py (one participant of a shared search) in place of
# `-m nnlo_sched run RUN_DIR`, and is the real interpreter for everything else (`nnlo job start|end`).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
real=${NNLO_TEST_REAL_PYTHON:?NNLO_TEST_REAL_PYTHON is not set}
if [ "$1" = "-m" ] && [ "$2" = "nnlo_sched" ] && [ "$3" = "run" ]; then
  exec "$real" "$here/search_payload.py" "$4"
fi
exec "$real" "$@"
