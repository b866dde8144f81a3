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

import re
import sys
from pathlib import Path

import tests.helpers.standins as common  # a program: the checkout is on its PYTHONPATH
from tests.helpers.standins import Jobs, record

PROG = Path(sys.argv[0]).name
ARGS = sys.argv[1:]
LSF_STATES = {"PEND", "RUN", "DONE", "EXIT"}


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
    def row(j: str, info: dict) -> tuple[str, str, str, str]:
        exec_host = "batch1" if info["state"] in ("RUN", "DONE", "EXIT") else "-"
        return j.split("[")[0], info["state"], exec_host, info["name"]  # an array element: JOBID 123, name[4]

    return common.bjobs(ARGS, row)


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
    return common.qstat(ARGS, lambda info: info["name"])


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
