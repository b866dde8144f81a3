#!/usr/bin/env bash
# The whole test suite: set up (nnlo with every extra the tests exercise: torch, MPICH, TensorFlow, test tools;
# plus the private Slurm the scheduler tests start), then run pytest. In CI (CI=true) the tests that need Slurm,
# MPI or TensorFlow must run: they fail instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh torch,mpi,tf,test
scripts/install-slurm.sh
if [ "${CI:-}" = "true" ]; then
  export NNLO_REQUIRE_SLURM=1 NNLO_REQUIRE_MPI=1 NNLO_REQUIRE_TF=1
fi
exec .venv/bin/python -m pytest -q -rs "$@"
