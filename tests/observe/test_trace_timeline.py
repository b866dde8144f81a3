"""The Chrome trace: valid after a normal end and after a SIGKILL, with the expected spans per rank."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nnlo.observe import summary, timeline
from nnlo.observe.trace import Tracer, get_tracer, set_tracer
from nnlo.roles import describe

from tests.helpers.observe import JOB, load_trace

pytestmark = pytest.mark.mpi


def _spans(trace: dict, pid: int) -> set[str]:
    return {e["name"] for e in trace["traceEvents"] if e.get("pid") == pid and e.get("ph") == "X"}


def test_normal_end_gives_a_valid_trace_with_roles_spans_summary_and_logs(tmp_path, run_traced_job):
    proc = run_traced_job(tmp_path, 3)
    assert proc.returncode == 0, proc.stderr
    trace = load_trace(tmp_path / "timeline.json")
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    hierarchy = describe(3)
    assert names == {r: f"rank {r} {hierarchy[r].label()}" for r in range(3)}
    assert {"wait for update", "recv update", "apply update", "send weights", "validation", "checkpoint",
            "gather state"} <= _spans(trace, 0)
    for worker in (1, 2):
        assert {"batch", "send update", "recv weights"} <= _spans(trace, worker)
    for e in events:
        if e["ph"] == "X":
            assert e["ts"] >= 0 and e["dur"] >= 0 and e["cat"] in {"compute", "comm", "wait", "io", "validate"}
    # nesting survived: the comm span inside the checkpoint lies within it
    ckpt = next(e for e in events if e.get("name") == "checkpoint")
    inner = next(e for e in events if e.get("name") == "gather state" and ckpt["ts"] <= e["ts"])
    assert inner["ts"] + inner["dur"] <= ckpt["ts"] + ckpt["dur"] + 1e-3
    # the monitor's counters are in the trace
    assert {"cpu %", "memory MB"} <= {e["name"] for e in events if e["ph"] == "C"}
    # per-epoch monitor aggregates, as the runtime merges them into history
    history = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [h["epoch"] for h in history] == [1, 2] and all(h["gpu"] == "no GPU" or "gpu_util_mean" in h for h in history)
    # per-role time summary
    combined = json.loads((tmp_path / "time_summary.json").read_text())
    assert [r["rank"] for r in combined["ranks"]] == [0, 1, 2]
    roles = combined["roles"]
    assert set(roles) == {"master", "worker"} and roles["worker"]["ranks"] == 2
    for role in roles.values():
        assert sum(role["fractions"].values()) == pytest.approx(1.0, abs=0.01)
    assert roles["worker"]["fractions"]["compute"] > 0 and roles["master"]["fractions"]["wait"] > 0
    # logs: one per rank plus the merged one, in time order, with every rank in it
    for r in range(3):
        assert "epoch 2 done" in (tmp_path / "logs" / f"rank-{r}.log").read_text()
    merged = (tmp_path / "logs" / "all-ranks.log").read_text().splitlines()
    stamps = [line[:27] for line in merged if line[:4].isdigit()]
    assert stamps == sorted(stamps)
    assert {f"rank {r} " for r in range(3)} <= {line[28:35] for line in merged}


def test_sigkill_mid_run_still_merges_into_a_valid_trace(tmp_path, mpirun, nnlo_env):
    proc = subprocess.Popen(
        [mpirun, "-np", "2", sys.executable, str(JOB), "--out", str(tmp_path), "--forever"],
        env=nnlo_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        line = proc.stdout.readline()  # blocks until both ranks recorded two epochs
        assert line.strip() == "ready", proc.stderr.read() if proc.poll() is not None else line
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    _wait_gone(tmp_path)
    # a kill in the middle of a write leaves a torn line; make sure there is one
    with open(tmp_path / "trace" / "rank-1.jsonl", "a") as f:
        f.write('{"name":"batch","cat":"compute","ph":"X","ts":12')
    assert not (tmp_path / "timeline.json").exists()
    cli = subprocess.run([sys.executable, "-m", "nnlo_sched", "timeline", str(tmp_path), "--per-rank"],
                         env=nnlo_env, capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert "dropped 1 torn line" in cli.stdout and "did not end cleanly" in cli.stdout
    trace = load_trace(tmp_path / "timeline.json")
    assert {"recv update", "send weights"} <= _spans(trace, 0)
    assert {"batch", "send update"} <= _spans(trace, 1)
    assert "worker" in cli.stdout  # the summary table from the trace
    rows = {line.split()[0]: line for line in cli.stdout.splitlines() if line[:2] in ("0 ", "1 ")}
    assert set(rows) == {"0", "1"} and describe(2)[1].label() in rows["1"]  # --per-rank


def _wait_gone(out: Path) -> None:
    """The killed ranks' files stop growing (nothing is still appending when we merge)."""
    sizes = None
    for _ in range(100):
        now = [p.stat().st_size for p in sorted((out / "trace").glob("*.jsonl"))]
        if now == sizes:
            return
        sizes = now
        time.sleep(0.1)


