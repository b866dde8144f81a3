#!/usr/bin/env bash
# The GPU checks in one go (issue 29): the tests marked `gpu` (tests/gpu), then the all-reduce and the
# parameter-server exchange benchmarks on the device, writing bench/results/allreduce-gpu.json and
# bench/results/ps_exchange-gpu.json. About 5 minutes on one GPU (each step has its own time limit; the whole
# stays under 8 minutes).
#
#   scripts/gpu-check.sh                    # on a GPU node, from any folder
#   scripts/gpu-check.sh --copy-to DIR      # also copy the result files into DIR
#
# Without a GPU it checks nothing, says why and exits 0, so it is safe anywhere. With one it needs torch with
# CUDA, mpi4py with an MPI library and pytest in the Python it runs (the repository's .venv when present, else
# $PYTHON, else python3); a missing one is a one-line error (exit 1). Exit status: 0 every step passed (or no
# GPU), 1 a step failed (its name is printed; the others still ran).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
copy_to=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --copy-to) copy_to="${2:?--copy-to needs a folder}"; shift 2 ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu-check: unknown option '$1'; use --copy-to DIR or --help" >&2; exit 2 ;;
  esac
done

if [[ -n "${PYTHON:-}" ]]; then py="$PYTHON"
elif [[ -x "$repo/.venv/bin/python" ]]; then py="$repo/.venv/bin/python"
else py="$(command -v python3 || true)"; fi
if [[ -z "$py" ]] || ! command -v "$py" >/dev/null; then
  echo "gpu-check: skipped, nothing to check here: no Python${py:+ at $py} (set PYTHON)"; exit 0
fi
cd "$repo"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

# 1. Is there a GPU at all? (never an error: most machines have none)
gpus=$("$py" - <<'EOF' 2>/dev/null
import sys
try:
    import torch
except Exception as e:
    print(f"torch does not import ({type(e).__name__})"); sys.exit(1)
if not torch.cuda.is_available():
    print(f"torch {torch.__version__} sees no CUDA GPU (torch.cuda.is_available() is False)"); sys.exit(1)
print(torch.cuda.device_count())
EOF
)
if [[ $? -ne 0 ]]; then
  echo "gpu-check: skipped, nothing to check here: ${gpus:-torch does not start}"
  exit 0
fi
echo "gpu-check: $gpus GPU(s): $("$py" -c 'import torch; print(torch.cuda.get_device_name(0))'), $("$py" --version)"

# 2. What the checks need besides the GPU.
missing=$("$py" - <<'EOF' 2>&1
import importlib
need = {"mpi4py.MPI": "mpi4py with an MPI library (pip install mpich mpi4py)", "pytest": "pytest",
        "h5py": "h5py", "click": "click", "psutil": "psutil", "jinja2": "jinja2"}
for module, what in need.items():
    try:
        importlib.import_module(module)
    except Exception as e:
        print(f"{what} ({type(e).__name__}: {e})")
        break
EOF
)
if [[ -n "$missing" ]]; then
  echo "gpu-check: error: this Python lacks $missing; install it (or carry its wheel) and rerun" >&2
  exit 1
fi

ranks=$(( gpus >= 2 ? 2 : 1 ))
failed=()
step() {  # step NAME SECONDS COMMAND...: run one step under a time limit, remember a failure
  local name="$1" limit="$2"; shift 2
  echo "=== $name ($(date -u +%H:%M:%S), limit ${limit}s)"
  timeout --signal=TERM --kill-after=15 "$limit" "$@"
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "gpu-check: step '$name' failed (exit $rc)" >&2
    failed+=("$name")
  fi
}

step "tests marked gpu" 210 "$py" -m pytest -q -m gpu tests/gpu -p no:cacheprovider -rs --timeout 150
step "all-reduce benchmark on the GPU" 150 "$py" bench/allreduce.py --device cuda --ranks "$ranks" \
  --params 10000000 50000000 --repeats 5 --warmup 2 --out bench/results/allreduce-gpu.json
if "$py" -c 'import sys, pathlib, shutil; sys.exit(0 if (pathlib.Path(sys.executable).parent / "mpirun").exists() or shutil.which("mpirun") else 1)'; then
  step "parameter-server exchange benchmark, GPU worker" 120 "$py" bench/ps_exchange.py --device cuda \
    --params 10000 1000000 25000000 --repeats 7 --out bench/results/ps_exchange-gpu.json
else
  echo "gpu-check: no mpirun here: the 2-rank exchange benchmark is left out" >&2
  failed+=("parameter-server exchange benchmark (no mpirun)")
fi

if [[ -n "$copy_to" ]]; then
  mkdir -p "$copy_to" && cp -f bench/results/*-gpu.json "$copy_to"/ 2>/dev/null || true
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "gpu-check: failed: ${failed[*]}" >&2
  exit 1
fi
echo "gpu-check: all steps passed; results in bench/results/*-gpu.json"
