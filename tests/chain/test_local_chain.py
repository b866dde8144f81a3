"""The whole checkpoint-restart cycle on the local scheduler: walltime stops, resubmission, resume, cancel,
failures that must not resubmit, and ``nnlo status``/``logs`` along the way (stand-in payload, real chain)."""
from __future__ import annotations

import json
import os
import signal

import pytest

from tests.helpers.chain import epochs_done, make_spec, nnlo, status_json, submit, wait_for

pytestmark = [pytest.mark.slow]


def test_walltime_chain_resubmits_and_finishes_with_every_epoch(chain_env):
    # 16 epochs, each job stopped as at its deadline after 6 of its own (forced by count, not raced against a
    # short walltime): exactly 3 jobs on any machine, the successor of each queued while it runs
    run = submit(make_spec("testlocal", epochs=16, epoch_s=0.1, walltime_s=600, epochs_per_job=6))
    assert run.job_id == "1"
    wait_for("the run to finish", lambda: run.state.state in ("done", "failed"), timeout=120)
    st = run.state
    assert st.state == "done", st.error
    assert epochs_done(run) == list(range(1, 17))
    started = [j for j in st.jobs if j.started_at]
    assert [(j.job_id, j.status, j.rc) for j in started] == [("1", "walltime", 75), ("2", "walltime", 75),
                                                              ("3", "finished", 0)]
    for job, succ in zip(st.jobs, st.jobs[1:]):  # each successor was queued behind its job while that job ran
        assert succ.depends_on == job.job_id and job.started_at <= succ.submitted_at <= job.ended_at
    # the successor queued behind the last job was taken back (not needed), nothing is left alive
    assert st.jobs[-1].status == "not-needed" and not st.alive_jobs and len(st.jobs) == 4
    view = status_json(run)
    assert view["progress"]["epoch"] == 16 and view["progress"]["epochs"] == 16
    assert [j["depends_on"] for j in view["jobs"]] == [None, "1", "2", "3"]
    table = nnlo("status").stdout
    assert run.id in table and "done" in table and "epoch 16/16" in table
    logs = nnlo("logs", run.id).stdout
    assert "payload: finished" in logs and "restored from ckpt-e0006" in logs and "restored from ckpt-e0012" in logs
    assert logs.index("==> logs/job-1.out") < logs.index("==> logs/job-2.out") < logs.index("==> logs/job-3.out")


def test_failing_job_stops_the_chain_with_its_error(chain_env):
    run = submit(make_spec("testlocal", model="fail_model.py", epochs=5, epoch_s=0.2))
    wait_for("the failure", lambda: run.state.state == "failed")
    st = run.state
    started = [j for j in st.jobs if j.started_at]
    assert len(started) == 1 and started[0].rc == 1 and started[0].status == "failed"
    assert "diverged" in st.error
    assert all(not j.alive for j in st.jobs)  # its successor was cancelled, not run
    out = nnlo("status", run.id).stdout
    assert "failed" in out and "diverged" in out


def test_job_without_new_checkpoint_stops_the_chain(chain_env):
    # stopped as at its deadline after 2 epochs of its own (forced by count: a 3 s walltime raced the job's own
    # start-up on a loaded machine), without checkpointing: exit 75 without a checkpoint -> no resubmission
    run = submit(make_spec("testlocal", model="nocheckpoint.py", epochs=1000, epoch_s=0.2, walltime_s=600,
                           epochs_per_job=2))
    wait_for("the chain to stop", lambda: run.state.state == "failed")
    st = run.state
    assert "without writing a new checkpoint" in st.error
    assert [j.status for j in st.jobs if j.started_at] == ["no-checkpoint"]
    assert not st.alive_jobs


def test_cancel_then_resume_continues_from_the_checkpoint(chain_env):
    run = submit(make_spec("testlocal", epochs=10, epoch_s=0.1, walltime_s=600, hold_at_epoch=2))
    wait_for("two epochs", lambda: (run.dir / "history.json").exists() and len(epochs_done(run)) >= 2)
    out = nnlo("cancel", run.id).stdout  # the job waits at epoch 2 for the cancel's SIGTERM
    assert "cancelled run" in out and "1" in out
    wait_for("the cancel to land", lambda: all(not j.alive for j in run.state.jobs) and
             _local_queue_idle(run))
    st = run.state
    assert st.state == "cancelled"
    assert st.jobs[0].status == "cancelled"
    assert nnlo("cancel", run.id, check=False).returncode == 0  # cancelling twice is harmless
    assert epochs_done(run) == [1, 2]
    spec_before = (run.dir / "spec.json").read_text()
    reshaped = nnlo("resume", run.id, "--n-masters", "3", check=False)  # the job script's layout would not fit
    assert reshaped.returncode == 2 and "changes the run's shape" in reshaped.stderr
    assert (run.dir / "spec.json").read_text() == spec_before and run.state.state == "cancelled"
    out = nnlo("resume", run.id, "--epochs", "12").stdout  # resumed with a changed option
    assert "resumed run" in out and "--epochs 12" in out
    assert run.spec.train.epochs == 12 and run.spec.args[-2:] == ["--epochs", "12"]
    wait_for("the resumed run to finish", lambda: run.state.state == "done")
    log = nnlo("logs", run.id, "--job", run.state.jobs[-2].job_id).stdout
    assert "restored from ckpt-e0002" in log
    assert epochs_done(run) == list(range(1, 13))
    view = status_json(run)
    assert view["progress"]["epochs"] == 12 and view["command"][-2:] == ["--epochs", "12"]
    assert "command   nnlo train --model" in nnlo("status", run.id).stdout
    refused = nnlo("resume", run.id, check=False)
    assert refused.returncode == 2 and "is done" in refused.stderr and "Traceback" not in refused.stderr


