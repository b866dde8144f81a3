"""Scheduler adapters: their submit command lines and job-id syntax, job ids from each submit program's real
output, state words, and the rules of query (one call for many jobs; absent = ended; a broken program =
unknown, not an exception). Ids outside a scheduler's syntax never reach one of its programs."""
from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path

import pytest

from nnlo_sched.render import job_name
from nnlo_sched.schedulers import SchedulerError, get_scheduler, scheduler_class
from nnlo_sched.schedulers.slurm import normalise

STANDIN = Path(__file__).resolve().parent / "standin_batch.py"


@pytest.mark.parametrize("name,text,job", [
    ("slurm", "4242\n", "4242"),
    ("slurm", "4242;cluster1\n", "4242"),
    ("slurm", "Submitted batch job 77\n", "77"),
    ("slurm", "77_3\n", "77_3"),
    ("lsf", "Job <123456> is submitted to queue <batch>.\n", "123456"),
    ("lsf", "<<Waiting for dispatch ...>>\nJob <9> is submitted to default queue <normal>.\n", "9"),
    ("pbs", "1234567.titan-batch.ccs.ornl.gov\n", "1234567.titan-batch.ccs.ornl.gov"),
    ("pbs", "3141592.titan-batch1\n", "3141592.titan-batch1"),
    ("pbs", "88\n", "88"),
    ("pbs", "88[].pbs01\n", "88[].pbs01"),
])
def test_job_id_from_submit_output(name, text, job):
    sched = get_scheduler(name)
    assert sched.parse_submit_output(text) == job
    assert sched.check_job_id(job) == job  # what the submit program prints can be depended on and cancelled


@pytest.mark.parametrize("name,depends_on,argv", [
    ("slurm", None, ["sbatch", "--parsable", "/r/job.sh"]),
    ("slurm", "42", ["sbatch", "--parsable", "--dependency=afterany:42", "/r/job.sh"]),
    ("lsf", None, ["sh", "-c", 'exec bsub "$@" < "$0"', "/r/job.sh"]),
    ("lsf", "42", ["sh", "-c", 'exec bsub "$@" < "$0"', "/r/job.sh", "-w", "ended(42)"]),
    ("pbs", None, ["qsub", "/r/job.sh"]),
    ("pbs", "42.titan-batch", ["qsub", "-W", "depend=afterany:42.titan-batch", "/r/job.sh"]),
    ("local", None, ["/bin/bash", "/r/job.sh"]),
    ("local", "3", ["/bin/bash", "/r/job.sh"]),  # the dependency lives in the run's queue
])
def test_submit_argv(name, depends_on, argv):
    assert get_scheduler(name, "/r").submit_argv(Path("/r/job.sh"), depends_on) == argv


def test_template_facts_are_the_schedulers():
    assert [scheduler_class(n).directive_prefix for n in ("slurm", "lsf", "pbs", "local")] == [
        "#SBATCH", "#BSUB", "#PBS", "#"]
    assert [n for n in ("slurm", "lsf", "pbs", "local") if not scheduler_class(n).warns_before_walltime] == ["pbs", "local"]
    assert [n for n in ("slurm", "lsf", "pbs", "local") if scheduler_class(n).takes_constraint] == ["slurm"]
    assert job_name("123 run/x", "slurm") == "123_run_x" and job_name("123456789012345678", "pbs") == "n12345678901234"
    assert job_name("", "lsf") == "nnlo" and len(job_name("x" * 100, "local")) == 64


@pytest.fixture
def standins(tmp_path, monkeypatch):
    """Recording bsub/bkill/qsub/qdel (standin_batch.py) and sbatch/scancel first on PATH; ``calls()`` lists
    every call of any of them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for prog in ("bsub", "bjobs", "bkill", "qsub", "qstat", "qdel"):
        (bin_dir / prog).symlink_to(STANDIN)
    log = tmp_path / "calls.jsonl"
    for prog, out in (("sbatch", "4242;cluster1"), ("scancel", "")):
        _program(bin_dir, prog, f"""python3 -c 'import json, sys; print(json.dumps({{"prog": "{prog}", "args": sys.argv[1:]}}))' "$@" >> {log}
