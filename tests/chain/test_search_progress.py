"""A search job's progress is its count of trial results and schedule stages, not its state file's time.

The coordinator saves the search's state at every job's start, so a chain that judged a search job by its
state file went on for ``--max-resubmits`` jobs in which no trial could finish inside the walltime. The
runtime's every save notes its count of results in the run's progress record (``nnlo.job.search_saved``,
key ``nnlo.contract.PROGRESS_RESULTS``); the chain goes on after a search job only if that count grew.
Process-free: the chain's own ``job start``/``job end`` around the runtime's own ``save_state``.
"""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from nnlo import job
from nnlo.contract import ENV_RUN_DIR, PROGRESS_RESULTS
from nnlo.optimize.state import results_recorded, save_state
from nnlo_sched.chain import job_end, job_start
from nnlo_sched.commands.job import command as job_command
from nnlo_sched.spec import RunSpec
from nnlo_sched.state import JobRecord, RunState, read_state, write_state


def _trial(tid, rungs=0):
    return {"id": tid, "params": {"a": 0.5}, "status": "ok", "rungs": [{"rung": r} for r in range(rungs)]}


@pytest.fixture
def search_run(tmp_path, monkeypatch):
    """An optimize run whose job 1 is about to start with job 2 queued behind it, seen from inside job 1."""
    run = tmp_path / "run"
    run.mkdir()
    spec = RunSpec.from_argv(kind="optimize", args=["--model", "m.py", "--num-iterations", "4"], cluster="local",
                             workdir=str(tmp_path))
    (run / "spec.json").write_text(spec.to_json())
    write_state(run, RunState(run_id="r1", name="r", cluster="local", scheduler="local", state="queued",
                              jobs=[JobRecord(job_id="1", submitted_at=1.0),
                                    JobRecord(job_id="2", submitted_at=1.0, depends_on="1")]))
    monkeypatch.setenv(ENV_RUN_DIR, str(run))
    return run


def _job(run, job_id, finished):
    """One job of the chain: start, the coordinator's save at its start, results, the save at its stop (75)."""
    assert job_start(run, job_id, submit_successor=False).ok
    save_state(run, {"finished": finished[0]})  # the coordinator restores and saves at once
    for state in finished[1:]:
        save_state(run, {"finished": state})


def test_a_search_job_that_finished_no_trial_stops_the_chain_with_the_walltime_as_the_reason(search_run):
    _job(search_run, "1", [[]])
    ended = CliRunner().invoke(job_command, ["end", str(search_run), "75", "--job-id", "1"])  # as job.sh does
    assert ended.exit_code == 0 and "run is failed: job 1 stopped (exit 75) without finishing a trial" in ended.output
    st = read_state(search_run)
    assert [j.status for j in st.jobs] == ["no-checkpoint", "cancelled"]  # its successor is not run
    assert "without finishing a trial or a stage" in st.error and "too short for one trial" in st.error
    assert "-t" in st.error and "--epochs" in st.error and "nnlo resume r1" in st.error


def test_a_search_job_goes_on_only_while_it_adds_results(search_run):
    _job(search_run, "1", [[], [_trial(0)], [_trial(0), _trial(1)]])
    assert job_end(search_run, "1", 75) == "resubmitting"
    st = read_state(search_run)
    st.jobs.append(JobRecord(job_id="3", submitted_at=2.0, depends_on="2"))
    write_state(search_run, st)
    _job(search_run, "2", [[_trial(0), _trial(1)]])  # restored with 2 results, saved, finished none
    assert job_end(search_run, "2", 75) == "failed"
    assert "too short for one trial" in read_state(search_run).error


def test_a_search_job_killed_with_its_shell_without_a_result_stops_the_next_job(search_run):
    _job(search_run, "1", [[]])  # killed at its walltime with its batch shell: no `job end`
    decision = job_start(search_run, "2", submit_successor=False)
    assert not decision.ok and "too short for one trial" in decision.message
    assert [j.status for j in read_state(search_run).jobs] == ["no-checkpoint", "skipped"]


def test_a_stage_under_a_schedule_is_progress(search_run):
    _job(search_run, "1", [[_trial(0, rungs=1)], [_trial(0, rungs=2)]])  # one more rung of trial 0
    assert job_end(search_run, "1", 75) == "resubmitting"


def test_the_count_and_the_marker(tmp_path, monkeypatch):
    assert results_recorded({"finished": [_trial(0), _trial(1, rungs=3)]}) == 4
    monkeypatch.setenv(ENV_RUN_DIR, str(tmp_path))
    assert job.progress_marker(tmp_path) is None
    job.search_saved(tmp_path / "optimizer-state.json", 0)
    assert job.progress(tmp_path)[PROGRESS_RESULTS] == 0
    assert job.progress_marker(tmp_path) is None  # a search with no result has nothing to resume
    job.search_saved(tmp_path / "optimizer-state.json", 2)
    assert job.progress_marker(tmp_path) == "2 results"
    job.search_saved(tmp_path / "optimizer-state.json", 2)  # saved again, nothing added: the same marker
    assert job.progress_marker(tmp_path) == "2 results"
    job.checkpointed(tmp_path / "trials" / "0003" / "ckpt")  # a trial's training checkpoints in the search's job:
    assert job.progress_marker(tmp_path) == "2 results"  # the count stays the measure, whoever wrote last



def test_an_update_from_a_stale_read_undoes_no_other(tmp_path, monkeypatch):
    """Every rank of a job may update the record (the coordinator its count, the trials' trainings their
    checkpoints): an update made from a read taken before another's write would undo that write. Forced, not
    raced: the trainer's update holds its read until the coordinator's update has been started; with the lock
    the coordinator's waits and lands after it (two threads: each update opens the lock file itself, so flock
    keeps them apart as it keeps processes apart)."""
    import threading

    monkeypatch.setenv(ENV_RUN_DIR, str(tmp_path))
    job.search_saved(tmp_path / "optimizer-state.json", 1)
    entered, go = threading.Event(), threading.Event()
    real = job.progress
    trainer_thread: list[threading.Thread] = []

    def progress(folder):
        record = real(folder)
        if threading.current_thread() in trainer_thread:
            entered.set()
            go.wait(30)
        return record

    monkeypatch.setattr(job, "progress", progress)
    trainer = threading.Thread(target=job.checkpointed, args=(tmp_path / "trials" / "0001" / "ckpt",))
    trainer_thread.append(trainer)
    trainer.start()
    assert entered.wait(30)
    coordinator = threading.Thread(target=job.search_saved, args=(tmp_path / "optimizer-state.json", 2))
    coordinator.start()
    coordinator.join(0.2)  # time for an unlocked update to land first; correct code passes however long this is
    go.set()
    trainer.join(30)
    coordinator.join(30)
    assert real(tmp_path)[PROGRESS_RESULTS] == 2


def test_the_successor_of_the_job_that_finished_the_run_reads_as_not_needed(search_run):
    """Issue 45 item 7: a finished run showed ``jobs 1>2x`` and job 2 'cancelled', as if the user had cancelled
    the successor that was never needed."""
    from nnlo_sched.commands.status import _fmt_jobs
    from nnlo_sched.status import collect

    _job(search_run, "1", [[], [_trial(0)]])
    assert job_end(search_run, "1", 0) == "done"
    assert [j.status for j in read_state(search_run).jobs] == ["finished", "not-needed"]
    (view,) = collect(str(search_run))
    assert _fmt_jobs(view) == "1>2-" and "cancelled" not in str(view["jobs"])
