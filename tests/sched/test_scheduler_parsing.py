"""What each scheduler makes of its programs' answers, without running them: the batch system's programs are
replaced by canned answers at the one place nnlo runs them (``run_capture``), so squeue/sacct/bjobs/qstat
output, exit statuses and error text go through the real query code. Also job-id syntax, submit output,
job names, the job id inside a job, and the local queue file's checks."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nnlo_sched.schedulers import SchedulerError, base, get_scheduler
from nnlo_sched.schedulers.base import JobInfo, unique_ids
from nnlo_sched.schedulers.local import ORPHAN_NOTE
from nnlo_sched.schedulers.pbs import short_id
from nnlo_sched.schedulers.slurm import normalise


class Answers:
    """Canned (returncode, stdout, stderr) per program; every call is recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.answers: dict[str, list[tuple[int, str, str]]] = {}
        self.calls: list[list[str]] = []
        monkeypatch.setattr(base, "run_capture", self._run)
        monkeypatch.setenv("NNLO_SCHED_RETRY_DELAY", "0")

    def on(self, program: str, stdout: str = "", stderr: str = "", rc: int = 0) -> Answers:
        self.answers.setdefault(program, []).append((rc, stdout, stderr))
        return self

    def _run(self, argv: list[str], *, what: str, **_: object) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        queue = self.answers.get(argv[0])
        if not queue:
            raise SchedulerError(f"{argv[0]} not found: cannot {what}")
        rc, out, err = queue.pop(0) if len(queue) > 1 else queue[0]
        return subprocess.CompletedProcess(argv, rc, out, err)


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> Answers:
    return Answers(monkeypatch)


def states(got: dict[str, JobInfo]) -> dict[str, tuple[str, str, str]]:
    assert all(v.job_id == k for k, v in got.items()), got
    return {k: (v.state, v.native, v.reason) for k, v in got.items()}


# -- Slurm ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("word, state", [
    ("PENDING", "PENDING"), ("REQUEUED", "PENDING"), ("SUSPENDED", "PENDING"), ("RUNNING", "RUNNING"),
    ("COMPLETING", "RUNNING"), ("COMPLETED", "COMPLETED"), ("TIMEOUT", "TIMEOUT"), ("DEADLINE", "TIMEOUT"),
    ("CANCELLED by 1234", "CANCELLED"), ("FAILED+", "FAILED"), ("OUT_OF_MEMORY", "FAILED"), ("PREEMPTED", "FAILED"),
    ("REVOKED", "CANCELLED"), ("", "UNKNOWN"), ("   ", "UNKNOWN"), ("running", "UNKNOWN"), ("BOGUS", "UNKNOWN"),
])
def test_slurm_state_words_normalise(word: str, state: str) -> None:
    assert normalise(word) == state


def test_squeue_answers_with_reasons_and_sacct_for_the_rest(answers: Answers) -> None:
    answers.on("squeue", "11|RUNNING|None\n\n  12|PENDING|Dependency  \n99|RUNNING|x\n")
    answers.on("sacct", "13|CANCELLED by 0\n14|FAILED+\n")
    got = get_scheduler("slurm").query(["11", "12", "13", "14", "15", "11"])
    assert states(got) == {"11": ("RUNNING", "RUNNING", "None"), "12": ("PENDING", "PENDING", "Dependency"),
                           "13": ("CANCELLED", "CANCELLED by 0", ""), "14": ("FAILED", "FAILED+", ""),
                           "15": ("ENDED", "", "not in squeue or sacct")}
    assert answers.calls == [
        ["squeue", "-h", "-r", "-t", "all", "-j", "11,12,13,14,15", "-o", "%i|%T|%r"],
        ["sacct", "-n", "-P", "-X", "-j", "13,14,15", "-o", "JobID,State"]]
    assert got["11"].alive and got["12"].alive and not got["13"].alive


