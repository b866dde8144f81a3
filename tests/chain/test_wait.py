"""``nnlo wait RUN`` on the local scheduler: ends with the chain, and its exit status says how (stand-in payload)."""
from __future__ import annotations

import pytest
from tests.helpers.chain import make_spec, nnlo, submit, wait_for

pytestmark = [pytest.mark.slow]


def test_wait_follows_a_resubmitted_chain_to_done(chain_env):
    # 8 epochs, 3 a job (a walltime forced by count): jobs 1 and 2 stop at their "walltime", job 3 finishes
    run = submit(make_spec("testlocal", epochs=8, epoch_s=0.1, walltime_s=600, epochs_per_job=3))
    proc = nnlo("wait", run.id, "--every", "0.3", "--timeout", "170", check=False, timeout=180)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith(f"{run.id}: done, jobs ") and "epoch 8/8" in lines[-1]
    st = run.state
    assert st.state == "done" and [j.status for j in st.jobs if j.started_at] == ["walltime", "walltime", "finished"]
    assert not st.alive_jobs


def test_wait_exits_1_with_the_runs_error_when_it_fails(chain_env):
    run = submit(make_spec("testlocal", model="fail_model.py", epochs=5, epoch_s=0.2))
    proc = nnlo("wait", run.id, "--every", "0.3", "-q", check=False, timeout=180)
    assert proc.returncode == 1
    assert len(proc.stdout.splitlines()) == 1 and "failed" in proc.stdout
    assert proc.stderr.startswith(f"nnlo: error: run {run.id} failed: ") and "diverged" in proc.stderr


def test_wait_gives_up_at_its_timeout_and_leaves_the_run_alone(chain_env):
    run = submit(make_spec("testlocal", epochs=200, epoch_s=0.5, walltime_s=600))
    proc = nnlo("wait", run.id, "--timeout", "1", "--every", "0.2", check=False)
    assert proc.returncode == 1 and "after 1 s" in proc.stderr and f"nnlo wait {run.id}" in proc.stderr
    assert run.state.state in ("queued", "running")
    nnlo("cancel", run.id)
    wait_for("the cancel", lambda: run.state.state == "cancelled" and not run.state.alive_jobs)


def test_wait_on_an_unknown_run_is_one_line(chain_env):
    proc = nnlo("wait", "no-such-run", check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("nnlo: error: ") and len(proc.stderr.splitlines()) == 1