def test_recording_tracer_lines_nesting_errors_and_torn_lines(tmp_path):
    path = timeline.trace_path(tmp_path, 5)
    tracer = timeline.RecordingTracer(path, 5, "worker:w4")
    previous = set_tracer(tracer)
    try:
        with get_tracer().span("outer", "io"):
            with get_tracer().span("inner", "comm", nbytes=10, loss=float("nan")):
                time.sleep(0.002)
            time.sleep(0.002)
        with pytest.raises(RuntimeError):
            with get_tracer().span("fails", "compute"):
                raise RuntimeError("boom")
        get_tracer().instant("new best", fom=0.5)
        get_tracer().counter("queue", {"depth": 3})
    finally:
        set_tracer(previous)
        tracer.close()
    seconds = tracer.account.seconds()
    assert seconds["io"] > 0 and seconds["comm"] >= 0.002
    stream = timeline.read_stream(path)
    assert stream.closed and stream.role == "worker:w4" and stream.dropped == 0
    by_name = {e["name"]: e for e in stream.events}
    assert by_name["fails"]["args"] == {"error": "RuntimeError"}
    assert by_name["inner"]["args"]["nbytes"] == 10
    assert by_name["new best"]["ph"] == "i" and by_name["queue"]["ph"] == "C"
    # recomputed exclusive time from the file matches the live account
    recomputed = summary.from_streams([stream])[0]["seconds"]
    assert recomputed["io"] == pytest.approx(seconds["io"], abs=1e-4)
    with open(path, "ab") as f:
        f.write(b'{"name":"half')
    result = timeline.merge(path.parent, tmp_path / "out" / "t.json")
    assert result.dropped_lines == 1 and result.ranks == [5] and result.unclosed == []
    assert len(load_trace(result.path)["traceEvents"]) == result.events


def test_no_op_tracer_records_nothing_and_merge_without_files_is_a_clear_error(tmp_path):
    tracer = Tracer()
    assert not tracer.enabled
    with tracer.span("x", "comm"):
        pass
    from nnlo.errors import ConfigError

    with pytest.raises(ConfigError, match="--timeline"):
        timeline.merge(tmp_path)


def test_exclusive_seconds_clips_children_and_ignores_siblings():
    spans = [(0.0, 10e6, "io"), (1e6, 2e6, "comm"), (5e6, 20e6, "wait"), (30e6, 1e6, "compute")]
    out = summary.exclusive_seconds(spans)
    # wait starts inside io and is clipped to io's end: 5 s; io keeps 10 - 2 - 5 = 3 s
    assert out == pytest.approx({"io": 3.0, "comm": 2.0, "wait": 5.0, "compute": 1.0})


def test_an_optimization_run_merges_every_trial_trace_with_unique_processes(tmp_path, nnlo_env):
    for trial in ("0000", "0001"):
        out = tmp_path / "trials" / trial / "fold-0"
        for rank, role in ((0, "b0:master:m0"), (1, "b0:worker:w0")):
            t = timeline.RecordingTracer(timeline.trace_path(out, rank), rank, role)
            with t.span("step", "compute"):
                pass
            t.close()
    cli = subprocess.run([sys.executable, "-m", "nnlo_sched", "timeline", str(tmp_path), "--json"], env=nnlo_env,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    result = json.loads(cli.stdout)
    assert result["ranks"] == [0, 1, 2, 3] and set(result["roles"]) == {"master", "worker"}
    trace = load_trace(tmp_path / "timeline.json")
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert names == {0: "trials/0000/fold-0 rank 0 b0:master:m0", 1: "trials/0000/fold-0 rank 1 b0:worker:w0",
                     2: "trials/0001/fold-0 rank 0 b0:master:m0", 3: "trials/0001/fold-0 rank 1 b0:worker:w0"}
    assert {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0, 1, 2, 3}


def test_a_job_restarted_after_a_kill_appends_to_the_same_file_and_both_jobs_are_kept(tmp_path):
    path = timeline.trace_path(tmp_path, 0)
    first = timeline.RecordingTracer(path, 0, "master")
    with first.span("job one", "compute"):
        pass
    # killed mid-write: no close marker, a torn line
    with open(path, "ab") as f:
        f.write(b'{"name":"job one second span","cat":"comm","ph":"X","pid":0,"tid":0,"ts":1')
    second = timeline.RecordingTracer(path, 0, "master")
    with second.span("job two", "compute"):
        pass
    second.close()
    stream = timeline.read_stream(path, keep_events=False)
    assert stream.dropped == 1 and stream.closed and len(stream.sessions) == 2
    result = timeline.merge(path.parent)
    spans = [e["name"] for e in load_trace(result.path)["traceEvents"] if e["ph"] == "X"]
    assert spans == ["job one", "job two"]


def test_a_slice_of_a_long_trace_keeps_the_events_overlapping_the_window(tmp_path):
    t0 = 1.7e15
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    lines = [json.dumps({"nnlo": "start", "rank": 0, "role": "master", "unix_us": t0})]
    lines.append(json.dumps({"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "rank 0 m"}}))
    for k in range(10):
        lines.append(json.dumps({"name": f"s{k}", "cat": "compute", "ph": "X", "pid": 0, "tid": 0,
                                 "ts": t0 + k * 1e6, "dur": 0.6e6, "args": {}}))
    (trace_dir / "rank-0.jsonl").write_text("\n".join(lines) + "\n")
    streams = timeline.load_run(tmp_path)
    result = timeline.write_trace(streams, tmp_path / "slice.json", (2.5, 5.0))
    trace = load_trace(result.path)
    assert [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"] == ["s2", "s3", "s4", "s5"]
    assert any(e["ph"] == "M" for e in trace["traceEvents"])  # names survive the slice
    whole = timeline.write_trace(timeline.load_run(tmp_path), tmp_path / "all.json", (None, None))
    assert whole.events == 11
