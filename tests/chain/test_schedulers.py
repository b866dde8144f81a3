"""Scheduler adapters: job ids from each submit program's real output, state words, and the rules of query
(one call for many jobs; absent = ended; a broken program = unknown, not an exception)."""
from __future__ import annotations

import os
import stat

import pytest

from nnlo_sched.schedulers import SchedulerError, get_scheduler
from nnlo_sched.schedulers.slurm import normalise


@pytest.mark.parametrize("name,text,job", [
    ("slurm", "4242\n", "4242"),
    ("slurm", "4242;cluster1\n", "4242"),
    ("slurm", "Submitted batch job 77\n", "77"),
    ("lsf", "Job <123456> is submitted to queue <batch>.\n", "123456"),
    ("lsf", "<<Waiting for dispatch ...>>\nJob <9> is submitted to default queue <normal>.\n", "9"),
    ("pbs", "1234567.titan-batch.ccs.ornl.gov\n", "1234567.titan-batch.ccs.ornl.gov"),
    ("pbs", "88\n", "88"),
])
def test_job_id_from_submit_output(name, text, job):
    assert get_scheduler(name).parse_submit_output(text) == job


@pytest.mark.parametrize("name", ["slurm", "lsf", "pbs"])
def test_no_job_id_is_a_one_line_error(name):
    with pytest.raises(SchedulerError) as e:
        get_scheduler(name).parse_submit_output("sbatch: error: Batch job submission failed: Invalid account\n")
    assert "\n" not in str(e.value) and "Invalid account" in str(e.value)


def test_slurm_state_words():
    assert normalise("PENDING") == "PENDING" and normalise("COMPLETING") == "RUNNING"
    assert normalise("CANCELLED by 0") == "CANCELLED" and normalise("TIMEOUT") == "TIMEOUT"
    assert normalise("NODE_FAIL") == "FAILED" and normalise("WHATEVER") == "UNKNOWN"


def _program(bin_dir, name, body):
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_squeue_once_for_many_jobs_and_missing_means_ended(tmp_path, monkeypatch):
    log = tmp_path / "calls"
    _program(tmp_path, "squeue", f'echo "$@" >> {log}\nprintf "11|RUNNING|None\\n12|PENDING|Dependency\\n"\n')
    _program(tmp_path, "sacct", f'echo sacct "$@" >> {log}\necho "sacct: error: Slurm accounting storage is disabled" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    got = get_scheduler("slurm").query(["11", "12", "13"])
    assert {k: v.state for k, v in got.items()} == {"11": "RUNNING", "12": "PENDING", "13": "ENDED"}
    calls = log.read_text().splitlines()
    assert len([c for c in calls if not c.startswith("sacct")]) == 1 and "11,12,13" in calls[0]
    assert len([c for c in calls if c.startswith("sacct")]) == 1  # one fallback call for all missing ids


def test_sacct_answers_for_jobs_squeue_forgot(tmp_path, monkeypatch):
    _program(tmp_path, "squeue", 'echo "slurm_load_jobs error: Invalid job id specified" >&2\nexit 1\n')
    _program(tmp_path, "sacct", 'printf "21|TIMEOUT\\n22|CANCELLED by 0\\n"\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    got = get_scheduler("slurm").query(["21", "22"])
    assert got["21"].state == "TIMEOUT" and got["22"].state == "CANCELLED"


def test_a_down_controller_gives_unknown(tmp_path, monkeypatch):
    _program(tmp_path, "squeue", 'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    got = get_scheduler("slurm").query(["5"])
    assert got["5"].state == "UNKNOWN" and "Unable to contact" in got["5"].reason


def test_missing_program_gives_unknown_for_query_and_error_for_submit(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert get_scheduler("lsf").query(["1"])["1"].state == "UNKNOWN"
    with pytest.raises(SchedulerError, match="bsub not found"):
        get_scheduler("lsf").submit(["bsub", "x"])
