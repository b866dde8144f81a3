#!/usr/bin/env bash
# Set up .venv with nnlo, PyTorch (CPU build, pinned), MPICH and mpi4py. Idempotent and quiet when done.
# Usage: scripts/setup.sh [extra,extra...]   (default: torch,mpi; the test script adds test,tf,tensorboard,mlflow)
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-torch,mpi}
py=${PYTHON:-python3}
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "nnlo needs Python 3.11 or newer ($py is $("$py" --version 2>&1)); set PYTHON=python3.11" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$py" -m venv .venv
stamp=".venv/.nnlo-setup-$(cat setup.cfg setup.py plugins/submitit-pbs/setup.cfg | sha1sum | cut -c1-12)-${extras//,/_}"
if [ ! -e "$stamp" ]; then
  echo "setup: installing nnlo-hpc[$extras] into .venv (first run takes a few minutes)"
  export PIP_DISABLE_PIP_VERSION_CHECK=1
  # The distribution was called "nnlo" before (PyPI's nnlo is another project): a venv set up then holds it
  # beside the new name, with the same packages and command; uninstall it first.
  if .venv/bin/pip show -q nnlo >/dev/null 2>&1; then .venv/bin/pip uninstall -q -y nnlo; fi
  # The CPU build of torch, pinned: an unpinned torch would pull gigabytes of CUDA packages.
  case ",$extras," in *,torch,*) .venv/bin/pip install -q "torch==2.13.0" ;; esac
  .venv/bin/pip install -q -e ".[$extras]"
  # nnlo's PBS executor for submitit (cluster="pbs"): a second, code-less distribution, because submitit
  # reads one "executor" entry point per distribution and nnlo's own holds the LSF one.
  .venv/bin/pip install -q ./plugins/submitit-pbs
  touch "$stamp"
fi