def test_squeue_garbage_makes_missing_jobs_unknown_not_ended(answers: Answers) -> None:
    answers.on("squeue", "<html>Proxy Error</html>\n11|RUNNING|None\nanother bad line\n")
    got = get_scheduler("slurm").query(["11", "12"])
    assert got["11"].state == "RUNNING"
    assert states(got)["12"] == ("UNKNOWN", "", "squeue printed unreadable output: '<html>Proxy Error</html>'")
    assert [c[0] for c in answers.calls] == ["squeue"]  # no sacct: absence proves nothing here


def test_sacct_garbage_or_absence(answers: Answers) -> None:
    answers.on("squeue", "").on("sacct", "Maintenance until 5pm\n21|TIMEOUT\n")
    got = get_scheduler("slurm").query(["21", "22"])
    assert states(got) == {"21": ("TIMEOUT", "TIMEOUT", ""),
                           "22": ("UNKNOWN", "", "sacct printed unreadable output: 'Maintenance until 5pm'")}


def test_no_accounting_means_ended(answers: Answers) -> None:
    answers.on("squeue", "", "slurm_load_jobs error: Invalid job id specified", rc=1)
    answers.on("sacct", "", "sacct: error: Slurm accounting storage is disabled", rc=1)
    got = get_scheduler("slurm").query(["31"])
    assert states(got) == {"31": ("ENDED", "", "not in squeue; no accounting")}
    assert [c[0] for c in answers.calls] == ["squeue", "sacct"]  # real answers: neither retried


def test_a_failing_squeue_is_retried_then_unknown(answers: Answers) -> None:
    answers.on("squeue", "", "Socket timed out\non send", rc=1)
    got = get_scheduler("slurm").query(["5", "6"])
    assert states(got)["5"] == ("UNKNOWN", "", "squeue failed: Socket timed out on send")
    assert len(answers.calls) == base.QUERY_RETRIES + 1 == 4
    answers.calls.clear()
    answers.answers.clear()
    answers.on("squeue", "", "flaky", rc=1).on("squeue", "7|RUNNING|None\n")
    assert get_scheduler("slurm").query(["7"])["7"].state == "RUNNING" and len(answers.calls) == 2


def test_a_missing_squeue_is_unknown(answers: Answers) -> None:
    got = get_scheduler("slurm").query(["5"])
    assert states(got) == {"5": ("UNKNOWN", "", "squeue not found: cannot query jobs")}


def test_retries_follow_the_environment(answers: Answers, monkeypatch: pytest.MonkeyPatch) -> None:
    answers.on("squeue", "", "down", rc=1)
    monkeypatch.setenv("NNLO_SCHED_RETRIES", "0")
    get_scheduler("slurm").query(["5"])
    assert len(answers.calls) == 1
    for name, value, message in [
        ("NNLO_SCHED_RETRIES", "x", r"^NNLO_SCHED_RETRIES must be a whole number of retries \(0 or more\), not 'x'$"),
        ("NNLO_SCHED_RETRIES", "-1", "not '-1'"),
        ("NNLO_SCHED_RETRY_DELAY", "soon", r"^NNLO_SCHED_RETRY_DELAY must be a number of seconds \(0 or more\), "
                                           r"not 'soon'$"),
        ("NNLO_SCHED_RETRY_DELAY", "-0.5", "not '-0.5'"), ("NNLO_SCHED_RETRY_DELAY", "nan", "not 'nan'"),
    ]:
        monkeypatch.setenv("NNLO_SCHED_RETRIES", "0")
        monkeypatch.setenv(name, value)
        with pytest.raises(SchedulerError, match=message):
            base.query_capture(["squeue"], what="query jobs")
        monkeypatch.setenv("NNLO_SCHED_RETRY_DELAY", "0")
    monkeypatch.setenv("NNLO_SCHED_RETRIES", " ")
    assert base._env_count("NNLO_SCHED_RETRIES", 3) == 3 and base._env_seconds("NOT_SET_ANYWHERE", 0.5) == 0.5


