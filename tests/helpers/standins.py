"""What the two sets of batch-system stand-ins share (tests/chain/standin_batch.py records and plays the
scheduler from the test; tests/submitit/submitit_standin.py also runs the scripts): the call log, the locked
job table, and the bjobs/qstat tables in the real programs' formats and exit statuses.

A stand-in runs as a program (linked as bsub, qstat, ...) with the checkout on ``PYTHONPATH``: it imports this
module as ``tests.helpers.standins``."""
from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DIR = Path(os.environ.get("STANDIN_DIR", "."))


def record(entry: dict[str, Any]) -> None:
    """One call, appended to ``$STANDIN_DIR/calls.jsonl``."""
    with open(DIR / "calls.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")


class Jobs:
    """``with Jobs() as db``: the job table (``{"next": 1001, "jobs": {id: info}}``) under an exclusive lock,
    written back atomically on exit."""

    def __enter__(self) -> dict[str, Any]:
        self.lock = open(DIR / "jobs.lock", "w")
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        path = DIR / "jobs.json"
        self.data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"next": 1001, "jobs": {}}
        return self.data

    def __exit__(self, *exc: object) -> None:
        tmp = DIR / "jobs.json.tmp"
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, DIR / "jobs.json")
        self.lock.close()


def _known(args: list[str]) -> tuple[list[str], list[tuple[str, dict[str, Any]]]]:
    ids = [a for a in args if not a.startswith("-")]
    with Jobs() as db:
        return ids, [(j, db["jobs"][j]) for j in ids if j in db["jobs"]]


def bjobs(args: list[str], row: Callable[[str, dict[str, Any]], tuple[str, str, str, str]]) -> int:
    """``bjobs -a -w ID...``: the table (``row`` gives JOBID, STAT, EXEC_HOST, JOB_NAME of a known job);
    ``Job <ID> is not found`` on stderr for unknown ids, exit 255 when none is known."""
    record({"prog": "bjobs", "args": args})
    ids, known = _known(args)
    if known:
        print("JOBID   USER    STAT  QUEUE      FROM_HOST   EXEC_HOST   JOB_NAME   SUBMIT_TIME")
        for j, info in known:
            jobid, stat, exec_host, name = row(j, info)
            print(f"{jobid:<7} root    {stat:<5} batch      login1      {exec_host:<11} {name:<10} Nov 21 09:00")
    for j in ids:
        if j not in dict(known):
            print(f"Job <{j}> is not found", file=sys.stderr)
    return 0 if known else 255


def qstat(args: list[str], name: Callable[[dict[str, Any]], str]) -> int:
    """``qstat ID...``: the ``Job ID  Name  User  Time Use S Queue`` table; ``qstat: Unknown Job Id ID`` on
    stderr and exit 153 for unknown ids."""
    record({"prog": "qstat", "args": args})
    ids, known = _known(args)
    if known:
        print("Job ID                    Name             User            Time Use S Queue")
        print("------------------------- ---------------- --------------- -------- - -----")
        for j, info in known:
            print(f"{j:<25} {name(info):<16} root            00:00:00 {info['state']} batch")
    rc = 0
    for j in ids:
        if j not in dict(known):
            print(f"qstat: Unknown Job Id {j}", file=sys.stderr)
            rc = 153
    return rc


PROGRAMS = ("bsub", "bjobs", "bkill", "qsub", "qstat", "qdel", "qsig", "flux")


def install(root: Path, program: Path, monkeypatch: Any, *, more_path: tuple[str, ...] = ()) -> Path:
    """Link ``program`` as every LSF and PBS program in ``root/standin-bin``, first on the test's ``PATH`` (then
    ``more_path``), with ``STANDIN_DIR`` a fresh ``root/standin``; returns that folder (the call log, the jobs)."""
    bin_dir = root / "standin-bin"
    bin_dir.mkdir()
    for prog in PROGRAMS:
        (bin_dir / prog).symlink_to(program)
    state = root / "standin"
    state.mkdir()
    monkeypatch.setenv("STANDIN_DIR", str(state))
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), *more_path, os.environ["PATH"]]))
    return state
