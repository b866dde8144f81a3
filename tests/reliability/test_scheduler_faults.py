"""Scheduler programs that fail, hang or print garbage (stand-ins for sbatch/squeue/sacct first on PATH).

What must hold: a failed submission is one clear line quoting the scheduler and leaves the run recorded as
failed with that message; a query that fails or hangs makes ``nnlo status`` show ``UNKNOWN`` for the job
(exit 0) and leaves ``state.json`` byte for byte as it was - a scheduler that cannot answer must never be
read as "the job is gone".
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.faults import GOOD_SQUEUE, error_lines, nnlo, submitted_run, write_standin

pytestmark = [pytest.mark.slow]


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed queries are retried (0.5 s, 1 s, 2 s in production); short waits keep these tests quick."""
    monkeypatch.setenv("NNLO_SCHED_RETRY_DELAY", "0.05")


def _submit(site: Path) -> subprocess.CompletedProcess:
    return nnlo("submit", "-c", "fakeslurm", "--name", "t", "-t", "10m", "--workers", "1", "--no-check", "train",
                "--model", "model.py", "--epochs", "1")


def _only_run(site: Path) -> Path:
    (run,) = [p for p in (site / "runs").iterdir() if p.is_dir()]
    return run


@pytest.mark.parametrize("sbatch, message", [
    ('echo "sbatch: error: Batch job submission failed: Socket timed out" >&2; exit 1', "Socket timed out"),
    ('echo "<html>503 Service Unavailable</html>"', "printed no job id"),
    ("exit 137", "exit status 137"),
])
def test_a_failed_submission_is_one_line_and_recorded(site: Path, sbatch: str, message: str) -> None:
    write_standin(site / "bin", "sbatch", sbatch)
    proc = _submit(site)
    assert proc.returncode != 0
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and message in lines[0] and "sbatch" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    state = json.loads((_only_run(site) / "state.json").read_text())
    assert state["state"] == "failed" and message in state["error"] and state["jobs"] == []


@pytest.mark.parametrize("squeue", [
    'echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2; exit 1',
    "kill -9 $$",
    'echo "squeue: error: Invalid user" >&2; exit 2',
])
def test_status_shows_unknown_when_the_query_fails_and_changes_nothing(site: Path, squeue: str) -> None:
    run = submitted_run(site)
    before = (run / "state.json").read_bytes()
    write_standin(site / "bin", "squeue", squeue)
    proc = nnlo("status", run.name, "--json")
    assert proc.returncode == 0, proc.stderr
    (view,) = json.loads(proc.stdout) if proc.stdout.lstrip().startswith("[") else [json.loads(proc.stdout)]
    assert view["state"] == "queued"
    assert [j["scheduler_state"] for j in view["jobs"]] == ["UNKNOWN"]
    table = nnlo("status")
    assert table.returncode == 0 and run.name in table.stdout, table.stderr
    assert (run / "state.json").read_bytes() == before