# -- LSF --------------------------------------------------------------------------------------------------
BJOBS = """JOBID   USER    STAT  QUEUE      FROM_HOST   EXEC_HOST   JOB_NAME   SUBMIT_TIME
101     u       RUN   batch      login1      h1          run1       Jan 1 10:00
102     u       PEND  batch      login1                  run2       Jan 1 10:00
103     u       DONE  batch      login1      h2          run3       Jan 1 10:00
104     u       EXIT  batch      login1      h2          arr[2]     Jan 1 10:00
104     u       RUN   batch      login1      h2          arr[3]     Jan 1 10:00
105     u       ZOMBI batch      login1      h2          run5       Jan 1 10:00
"""


def test_bjobs_table_with_pending_jobs_and_array_elements(answers: Answers) -> None:
    answers.on("bjobs", BJOBS, "Job <106> is not found\n", rc=255)
    got = get_scheduler("lsf").query(["101", "102", "103", "104[2]", "104[3]", "105", "106"])
    assert {k: (v.state, v.native) for k, v in got.items()} == {
        "101": ("RUNNING", "RUN"), "102": ("PENDING", "PEND"), "103": ("COMPLETED", "DONE"),
        "104[2]": ("FAILED", "EXIT"), "104[3]": ("RUNNING", "RUN"), "105": ("UNKNOWN", "ZOMBI"),
        "106": ("ENDED", "")}
    assert got["106"].reason == "not found by bjobs" and all(v.job_id == k for k, v in got.items())
    assert answers.calls == [["bjobs", "-a", "-w", "101", "102", "103", "104[2]", "104[3]", "105", "106"]]


def test_bjobs_without_a_header_garbage_and_failures(answers: Answers) -> None:
    answers.on("bjobs", "101 u RUN batch\nLSF is down for maintenance\n")
    got = get_scheduler("lsf").query(["101", "102"])
    assert states(got) == {"101": ("RUNNING", "RUN", ""),
                           "102": ("UNKNOWN", "", "bjobs printed unreadable output: 'LSF is down for maintenance'")}
    answers.answers.clear()
    answers.on("bjobs", "JOBID USER QUEUE\n101 u batch\n")
    assert states(get_scheduler("lsf").query(["101"])) == {
        "101": ("UNKNOWN", "", "bjobs printed an unexpected header")}
    answers.answers.clear()
    answers.on("bjobs", "", "LSF daemon (LIM) not responding", rc=255)
    assert states(get_scheduler("lsf").query(["101"])) == {
        "101": ("UNKNOWN", "", "bjobs failed: LSF daemon (LIM) not responding")}
    answers.answers.clear()
    answers.on("bjobs", "JOBID USER STAT\n\n0 u RUN\n")  # 0 is no job id: a line that proves nothing
    assert get_scheduler("lsf").query(["101"])["101"].state == "UNKNOWN"


# -- PBS --------------------------------------------------------------------------------------------------
QSTAT = """Job ID                    Name             User            Time Use S Queue
------------------------- ---------------- --------------- -------- - -----
1234.titan-batch          run1             u               00:01:00 R batch
1235.titan-batch          run2             u               0        Q batch
1236.titan-bat            run3             u               00:05:00 C batch
1237[4].pbs01             arr              u               0        F batch
"""


def test_qstat_table_short_ids_and_finished_states(answers: Answers) -> None:
    answers.on("qstat", QSTAT, "qstat: Unknown Job Id 1238.titan-batch\n", rc=153)
    ids = ["1234.titan-batch", "1235.titan-batch", "1236.titan-batch", "1237[4].pbs01", "1238.titan-batch"]
    got = get_scheduler("pbs").query(ids)
    assert {k: (v.state, v.native) for k, v in got.items()} == {
        "1234.titan-batch": ("RUNNING", "R"), "1235.titan-batch": ("PENDING", "Q"),
        "1236.titan-batch": ("ENDED", "C"), "1237[4].pbs01": ("ENDED", "F"), "1238.titan-batch": ("ENDED", "")}
    assert got["1238.titan-batch"].reason == "unknown to qstat" and all(v.job_id == k for k, v in got.items())
    assert short_id("1234.titan-batch.ccs.ornl.gov") == "1234" and short_id("88") == "88"


