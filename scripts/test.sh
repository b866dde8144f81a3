#!/usr/bin/env bash
# The whole test suite: set up (nnlo with every extra the tests exercise: torch, MPICH, TensorFlow, test
# tools, the tracking extras; Horovod built against the venv's MPICH; the packages of the private Slurm the scheduler tests
# start), then lint (ruff) and type-check (mypy) nnlo and nnlo_sched, then run pytest under coverage, counting
# every process the tests start (MPI ranks, job shells' Python, subprocesses), and print coverage's report
# (its last line is the TOTAL). In CI (CI=true) the tests that need Slurm, MPI, TensorFlow or Horovod must
# run: they fail instead of skipping. See docs/testing.md.
#
#   scripts/test.sh                 everything (what CI runs), on two pytest workers
#   scripts/test.sh --fast          the inner loop: lint, types and the tests that start no process, no coverage
#   scripts/test.sh [--fast] ARGS   ARGS go to pytest (e.g. -k chain, tests/sched)
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi
scripts/setup.sh torch,mpi,tf,test,tensorboard,mlflow
if [ "$fast" = 0 ]; then
  scripts/install-horovod.sh   # ~3 minutes the first time; nothing once built
  scripts/install-slurm.sh     # Debian packages for the private test Slurm (root + apt only; instant when present)
fi
if [ "${CI:-}" = "true" ]; then
  export NNLO_REQUIRE_SLURM=1 NNLO_REQUIRE_MPI=1 NNLO_REQUIRE_TF=1 NNLO_REQUIRE_HOROVOD=1
fi
# Lint, type and import-layer checks first (configured in pyproject.toml): a finding fails the test command.
.venv/bin/ruff check nnlo nnlo_sched
.venv/bin/mypy
.venv/bin/lint-imports

if [ "$fast" = 1 ]; then
  exec .venv/bin/python -m pytest -q -rs -m "not (mpi or slurm or slow or gpu)" "$@"
fi
# Coverage of every process: [tool.coverage.run] in pyproject.toml (patch = subprocess hands it to every Python
# child through the environment); each process writes its own data file beside COVERAGE_FILE, combined below.
export COVERAGE_FILE="$PWD/.coverage"
.venv/bin/coverage erase
rc=0
# Two pytest workers (pytest-xdist): the tests that wait (chains, walltimes, leases) overlap the ones that compute;
# the Slurm tests share one worker (their xdist_group). NNLO_TEST_WORKERS=0 runs them one after another.
.venv/bin/coverage run -m pytest -q -rs --durations=25 -n "${NNLO_TEST_WORKERS:-2}" --dist loadgroup "$@" || rc=$?
.venv/bin/coverage combine -q
.venv/bin/coverage report
exit "$rc"
