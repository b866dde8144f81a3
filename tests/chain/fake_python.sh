#!/bin/bash
# The test profiles' "python": runs tests/chain/payload.py in place of `-m nnlo_sched run RUN_DIR` and is the
# real interpreter for everything else (`-m nnlo_sched job start|end`), so the chain code under test is real.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
real=${NNLO_TEST_REAL_PYTHON:?NNLO_TEST_REAL_PYTHON is not set}
if [ "$1" = "-m" ] && [ "$2" = "nnlo_sched" ] && [ "$3" = "run" ]; then
  exec "$real" "$here/payload.py" "$4"
fi
exec "$real" "$@"