def test_max_resubmits_bounds_the_chain(chain_env):
    # 2 epochs a job (a walltime forced by count): the first job and its one resubmission, then the bound
    run = submit(make_spec("testlocal", epochs=30, epoch_s=0.1, walltime_s=600, max_resubmits=1, epochs_per_job=2))
    wait_for("the bound", lambda: run.state.state == "failed")
    st = run.state
    assert "max-resubmits" in st.error
    assert [(j.status, j.rc) for j in st.jobs if j.started_at] == [("walltime", 75), ("walltime", 75)]
    assert epochs_done(run) == [1, 2, 3, 4]


def test_a_successor_starting_on_a_finished_run_exits_at_once(chain_env):
    from nnlo_sched.chain import job_start
    from nnlo_sched.state import update_state

    run = submit(make_spec("testlocal", epochs=1, epoch_s=0.1))
    wait_for("the run to finish", lambda: run.state.state == "done")
    decision = job_start(run.dir, "99")
    assert not decision.ok and "done" in decision.message
    assert run.state.job("99").status == "skipped"
    # and through the CLI: non-zero, so the job script exits 0 without running
    proc = nnlo("job", "start", str(run.dir), "--job-id", "100", check=False)
    assert proc.returncode == 1 and "exits without running" in proc.stderr
    with update_state(run.dir) as st:
        assert st.state == "done"


def _exists(pid: int) -> bool:
    """Whether signal 0 reaches process ``pid`` (a negative one: that process group)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill_supervisor(run) -> int:
    """SIGKILL the run's local supervisor (out of memory, killed by hand) and wait until it is gone; its pid."""
    supervisor = json.loads((run.dir / "local" / "queue.json").read_text())["supervisor_pid"]
    os.kill(supervisor, signal.SIGKILL)
    # a SIGKILL is delivered at once, but a process lets go of its files (the supervisor's lock) as it exits
    wait_for("the killed supervisor to be gone", lambda: not _exists(supervisor))
    return supervisor


def test_a_run_whose_supervisor_and_job_were_killed_is_cancelled_and_resumed(chain_env):
    run = submit(make_spec("testlocal", epochs=4, epoch_s=0.1, walltime_s=600, hold_at_epoch=2))
    wait_for("the job to hold at epoch 2", lambda: _pid(run, "1") and (run.dir / "history.json").exists()
             and epochs_done(run) == [1, 2] and "holding" in nnlo("logs", run.id).stdout)
    # kill the supervisor and the job behind nnlo's back (a reboot): nobody does the bookkeeping
    job_group = _pid(run, "1")
    _kill_supervisor(run)
    os.killpg(job_group, signal.SIGKILL)
    wait_for("the killed job to be gone", lambda: not _exists(-job_group))
    view = status_json(run)
    assert view["state"] == "running"  # its queued successor cannot be told apart from a live one...
    assert [j["scheduler_state"] for j in view["jobs"]] == ["FAILED", "UNKNOWN"]  # ...its ended job can
    assert f"{run.id}" in (table := nnlo("status").stdout) and "2?" in table
    # the user stops it and resumes it: the new chain goes on from the checkpoint of epoch 2
    nnlo("cancel", run.id)
    assert run.state.state == "cancelled"
    nnlo("resume", run.id)
    wait_for("the resumed run to finish", lambda: run.state.state in ("done", "failed"))
    assert run.state.state == "done", run.state.error
    assert epochs_done(run) == [1, 2, 3, 4]


