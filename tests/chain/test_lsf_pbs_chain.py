"""LSF and PBS chains through their real rendered scripts, with recording stand-ins for bsub/bjobs/bkill and
qsub/qstat/qdel that answer in the real output formats (tests/chain/standin_batch.py). The test plays the
scheduler: it starts each job the way LSF/PBS would (the script under bash, the job id in LSB_JOBID or
PBS_JOBID, output into the log the directives name) and checks every command line nnlo ran."""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers.chain import CHAIN as HERE, epochs_done, make_spec, nnlo, status_json, submit, wait_for
from tests.helpers.standins import install as install_standins

pytestmark = [pytest.mark.slow]

STANDIN = HERE / "standin_batch.py"


@pytest.fixture
def standins(chain_env, monkeypatch):
    return install_standins(chain_env, STANDIN, monkeypatch)


def calls(state: Path, prog: str) -> list[dict]:
    path = state / "calls.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [c for c in map(json.loads, lines) if c["prog"] == prog]


def set_state(state: Path, job: str, value: str) -> None:
    path = state / "jobs.json"
    db = json.loads(path.read_text())
    db["jobs"][job]["state"] = value
    path.write_text(json.dumps(db))


def forget(state: Path, job: str) -> None:
    path = state / "jobs.json"
    db = json.loads(path.read_text())
    del db["jobs"][job]
    path.write_text(json.dumps(db))


def run_job(run, env_var: str, job: str, log: Path, interrupt=None) -> int:
    """Run the job script as the batch system would; ``interrupt`` = (signal, ready()) sends it when ready."""
    env = dict(os.environ, **{env_var: job})
    with open(log, "ab") as out:
        proc = subprocess.Popen(["/bin/bash", str(run.script)], env=env, stdout=out, stderr=subprocess.STDOUT,
                                cwd=run.spec.workdir, start_new_session=True)
    if interrupt is not None:
        sig, ready = interrupt
        wait_for("the moment to signal the job", lambda: ready() or proc.poll() is not None, timeout=120)
        os.kill(proc.pid, sig)  # LSF -wa: the warning signal goes to the job (here: its batch shell)
    return proc.wait(timeout=180)


def test_lsf_chain_dependency_warning_signal_resume_and_finish(standins):
    run = submit(make_spec("testlsf", epochs=6, epoch_s=0.1, walltime_s=3600, account="ABC123", hold_at_epoch=2))
    first = calls(standins, "bsub")
    assert len(first) == 1 and first[0]["args"] == []  # no dependency for the first job
    script = first[0]["script"]  # bsub read the directives from the script on stdin
    for line in ("#BSUB -P ABC123", "#BSUB -W 1:00", "#BSUB -wa USR1", "#BSUB -wt 1",
                 f"#BSUB -o {run.dir}/logs/job-%J.out"):
        assert line in script
    assert run.job_id == "1001" and status_json(run)["state"] == "queued"

    # LSF starts 1001; it queues 1002 behind itself; the warning signal makes it checkpoint and stop (the job
    # waits at epoch 2 for it: the signal comes mid-run on any machine)
    set_state(standins, "1001", "RUN")
    rc = run_job(run, "LSB_JOBID", "1001", run.dir / "logs" / "job-1001.out",
                 interrupt=(signal.SIGUSR1, lambda: (run.dir / "history.json").exists() and len(epochs_done(run)) >= 2))
    assert rc == 75
    succ = calls(standins, "bsub")[1]
    assert succ["args"] == ["-w", "ended(1001)"] and succ["job"] == "1002"
    set_state(standins, "1001", "EXIT")
    view = status_json(run)
    assert view["state"] == "resubmitting"
    assert [(j["job_id"], j["status"]) for j in view["jobs"]] == [("1001", "walltime"), ("1002", "queued")]
    assert view["jobs"][1]["scheduler_state"] == "PENDING"
    assert epochs_done(run) == [1, 2]

    # ended(1001) is satisfied: LSF starts 1002, which resumes and finishes; its successor 1003 is killed
    set_state(standins, "1002", "RUN")
    assert run_job(run, "LSB_JOBID", "1002", run.dir / "logs" / "job-1002.out") == 0
    assert calls(standins, "bsub")[2]["args"] == ["-w", "ended(1002)"]
    assert calls(standins, "bkill")[-1]["args"] == ["1003"]
    assert run.state.state == "done"
    assert epochs_done(run) == list(range(1, 7))
    assert "restored from ckpt-e" in (run.dir / "logs" / "job-1002.out").read_text()

    # status asks bjobs once for every job of every run, and only for jobs that may be alive
    before = len(calls(standins, "bjobs"))
    other = submit(make_spec("testlsf", name="other", walltime_s=600))
    third = submit(make_spec("testlsf", name="third", walltime_s=600))
    table = nnlo("status").stdout
    queried = calls(standins, "bjobs")[before:]
    assert len(queried) == 1 and sorted(queried[0]["args"][2:]) == sorted([other.job_id, third.job_id])
    assert other.id in table and third.id in table and "queued" in table

    # cancel takes the whole chain back with one bkill
    nnlo("cancel", other.id)
    assert calls(standins, "bkill")[-1]["args"] == [other.job_id]
    assert other.state.state == "cancelled"

    # a job LSF forgot while the record says queued: status says failed instead of queued forever
    forget(standins, third.job_id)
    view = status_json(third)
    assert view["state"] == "failed" and "nnlo resume" in view["error"]


