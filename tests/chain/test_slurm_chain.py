"""On a real (private, single-node) Slurm: a training submitted with `nnlo submit` is stopped three times,
resubmits with afterany, resumes and finishes with the same epochs and - synchronous mode, fixed seed - the same
final metrics as an uninterrupted run; `nnlo status` is checked at each stage. Each job is stopped after an exact
number of updates of its own (``NNLO_TEST_SIGNAL_AT_UPDATE``: the real signal path, forced rather than raced
against a short walltime; Slurm's own pre-walltime signal is tests/sched/test_slurm_script.py's). Then the quick
cases with the stand-in payload: cancel of a chain, a failing run that is not resubmitted, and the PBS path
through Slurm's own qsub/qstat/qdel wrappers."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.chain import epochs_done, make_spec, nnlo, status_json, status_view, submit, wait_for

pytestmark = [pytest.mark.slurm]
REPO = Path(__file__).resolve().parents[2]
MODEL = Path(__file__).parent / "paced_mlp.py"  # its gate holds every job's first batch until the test opens it
SAMPLES, BATCH, EPOCHS = 2000, 50, 6  # one worker: 40 updates an epoch, 240 in all
UPDATES_PER_JOB = 90  # jobs stop at updates 90 and 180 (mid-epoch), the third finishes: exactly three jobs


def _train_args(data: Path, gate: Path) -> list[str]:
    return ["--model", str(MODEL), "--model-arg", "pause_s=0", "--model-arg", f"gate={gate}",
            "--train", str(data / "data.list"), "--val", str(data / "val.list"), "--epochs", str(EPOCHS),
            "--batch", str(BATCH), "--mode", "downpour", "--synchronous", "--seed", "7", "--checkpoint-interval", "1"]


def _run_view(run_id: str) -> dict:
    return status_view(run_id)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_training_chain_over_three_walltimes_matches_an_uninterrupted_run(slurm, chain_env, mpirun, request,
                                                                          monkeypatch):
    data = chain_env / "data"
    subprocess.run([sys.executable, str(REPO / "examples" / "make_synthetic.py"), "--out", str(data),
                    "--samples", str(SAMPLES), "--features", "32", "--classes", "4", "--files", "2",
                    "--val-samples", "400", "--seed", "3"], check=True, capture_output=True, timeout=120)
    # pip MPICH inside the allocation: its own mpirun (hydra). `srun --mpi=pmi2` works too, but here the
    # first MPI step of a fresh test cluster sometimes fails in MPI_Init (UCX address exchange)
    (chain_env / "clusters" / "slurmtrain.toml").write_text(
        'scheduler = "slurm"\nlauncher = "mpirun"\nlauncher_command = "auto"\ncores_per_node = 2\n'
        f'nodes = 1\npython = "{sys.executable}"\n')
    gate = chain_env / "gate"
    # the reference: the same training, uninterrupted (no stop hook), run while the chain runs
    ref_dir = chain_env / "reference"
    ref_log = chain_env / "reference.log"
    with open(ref_log, "w") as log:
        reference = subprocess.Popen([sys.executable, "-m", "nnlo_sched", "train", "-n", "2",
                                      *_train_args(data, gate), "--checkpoint", str(ref_dir)],
                                     stdout=log, stderr=subprocess.STDOUT)
    request.addfinalizer(lambda: reference.poll() is None and reference.terminate())
    # 1 master + 1 worker (few ranks: quick start-up on 2 cores); sbatch passes the hook on to every job
    monkeypatch.setenv("NNLO_TEST_SIGNAL_AT_UPDATE", str(UPDATES_PER_JOB))
    out = nnlo("submit", "--cluster", "slurmtrain", "--workers", "1", "--walltime", "10", "--name", "e2e",
               "train", *_train_args(data, gate)).stdout
    assert out.startswith("submitted run e2e-") and " as job " in out
    run_id = out.split()[2]
    first_job = out.split(" as job ")[1].split()[0]

    # the first job waits at the gate: it is running, its successor queued behind it with afterany
    view = wait_for("the first job to run with its successor queued",
                    lambda: (v := _run_view(run_id))["state"] == "running" and len(v["jobs"]) == 2
                    and v["jobs"][1]["scheduler_state"] is not None and v)
    assert view["jobs"][0]["job_id"] == first_job and view["jobs"][0]["status"] == "running"
    assert view["jobs"][1]["status"] == "queued" and view["jobs"][1]["depends_on"] == first_job
    assert view["jobs"][1]["scheduler_state"] == "PENDING"
    squeue = slurm.run("squeue", "-h", "-j", view["jobs"][1]["job_id"], "-o", "%E").stdout
    assert f"afterany:{first_job}" in squeue
    assert view["progress"]["epoch"] is None
    gate.touch()

    view = wait_for("the chain to end", lambda: (v := _run_view(run_id))["state"] in ("done", "failed") and v,
                    timeout=480)
    assert view["state"] == "done", view["error"] + "\n" + nnlo("logs", run_id).stdout[-3000:]
    started = [j for j in view["jobs"] if j["started_at"]]
    assert [(j["status"], j["rc"]) for j in started] == [("walltime", 75), ("walltime", 75), ("finished", 0)]
    for job, succ in zip(view["jobs"], view["jobs"][1:]):  # each successor waited for its job
        assert succ["depends_on"] == job["job_id"]
    assert view["jobs"][-1]["status"] == "not-needed" and len(view["jobs"]) == 4  # the one behind the last job
    assert view["progress"]["epoch"] == EPOCHS and view["progress"]["best"] is not None
    table = nnlo("status").stdout
    assert run_id in table and "done" in table and f"epoch {EPOCHS}/{EPOCHS}" in table
    logs = nnlo("logs", run_id).stdout
    assert logs.count("received SIGUSR1") == 2 and logs.count("restoring from") == 2, logs[-3000:]

    # the reference, started beside the chain: the same training, uninterrupted
    assert reference.wait(timeout=600) == 0, ref_log.read_text()[-2000:]
    chained = json.loads((Path(view["dir"]) / "history.json").read_text())
    straight = json.loads((ref_dir / "history.json").read_text())
    assert [e["epoch"] for e in chained["history"]] == list(range(1, EPOCHS + 1))
    assert [e["epoch"] for e in straight["history"]] == list(range(1, EPOCHS + 1))
    for key in ("loss", "val_loss", "val_accuracy"):
        assert math.isclose(chained["final"][key], straight["final"][key], rel_tol=1e-5, abs_tol=1e-7), key
    assert chained["final"]["updates"] == straight["final"]["updates"] == EPOCHS * SAMPLES // BATCH


def test_cancel_takes_back_the_running_job_and_its_successor(slurm, chain_env):
    run = submit(make_spec("testslurm", epochs=200, epoch_s=0.5, walltime_s=600))
    view = wait_for("the job to run", lambda: (v := status_json(run))["state"] == "running" and
                    len(v["jobs"]) == 2 and v)
    ids = [j["job_id"] for j in view["jobs"]]
    out = nnlo("cancel", run.id).stdout
    assert all(i in out for i in ids)
    assert run.state.state == "cancelled"

    def gone():
        rows = slurm.run("squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i %T").stdout.split("\n")
        states = dict(r.split() for r in rows if r.strip())
        return all(states.get(i) not in ("PENDING", "RUNNING", "COMPLETING") for i in ids) and states
    states = wait_for("Slurm to end both jobs", gone, timeout=120)
    assert states[ids[1]] == "CANCELLED"
    view = status_json(run)
    assert view["state"] == "cancelled" and all(j["status"] == "cancelled" for j in view["jobs"])


def test_a_failing_run_is_not_resubmitted(slurm, chain_env):
    run = submit(make_spec("testslurm", model="fail_model.py", epochs=5, epoch_s=0.2, walltime_s=600))
    wait_for("the failure", lambda: run.state.state == "failed", timeout=120)
    st = run.state
    started = [j for j in st.jobs if j.started_at]
    assert len(started) == 1 and started[0].rc == 1
    assert "diverged" in st.error
    successor = st.jobs[1].job_id
    wait_for("the successor to be cancelled",
             lambda: "CANCELLED" in slurm.run("squeue", "-h", "-t", "all", "-j", successor, "-o", "%T").stdout)
    assert "failed" in nnlo("status").stdout


def test_nnlo_preempt_signals_through_slurm_and_the_successor_resumes(slurm, chain_env):
    """``nnlo preempt`` sends the profile's warning signal with ``scancel --signal=USR2 --batch`` (what a site's
    preemption sends): the batch shell relays it to srun's tasks, the job stops with a checkpoint (75,
    ``preempted``), its queued successor resumes. The first job holds after its first checkpoint until a stop
    signal comes, so only the preemption moves the chain on."""
    run = submit(make_spec("testslurm", epochs=4, epoch_s=0.3, walltime_s=600, hold_at_epoch=1))
    out = nnlo("preempt", run.id, "--wait", "170", timeout=180).stdout
    first = run.state.jobs[0].job_id
    assert f"preempted job {first} of run {run.id}" in out
    wait_for("the run to finish", lambda: run.state.state in ("done", "failed"), timeout=180)
    st = run.state
    assert st.state == "done", st.error
    assert st.jobs[0].status == "preempted" and st.jobs[0].rc == 75, st.jobs[0]
    assert epochs_done(run) == [1, 2, 3, 4]
    logs = nnlo("logs", run.id).stdout
    assert "payload: stopping at epoch 1 (signal)" in logs and "restored from ckpt-e0001" in logs


def test_pbs_path_through_slurms_torque_wrappers(slurm, chain_env):
    (chain_env / "clusters" / "torque.toml").write_text(
        'scheduler = "pbs"\nlauncher = "mpirun"\nlauncher_command = "auto"\ncores_per_node = 8\nnodes = 1\n'
        f'python = "{Path(__file__).parent / "fake_python.sh"}"\n')
    run = submit(make_spec("torque", epochs=3, epoch_s=0.2, walltime_s=600))
    assert run.job_id.isdigit()  # the wrapper's qsub prints Slurm's job id
    wait_for("the run to finish", lambda: run.state.state in ("done", "failed"), timeout=120)
    st = run.state
    assert st.state == "done", st.error
    assert epochs_done(run) == [1, 2, 3]
    assert st.jobs[1].depends_on == st.jobs[0].job_id and st.jobs[1].status == "not-needed"
    succ = st.jobs[1].job_id
    state = wait_for("qdel to cancel the successor", lambda: "JobState=CANCELLED" in (
        out := slurm.run("scontrol", "show", "job", succ, check=False).stdout) and out, timeout=60)
    assert f"Dependency=afterany:{st.jobs[0].job_id}" in state or "Dependency=(null)" in state


def test_sacct_answers_for_ended_jobs_with_accounting(slurm):
    """slurmdbd + MariaDB on loopback: the path status takes for jobs squeue has forgotten."""
    from nnlo_sched.schedulers.slurm import SlurmScheduler

    if not slurm.accounting:
        if os.environ.get("NNLO_REQUIRE_SLURM") == "1":
            pytest.fail("NNLO_REQUIRE_SLURM=1 but the session's test Slurm has no accounting (slurmdbd, MariaDB)")
        pytest.skip("the session's private Slurm has no accounting (slurmdbd, MariaDB not installed)")
    ok = slurm.run("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true").stdout.strip()
    bad = slurm.run("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "exit 3").stdout.strip()
    sched = SlurmScheduler()
    wait_for("both jobs to end", lambda: all(not i.alive for i in sched.query([ok, bad]).values()), timeout=120)
    # slurmdbd records each job's end on its own schedule: wait until neither is pending or running there
    got = wait_for("accounting to record them",
                   lambda: (g := sched._sacct([ok, bad, "999999"]))[ok].state == "COMPLETED"
                   and not g[bad].alive and g, timeout=60)
    assert got[bad].state == "FAILED" and got["999999"].state == "ENDED"
