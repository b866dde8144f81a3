#!/usr/bin/env bash
# The main job: set up, turn scikit-learn's bundled digits into HDF5 files, and train on them with
# 1 master + 2 workers (GEM mode) as a checkpoint-restart CHAIN on this machine: `nnlo submit --cluster local`,
# then `nnlo preempt RUN --wait` stops the first job as soon as training is under way in it (its first
# checkpoint): the job gets the chain's warning signal, checkpoints and exits 75, and the queued successor
# resumes from the checkpoint. That stop is forced, at any machine speed; the per-job walltime stays as the
# second, real mechanism (on a busy machine later jobs also stop at it and are resumed). The script waits for
# the chain (`nnlo wait`), prints `nnlo status` (jobs, epochs, best figure of merit) and the final accuracy,
# and fails (non-zero) unless the run is done, a job was stopped and resumed by the next, and the run reached
# the accuracy bar.
#
# Environment: SETUP=0 skips the set-up (a clone already set up), EPOCHS (default 200), WALLTIME (per job, default 60s), MIN_ACCURACY (default 0.90),
# NNLO_HOME (where the run directory goes, default ./nnlo-runs in the clone, where every later `nnlo`
# command run from the clone finds it). Extra arguments go to `nnlo train`.
set -euo pipefail
called_from=$PWD
cd "$(dirname "$0")/.."
root=$PWD
[ "${SETUP:-1}" = 0 ] || scripts/setup.sh torch,mpi
.venv/bin/python examples/make_digits.py --out examples/data/digits
nnlo=.venv/bin/nnlo
min_accuracy=${MIN_ACCURACY:-0.90}

submitted=$("$nnlo" submit --cluster local --name digits --workers 2 --walltime "${WALLTIME:-60s}" \
  train --model examples/digits_torch.py \
  --train examples/data/digits/train.list --val examples/data/digits/val.list \
  --mode gem --epochs "${EPOCHS:-200}" --batch 32 "$@")
echo "$submitted"
run=$(sed -n 's/^submitted run \([^ ]*\) as job .*/\1/p' <<<"$submitted")
[ -n "$run" ] || { echo "demo: could not read the run id from nnlo submit" >&2; exit 1; }

# Stop the first job once training is under way in it, as a site's preemption or the walltime would: it
# checkpoints, and the successor the chain queued at its start resumes. Not fatal: a run that a busy machine
# already moved on at its walltime has shown the chain anyway (the verdict below counts both).
"$nnlo" preempt "$run" --wait 1800 || echo "demo: note: the run was not preempted (see above)"

wait_rc=0
# prints a line at each change of state; gives up (exit 1, run left alone) after 30 minutes
"$nnlo" wait "$run" --timeout 1800 || wait_rc=$?
echo
"$nnlo" status "$run"
echo

# The verdict, from the run's own records (nnlo status --json and the training history).
view=$("$nnlo" status "$run" --json)
.venv/bin/python - "$view" "$min_accuracy" <<'PY'
import json
import sys
from pathlib import Path

view, bar = json.loads(sys.argv[1]), float(sys.argv[2])
started = [j for j in view["jobs"] if j["started_at"]]
resumed = [j for j in started[:-1] if j["status"] in ("preempted", "walltime")]
preempted = [j for j in resumed if j["status"] == "preempted"]
try:
    hist = json.loads((Path(view["dir"]) / "history.json").read_text())
except (OSError, ValueError):
    hist = []
entries = hist["history"] if isinstance(hist, dict) else hist
acc = entries[-1].get("val_accuracy") if entries else None
state, run_id = view["state"], view["run_id"]
print(f"demo: run {run_id} {state}: {len(started)} job(s), {len(resumed)} stopped with a checkpoint and resumed by "
      f"the next ({len(preempted)} preempted, {len(resumed) - len(preempted)} at the walltime); "
      f"{len(entries)} epoch(s); final val_accuracy {acc}")
problems = []
if state != "done":
    problems.append(f"the run is {state}, not done ({view.get('error') or 'no error recorded'})")
    if "without writing a new checkpoint" in (view.get("error") or ""):
        problems.append("a job spent its whole walltime starting up (a busy machine?): "
                        "run it again with a longer one, e.g. WALLTIME=90s scripts/demo.sh")
if not resumed:
    problems.append("no job was stopped and resumed by the next: the chain was not exercised (the training "
                    "ended before `nnlo preempt` could stop it: raise EPOCHS)")
if acc is None or acc < bar:
    problems.append(f"final val_accuracy {acc} is below {bar}")
for p in problems:
    print(f"demo: FAILED: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
[ "$wait_rc" -eq 0 ] || exit "$wait_rc"
# The hint works as printed from where the script was started.
here=""
[ "$called_from" = "$root" ] || here="cd $root && "
echo "demo: OK (logs: ${here}.venv/bin/nnlo logs $run; status: ${here}.venv/bin/nnlo status $run)"
