"""A stand-in for one participant of a shared ``nnlo optimize --shared`` in the orchestration tests.

Run as ``python search_payload.py RUN_DIR`` (by ``fake_python_search.sh``) in place of ``python -m nnlo_sched
run RUN_DIR``, it follows the runtime contract a chain relies on, with a toy journal of its own: the search's
folder is the spec's ``--output``, the participant ``$NNLO_PARTICIPANT``. Under an ``flock`` on the journal it
leases the lowest trial id that is neither finished nor leased (a lease expires after ``LEASE_S``; leases of
its own participant from a killed earlier job are taken back at start), "trains" it (a sleep of
``--model-arg trial_seconds=S``), appends the result unless another participant already did, and rewrites
trials.csv and best.json from the journal. It exits 0 once the budget (``--num-iterations``) is complete
(whoever completed it), 75 after releasing its lease on SIGTERM/SIGUSR1/SIGUSR2 or before ``NNLO_DEADLINE``.
The orchestration under test (``nnlo job start/end``, chains, arrays, status, cancel) is all real.
"""
from __future__ import annotations

import csv
import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path

LEASE_S = 5.0
run_dir = Path(sys.argv[1])
rank = int(os.environ.get("PMI_RANK") or os.environ.get("SLURM_PROCID") or 0)
if rank != 0:
    sys.exit(0)
spec = json.loads((run_dir / "spec.json").read_text())
budget = int(spec["search"]["num_iterations"])
out = Path(spec["workdir"] or ".", spec["search"]["output"] or run_dir)
trial_s = float(spec["config"]["model_args"].get("trial_seconds", 0.5))
me = os.environ.get("NNLO_PARTICIPANT") or "solo"
deadline = float(os.environ.get("NNLO_DEADLINE") or 1e18)
journal = out / "search-journal.jsonl"
stop = {"flag": False}
for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(s, lambda *_: stop.update(flag=True))


def locked(fn):
    with open(out / ".journal.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return fn()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read() -> list[dict]:
    if not journal.exists():
        return []
    return [json.loads(ln) for ln in journal.read_text().splitlines() if ln.strip()]


def append(rec: dict) -> None:
    with open(journal, "a") as f:
        f.write(json.dumps(rec) + "\n")
        f.flush()
        os.fsync(f.fileno())


def view(recs: list[dict]) -> tuple[dict[int, dict], dict[int, dict]]:
    """(results by trial, live leases by trial)."""
    results: dict[int, dict] = {}
    leases: dict[int, dict] = {}
    for r in recs:
        if r["type"] == "result":
            results.setdefault(r["trial"], r)
            leases.pop(r["trial"], None)
        elif r["type"] == "lease":
            leases[r["trial"]] = r
        elif r["type"] == "release":
            leases.pop(r["trial"], None)
    now = time.time()
    return results, {t: r for t, r in leases.items() if r["expires"] > now}


def take() -> int | str | None:
    recs = read()
    results, leases = view(recs)
    if len(results) >= budget:
        return "done"
    for t, r in list(leases.items()):
        if r["participant"] == me:  # mine, from a job of my chain that was killed: back to the pool
            append({"type": "release", "trial": t, "participant": me})
            del leases[t]
    for t in range(budget):
        if t not in results and t not in leases:
            append({"type": "lease", "trial": t, "participant": me, "expires": time.time() + LEASE_S})
            return t
    return None


def report(t: int, fom: float) -> None:
    results, _ = view(read())
    if t not in results:
        append({"type": "result", "trial": t, "participant": me, "fom": fom})
        results[t] = {"trial": t, "fom": fom, "participant": me}
    rows = sorted(results.values(), key=lambda r: r["trial"])
    tmp = out / f".trials.{os.getpid()}"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trial", "fom", "participant", "status"])
        for r in rows:
            w.writerow([r["trial"], r["fom"], r["participant"], "ok"])
    os.replace(tmp, out / "trials.csv")
    best = min(rows, key=lambda r: r["fom"])
    (out / f".best.{os.getpid()}").write_text(json.dumps({"best_fom": best["fom"], "fom_name": "val_loss",
                                                           "trials_done": len(rows), "trials_total": budget}))
    os.replace(out / f".best.{os.getpid()}", out / "best.json")


while True:
    if stop["flag"] or time.time() + 1.5 * trial_s + 1 > deadline:
        print(f"search-payload {me}: stopping ({'signal' if stop['flag'] else 'deadline'})", flush=True)
        sys.exit(75)
    got = locked(take)
    if got == "done":
        print(f"search-payload {me}: the search is complete", flush=True)
        sys.exit(0)
    if got is None:
        time.sleep(0.1)
        continue
    print(f"search-payload {me}: trial {got}", flush=True)
    end = time.time() + trial_s
    while time.time() < end and not stop["flag"]:
        time.sleep(0.02)
    if stop["flag"]:
        locked(lambda: append({"type": "release", "trial": got, "participant": me}))
        continue
    locked(lambda: report(got, (got * 7919 % 97) / 97.0))
