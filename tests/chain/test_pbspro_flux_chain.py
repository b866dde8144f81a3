"""PBS Pro (ALCF) and Flux (LLNL) chains through their real rendered scripts, with the recording stand-ins of
tests/chain/standin_batch.py answering in the real formats (``qstat -x -f -F json``, ``flux jobs -o``): submit,
the warning (``nnlo preempt`` through ``qsig``, which ALCF's jobs only get by hand; Flux's own ``--signal`` to the
batch script), the checkpoint, the successor behind ``afterany``, done. The test plays the batch system as
tests/chain/test_lsf_pbs_chain.py does: it starts each job's script under bash with the job id in
``PBS_JOBID``/``FLUX_JOB_ID``."""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.chain.test_lsf_pbs_chain import STANDIN, calls, set_state
from tests.helpers.chain import epochs_done, make_spec, nnlo, status_json, submit, wait_for
from tests.helpers.standins import install as install_standins

pytestmark = [pytest.mark.slow]


@pytest.fixture
def standins(chain_env, monkeypatch):
    monkeypatch.delenv("FLUX_JOB_ID", raising=False)
    return install_standins(chain_env, STANDIN, monkeypatch)


def start_job(run, state: Path, env_var: str, job: str, log: Path) -> subprocess.Popen:
    """Start the job script as the batch system would, and record its batch shell for qsig / flux job kill."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(["/bin/bash", str(run.script)], env=dict(os.environ, **{env_var: job}),
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=run.spec.workdir, start_new_session=True)
    db = json.loads((state / "jobs.json").read_text())
    db["jobs"][job]["pid"] = proc.pid
    (state / "jobs.json").write_text(json.dumps(db))
    return proc


def checkpointed(run, epochs: int):
    return lambda: (run.dir / "history.json").exists() and len(epochs_done(run)) >= epochs


def test_pbspro_chain_preempt_by_qsig_successor_afterany_and_done(standins):
    run = submit(make_spec("testpbspro", epochs=6, epoch_s=0.1, walltime_s=3600, account="ABC123", hold_at_epoch=2))
    first = calls(standins, "qsub")[0]
    assert first["args"] == [str(run.script)]
    for line in ("#PBS -A ABC123", "#PBS -l select=1", "#PBS -l place=scatter", "#PBS -l walltime=01:00:00",
                 "#PBS -l filesystems=home:flare", "#PBS -k doe"):
        assert line in first["script"].splitlines()
    job = run.job_id
    assert job == "1001.pbs01" and status_json(run)["state"] == "queued"
    assert calls(standins, "qstat")[-1]["args"] == ["-x", "-f", "-F", "json", job]  # one call, JSON, history too

    # PBS Pro starts it; it queues its successor behind itself; `nnlo preempt` warns it through qsig (ALCF has no
    # signal before the walltime), and it checkpoints and stops (it holds at epoch 2 for that)
    set_state(standins, job, "R")
    proc = start_job(run, standins, "PBS_JOBID", job, run.dir / "logs" / "a.o1001")
    wait_for("the first checkpoint and the queued successor",
             lambda: checkpointed(run, 2)() and len(calls(standins, "qsub")) == 2)
    nnlo("preempt", run.id)
    assert calls(standins, "qsig")[-1]["args"] == ["-s", "USR1", job]
    assert proc.wait(timeout=180) == 75
    assert calls(standins, "qsub")[1]["args"] == ["-W", f"depend=afterany:{job}", str(run.script)]
    set_state(standins, job, "F")
    view = status_json(run)
    assert view["state"] == "resubmitting"
    assert [(j["job_id"], j["status"]) for j in view["jobs"]] == [(job, "preempted"), ("1002.pbs01", "queued")]
    assert epochs_done(run) == [1, 2]

    # afterany is satisfied: the successor resumes from the checkpoint and finishes; its own successor is deleted
    succ = "1002.pbs01"
    set_state(standins, succ, "R")
    assert start_job(run, standins, "PBS_JOBID", succ, run.dir / "logs" / "a.o1002").wait(timeout=180) == 0
    assert calls(standins, "qsub")[2]["args"] == ["-W", f"depend=afterany:{succ}", str(run.script)]
    assert calls(standins, "qdel")[-1]["args"] == ["1003.pbs01"]
    assert run.state.state == "done" and epochs_done(run) == list(range(1, 7))
    assert "restored from ckpt-e" in (run.dir / "logs" / "a.o1002").read_text()


def test_flux_chain_warning_signal_successor_from_inside_the_job_and_done(standins):
    run = submit(make_spec("testflux", epochs=6, epoch_s=0.1, walltime_s=3600, account="bank1", hold_at_epoch=2))
    first = calls(standins, "flux")[0]
    assert first["args"] == ["batch", str(run.script)]  # from the login node: the system instance
    script = run.script.read_text().splitlines()
    for line in ("#flux: -N 1", "#flux: --exclusive", "#flux: -t 60m", "#flux: --bank=bank1",
                 "#flux: --signal=USR2@60s", f"#flux: --output={run.dir}/logs/job-{{{{id}}}}.out"):
        assert line in script
    job = run.job_id
    assert job.startswith("ƒ") and status_json(run)["state"] == "queued"
    query = calls(standins, "flux")[-1]["args"]
    assert query[:4] == ["jobs", "-a", "-n", "-o"] and query[-1] == job

    # Flux starts it (inside it FLUX_JOB_ID is set: the chain's commands go to the parent instance); its warning
    # signal reaches the batch script and the running job's tasks (the script only catches it: flux run is not
    # sent what it does not forward); the job checkpoints and stops
    set_state(standins, job, "RUN")
    log = run.dir / "logs" / f"job-{job}.out"
    proc = start_job(run, standins, "FLUX_JOB_ID", job, log)
    wait_for("the first checkpoint", checkpointed(run, 2))
    assert "trap 'caught=USR2' USR2" in run.script.read_text()
    os.killpg(proc.pid, signal.SIGUSR2)
    assert proc.wait(timeout=180) == 75
    succ_call = [c for c in calls(standins, "flux") if "batch" in c["args"]][1]
    assert succ_call["args"] == ["--parent", "batch", f"--dependency=afterany:{job}", str(run.script)]
    launched = calls(standins, "flux-run")[0]["args"]
    assert launched[:7] == ["-N", "1", "-n", "1", "-c", "8", "--exclusive"]
    set_state(standins, job, "COMPLETED")
    succ = [c for c in calls(standins, "flux-batch")][1]["job"]
    view = status_json(run)
    assert view["state"] == "resubmitting"
    assert [(j["job_id"], j["status"]) for j in view["jobs"]] == [(job, "walltime"), (succ, "queued")]

    # the successor resumes and finishes; the one it queued is cancelled in the parent instance
    set_state(standins, succ, "RUN")
    log2 = run.dir / "logs" / f"job-{succ}.out"
    assert start_job(run, standins, "FLUX_JOB_ID", succ, log2).wait(timeout=180) == 0
    third = calls(standins, "flux-batch")[2]["job"]
    assert [c for c in calls(standins, "flux") if "cancel" in c["args"]][-1]["args"] == ["--parent", "cancel", third]
    assert run.state.state == "done" and epochs_done(run) == list(range(1, 7))
    assert "restored from ckpt-e" in log2.read_text()
