#!/usr/bin/env bash
# Optional: build Horovod (PyTorch + MPI) into .venv so the Horovod all-reduce engine can be used and tested.
#
# Why a script: Horovod 0.28.1 is the last release and does not build from PyPI against torch >= 2.x headers
# that require C++17 (its CMakeLists.txt pin C++14). We take the sdist, raise the standard to 17 in its two
# CMakeLists.txt and build it against the venv's MPICH (mpicc from .venv/bin first on PATH), without
# TensorFlow/MXNet. Idempotent: does nothing when `import horovod.torch` already works. Takes ~3 minutes.
# Usage: scripts/install-horovod.sh   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(pwd)/.venv
py="$venv/bin/python"
[ -x "$py" ] || { echo "install-horovod: no .venv; run scripts/setup.sh first" >&2; exit 2; }
if "$py" -c 'import horovod.torch' 2>/dev/null; then
  exit 0
fi
command -v cmake >/dev/null || { echo "install-horovod: cmake not found; install it (apt-get install cmake or pip install cmake)" >&2; exit 2; }
[ -x "$venv/bin/mpicc" ] || { echo "install-horovod: $venv/bin/mpicc missing; install the 'mpich' extra (scripts/setup.sh) first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1
echo "install-horovod: building Horovod 0.28.1 (PyTorch, MPI) into .venv, a few minutes"
"$venv/bin/pip" download -q horovod==0.28.1 --no-deps --no-binary :all: -d "$work"
tar -xzf "$work"/horovod-0.28.1.tar.gz -C "$work"
src="$work/horovod-0.28.1"
for f in "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"; do
  [ -f "$f" ] && sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/g' "$f"
done
if grep -l 'CMAKE_CXX_STANDARD 14' "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt" 2>/dev/null; then
  echo "install-horovod: the C++14 pin is still there; this script knows Horovod 0.28.1 only" >&2; exit 1
fi
export PATH="$venv/bin:$PATH" MPICC="$venv/bin/mpicc" MPICXX="$venv/bin/mpicxx"
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
  HOROVOD_WITHOUT_GLOO=1 HOROVOD_CPU_OPERATIONS=MPI
export MAKEFLAGS="-j${HOROVOD_BUILD_JOBS:-2}"
"$venv/bin/pip" install -q --no-build-isolation "$src"
"$py" -c 'import horovod.torch as hvd; assert hvd.mpi_built(), "Horovod built without MPI"' \
  || { echo "install-horovod: built, but horovod.torch does not import with MPI" >&2; exit 1; }
echo "install-horovod: done"
