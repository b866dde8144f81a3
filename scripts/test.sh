#!/usr/bin/env bash
# The whole test suite: set up (nnlo with every extra the tests exercise: torch, MPICH, TensorFlow, test
# tools; Horovod built against the venv's MPICH; the packages of the private Slurm the scheduler tests
# start), then lint (ruff) and type-check (mypy) nnlo and nnlo_sched, then run pytest. In CI (CI=true) the
# tests that need Slurm, MPI, TensorFlow or Horovod must run: they fail instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh torch,mpi,tf,test
scripts/install-horovod.sh   # ~3 minutes the first time; nothing once built
scripts/install-slurm.sh     # Debian packages for the private test Slurm (root + apt only; instant when present)
if [ "${CI:-}" = "true" ]; then
  export NNLO_REQUIRE_SLURM=1 NNLO_REQUIRE_MPI=1 NNLO_REQUIRE_TF=1 NNLO_REQUIRE_HOROVOD=1
fi
# Lint, type and import-layer checks first (configured in pyproject.toml): a finding fails the test command.
.venv/bin/ruff check nnlo nnlo_sched
.venv/bin/mypy
.venv/bin/lint-imports
exec .venv/bin/python -m pytest -q -rs --durations=25 "$@"
