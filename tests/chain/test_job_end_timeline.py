"""`nnlo job end` merges a --timeline run's per-rank traces into timeline.json, so a job killed at its walltime
(which never reaches the runtime's own merge) still leaves a valid Chrome trace; a merge failure never changes
the job's outcome."""
from __future__ import annotations

import json

from nnlo.observe.timeline import RecordingTracer, trace_path
from nnlo_sched.chain import job_end
from nnlo_sched.spec import RunSpec
from nnlo_sched.state import JobRecord, RunState, read_state, write_state


def _run(tmp_path, kind="train"):
    run = tmp_path / "run"
    run.mkdir()
    (run / "spec.json").write_text(RunSpec.from_argv(kind=kind, args=["--model", "m.py"], cluster="local",
                                           workdir=str(tmp_path)).to_json())
    write_state(run, RunState(run_id="r1", name="r", cluster="local", scheduler="local", state="running",
                              jobs=[JobRecord(job_id="1", submitted_at=1.0, started_at=2.0)]))
    return run


def _killed_rank(out_dir, rank):
    """A rank that recorded spans and was then killed: its trace file is never closed."""
    tracer = RecordingTracer(trace_path(out_dir, rank), rank, "worker" if rank else "master")
    with tracer.span("compute gradients", "compute"):
        pass
    with tracer.span("send update", "comm"):
        pass
    return tracer


def test_job_end_merges_the_traces_of_a_killed_training_job(tmp_path):
    run = _run(tmp_path)
    tracers = [_killed_rank(run, r) for r in range(2)]  # kept alive: files open, never closed, as when killed
    assert not (run / "timeline.json").exists()
    assert job_end(run, "1", 1) == "failed"
    merged = json.loads((run / "timeline.json").read_text())
    events = merged["traceEvents"] if isinstance(merged, dict) else merged
    names = {e.get("name") for e in events}
    assert {"compute gradients", "send update"} <= names
    assert {e.get("pid") for e in events if e.get("name") == "send update"} == {0, 1}
    assert read_state(run).jobs[0].status == "failed"
    del tracers


def test_a_broken_trace_is_reported_and_the_job_outcome_stands(tmp_path, capsys):
    run = _run(tmp_path)
    trace = trace_path(run, 0)
    trace.parent.mkdir(parents=True)
    trace.write_bytes(b"\x00\xff not json at all\n")
    (run / "timeline.json").mkdir()  # the merged file cannot be written: the merge must fail
    assert job_end(run, "1", 0) == "done"
    st = read_state(run)
    assert st.state == "done" and st.jobs[0].status == "finished" and st.error is None
    err = capsys.readouterr().err
    assert "cannot merge the timeline" in err and "nnlo timeline" in err


def test_no_trace_means_no_timeline(tmp_path, capsys):
    run = _run(tmp_path)
    assert job_end(run, "1", 0) == "done"
    assert not (run / "timeline.json").exists()
    assert "timeline" not in capsys.readouterr().err