def test_status_shows_unknown_when_the_query_hangs(site: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """squeue that never answers: bounded by the query timeout (shortened here to keep the test quick)."""
    from nnlo_sched.cli import main
    from nnlo_sched.schedulers import base

    run = submitted_run(site)
    before = (run / "state.json").read_bytes()
    write_standin(site / "bin", "squeue", "exec sleep 600")
    defaults = list(base.run_capture.__kwdefaults__.items())
    monkeypatch.setitem(base.run_capture.__kwdefaults__, "timeout", 2)
    try:
        main(["status", run.name, "--json"])
    except SystemExit as e:
        assert not e.code, capsys.readouterr().err
    view = json.loads(capsys.readouterr().out)
    view = view[0] if isinstance(view, list) else view
    assert [j["scheduler_state"] for j in view["jobs"]] == ["UNKNOWN"], (view, defaults)
    assert (run / "state.json").read_bytes() == before


def test_garbage_from_squeue_changes_nothing(site: Path) -> None:
    run = submitted_run(site)
    before = (run / "state.json").read_bytes()
    garbage = 'printf "*** maintenance tonight ***\\n<html><body>503</body></html>\\n"'
    write_standin(site / "bin", "squeue", garbage)
    write_standin(site / "bin", "sacct", garbage)
    proc = nnlo("status", run.name, "--json")
    assert proc.returncode == 0, proc.stderr
    assert (run / "state.json").read_bytes() == before


@pytest.mark.parametrize("squeue, sacct, expected", [
    ('printf "<html>503</html>\\n"', 'printf "1|COMPLETED\\n"', {"1": "UNKNOWN", "2": "UNKNOWN"}),
    ('printf "1|RUNNING|None\\n*** maintenance ***\\n"', "exit 0", {"1": "RUNNING", "2": "UNKNOWN"}),
    ("exit 0", 'printf "2|TIMEOUT\\nsacct: banner\\n"', {"1": "UNKNOWN", "2": "TIMEOUT"}),
    ("exit 0", 'printf "2|CANCELLED by 0\\n"', {"1": "ENDED", "2": "CANCELLED"}),
])
def test_unreadable_lines_make_missing_jobs_unknown_not_ended(site: Path, squeue: str, sacct: str,
                                                              expected: dict[str, str]) -> None:
    """Readable lines are believed; a job missing from an answer that had garbage in it is UNKNOWN."""
    from nnlo_sched.schedulers import get_scheduler

    write_standin(site / "bin", "squeue", squeue)
    write_standin(site / "bin", "sacct", sacct)
    got = get_scheduler("slurm").query(["1", "2"])
    assert {j: info.state for j, info in got.items()} == expected, got


@pytest.mark.parametrize("scheduler, program, output, expected", [
    ("lsf", "bjobs", "*** LSF maintenance ***", "UNKNOWN"),
    ("lsf", "bjobs", "JOBID USER STAT QUEUE\\n<html>503</html>", "UNKNOWN"),
    ("lsf", "bjobs", "JOBID USER STAT QUEUE\\n8 u RUN batch", "ENDED"),
    ("pbs", "qstat", "<html><body>503 Service Unavailable</body></html>", "UNKNOWN"),
    ("pbs", "qstat", "Job ID Name User Time S Queue\\n------\\n8.pbs01 t u 0 R batch", "ENDED"),
])
def test_lsf_and_pbs_garbage_is_unknown_not_ended(site: Path, scheduler: str, program: str, output: str,
                                                  expected: str) -> None:
    """The same rule for bjobs and qstat: absence from an answer only means "ended" if the answer was readable."""
    from nnlo_sched.schedulers import get_scheduler

    write_standin(site / "bin", program, f'printf "{output}\\n"')
    assert get_scheduler(scheduler).query(["7"])["7"].state == expected


def test_non_utf8_bytes_from_squeue_are_no_traceback(site: Path) -> None:
    run = submitted_run(site)
    write_standin(site / "bin", "squeue", 'printf "4242|RUNNING|\\xff\\xfe bad bytes\\n"')
    proc = nnlo("status", run.name, "--json")
    assert "Traceback" not in proc.stderr and proc.returncode == 0, proc.stderr[-2000:]


def test_a_transient_query_failure_is_retried(site: Path) -> None:
    run = submitted_run(site)
    write_standin(site / "bin", "squeue", f"""
if [ ! -e "{site}/squeue.failed" ]; then
  touch "{site}/squeue.failed"; echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1
fi
{GOOD_SQUEUE}""")
    proc = nnlo("status", run.name, "--json")
    view = json.loads(proc.stdout)
    view = view[0] if isinstance(view, list) else view
    assert [j["scheduler_state"] for j in view["jobs"]] == ["RUNNING"]


def test_a_submit_that_times_out_is_not_retried_and_may_have_gone_through(
        site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Unlike a query, a submit is never repeated: the controller may have queued the job before timing out."""
    from nnlo_sched.cli import main
    from nnlo_sched.schedulers import base

    calls = site / "sbatch.calls"
    write_standin(site / "bin", "sbatch", f'echo call >> "{calls}"; exec sleep 600')
    monkeypatch.setitem(base.run_program.__kwdefaults__, "timeout", 2)
    with pytest.raises(SystemExit) as exit_:
        main(["submit", "-c", "fakeslurm", "--name", "t", "-t", "10m", "--workers", "1", "--no-check", "train",
              "--model", "model.py", "--epochs", "1"])
    assert exit_.value.code
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "may have been submitted anyway" in lines[0], lines
    assert calls.read_text().splitlines() == ["call"]


def test_a_working_squeue_is_believed(site: Path) -> None:
    """The control case: the same set-up with an answering squeue shows the job's real state."""
    run = submitted_run(site)
    write_standin(site / "bin", "squeue", GOOD_SQUEUE)
    proc = nnlo("status", run.name, "--json")
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    view = view[0] if isinstance(view, list) else view
    assert [j["scheduler_state"] for j in view["jobs"]] == ["RUNNING"]
