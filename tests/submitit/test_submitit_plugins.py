"""nnlo's LSF and PBS submitit plugins through submitit's public API, end to end: recording stand-ins for
bsub/bjobs/bkill and qsub/qstat/qdel (submitit_standin.py) run each rendered script in the background, so
``job.result()`` is the function's real value, an exception is submitit's FailedJobError with the traceback,
``job.state`` follows the job, and a checkpointable function goes on in a successor job."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import submitit
from submitit.core import plugins

from nnlo.errors import ConfigError
from tests.submitit import submitit_funcs as funcs

TIMEOUT = 60


def calls(state: Path, prog: str) -> list[dict]:
    path = state / "calls.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [c for c in map(json.loads, lines) if c["prog"] == prog]


def wait_state(job, wanted: set[str], timeout: float = TIMEOUT) -> str:
    end = time.time() + timeout
    while time.time() < end:
        job.watcher.update()  # what a forced refresh does: one query for every registered job
        state = job.state
        if state in wanted:
            return state
        time.sleep(0.2)
    raise AssertionError(f"job {job.job_id} never reached {wanted} (state {job.state})")


def lsf_executor(folder: Path, **params) -> submitit.AutoExecutor:
    ex = submitit.AutoExecutor(folder, cluster="lsf")
    ex.update_parameters(timeout_min=2, lsf_profile="testlsf", lsf_account="ABC123", **params)
    return ex


def pbs_executor(folder: Path, **params) -> submitit.AutoExecutor:
    ex = submitit.AutoExecutor(folder, cluster="pbs", pbs_max_num_timeout=10)  # a loaded machine starts slowly
    ex.update_parameters(timeout_min=2, pbs_profile="testpbs", **params)
    return ex


def test_entry_points_register_both_backends_and_register_stands_in_for_them(plugin_env, monkeypatch):
    import nnlo_sched.submitit
    from nnlo_sched.submitit.lsf import LsfExecutor, LsfJobEnvironment
    from nnlo_sched.submitit.pbs import PbsExecutor, PbsJobEnvironment
    from tests.helpers.submitit import clear_plugin_caches

    # from the declared entry points alone (nnlo's setup.cfg: LSF; plugins/submitit-pbs: PBS)
    assert plugins.get_executors()["lsf"] is LsfExecutor and plugins.get_executors()["pbs"] is PbsExecutor
    assert isinstance(plugins.get_job_environments()["lsf"], LsfJobEnvironment)
    assert isinstance(plugins.get_job_environments()["pbs"], PbsJobEnvironment)
    assert isinstance(submitit.AutoExecutor(plugin_env, cluster="pbs")._executor, PbsExecutor)
    for env in plugins.get_job_environments().values():  # submitit's own plugin checks
        assert not env.activated()
        assert type(env)._requeue is not submitit.JobEnvironment._requeue
    # without the PBS distribution (installed or not here, its entry points are hidden), register() adds it
    # at run time (idempotent)
    declared = plugins._iter_submitit_entrypoints
    monkeypatch.setattr(plugins, "_iter_submitit_entrypoints",
                        lambda: [ep for ep in declared() if not ep.value.startswith("nnlo_sched.submitit.pbs")])
    clear_plugin_caches()
    with pytest.raises(ValueError, match="pbs"):
        submitit.AutoExecutor(plugin_env, cluster="pbs")
    nnlo_sched.submitit.register()
    nnlo_sched.submitit.register()
    assert plugins.get_executors()["pbs"] is PbsExecutor and plugins.get_executors()["lsf"] is LsfExecutor
    assert isinstance(plugins.get_job_environments()["pbs"], PbsJobEnvironment)


def test_dry_run_script_carries_the_profile_and_parameters(plugin_env):
    import nnlo_sched.submitit

    ex = lsf_executor(plugin_env / "jobs", nodes=2, name="my fn", lsf_setup=["echo ready"],
                      lsf_directives=["-alloc_flags smt4"])
    text = nnlo_sched.submitit.script(ex)
    for line in ("#BSUB -J my_fn", "#BSUB -P ABC123", "#BSUB -W 2", "#BSUB -nnodes 2", "#BSUB -wa USR1",
                 "#BSUB -wt 1", "#BSUB -alloc_flags smt4", "export FROM_PROFILE_SETUP=1", "echo ready",
                 "export SUBMITIT_EXECUTOR=lsf", "-m nnlo_sched.submitit.job"):
        assert line in text, line
    assert not list((plugin_env / "jobs").glob("*.pkl")) and not (plugin_env / "standin").exists()
    # refused before anything is submitted, each with one line
    with pytest.raises(ConfigError, match="at most nodes=2"):
        ex.update_parameters(nodes=3)
    with pytest.raises(ValueError, match="one task per job"):
        ex.update_parameters(tasks_per_node=2)
    with pytest.raises(ConfigError, match="uses pbs, not lsf"):
        ex.update_parameters(lsf_profile="testpbs")
    with pytest.raises(NameError, match="bogus"):
        ex.update_parameters(lsf_bogus=1)
    for bad, match in ((dict(timeout_min=0), "positive"), (dict(nodes=0), "at least 1"),
                       (dict(lsf_checkpoint_lead_s="soon"), "positive"), (dict(lsf_setup=[1]), "list of strings"),
                       (dict(lsf_account="A 1"), "batch directive"), (dict(lsf_checkpoint_lead_s=500), "walltime")):
        with pytest.raises(ConfigError, match=match):
            ex.update_parameters(**bad)
            nnlo_sched.submitit.script(ex)
        ex.update_parameters(lsf_checkpoint_lead_s=30)  # a valid state again for the next check
    with pytest.raises(ConfigError, match="batch directive"):
        submitit.AutoExecutor(plugin_env / "a folder", cluster="lsf")
    # Summit's batch script runs on a launch node: the function goes to a compute node through jsrun
    summit = submitit.AutoExecutor(plugin_env / "jobs", cluster="lsf")
    summit.update_parameters(timeout_min=90, nodes=2, lsf_profile="summit", lsf_account="ABC123")
    last = nnlo_sched.submitit.script(summit).splitlines()[-1]
    assert last.startswith("exec jsrun -n 1 -r 1 -a 1 -c 42 -g 6 ") and "-m nnlo_sched.submitit.job" in last
    summit.update_parameters(lsf_launch=False)
    assert nnlo_sched.submitit.script(summit).splitlines()[-1].startswith("exec " + sys.executable)
    with pytest.raises(ConfigError, match="longer than queue 'batch'"):
        summit.update_parameters(timeout_min=180)
        nnlo_sched.submitit.script(summit)
    bare = submitit.AutoExecutor(plugin_env / "jobs", cluster="lsf")
    bare.update_parameters(lsf_profile="testlsf")
    with pytest.raises(ConfigError, match="lsf_account"):
        nnlo_sched.submitit.script(bare)


@pytest.mark.slow
def test_lsf_results_states_and_one_query_for_many_jobs(standins, plugin_env):
    ex = lsf_executor(plugin_env / "jobs")
    jobs = ex.map_array(funcs.add, [1, 2, 3], [10, 20, 30])
    jobs[0].watcher.update()  # one bjobs call answers for every job not known to have ended
    asked = calls(standins, "bjobs")[-1]["args"]
    assert asked[:2] == ["-a", "-w"] and sorted(asked[2:]) == sorted(j.job_id for j in jobs)
    assert [j.result() for j in jobs] == [11, 22, 33]
    assert all(j.state == "COMPLETED" for j in jobs)
    assert "adding 2 and 20 in job " + jobs[1].job_id in jobs[1].stdout()
    subs = calls(standins, "bsub")
    assert [c["job"] for c in subs] == [j.job_id for j in jobs] and all(c["args"] == [] for c in subs)
    assert "#BSUB -P ABC123" in subs[0]["script"]


@pytest.mark.slow
def test_lsf_exception_surfaces_as_failed_job_error(standins, plugin_env):
    job = lsf_executor(plugin_env / "jobs").submit(funcs.fail, "the model diverged")
    with pytest.raises(submitit.core.utils.FailedJobError) as info:
        job.result()
    assert "ValueError: the model diverged" in str(info.value) and "Traceback" in str(info.value)
    assert job.state == "FAILED"


@pytest.mark.slow
def test_lsf_cancel(standins, plugin_env, monkeypatch):
    from nnlo_sched.submitit.base import NnloJob

    monkeypatch.setattr(NnloJob, "_results_timeout_s", 1)
    job = lsf_executor(plugin_env / "jobs").submit(funcs.sleep, 120)
    assert wait_state(job, {"RUNNING"}) == "RUNNING"
    job.cancel()
    assert calls(standins, "bkill")[-1]["args"] == [job.job_id]
    assert wait_state(job, {"CANCELLED"}) == "CANCELLED"
    job.wait()
    assert isinstance(job.exception(), submitit.core.utils.UncompletedJobError)


@pytest.mark.slow
def test_pbs_checkpoint_resumes_in_a_successor_job(standins, plugin_env):
    # no warning signal on PBS: the job's timer checkpoints 56 s before its 1-minute walltime
    ex = pbs_executor(plugin_env / "jobs", pbs_checkpoint_lead_s=56)
    ex.update_parameters(timeout_min=1)
    job = ex.submit(funcs.Counter(), 4, 0.25, 2)  # returns only in a second job
    count, seen, steps = job.result()
    assert count == 4 and sum(steps) == 4  # the second job went on from the first one's count
    assert len(job.chain) == 2 and seen == job.chain  # each job of the chain ran the function once
    subs = calls(standins, "qsub")
    assert [c["job"] for c in subs] == job.chain
    for prev, nxt in zip(subs, subs[1:]):
        assert nxt["args"][:2] == ["-W", f"depend=afterany:{prev['job']}"]
    assert job.state == "COMPLETED" and job.job_id == job.chain[-1]


@pytest.mark.slow
def test_lsf_checkpoint_on_the_signal_resumes_in_a_successor_job(standins, plugin_env):
    # the first job counts to 5 and waits there for the signal: it comes mid-count on any machine
    job = lsf_executor(plugin_env / "jobs").submit(funcs.Counter(), 20, 0.05, 1, 5)
    first = job.job_id
    end = time.time() + TIMEOUT
    while not (plugin_env / f"held-{first}").exists() and time.time() < end:
        time.sleep(0.1)
    job._interrupt()  # what LSF's -wa warning (or a preemption) does: SIGUSR2 to the job
    assert calls(standins, "bkill")[-1]["args"] == ["-s", "USR2", first]
    count, seen, steps = job.result()
    assert count == 20 and steps == [5, 15]  # the second job went on from the first one's checkpointed count
    assert job.chain[0] == first and len(job.chain) == 2 and seen == job.chain
    assert calls(standins, "bsub")[1]["args"] == ["-w", f"ended({first})"]
    assert job.state == "COMPLETED"