def test_lsf_status_survives_a_broken_bjobs(standins, monkeypatch):
    run = submit(make_spec("testlsf", walltime_s=600))
    (Path(standins).parent / "standin-bin" / "bjobs").unlink()
    (Path(standins).parent / "standin-bin" / "bjobs").write_text("#!/bin/sh\necho 'LSF is down' >&2\nexit 255\n")
    (Path(standins).parent / "standin-bin" / "bjobs").chmod(0o755)
    view = status_json(run)
    assert view["state"] == "queued" and view["jobs"][0]["scheduler_state"] == "UNKNOWN"
    assert "?" in nnlo("status").stdout


def test_pbs_chain_afterany_failure_stops_without_resubmitting(standins):
    run = submit(make_spec("testpbs", epochs=6, epoch_s=0.1, walltime_s=5400, account="CSC123", hold_at_epoch=1))
    first = calls(standins, "qsub")[0]
    assert first["args"] == [str(run.script)]
    for line in ("#PBS -A CSC123", "#PBS -l walltime=01:30:00", "#PBS -l nodes=1"):
        assert line in first["script"]
    assert "#PBS -W" not in first["script"] and "signal" not in first["script"].lower().split("#pbs")[0]
    job = run.job_id
    assert job == "1001.pbs01"

    # Torque starts it; it queues its successor with afterany on the full id, then is killed at walltime (the
    # job waits at epoch 1 for the SIGTERM: it comes mid-run on any machine)
    set_state(standins, job, "R")
    log = run.dir / "logs" / "t.o1001"  # Torque's own naming in the -o directory
    rc = run_job(run, "PBS_JOBID", job, log,
                 interrupt=(signal.SIGTERM, lambda: (run.dir / "history.json").exists() and len(epochs_done(run)) >= 1))
    assert rc == 75
    assert calls(standins, "qsub")[1]["args"] == ["-W", "depend=afterany:1001.pbs01", str(run.script)]
    set_state(standins, job, "C")
    assert status_json(run)["state"] == "resubmitting"

    # the successor fails for another reason (bad input): no blind resubmission, its successor is deleted
    succ = "1002.pbs01"
    set_state(standins, succ, "R")
    spec_path = run.dir / "spec.json"
    spec = json.loads(spec_path.read_text())
    spec["config"]["model"] = "fail_model.py"  # the payload fails after one epoch, as a diverging model would
    spec_path.write_text(json.dumps(spec))
    assert run_job(run, "PBS_JOBID", succ, run.dir / "logs" / "t.o1002") == 1
    assert calls(standins, "qsub")[2]["args"] == ["-W", "depend=afterany:1002.pbs01", str(run.script)]
    assert calls(standins, "qdel")[-1]["args"] == ["1003.pbs01"]
    st = run.state
    assert st.state == "failed" and "1002.pbs01" in st.error and "exit 1" in st.error
    assert len(calls(standins, "qsub")) == 3
    detail = nnlo("status", run.id).stdout  # the detail view quotes the failed job's log (t.o1002)
    assert "failed" in detail and "payload: error: the model diverged" in detail
    logs = nnlo("logs", run.id).stdout
    assert "==> logs/t.o1001 <==" in logs and "payload: error" in logs


def test_a_refused_cancel_says_so_and_the_queued_job_exits_at_once_later(standins):
    run = submit(make_spec("testlsf", walltime_s=600))
    bkill = Path(standins).parent / "standin-bin" / "bkill"
    bkill.unlink()
    bkill.write_text("#!/bin/sh\necho 'LSF daemon (LIM) not responding ... still trying' >&2\nexit 255\n")
    bkill.chmod(0o755)
    proc = nnlo("cancel", run.id, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "LIM) not responding" in proc.stderr and f"job(s) {run.job_id} by hand" in proc.stderr
    assert run.state.state == "cancelled"
    # LSF starts the job anyway: it sees the cancelled run and exits without running or queueing anything
    set_state(standins, run.job_id, "RUN")
    assert run_job(run, "LSB_JOBID", run.job_id, run.dir / "logs" / f"job-{run.job_id}.out") == 0
    assert len(calls(standins, "bsub")) == 1 and run.state.jobs[0].status == "skipped"
    assert "exits without running" in (run.dir / "logs" / f"job-{run.job_id}.out").read_text()
