#!/usr/bin/env bash
# The main job: set up, turn scikit-learn's bundled digits into HDF5 files, and train on them with
# 1 master + 2 workers (mpirun on this machine, GEM mode), then print where the results are.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh torch,mpi
.venv/bin/python examples/make_digits.py --out examples/data/digits
exec .venv/bin/nnlo train -n 3 --model examples/digits_torch.py \
  --train examples/data/digits/train.list --val examples/data/digits/val.list \
  --mode gem --epochs "${EPOCHS:-15}" --batch 32 --checkpoint examples/data/digits-run "$@"
