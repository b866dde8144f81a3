"""The PBS plugin once against real programs: Debian's Torque-compatible qsub/qstat/qdel wrappers
(``slurm-wlm-torque``) over the private test Slurm. They ignore ``#PBS -o`` and leave ``PBS_JOBID`` empty (the
job id is then ``SLURM_JOB_ID``); the job's output still lands in submitit's log files."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import submitit

from tests.submitit import submitit_funcs as funcs

pytestmark = pytest.mark.slurm


@pytest.fixture
def torque(slurm_cluster, plugin_env, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    (plugin_env / "clusters" / "torque.toml").write_text('scheduler = "pbs"\nlauncher = "mpirun"\n'
                                                          'cores_per_node = 2\nnodes = 1\n')
    for prog in ("qsub", "qstat", "qdel"):
        if not any((Path(d) / prog).exists() for d in os.environ["PATH"].split(os.pathsep)):
            pytest.skip(f"{prog} (slurm-wlm-torque) is not installed")
    return slurm_cluster


def test_pbs_plugin_through_slurms_torque_wrappers(torque, plugin_env):
    ex = submitit.AutoExecutor(plugin_env / "jobs", cluster="pbs")
    ex.update_parameters(timeout_min=5, pbs_profile="torque", name="torque-add")
    good = ex.submit(funcs.add, 2, 3)
    bad = ex.submit(funcs.fail, "torque says no")
    assert good.job_id.isdigit()  # the wrapper's qsub prints Slurm's job id
    assert good.result() == 5
    assert "adding 2 and 3 in job " in good.stdout()  # PBS_JOBID is empty under the wrappers
    with pytest.raises(submitit.core.utils.FailedJobError, match="torque says no"):
        bad.result()
    assert (good.state, bad.state) == ("COMPLETED", "FAILED")
    end = time.time() + 60
    while time.time() < end and not good.watcher.is_done(good.job_id, mode="force"):
        time.sleep(0.5)
    assert good.watcher.is_done(good.job_id, mode="cache")  # qstat through the wrapper saw it end


def test_pbs_checkpoint_chain_through_slurms_torque_wrappers(torque, plugin_env):
    ex = submitit.AutoExecutor(plugin_env / "jobs", cluster="pbs", pbs_max_num_timeout=10)
    ex.update_parameters(timeout_min=1, pbs_profile="torque", pbs_checkpoint_lead_s=56)
    job = ex.submit(funcs.Counter(), 4, 0.25, 2)  # returns only in a second job
    count, seen, steps = job.result()
    assert count == 4 and sum(steps) == 4 and len(job.chain) == 2 and seen == job.chain  # SLURM_JOB_ID of each
