#!/usr/bin/env python3
"""Recording stand-ins for LSF (bsub, bjobs, bkill), PBS/Torque and PBS Pro (qsub, qstat, qdel, qsig) and Flux
(flux batch|jobs|cancel|job kill|run).

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
* ``qstat -x -f -F json ID...`` (PBS Pro): ``{"pbs_server": ..., "Jobs": {ID: {"job_state": S, ...}}}`` with the
  known ids, ``qstat: Unknown Job Id ID`` on stderr and exit 153 for the others.
* ``qsig -s SIG ID...``: sends SIG to the job's batch shell (its ``pid``, which the test records when it starts
  the job), as PBS Pro signals the job's session; ``qsig: Unknown Job Id ID``, exit 153.
* ``flux [--parent] batch [--dependency=afterany:ID] SCRIPT``: the new job's F58 id (``ƒ...``);
  ``flux [--parent] jobs -a -n -o '{id.dec}|{id.f58}|{status}' ID...``: one row per known job;
  ``flux [--parent] cancel ID...``; ``flux [--parent] job kill -s SIG ID...`` (to the batch shell's ``pid``);
  ``flux run -N n -n k ... PROGRAM ARGS`` runs the program (one task: itself; more: on k ranks with this
  environment's ``mpirun``).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
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
    if "-F" in ARGS:  # PBS Pro's JSON
        record({"prog": "qstat", "args": ARGS})
        ids = [a for a in ARGS if not a.startswith("-") and a != "json"]
        rc = 0
        with Jobs() as db:
            known = {j: {"Job_Name": db["jobs"][j]["name"], "job_state": db["jobs"][j]["state"],
                         **({"Exit_status": db["jobs"][j]["exit"]} if "exit" in db["jobs"][j] else {})}
                     for j in ids if j in db["jobs"]}
        print(json.dumps({"timestamp": 1764380000, "pbs_version": "2022.1.3", "pbs_server": "pbs01",
                          "Jobs": known}, indent=4))
        for j in ids:
            if j not in known:
                print(f"qstat: Unknown Job Id {j}", file=sys.stderr)
                rc = 153
        return rc
    return common.qstat(ARGS, lambda info: info["name"])


def _deliver(ids: list[str], sig: str, running: set[str]) -> int:
    """Send SIG<sig> to the batch shell of each running job of ``ids``; 1 if one is not running."""
    rc = 0
    with Jobs() as db:
        for j in ids:
            info = db["jobs"].get(j)
            if info is None or info["state"] not in running or "pid" not in info:
                print(f"Unknown Job Id {j}", file=sys.stderr)
                rc = 1
            else:
                os.kill(info["pid"], getattr(signal, "SIG" + sig.removeprefix("SIG")))
    return rc


def qsig() -> int:
    record({"prog": "qsig", "args": ARGS})
    sig, ids = (ARGS[1], ARGS[2:]) if ARGS[:1] == ["-s"] else ("TERM", ARGS)
    return 153 if _deliver(ids, sig, {"R"}) else 0


_F58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def f58(n: int) -> str:
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = _F58[r] + out
    return "ƒ" + (out or "1")


def flux() -> int:
    args = ARGS[1:] if ARGS[:1] == ["--parent"] else ARGS
    sub, rest = args[0], args[1:]
    if sub != "run":
        record({"prog": "flux", "args": ARGS})
    if sub == "batch":
        with Jobs() as db:
            n = db["next"]
            db["next"] += 1
            jid = f58(n)
            db["jobs"][jid] = {"state": "SCHED", "dec": n, "name": "nnlo", "args": rest}
        record({"prog": "flux-batch", "script": Path(rest[-1]).read_text(), "job": jid})
        print(jid)
        return 0
    if sub == "jobs":
        ids = [a for a in rest[rest.index("-o") + 2:]]
        with Jobs() as db:
            for j in ids:
                info = db["jobs"].get(j) or next((v | {"id": k} for k, v in db["jobs"].items()
                                                  if str(v.get("dec")) == j), None)
                if info is not None:
                    key = j if j in db["jobs"] else info["id"]
                    print(f"{db['jobs'][key]['dec']}|{key}|{db['jobs'][key]['state']}")
        return 0
    if sub == "cancel":
        with Jobs() as db:
            for j in rest:
                if j in db["jobs"] and db["jobs"][j]["state"] in ("DEPEND", "SCHED", "RUN"):
                    db["jobs"][j]["state"] = "CANCELED"
        return 0
    if sub == "job" and rest[:1] == ["kill"]:
        sig = rest[rest.index("-s") + 1]
        return _deliver(rest[3:], sig, {"RUN"})
    if sub == "run":  # flux run [options] PROGRAM ARGS: the ranks through this environment's mpirun
        record({"prog": "flux-run", "args": rest})
        valued = {"-N", "-n", "-c", "-g", "-o"}
        i = 0
        while i < len(rest) and rest[i].startswith("-"):
            i += 2 if rest[i] in valued else 1
        ranks = rest[rest.index("-n") + 1]
        if ranks == "1":  # one task: the program itself, as the job shell starts it (no launcher in between)
            os.execvp(rest[i], rest[i:])
        local = Path(sys.executable).parent / "mpirun"
        mpirun = str(local) if local.exists() else (shutil.which("mpirun") or "mpirun")
        os.execv(mpirun, [mpirun, "-np", ranks, *rest[i:]])
    print(f"flux: unknown command {sub}", file=sys.stderr)
    return 1


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
    sys.exit({"bsub": bsub, "bjobs": bjobs, "bkill": bkill, "qsub": qsub, "qstat": qstat, "qdel": qdel,
              "qsig": qsig, "flux": flux}[PROG]())