def test_a_running_job_of_a_killed_supervisor_is_shown_cancelled_and_resumed(chain_env):
    run = submit(make_spec("testlocal", epochs=4, epoch_s=0.1, walltime_s=600, hold_at_epoch=2))
    wait_for("the job to hold at epoch 2", lambda: _pid(run, "1") and (run.dir / "history.json").exists()
             and epochs_done(run) == [1, 2] and "holding" in nnlo("logs", run.id).stdout)
    _kill_supervisor(run)  # the job runs on
    assert [j["scheduler_state"] for j in status_json(run)["jobs"]] == ["RUNNING", "UNKNOWN"]
    # the cancel's SIGTERM reaches the job (its pid and start time checked), and a new supervisor adopts it:
    # it follows up at the kill wait and ends the job's record once its process is gone
    nnlo("cancel", run.id)
    wait_for("the cancel to land", lambda: all(not j.alive for j in run.state.jobs) and _local_queue_idle(run))
    assert run.state.state == "cancelled" and run.state.jobs[0].status == "cancelled"
    nnlo("resume", run.id)
    wait_for("the resumed run to finish", lambda: run.state.state in ("done", "failed"))
    assert run.state.state == "done", run.state.error
    assert epochs_done(run) == [1, 2, 3, 4]


def _pid(run, job_id):
    try:
        q = json.loads((run.dir / "local" / "queue.json").read_text())
    except (OSError, ValueError):
        return None
    return next((j["pid"] for j in q["jobs"] if j["id"] == job_id), None)


def _local_queue_idle(run) -> bool:
    q = json.loads((run.dir / "local" / "queue.json").read_text())
    return all(j["state"] not in ("PENDING", "RUNNING") for j in q["jobs"])


def test_logs_follow_and_status_watch_end_with_the_run(chain_env):
    run = submit(make_spec("testlocal", epochs=3, epoch_s=0.3, walltime_s=600))
    followed = nnlo("logs", run.id, "-f", "--interval", "0.2", timeout=180).stdout
    assert run.state.state == "done"  # -f returned because the run ended...
    assert "payload: finished" in followed and followed.count("==> logs/job-1.out <==") == 1  # ...with all of it
    watched = nnlo("status", "--watch", "--every", "0.5", timeout=60).stdout
    assert "done" in watched and run.id in watched


def test_unknown_or_ambiguous_runs_are_one_line_errors(chain_env):
    for cmd in (["status", "nope"], ["cancel", "nope"], ["logs", "nope"], ["resume", "nope"]):
        proc = nnlo(*cmd, check=False)
        assert proc.returncode == 2, cmd
        assert proc.stderr.count("\n") == 1 and "no run 'nope'" in proc.stderr and "Traceback" not in proc.stderr
    a = submit(make_spec("testlocal", epochs=1, epoch_s=0.1, name="twin"))
    b = submit(make_spec("testlocal", epochs=1, epoch_s=0.1, name="twin"))
    proc = nnlo("status", "twin", check=False)
    assert proc.returncode == 2 and "matches 2 runs" in proc.stderr
    wait_for("both runs", lambda: a.state.state == "done" and b.state.state == "done")
    assert f"run       {a.id}" in nnlo("status", str(a.dir)).stdout  # a run directory's path names it too


def test_preempt_stops_the_running_job_and_its_successor_resumes(chain_env):
    # the first job holds after its first checkpoint until a stop signal comes (its walltime is far away):
    # only `nnlo preempt` moves the chain on, at any machine speed
    run = submit(make_spec("testlocal", epochs=4, epoch_s=0.2, walltime_s=600, hold_at_epoch=1))
    out = nnlo("preempt", run.id, "--wait", "170", timeout=180).stdout
    assert "preempted job 1 of run" in out
    wait_for("the run to finish", lambda: run.state.state in ("done", "failed"), timeout=120)
    st = run.state
    assert st.state == "done", st.error
    started = [j for j in st.jobs if j.started_at]
    assert [(j.status, j.rc) for j in started] == [("preempted", 75), ("finished", 0)]
    assert started[0].preempted_at is not None and started[1].preempted_at is None
    assert epochs_done(run) == [1, 2, 3, 4]
    assert "payload: stopping at epoch 1 (signal)" in nnlo("logs", run.id).stdout
    view = status_json(run)
    assert [j["status"] for j in view["jobs"] if j["started_at"]] == ["preempted", "finished"]
    late = nnlo("preempt", run.id, check=False)  # nothing left to preempt: one line, nothing changes
    assert late.returncode == 2 and late.stderr.count("\n") == 1 and "is done" in late.stderr


def test_preempt_refuses_a_job_without_successor_and_one_not_started(chain_env):
    run = submit(make_spec("testlocal", epochs=3, epoch_s=0.2, walltime_s=600, hold_at_epoch=1,
                           max_resubmits=0))
    wait_for("the first checkpoint", lambda: (run.dir / "history.json").exists())
    refused = nnlo("preempt", run.id, check=False)  # stopping it would end the chain: cancel says so
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "no successor queued" in refused.stderr and f"nnlo cancel {run.id}" in refused.stderr
    assert run.state.state == "running" and run.state.jobs[0].preempted_at is None
    nnlo("cancel", run.id)
    wait_for("the cancel to land", lambda: _local_queue_idle(run))
    waited = nnlo("preempt", run.id, "--wait", "5", check=False)
    assert waited.returncode == 2 and "is cancelled" in waited.stderr
