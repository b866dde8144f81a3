#!/usr/bin/env bash
# Run nnlo's benchmarks: bench/run.sh [NAME...] [-- ARGS...]
#
#   bench/run.sh                         all benchmarks, default settings (~1-2 min each on 2 cores)
#   bench/run.sh ps_exchange allreduce   only these
#   bench/run.sh search --seeds 10       one benchmark with its own options (see bench/NAME.py --help)
#   bench/run.sh --quick                 every benchmark in its tiny smoke-test setting
#
# Each writes bench/results/NAME.json (machine, load, rerun command, medians and spreads) and prints its
# ratios. The Python is the repository's .venv when present (its mpirun is used for MPI benchmarks), else
# $PYTHON or python3.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
all=(ps_exchange allreduce scaling search orchestration startup hetero proposers validation fold_noise fidelity)
extra=(slurm_requeue)

if [[ -n "${PYTHON:-}" ]]; then py="$PYTHON"
elif [[ -x "$repo/.venv/bin/python" ]]; then py="$repo/.venv/bin/python"
else py="$(command -v python3)"; fi

names=()
args=()
for a in "$@"; do
  if [[ ${#args[@]} -eq 0 && "$a" != -* && -f "$here/$a.py" ]]; then
    names+=("$a")
  elif [[ "$a" == "--" ]]; then
    continue
  elif [[ ${#args[@]} -eq 0 && "$a" != -* ]]; then
    echo "bench/run.sh: no benchmark named '$a'; choose from: ${all[*]} ${extra[*]}" >&2
    exit 2
  else
    args+=("$a")
  fi
done
if [[ ${#names[@]} -eq 0 ]]; then names=("${all[@]}"); fi
if [[ ${#names[@]} -gt 1 && ${#args[@]} -gt 0 && "${args[*]}" != "--quick" ]]; then
  echo "bench/run.sh: options other than --quick go to one benchmark at a time (bench/run.sh NAME OPTIONS)" >&2
  exit 2
fi

cd "$repo"
failed=()
for n in "${names[@]}"; do
  echo "=== $n $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo ?)"
  if ! "$py" "$here/$n.py" "${args[@]+"${args[@]}"}"; then
    failed+=("$n")
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "bench/run.sh: failed: ${failed[*]}" >&2
  exit 1
fi