echo '{out}'
""")
    monkeypatch.setenv("STANDIN_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#BSUB -J x\necho hi\n")

    def calls() -> list[dict]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return script, calls


@pytest.mark.slow
def test_submit_runs_the_schedulers_own_command(standins):
    """Each submit program gets its dependency option and the script (bsub on stdin); the id comes back."""
    script, calls = standins
    assert get_scheduler("slurm").submit(script, depends_on="41", walltime_s=60) == "4242"
    assert get_scheduler("lsf").submit(script, depends_on="41", walltime_s=60) == "1001"
    assert get_scheduler("pbs").submit(script, depends_on="41.pbs01", walltime_s=60) == "1002.pbs01"
    sbatch, bsub, qsub = calls()
    assert sbatch["args"] == ["--parsable", "--dependency=afterany:41", str(script)]
    assert bsub["args"] == ["-w", "ended(41)"] and bsub["script"] == script.read_text()
    assert qsub["args"] == ["-W", "depend=afterany:41.pbs01", str(script)]


@pytest.mark.slow
def test_a_failing_bsub_is_named_not_its_shell(standins):
    script, _ = standins
    bsub = script.parent / "bin" / "bsub"
    bsub.unlink()
    _program(script.parent / "bin", "bsub", 'echo "Bad project name. Job not submitted." >&2\nexit 255\n')
    with pytest.raises(SchedulerError, match=r"^bsub failed \(submit\): Bad project name"):
        get_scheduler("lsf").submit(script, depends_on=None, walltime_s=60)


# ids each scheduler must refuse: specials that mean "all jobs" (bkill 0, qdel all), options, shell and
# dependency-list syntax, empty
_BAD_IDS = ["", "-1", "all", "ALL", "--user=x", "1;rm -rf ~", "1 2", "1\n2", "1,2", "1:2", "$(id)", "１"]
_REFUSED = ([("slurm", b) for b in [*_BAD_IDS, "0", "00", "1_"]]
            + [("lsf", b) for b in [*_BAD_IDS, "0", "0[1]", "1[0]", "ended(1)"]]
            + [("pbs", b) for b in [*_BAD_IDS, "1.a:2", "1.a,afterok:2", "1@server", ".1"]]
            + [("local", b) for b in [*_BAD_IDS, "0", "pid123"]])


@pytest.mark.parametrize("name,bad", _REFUSED)
def test_a_malformed_dependency_is_refused_before_any_program_runs(standins, tmp_path, name, bad):
    script, calls = standins
    sched = get_scheduler(name, tmp_path / "run")
    with pytest.raises(SchedulerError, match="is not a .* job id") as e:
        sched.submit(script, depends_on=bad, walltime_s=60)
    assert "\n" not in str(e.value)
    with pytest.raises(SchedulerError, match="is not a .* job id"):
        sched.submit_argv(script, bad)
    assert calls() == [] and not (tmp_path / "run").exists()  # not even the local queue was touched


@pytest.mark.slow
@pytest.mark.parametrize("name,bad", _REFUSED)
def test_a_malformed_cancel_id_is_refused_before_any_program_runs(standins, tmp_path, name, bad):
    _, calls = standins
    sched = get_scheduler(name, tmp_path / "run")
    good = {"slurm": "5", "lsf": "5", "pbs": "5.pbs01", "local": "5"}[name]
    with pytest.raises(SchedulerError, match="is not a .* job id"):
        sched.cancel([good, bad])  # one bad id refuses the whole call: nothing is half done
    assert calls() == []
    if name != "local":  # the control: a well-formed id does reach the cancel program
        sched.cancel([good])
        assert [(c["prog"], c["args"]) for c in calls()] == [(sched.cancel_program, [good])]


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_sacct_answers_for_jobs_squeue_forgot(tmp_path, monkeypatch):
    _program(tmp_path, "squeue", 'echo "slurm_load_jobs error: Invalid job id specified" >&2\nexit 1\n')
    _program(tmp_path, "sacct", 'printf "21|TIMEOUT\\n22|CANCELLED by 0\\n"\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    got = get_scheduler("slurm").query(["21", "22"])
    assert got["21"].state == "TIMEOUT" and got["22"].state == "CANCELLED"


@pytest.mark.slow
def test_a_down_controller_gives_unknown(tmp_path, monkeypatch):
    _program(tmp_path, "squeue", 'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    got = get_scheduler("slurm").query(["5"])
    assert got["5"].state == "UNKNOWN" and "Unable to contact" in got["5"].reason


def test_missing_program_gives_unknown_for_query_and_error_for_submit(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert get_scheduler("lsf").query(["1"])["1"].state == "UNKNOWN"
    with pytest.raises(SchedulerError, match="bsub not found"):  # not "sh not found": bsub is what is missing
        get_scheduler("lsf").submit(tmp_path / "job.sh", depends_on=None, walltime_s=60)


# -- signals (what a preemption or `nnlo preempt` sends) ------------------------------------------------------
@pytest.mark.parametrize("name,ids,sig,argv", [
    ("slurm", ["5", "6_1"], signal.SIGUSR1, ["scancel", "--signal=USR1", "--batch", "5", "6_1"]),
    ("lsf", ["5", "6[2]"], signal.SIGUSR2, ["bkill", "-s", "USR2", "5", "6[2]"]),
    ("pbs", ["5.pbs01"], signal.SIGTERM, ["qsig", "-s", "TERM", "5.pbs01"]),
])
def test_signal_argv_is_the_batch_systems_own(name, ids, sig, argv):
    assert get_scheduler(name).signal_argv(ids, sig) == argv


@pytest.fixture
def signallers(tmp_path, monkeypatch):
    """Recording scancel/bkill/qsig; bkill complains about job 9 as LSF does about a job that has ended."""
    log = tmp_path / "calls"
    for prog in ("scancel", "bkill", "qsig"):
        _program(tmp_path, prog, f'echo "{prog} $*" >> {log}\n'
                                 'case " $* " in *" 9 "*) echo "Job <9>: Job has already finished" >&2; exit 255;; esac\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return lambda: log.read_text().splitlines() if log.exists() else []


@pytest.mark.slow  # the batch systems' signal programs are stand-in scripts
def test_signal_runs_one_program_call_for_every_job(signallers):
    get_scheduler("slurm").signal(["5", "6", "5"], signal.SIGUSR2)
    get_scheduler("lsf").signal(["5", "9"], signal.SIGUSR2)  # 9 has ended: no error
    get_scheduler("pbs").signal([], signal.SIGUSR1)  # nothing to signal: no program runs
    assert signallers() == ["scancel --signal=USR2 --batch 5 6", "bkill -s USR2 5 9"]


@pytest.mark.parametrize("name,bad", _REFUSED)
def test_a_malformed_signal_id_is_refused_before_any_program_runs(signallers, tmp_path, name, bad):
    sched = get_scheduler(name, tmp_path / "run")
    good = {"slurm": "5", "lsf": "5", "pbs": "5.pbs01", "local": "5"}[name]
    with pytest.raises(SchedulerError, match="is not a .* job id"):
        sched.signal([good, bad], signal.SIGUSR1)
    assert signallers() == [] and not (tmp_path / "run").exists()


def test_a_missing_signal_program_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SchedulerError, match="^qsig not found: cannot signal jobs") as e:
        get_scheduler("pbs").signal(["5"], signal.SIGUSR1)
    assert "\n" not in str(e.value)


@pytest.mark.slow  # a real local-scheduler job
def test_the_local_scheduler_signals_the_batch_shell_of_a_running_job_only(tmp_path):
    """The running job's batch shell gets the signal (its trap runs); the job queued behind it is left alone."""
    run = tmp_path / "run"
    run.mkdir()
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\ntrap 'echo got-$$ >> {tmp_path}/got; exit 0' USR1\n"
                      f"touch {tmp_path}/started-$$\nwhile :; do sleep 0.05; done\n")
    sched = get_scheduler("local", run)
    first = sched.submit(script, depends_on=None, walltime_s=60)
    second = sched.submit(script, depends_on=first, walltime_s=60)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("started-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.glob("started-*")), "the first job never started"
    sched.signal([first, second], signal.SIGUSR1)
    while not (tmp_path / "got").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "got").read_text().count("got-") == 1  # only the running job's shell
    assert sched.query([second])[second].state in ("PENDING", "RUNNING")  # queued, or started once 1 ended
    sched.cancel([second])
    while sched.query([first, second])[second].alive and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sched.query([second])[second].alive
