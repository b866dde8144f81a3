#!/usr/bin/env python3
"""Recording stand-ins for LSF (bsub, bjobs, bkill) and PBS/Torque (qsub, qstat, qdel).

Linked under those names into a test's bin folder. Each call is appended as one JSON line to
``$STANDIN_DIR/calls.jsonl`` (program, argv, the script read from stdin for bsub) and the jobs live in
``$STANDIN_DIR/jobs.json`` (id -> state), which the tests change to play the scheduler (start, finish,
forget a job). The answers copy the real programs' output formats and exit statuses:

* ``bsub``: ``Job <1001> is submitted to queue <batch>.``
* ``bjobs -a -w ID...``: the ``JOBID USER STAT QUEUE FROM_HOST EXEC_HOST JOB_NAME SUBMIT_TIME`` table;
  ``Job <ID> is not found`` on stderr for unknown ids, exit 255 when none is known.
* ``bkill ID...``: ``Job <ID> is being terminated``; ``Job <ID>: Job has already finished``, exit 255.
* ``qsub [-W depend=afterany:ID] SCRIPT``: ``1001.pbs01``.
* ``qstat ID...``: the ``Job ID  Name  User  Time Use S Queue`` table; ``qstat: Unknown Job Id ID`` on
  stderr and exit 153 for unknown ids.
* ``qdel ID...``: silent; ``qdel: Unknown Job Id ID``, exit 153.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import sys
from pathlib import Path

DIR = Path(os.environ["STANDIN_DIR"])
PROG = Path(sys.argv[0]).name
ARGS = sys.argv[1:]
LSF_STATES = {"PEND", "RUN", "DONE", "EXIT"}


def record(entry: dict) -> None:
    with open(DIR / "calls.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")


class Jobs:
    def __enter__(self):
        self.lock = open(DIR / "jobs.lock", "w")
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        path = DIR / "jobs.json"
        self.data = json.loads(path.read_text()) if path.exists() else {"next": 1001, "jobs": {}}
        return self.data

    def __exit__(self, *exc):
        (DIR / "jobs.json").write_text(json.dumps(self.data, indent=1))
        self.lock.close()


def _array(script: str, directive: str) -> range | None:
    """The index range of a job array asked for in the script (``#BSUB -J name[1-3]``, ``#PBS -J 1-3``)."""
    m = re.search(rf"^{directive}\s+\S*?\[?(\d+)-(\d+)\]?\s*$", script, re.MULTILINE)
    return range(int(m.group(1)), int(m.group(2)) + 1) if m else None


def bsub() -> int:
    script = sys.stdin.read()
    with Jobs() as db:
        jid = str(db["next"])
        db["next"] += 1
        db["jobs"][jid] = {"state": "PEND", "name": "nnlo", "args": ARGS}
        for i in _array(script, "#BSUB -J") or ():  # an array: its elements are jobs JID[i] named name[i]
            db["jobs"][f"{jid}[{i}]"] = {"state": "PEND", "name": f"nnlo[{i}]", "args": ARGS}
    record({"prog": "bsub", "args": ARGS, "script": script, "job": jid})
    print(f"Job <{jid}> is submitted to queue <batch>.")
    return 0


def bjobs() -> int:
    record({"prog": "bjobs", "args": ARGS})
    ids = [a for a in ARGS if not a.startswith("-")]
    with Jobs() as db:
        known = [(j, db["jobs"][j]) for j in ids if j in db["jobs"]]
    missing = [j for j in ids if j not in dict(known)]
    if known:
        print("JOBID   USER    STAT  QUEUE      FROM_HOST   EXEC_HOST   JOB_NAME   SUBMIT_TIME")
        for j, info in known:
            exec_host = "batch1" if info["state"] in ("RUN", "DONE", "EXIT") else "-"
            j = j.split("[")[0]  # bjobs prints an array element as JOBID 123, JOB_NAME name[4]
            print(f"{j:<7} root    {info['state']:<5} batch      login1      {exec_host:<11} {info['name']:<10} Nov 21 09:00")
    for j in missing:
        print(f"Job <{j}> is not found", file=sys.stderr)
    return 0 if known else 255


def bkill() -> int:
    record({"prog": "bkill", "args": ARGS})
    rc = 0
    with Jobs() as db:
        for j in ARGS:
            info = db["jobs"].get(j)
            if info is None:
                print(f"Job <{j}>: No matching job found", file=sys.stderr)
                rc = 255
            elif info["state"] in ("DONE", "EXIT"):
                print(f"Job <{j}>: Job has already finished", file=sys.stderr)
                rc = 255
            else:
                info["state"] = "EXIT"
                print(f"Job <{j}> is being terminated")
    return rc


def qsub() -> int:
    script = Path(ARGS[-1]).read_text()
    with Jobs() as db:
        array = _array(script, "#PBS -J")
        jid = f"{db['next']}{'[]' if array else ''}.pbs01"
        for i in array or ():  # PBS Pro: qsub prints 123[].server, the subjobs are 123[i].server
            db["jobs"][f"{db['next']}[{i}].pbs01"] = {"state": "Q", "name": "nnlo", "args": ARGS}
        db["next"] += 1
        db["jobs"][jid] = {"state": "Q", "name": "nnlo", "args": ARGS}
    record({"prog": "qsub", "args": ARGS, "script": script, "job": jid})
    print(jid)
    return 0


def qstat() -> int:
    record({"prog": "qstat", "args": ARGS})
    ids = [a for a in ARGS if not a.startswith("-")]
    with Jobs() as db:
        known = [(j, db["jobs"][j]) for j in ids if j in db["jobs"]]
    if known:
        print("Job ID                    Name             User            Time Use S Queue")
        print("------------------------- ---------------- --------------- -------- - -----")
        for j, info in known:
            print(f"{j:<25} {info['name']:<16} root            00:00:00 {info['state']} batch")
    rc = 0
    for j in ids:
        if j not in dict(known):
            print(f"qstat: Unknown Job Id {j}", file=sys.stderr)
            rc = 153
    return rc


def qdel() -> int:
    record({"prog": "qdel", "args": ARGS})
    rc = 0
    with Jobs() as db:
        for j in ARGS:
            info = db["jobs"].get(j)
            if info is None or info["state"] == "C":
                print(f"qdel: Unknown Job Id {j}", file=sys.stderr)
                rc = 153
            else:
                info["state"] = "C"
    return rc


if __name__ == "__main__":
    sys.exit({"bsub": bsub, "bjobs": bjobs, "bkill": bkill, "qsub": qsub, "qstat": qstat, "qdel": qdel}[PROG]())