def test_qstat_garbage_and_failures(answers: Answers) -> None:
    answers.on("qstat", "PBS server is down\n1234.s  run  u  0  X  batch\nshort line\n")
    got = get_scheduler("pbs").query(["1234.s", "99.s"])
    assert states(got) == {"1234.s": ("ENDED", "X", ""),
                           "99.s": ("UNKNOWN", "", "qstat printed unreadable output: 'PBS server is down'")}
    answers.answers.clear()
    answers.on("qstat", "", "Connection refused", rc=2)
    assert states(get_scheduler("pbs").query(["1.s"])) == {"1.s": ("UNKNOWN", "", "qstat failed: Connection refused")}
    answers.answers.clear()
    answers.on("qstat", "1.s run u 0 Z batch\n")
    assert states(get_scheduler("pbs").query(["1.s"])) == {"1.s": ("UNKNOWN", "Z", "")}


# -- ids, submit output, names, the job inside a job ------------------------------------------------------
@pytest.mark.parametrize("name, good, bad", [
    ("slurm", ["1", "123", "77_0", "77_12"], ["0", "01", "-1", "1_", "_1", "1 2", "1,2", "all", "", "1_a", "1\n"]),
    ("lsf", ["1", "123[4]", "9[1]"], ["0", "012", "1[0]", "1[]", "1[01]", "-u", "1 2", "all"]),
    ("pbs", ["0", "1234", "1234.titan-batch", "88[].pbs01", "88[4].pbs01", "1.a_b-c.d"],
     ["all", "x1", ".s", "1 .s", "-W", "1.s s", "1[a]"]),
    ("local", ["1", "42"], ["0", "01", "a", "1.0", "-1"]),
])
def test_job_id_syntax(name: str, good: list[str], bad: list[object], tmp_path: Path) -> None:
    sched = get_scheduler(name, tmp_path)
    for j in good:
        assert sched.is_job_id(j) and sched.check_job_id(j) == j, j
    for j in [*bad, 1, None, ["1"]]:
        assert not sched.is_job_id(j), j
    with pytest.raises(SchedulerError, match=rf"^'all' is not a {name} job id; no {name} command was run with it$"):
        sched.check_job_id("all")


def test_malformed_ids_never_reach_the_query_program(answers: Answers) -> None:
    answers.on("squeue", "5|RUNNING|None\n")
    got = get_scheduler("slurm").query(["0", "5", "-u", "", "5"])
    assert list(got) == ["0", "-u", "5"]
    assert states(got)["0"] == ("UNKNOWN", "", "not a slurm job id; no slurm command was run with it")
    assert answers.calls == [["squeue", "-h", "-r", "-t", "all", "-j", "5", "-o", "%i|%T|%r"]]
    answers.calls.clear()
    assert get_scheduler("slurm").query(["all", ""]) == {"all": JobInfo("all", "UNKNOWN", "", "not a slurm job id; "
                                                                        "no slurm command was run with it")}
    assert get_scheduler("slurm").query([]) == {} and answers.calls == []
    assert unique_ids(["3", "", "1", "3", 7, "2"]) == ["3", "1", "2"]  # type: ignore[list-item]


@pytest.mark.parametrize("name, text", [
    ("slurm", "sbatch: error: Batch job submission failed: Invalid account\n"),
    ("lsf", "Request aborted by esub. Job not submitted.\n"),
    ("pbs", "qsub: Unauthorized Request \n"),
])
def test_no_job_id_in_submit_output_is_quoted_on_one_line(name: str, text: str) -> None:
    sched = get_scheduler(name)
    with pytest.raises(SchedulerError) as e:
        sched.parse_submit_output(text)
    assert str(e.value) == f"{sched.submit_program} printed no job id: {' '.join(text.split())!r}"
    with pytest.raises(SchedulerError) as e:
        sched.parse_submit_output("x " * 300)
    assert str(e.value).endswith("'") and len(str(e.value)) < 240  # quoted, cut at 200 characters


