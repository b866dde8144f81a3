"""A stand-in for one participant of a shared ``nnlo optimize --shared`` in the orchestration tests.

Run as ``python search_payload.py RUN_DIR`` (by ``fake_python_search.sh``) in place of ``python -m nnlo_sched
run RUN_DIR``, it follows the runtime contract a chain relies on, with a toy journal in the runtime's line
format (``{"crc": ..., "rec": {"kind", "p", "id", ...}}``, nnlo/optimize/journal.py) so that ``nnlo status``
reads it like a real one: the search's
folder is the spec's ``--output``, the participant ``$NNLO_PARTICIPANT``. Under an ``flock`` on the journal it
leases the lowest trial id that is neither finished nor leased (a lease expires after ``LEASE_S``; leases of
its own participant from a killed earlier job are taken back at start), "trains" it (a sleep of
``--model-arg trial_seconds=S``), appends the result unless another participant already did, and rewrites
trials.csv and best.json from the journal. It exits 0 once the budget (``--num-iterations``) is complete
(whoever completed it), notes the search's count of results in the run's progress record (as the runtime's
every save does, ``nnlo.job.search_saved``), exits 75 after releasing its lease on SIGTERM/SIGUSR1/SIGUSR2
or before ``NNLO_DEADLINE``,
and 75 after ``--model-arg trials_per_job=K`` trials of its own (a walltime forced by count: a search of N trials
needs at least ceil(N / K) jobs on any machine, so resubmission is tested without racing the clock).
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
import zlib
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
trials_per_job = int(spec["config"]["model_args"].get("trials_per_job", 0))  # 0: no quota
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
    return [json.loads(ln)["rec"] for ln in journal.read_text().splitlines() if ln.strip()]


def append(rec: dict) -> None:
    body = json.dumps(dict(rec, p=me, t=time.time()), separators=(",", ":"), sort_keys=True)
    with open(journal, "a") as f:
        f.write(f'{{"crc":"{zlib.crc32(body.encode()):08x}","rec":{body}}}\n')
        f.flush()
        os.fsync(f.fileno())


def view(recs: list[dict]) -> tuple[dict[int, dict], dict[int, dict], set[int]]:
    """(results by trial, live leases by trial, every trial id ever proposed)."""
    results: dict[int, dict] = {}
    leases: dict[int, dict] = {}
    proposed: set[int] = set()
    for r in recs:
        if r["kind"] == "result":
            results.setdefault(r["id"], r)
            leases.pop(r["id"], None)
        elif r["kind"] in ("propose", "lease"):
            proposed.add(r["id"])
            leases[r["id"]] = r
        elif r["kind"] == "release":
            leases.pop(r["id"], None)
    now = time.time()
    return results, {t: r for t, r in leases.items() if r["until"] > now}, proposed


def take() -> int | str | None:
    recs = read()
    results, leases, proposed = view(recs)
    if len(results) >= budget:
        return "done"
    for t, r in list(leases.items()):
        if r["p"] == me:  # mine, from a job of my chain that was killed: back to the pool
            append({"kind": "release", "id": t})
            del leases[t]
    for t in range(budget):
        if t not in results and t not in leases:
            kind = "lease" if t in proposed else "propose"
            append({"kind": kind, "id": t, "until": time.time() + LEASE_S, **({"params": {"t": t}} if kind ==
                                                                              "propose" else {})})
            return t
    return None


def report(t: int, fom: float) -> None:
    results, _, _ = view(read())
    if t not in results:
        rec = {"kind": "result", "id": t, "p": me, "trial": {"id": t, "params": {"t": t}, "status": "ok", "fom": fom}}
        append(rec)
        results[t] = rec
    rows = sorted(results.values(), key=lambda r: r["id"])
    tmp = out / f".trials.{os.getpid()}"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trial", "status", "fom", "participant"])
        for r in rows:
            w.writerow([r["id"], "ok", r["trial"]["fom"], r["p"]])
    os.replace(tmp, out / "trials.csv")
    best = min(rows, key=lambda r: r["trial"]["fom"])
    (out / f".best.{os.getpid()}").write_text(json.dumps({"best_fom": best["trial"]["fom"], "fom_name": "val_loss",
                                                           "trials_done": len(rows), "trials_total": budget}))
    os.replace(out / f".best.{os.getpid()}", out / "best.json")
    # the search's progress, as the runtime's every save notes it (nnlo.job.search_saved): the chain goes on
    # after a job only if the count of results grew during it
    record = run_dir / "progress.json"
    (run_dir / ".progress.tmp").write_text(json.dumps({"checkpoint": str(journal), "saved_at": time.time(),
                                                       "results": len(rows)}))
    os.replace(run_dir / ".progress.tmp", record)


reported = 0  # trials this job completed
while True:
    if trials_per_job and reported >= trials_per_job and len(locked(lambda: view(read())[0])) < budget:
        print(f"search-payload {me}: stopping (deadline: trials_per_job={trials_per_job})", flush=True)
        sys.exit(75)
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
        locked(lambda got=got: append({"kind": "release", "id": got}))
        continue
    locked(lambda got=got: report(got, (got * 7919 % 97) / 97.0))
    reported += 1
