#!/usr/bin/env bash
# The whole test suite: set up (nnlo with every extra the tests exercise, plus the private Slurm the
# scheduler tests start), then run pytest. In CI (CI=true) tests that need Slurm or MPI must run, not skip.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh torch,mpi,test
if [ "${CI:-}" = "true" ]; then
  export NNLO_REQUIRE_SLURM=1 NNLO_REQUIRE_MPI=1
fi
exec .venv/bin/python -m pytest -q -rs "$@"