@pytest.mark.parametrize("name, raw, clean", [
    ("slurm", "my run/1", "my_run_1"), ("slurm", "", "nnlo"), ("slurm", "a" * 80, "a" * 64),
    ("lsf", "x.y-z_1", "x.y-z_1"), ("pbs", "123 run", "n123_run"), ("pbs", "run-with-a-long-name", "run-with-a-long"),
    ("pbs", "", "nnlo"), ("pbs", "_x", "n_x"),
])
def test_job_names(name: str, raw: str, clean: str) -> None:
    assert get_scheduler(name, "/r").job_name(raw) == clean


@pytest.mark.parametrize("name, env, job", [
    ("slurm", {"SLURM_JOB_ID": "42"}, "42"), ("slurm", {"SLURM_JOBID": "43"}, "43"),
    ("slurm", {"SLURM_JOB_ID": "", "SLURM_JOBID": "44"}, "44"),
    ("slurm", {"SLURM_JOB_ID": "45", "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "2"}, "40_2"),
    ("slurm", {"SLURM_JOB_ID": "45", "SLURM_ARRAY_JOB_ID": "40"}, "45"),
    ("lsf", {"LSB_JOBID": "7"}, "7"), ("lsf", {"LSB_JOBID": "7", "LSB_JOBINDEX": "0"}, "7"),
    ("lsf", {"LSB_JOBID": "7", "LSB_JOBINDEX": "3"}, "7[3]"),
    ("pbs", {"PBS_JOBID": "9.s"}, "9.s"), ("pbs", {"PBS_JOBID": "", "SLURM_JOB_ID": "10"}, "10"),
    ("slurm", {}, None), ("lsf", {"LSB_JOBINDEX": "3"}, None),
])
def test_the_job_id_inside_a_job(name: str, env: dict[str, str], job: str | None) -> None:
    assert get_scheduler(name).current_job_id(env) == job


def test_array_task_ids_and_ranges(tmp_path: Path) -> None:
    assert get_scheduler("slurm").array_task_id("40", 0) == "40_0"
    assert get_scheduler("lsf").array_task_id("7", 2) == "7[2]"
    assert get_scheduler("pbs").array_task_id("88[].pbs01", 4) == "88[4].pbs01"
    assert get_scheduler("pbs").array_task_id("88[]", 1) == "88[1]"
    assert get_scheduler("slurm").array_directive_range(0, 3) == "0-3"
    with pytest.raises(SchedulerError, match=r"^local has no job arrays in nnlo$"):
        get_scheduler("local", tmp_path).array_task_id("1", 0)
    with pytest.raises(SchedulerError, match="is not a lsf job id"):
        get_scheduler("lsf").array_task_id("7", 0)  # LSF counts elements from 1


# -- the local queue file ---------------------------------------------------------------------------------
def _queue(tmp_path: Path, queue: object) -> Path:
    qdir = tmp_path / "local"
    qdir.mkdir(exist_ok=True)
    (qdir / "queue.json").write_text(json.dumps(queue) if not isinstance(queue, str) else queue)
    return qdir / "queue.json"


def _job(jid: str, state: str, **kw: object) -> dict[str, object]:
    return {"id": jid, "state": state, "pid": None, "depends_on": None, "submitted": 1.0, "started": None,
            "ended": None, "cancel_at": None, **kw}


def test_the_local_queue_answers_and_a_dead_supervisor_makes_live_jobs_unknown(tmp_path: Path) -> None:
    sched = get_scheduler("local", tmp_path)
    assert states(sched.query(["1"])) == {"1": ("ENDED", "", "not in local queue")}  # no queue yet
    _queue(tmp_path, {"next_id": 4, "jobs": [_job("1", "COMPLETED", pid=1234, ended=2.0), _job("2", "TIMEOUT"),
                                             _job("3", "PENDING", depends_on="2")]})
    got = sched.query(["1", "2", "3", "9"])
    assert states(got) == {"1": ("COMPLETED", "COMPLETED", ""), "2": ("TIMEOUT", "TIMEOUT", ""),
                           "3": ("UNKNOWN", "PENDING", "local supervisor is not running"),
                           "9": ("ENDED", "", "not in local queue")}
    assert sched.submit_argv(Path("/r/job.sh"), "3") == ["/bin/bash", "/r/job.sh"]
    with pytest.raises(SchedulerError, match="is not a local job id"):
        sched.submit_argv(Path("/r/job.sh"), "0")


@pytest.mark.parametrize("queue, problem", [
    ("[]", "not a JSON object"),
    ({"next_id": 0, "jobs": []}, "'next_id' must be a whole number >= 1 and 'jobs' a list"),
    ({"next_id": True, "jobs": []}, "'next_id' must be a whole number >= 1 and 'jobs' a list"),
    ({"next_id": 1.5, "jobs": []}, "'next_id' must be a whole number >= 1 and 'jobs' a list"),
    ({"next_id": 1, "jobs": {}}, "'next_id' must be a whole number >= 1 and 'jobs' a list"),
    ({"next_id": 2, "jobs": [["1"]]}, "a job is not an object with a string 'id' and a known 'state'"),
    ({"next_id": 2, "jobs": [_job("1", "DONE")]}, "a job is not an object with a string 'id' and a known 'state'"),
    ({"next_id": 2, "jobs": [_job(1, "PENDING")]},  # type: ignore[arg-type]
     "a job is not an object with a string 'id' and a known 'state'"),
    ({"next_id": 2, "jobs": [_job("1", "RUNNING", pid=1)]}, "job '1' has pid 1, not a process id"),
    ({"next_id": 2, "jobs": [_job("1", "RUNNING", pid=0)]}, "job '1' has pid 0, not a process id"),
    ({"next_id": 2, "jobs": [_job("1", "RUNNING", pid=-5)]}, "job '1' has pid -5, not a process id"),
    ({"next_id": 2, "jobs": [_job("1", "RUNNING", pid=4_194_305)]}, "job '1' has pid 4194305, not a process id"),
    ({"next_id": 2, "jobs": [_job("1", "RUNNING", pid="7")]}, "job '1' has pid '7', not a process id"),
    ({"next_id": 2, "jobs": [_job("1", "RUNNING", pid=True)]}, "job '1' has pid True, not a process id"),
    ({"next_id": 2, "jobs": [_job("1", "ENDED", started="x")]},
     "a job is not an object with a string 'id' and a known 'state'"),
    ({"next_id": 2, "jobs": [_job("1", "FAILED", started="x")]}, "job '1' has a time that is not a number"),
    ({"next_id": 2, "jobs": [_job("1", "FAILED", ended=True)]}, "job '1' has a time that is not a number"),
    ({"next_id": 2, "jobs": [_job("1", "CANCELLED", cancel_at=float("inf"))]},
     "job '1' has a time that is not a number"),
    ({"next_id": 2, "jobs": [_job("1", "CANCELLED", submitted=float("nan"))]},
     "job '1' has a time that is not a number"),
    ({"next_id": 2, "jobs": [_job("1", "PENDING", depends_on=3)]}, "job '1' has a 'depends_on' that is not a job id"),
])
def test_a_damaged_local_queue_is_named_and_refused(tmp_path: Path, queue: object, problem: str) -> None:
    path = _queue(tmp_path, queue)
    sched = get_scheduler("local", tmp_path)
    got = sched.query(["1"])["1"]
    assert (got.state, got.reason) == ("UNKNOWN", f"local queue {path} is damaged: {problem}")
    with pytest.raises(SchedulerError, match="is damaged"):
        sched.check_cancel(["1"])
    sched.check_cancel([])  # nothing to cancel: the queue is not read


def test_an_unreadable_local_queue_is_named(tmp_path: Path) -> None:
    text = '{"next_id": 1,\n "jobs": ['
    path = _queue(tmp_path, text)
    reason = get_scheduler("local", tmp_path).query(["1"])["1"].reason
    with pytest.raises(ValueError) as e:
        json.loads(text)
    assert reason == f"local queue {path} cannot be read ({' '.join(str(e.value).split())}); the run directory is damaged"
    _queue(tmp_path, {"next_id": 3, "jobs": [_job("2", "RUNNING", pid=4_194_304, started=5, cancel_at=-1.5)]})
    # a running job of a dead supervisor, whose process (no start time recorded: not the job's) is gone
    assert get_scheduler("local", tmp_path).query(["2"])["2"].reason == ORPHAN_NOTE


# -- the edges of each parser -------------------------------------------------------------------------------
def test_unreadable_output_is_quoted_up_to_120_characters(answers: Answers) -> None:
    banner = "MAINTENANCE " * 20
    quoted = repr(" ".join(banner.split())[:120])
    answers.on("squeue", banner + "\n").on("bjobs", banner + "\n").on("qstat", banner + "\n")
    answers.on("sacct", banner + "\n")
    assert get_scheduler("slurm").query(["1"])["1"].reason == f"squeue printed unreadable output: {quoted}"
    assert get_scheduler("lsf").query(["1"])["1"].reason == f"bjobs printed unreadable output: {quoted}"
    assert get_scheduler("pbs").query(["1"])["1"].reason == f"qstat printed unreadable output: {quoted}"
    answers.answers["squeue"] = [(0, "", "")]
    assert get_scheduler("slurm").query(["1"])["1"].reason == f"sacct printed unreadable output: {quoted}"
    assert base.one_line("a \n b " * 100) == ("a b " * 75)[:300] and len(base.one_line("x" * 400)) == 300


@pytest.mark.parametrize("program, name, rc, stderr, state, reason", [
    ("bjobs", "lsf", 1, "LSF is down", "UNKNOWN", "bjobs failed: LSF is down"),
    ("bjobs", "lsf", 255, "Job <5> is not found", "ENDED", "not found by bjobs"),
    ("qstat", "pbs", 1, "Connection refused", "UNKNOWN", "qstat failed: Connection refused"),
    ("qstat", "pbs", 153, "qstat: Unknown Job Id 5.s", "ENDED", "unknown to qstat"),
])
def test_a_failing_query_program_is_unknown_and_a_forgotten_job_ended(answers: Answers, program: str, name: str,
                                                                      rc: int, stderr: str, state: str,
                                                                      reason: str) -> None:
    answers.on(program, "", stderr, rc=rc)
    job = "5.s" if name == "pbs" else "5"
    assert states(get_scheduler(name).query([job])) == {job: (state, "", reason)}
    # "not found" is an answer (one call); any other failure is retried first
    assert len(answers.calls) == (1 if state == "ENDED" else base.QUERY_RETRIES + 1)


@pytest.mark.parametrize("name, program", [("lsf", "bjobs"), ("pbs", "qstat"), ("slurm", "squeue")])
def test_a_missing_query_program_is_named(answers: Answers, name: str, program: str) -> None:
    assert states(get_scheduler(name).query(["5"])) == {"5": ("UNKNOWN", "", f"{program} not found: cannot query jobs")}


def test_no_sacct_means_ended(answers: Answers) -> None:
    answers.on("squeue", "")
    assert states(get_scheduler("slurm").query(["5"])) == {"5": ("ENDED", "", "not in squeue; no accounting")}


def test_short_rows_and_array_elements_of_a_headerless_table(answers: Answers) -> None:
    answers.on("bjobs", "101 u\n104 u EXIT arr[2]\n")
    got = get_scheduler("lsf").query(["101", "104[2]"])
    assert states(got) == {"101": ("UNKNOWN", "", "bjobs printed unreadable output: '101 u'"),
                           "104[2]": ("FAILED", "EXIT", "")}
    answers.answers.clear()
    answers.on("qstat", "1234.s run u 0\n1235.s run u R batch\n")  # 4 columns: not a row; 5: a row
    assert states(get_scheduler("pbs").query(["1234.s", "1235.s"])) == {
        "1234.s": ("UNKNOWN", "", "qstat printed unreadable output: '1234.s run u 0'"),
        "1235.s": ("RUNNING", "R", "")}
    answers.answers.clear()
    answers.on("qstat", "Banner with more than five words here\n")
    assert get_scheduler("pbs").query(["9.s"])["9.s"].state == "UNKNOWN"


def test_more_of_the_job_inside_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    assert get_scheduler("slurm").current_job_id({"SLURM_ARRAY_TASK_ID": "3", "SLURM_JOB_ID": "5"}) == "5"
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    assert get_scheduler("slurm").current_job_id() == "77"  # this process's environment by default
    assert get_scheduler("slurm").job_name("Run-A.1") == "Run-A.1"
    assert get_scheduler("slurm").unknown(["1", "2"]) == {"1": JobInfo("1", "UNKNOWN"), "2": JobInfo("2", "UNKNOWN")}
    with pytest.raises(SchedulerError, match=r"^ printed no job id: '1'$"):
        get_scheduler("local", "/r").parse_submit_output("1")  # the local scheduler reads no submit output
    with pytest.raises(SchedulerError) as e:
        get_scheduler("slurm").parse_submit_output("y" * 300)
    assert str(e.value) == f"sbatch printed no job id: {'y' * 200!r}"


def test_the_smallest_valid_local_queue(tmp_path: Path) -> None:
    _queue(tmp_path, {"next_id": 1, "jobs": []})
    assert states(get_scheduler("local", tmp_path).query(["1"])) == {"1": ("ENDED", "", "not in local queue")}
    _queue(tmp_path, {"next_id": 2, "jobs": [_job("1", "COMPLETED", pid=2)]})  # pid 2: the smallest signalable
    assert states(get_scheduler("local", tmp_path).query(["1"])) == {"1": ("COMPLETED", "COMPLETED", "")}


# -- a pending job's reason in `nnlo status` ---------------------------------------------------------------
@pytest.mark.parametrize("reason, never", [
    ("PartitionConfig", "lower cores_per_node"), ("BadConstraints", "correct the constraint"),
    ("QOSMaxWallDurationPerJobLimit", "shorter --walltime"), ("Priority", None), ("Dependency", None),
    ("Resources", None),
])
def test_status_shows_a_pending_reason_and_flags_the_never_ones_with_the_fix(reason: str, never: str | None,
                                                                              tmp_path: Path) -> None:
    from nnlo_sched.commands.status import detail, table
    from nnlo_sched.runs import Run
    from nnlo_sched.spec import RunSpec
    from nnlo_sched.state import JobRecord, RunState, write_state
    from nnlo_sched.status import run_view

    run = tmp_path / "r1"
    (run / "logs").mkdir(parents=True)
    (run / "spec.json").write_text(RunSpec.from_argv(kind="train", args=["--model", "m.py"], cluster="x").to_json())
    write_state(run, RunState(run_id="r1", name="r", cluster="x", scheduler="slurm", state="queued",
                              jobs=[JobRecord(job_id="812", submitted_at=1.0)]))
    answers = {"slurm": {"812": JobInfo("812", "PENDING", "PENDING", reason)}}
    view = run_view(Run("r1", run), answers, reconcile=False)
    job = view["jobs"][0]
    assert job["pending_reason"] == reason
    shown = table([view]) + "\n" + detail(view)
    assert f"PENDING: {reason}" in shown
    if never is None:
        assert job["never_starts"] is None and "never start" not in shown
    else:
        assert never in job["never_starts"]
        assert f"job 812 will never start ({reason}): " in shown and "nnlo cancel r1" in shown
