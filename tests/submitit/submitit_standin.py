#!/usr/bin/env python3
"""Recording stand-ins for LSF (bsub, bjobs, bkill) and PBS/Torque (qsub, qstat, qdel) that also RUN the job.

Linked under those names into a test's bin folder. Every call is appended as one JSON line to
``$STANDIN_DIR/calls.jsonl``; the jobs live in ``$STANDIN_DIR/jobs.json`` (under a lock). A submitted script
is started in the background by a detached runner (``standin.py __run ID``) once its dependency
(``-w 'ended(ID)'``, ``-W depend=afterany:ID``) has ended, under bash, with the job id in ``LSB_JOBID`` or
``PBS_JOBID`` and its own process group, as the batch system would; its state goes PEND -> RUN -> DONE/EXIT
(LSF) or Q -> R -> C (PBS). The answers copy the real programs' output formats and exit statuses:

* ``bsub`` (script on stdin): ``Job <1001> is submitted to queue <batch>.``
* ``bjobs -a -w ID...``: the ``JOBID USER STAT QUEUE ...`` table; ``Job <ID> is not found`` on stderr.
* ``bkill ID...``: SIGTERM to the job's process group; ``Job <ID> is being terminated``; ``bkill -s SIG ID``
  sends SIG to it.
* ``qsub [-W depend=afterany:ID] SCRIPT``: ``1001.pbs01``; ``qstat ID...``: the ``Job ID  Name ...`` table;
  ``qdel ID...``: silent; ``Unknown Job Id`` for ids it does not know.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import tests.helpers.standins as common  # a program: the checkout is on its PYTHONPATH
from tests.helpers.standins import DIR, Jobs, record

PROG = Path(sys.argv[0]).name
ARGS = sys.argv[1:]
ENDED = {"DONE", "EXIT", "C"}


def queue(script: str, dep: str | None, pbs: bool) -> str:
    with Jobs() as db:
        jid = f"{db['next']}.pbs01" if pbs else str(db["next"])
        db["next"] += 1
        db["jobs"][jid] = {"state": "Q" if pbs else "PEND", "dep": dep, "pbs": pbs, "pid": None}
    (DIR / f"job-{jid}.sh").write_text(script)
    subprocess.Popen([sys.executable, __file__, "__run", jid], start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return jid


def run(jid: str) -> int:
    """The batch system's side of one job: wait for the dependency, run the script, record how it ended."""
    give_up = time.time() + 300
    while True:
        with Jobs() as db:
            me = db["jobs"][jid]
            dep = db["jobs"].get(me["dep"]) if me["dep"] else None
            if me["state"] in ENDED:  # cancelled while pending
                return 0
            if dep is None or dep["state"] in ENDED:
                env = dict(os.environ, **{"PBS_JOBID" if me["pbs"] else "LSB_JOBID": jid})
                with open(DIR / f"job-{jid}.out", "ab") as out:
                    proc = subprocess.Popen(["/bin/bash", str(DIR / f"job-{jid}.sh")], env=env, stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
                me.update(state="R" if me["pbs"] else "RUN", pid=proc.pid)
                break
        if time.time() > give_up:
            return 1
        time.sleep(0.2)
    rc = proc.wait()
    with Jobs() as db:
        me = db["jobs"][jid]
        if me["state"] not in ENDED:
            me["state"] = "C" if me["pbs"] else ("DONE" if rc == 0 else "EXIT")
        me["rc"] = rc
    return 0


def kill(ids: list[str], unknown: str) -> int:
    rc = 0
    with Jobs() as db:
        for j in ids:
            info = db["jobs"].get(j)
            if info is None or info["state"] in ENDED:
                print(unknown.format(j=j), file=sys.stderr)
                rc = 255 if PROG == "bkill" else 153
                continue
            if info["pid"]:
                try:
                    os.killpg(info["pid"], signal.SIGTERM)
                except ProcessLookupError:
                    pass
            info["state"] = "C" if info["pbs"] else "EXIT"
            if PROG == "bkill":
                print(f"Job <{j}> is being terminated")
    return rc


def bsub() -> int:
    script = sys.stdin.read()
    dep = None
    if "-w" in ARGS:
        dep = re.fullmatch(r"ended\((.+)\)", ARGS[ARGS.index("-w") + 1]).group(1)
    jid = queue(script, dep, pbs=False)
    record({"prog": "bsub", "args": ARGS, "script": script, "job": jid})
    print(f"Job <{jid}> is submitted to queue <batch>.")
    return 0


def qsub() -> int:
    script = Path(ARGS[-1]).read_text()
    dep = ARGS[ARGS.index("-W") + 1].removeprefix("depend=afterany:") if "-W" in ARGS else None
    jid = queue(script, dep, pbs=True)
    record({"prog": "qsub", "args": ARGS, "script": script, "job": jid})
    print(jid)
    return 0


def bjobs() -> int:
    return common.bjobs(ARGS, lambda j, info: (j, info["state"], "batch1", "submitit"))


def qstat() -> int:
    return common.qstat(ARGS, lambda info: "submitit")


def bkill() -> int:
    record({"prog": "bkill", "args": ARGS})
    if ARGS[:1] == ["-s"]:  # bkill -s SIG ID: a signal to the running job, which goes on
        with Jobs() as db:
            pid = db["jobs"][ARGS[2]]["pid"]
        os.killpg(pid, getattr(signal, "SIG" + ARGS[1]))
        print(f"Job <{ARGS[2]}> is being signaled")
        return 0
    return kill(ARGS, "Job <{j}>: Job has already finished")


def qdel() -> int:
    record({"prog": "qdel", "args": ARGS})
    return kill(ARGS, "qdel: Unknown Job Id {j}")


if __name__ == "__main__":
    if ARGS[:1] == ["__run"]:
        sys.exit(run(ARGS[1]))
    sys.exit({"bsub": bsub, "bjobs": bjobs, "bkill": bkill, "qsub": qsub, "qstat": qstat, "qdel": qdel}[PROG]())
