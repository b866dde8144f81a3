"""Reading, checking and merging the per-rank trace files that :mod:`nnlo.observe.timeline` writes.

File format: ``<out_dir>/trace/rank-<r>.jsonl``, one JSON object per line, each ending with its newline:
Chrome trace events (``pid`` = rank, ``ts``/``dur`` in µs since the Unix epoch) and bookkeeping records
``{"nnlo": "start" | "closed", ...}``. A line without its newline, or that does not parse, is torn (the job
was killed mid-write) and dropped. Lines are checked once and then copied verbatim into the merged trace,
so merging a long run is I/O bound and needs memory only for compact arrays of the spans (for summaries
and plots), never for the events themselves.
"""
from __future__ import annotations

import json
import math
import os
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnlo.atomic import atomic_open
from nnlo.contract import TIMELINE_FILE as MERGED_NAME
from nnlo.errors import ConfigError

TRACE_DIR = "trace"


@dataclass
class JobWindow:
    """One job's stretch of a rank's file (a restarted chain appends one more): microseconds."""

    start_us: float
    end_us: float
    first_span_us: float | None = None

    def extend(self, ts: float, end: float, span: bool) -> None:
        self.end_us = max(self.end_us, end)
        if span:
            self.first_span_us = ts if self.first_span_us is None else min(self.first_span_us, ts)

    @property
    def active_s(self) -> float:
        """From the first span to the end: the time the summary's fractions are of."""
        return max(0.0, self.end_us - (self.first_span_us if self.first_span_us is not None else self.start_us)) / 1e6

    @property
    def startup_s(self) -> float:
        """From the session's start to the first span (imports, model building, data opening)."""
        return max(0.0, (self.first_span_us if self.first_span_us is not None else self.start_us) - self.start_us) / 1e6


class Spans:
    """The main thread's complete spans of one rank in compact arrays (8+8+1 bytes a span, not a dict).

    Summaries and plots need only (start, duration, category); a long run has millions of spans.
    """

    def __init__(self) -> None:
        self.ts = array("d")
        self.dur = array("d")
        self.cat = array("B")
        self.names: list[str] = []
        self._codes: dict[str, int] = {}

    def add(self, ts: float, dur: float, cat: str) -> None:
        code = self._codes.get(cat)
        if code is None:
            if len(self.names) >= 255:  # more categories than a byte holds: fold the rest into "other"
                cat = "other"
                code = self._codes.get(cat)
            if code is None:
                code = self._codes[cat] = len(self.names)
                self.names.append(cat)
        self.ts.append(ts)
        self.dur.append(dur)
        self.cat.append(code)

    def __len__(self) -> int:
        return len(self.ts)

    def __iter__(self) -> Iterator[tuple[float, float, str]]:
        names = self.names
        return ((t, d, names[c]) for t, d, c in zip(self.ts, self.dur, self.cat, strict=True))


@dataclass
class RankStream:
    """What one rank's line file holds, after dropping torn or corrupt lines.

    ``events`` holds every event only when read with ``keep_events=True``; otherwise the merge re-reads the
    file line by line, so merging a long run's trace needs memory for its spans' arrays, not its events.
    ``rank`` is the process id in the merged trace; ``local_rank`` and ``label`` say where it came from.
    """

    rank: int
    path: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    role: str | None = None
    closed: bool = False
    dropped: int = 0
    #: one window per job that appended to this file (a restarted chain appends a new one)
    sessions: list[JobWindow] = field(default_factory=list)
    meta: list[dict[str, Any]] = field(default_factory=list)
    spans: Spans = field(default_factory=Spans)
    first_ts: float | None = None
    kept: bool = True
    local_rank: int | None = None
    label: str = ""
    #: line numbers that are torn or corrupt (skipped) and that hold NaN/Infinity (rewritten by the merge)
    bad: set[int] = field(default_factory=set)
    rewrite: set[int] = field(default_factory=set)
    skip: set[int] = field(default_factory=set)
    #: lines scanned: the merge copies no further (a running job appends lines nobody has checked yet)
    lines: int = 0
    #: per line: the event's start and end in µs (NaN without a timestamp), for a windowed merge
    line_start: array = field(default_factory=lambda: array("d"))
    line_end: array = field(default_factory=lambda: array("d"))

    def add(self, obj: dict[str, Any]) -> None:
        """Account one parsed line (a bookkeeping record or a trace event)."""
        marker = obj.get("nnlo")
        if marker == "start":
            self.role, self.closed = obj.get("role"), False
            self.sessions.append(JobWindow(float(obj.get("unix_us", 0)), float(obj.get("unix_us", 0))))
            return
        if marker == "closed":
            self.closed = True
            if self.sessions:
                self.sessions[-1].extend(0.0, float(obj.get("unix_us", 0)), span=False)
            return
        ph = obj.get("ph")
        if ph is None:
            self.dropped += 1
            return
        if ph == "M":
            self.meta.append(obj)
            if obj.get("name") == "process_name" and self.role is None:
                name = str((obj.get("args") or {}).get("name", ""))
                self.role = name.split(" ", 2)[2] if name.startswith("rank ") and name.count(" ") >= 2 else name
            return
        if self.kept:
            self.events.append(obj)
        ts = obj.get("ts")
        if not isinstance(ts, (int, float)):
            return
        ts = float(ts)
        dur = float(obj.get("dur", 0) or 0)
        self.first_ts = ts if self.first_ts is None else min(self.first_ts, ts)
        main = obj.get("tid", 0) == 0
        if not self.sessions:
            self.sessions.append(JobWindow(ts, ts + dur))
        self.sessions[-1].extend(ts, ts + dur, span=ph == "X" and main)
        if ph == "X" and main:
            self.spans.add(ts, dur, str(obj.get("cat", "other")))

    def event_lines(self, window: tuple[float, float] | None = None) -> Iterator[str]:
        """This rank's non-metadata events as strict JSON text, for the merged trace.

        Lines the tracer wrote are copied verbatim (no parse, no re-encoding: merging a long run's trace
        is I/O bound); only events kept in memory, relabelled streams (several trace folders) and lines
        holding NaN/Infinity are re-encoded. ``window`` (start, end) in µs keeps only the events that
        overlap it.
        """
        relabel = self.local_rank is not None and self.local_rank != self.rank
        lo, hi = window if window is not None else (-math.inf, math.inf)
        if self.kept:
            for e in self.events:
                ts = e.get("ts")
                if isinstance(ts, (int, float)) and (ts > hi or ts + float(e.get("dur", 0) or 0) < lo):
                    continue
                yield _strict_json(dict(e, pid=self.rank))
            return
        bad, rewrite, skip = self.bad, self.rewrite, self.skip
        starts, ends = self.line_start, self.line_end
        with open(self.path, "rb") as f:
            for index, raw in enumerate(f):
                if index >= self.lines:
                    break
                if index in bad or index in skip or not raw.strip():
                    continue
                if window is not None and (starts[index] > hi or ends[index] < lo):  # NaN compares False
                    continue
                if relabel or index in rewrite:
                    obj = json.loads(raw)
                    if isinstance(obj, dict) and "ph" in obj:
                        yield _strict_json(dict(obj, pid=self.rank))
                    continue
                yield raw.decode("utf-8", "replace").rstrip("\n")


def read_stream(path: str | Path, keep_events: bool = True) -> RankStream:
    """Parse one ``rank-<r>.jsonl``; a torn last line (the job was killed mid-write) is dropped, not fatal."""
    path = Path(path)
    rank = _rank_of(path)
    stream = RankStream(rank=rank if rank is not None else -1, path=path, kept=keep_events)
    stream.local_rank = stream.rank
    index = -1
    nan = math.nan
    with open(path, "rb") as f:
        for index, raw in enumerate(f):
            stream.line_start.append(nan)
            stream.line_end.append(nan)
            if not raw.strip():
                continue
            if not raw.endswith(b"\n"):  # the tracer writes each line with its newline: this one is torn
                stream.bad.add(index)
                continue
            try:
                obj = json.loads(raw, parse_constant=_reject_constant)
            except _NonFinite:
                obj = json.loads(raw)
                stream.rewrite.add(index)  # NaN/Infinity: valid for Python, not for browsers
            except ValueError:
                stream.bad.add(index)
                continue
            if not isinstance(obj, dict) or ("ph" not in obj and "nnlo" not in obj):
                stream.bad.add(index)
                continue
            if "ph" in obj and "nnlo" in obj:  # not a line this tracer writes; keep it out of the trace
                stream.bad.add(index)
                continue
            if "nnlo" in obj or obj.get("ph") == "M":
                stream.skip.add(index)  # bookkeeping and metadata: the merge writes these itself
            elif isinstance(obj.get("ts"), (int, float)):
                stream.line_start[index] = obj["ts"]
                stream.line_end[index] = obj["ts"] + float(obj.get("dur", 0) or 0)
            stream.add(obj)
    stream.lines = index + 1
    stream.dropped += len(stream.bad)
    return stream


class _NonFinite(Exception):
    pass


def _reject_constant(name: str) -> None:
    raise _NonFinite(name)


def rank_files(trace_dir: str | Path) -> list[Path]:
    files = [p for p in Path(trace_dir).glob("rank-*.jsonl") if _rank_of(p) is not None]
    return sorted(files, key=lambda p: _rank_of(p) or 0)


def _rank_of(path: Path) -> int | None:
    stem = path.name.removeprefix("rank-").removesuffix(".jsonl")
    return int(stem) if stem.isdigit() else None


@dataclass
class MergeResult:
    path: Path
    ranks: list[int]
    events: int
    dropped_lines: int
    unclosed: list[int]

    def describe(self) -> str:
        text = f"wrote {self.path} ({self.events} events from {len(self.ranks)} ranks)"
        if self.dropped_lines:
            text += f"; dropped {self.dropped_lines} torn line(s)"
        if self.unclosed:
            shown = ", ".join(map(str, self.unclosed[:10])) + (" ..." if len(self.unclosed) > 10 else "")
            text += f"; rank(s) {shown} did not end cleanly (killed?)"
        return text


def load_events(trace_dir: str | Path, keep_events: bool = True) -> tuple[list[RankStream], float]:
    """All ranks' streams of ``trace_dir`` and the earliest timestamp (µs), the trace's time zero."""
    streams = [read_stream(p, keep_events) for p in rank_files(trace_dir)]
    return streams, _t0(streams)


def _t0(streams: list[RankStream]) -> float:
    return min((s.first_ts for s in streams if s.first_ts is not None), default=0.0)


def _meta_events(streams: list[RankStream]) -> Iterator[dict[str, Any]]:
    """Process and thread names of every stream, relabelled to the stream's pid (and folder label)."""
    for s in streams:
        for e in s.meta:
            e = dict(e, pid=s.rank)
            if e.get("name") == "process_name" and s.label:
                e["args"] = {"name": f"{s.label} {(e.get('args') or {}).get('name', '')}".strip()}
            elif e.get("name") == "process_sort_index":
                e["args"] = {"sort_index": s.rank}
            yield e


def merge(trace_dir: str | Path, out: str | Path | None = None) -> MergeResult:
    """Merge ``trace_dir/rank-*.jsonl`` into one Chrome trace, written atomically (temp file + rename).

    The result opens in https://ui.perfetto.dev and chrome://tracing: one process per rank named by its
    role, complete ("X") spans, instants and counters. Safe to run while a job is still writing.
    """
    trace_dir = Path(trace_dir)
    if not rank_files(trace_dir):
        raise ConfigError(f"no rank-*.jsonl trace files in {trace_dir}: run with --timeline to record one")
    streams, _ = load_events(trace_dir, keep_events=False)
    return write_trace(streams, Path(out) if out is not None else trace_dir.parent / MERGED_NAME)


def find_trace_dirs(root: str | Path, depth: int = 4) -> list[Path]:
    """Folders holding rank-*.jsonl: ``root`` itself, ``root/trace``, or ``trace/`` folders below (an
    optimization run has one per trial and fold: ``trials/<id>/fold-<f>/trace``), in path order."""
    root = Path(root)
    if rank_files(root):
        return [root]
    found: list[Path] = []
    level = [root]
    for _ in range(depth + 1):
        for d in level:
            candidate = d / TRACE_DIR
            if candidate.is_dir() and rank_files(candidate):
                found.append(candidate)
        level = sorted(p for d in level for p in _subdirs(d) if p.name != TRACE_DIR)
        if not level:
            break
    return found


def _subdirs(d: Path) -> list[Path]:
    try:
        return [p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return []


def load_run(root: str | Path, keep_events: bool = False) -> list[RankStream]:
    """Every rank stream under ``root``; with several trace folders (an optimization run), each stream gets a
    unique ``rank`` (its pid in the merged trace) and a ``label`` naming its folder, e.g.
    ``trials/0003/fold-0``, so trials that ran side by side show up side by side."""
    root = Path(root)
    dirs = find_trace_dirs(root)
    if len(dirs) == 1:
        return load_events(dirs[0], keep_events)[0]
    streams: list[RankStream] = []
    for d in dirs:
        label = d.parent.relative_to(root).as_posix() if d.parent != root else ""
        for s in load_events(d, keep_events)[0]:
            s.label, s.rank = label, len(streams)
            s.role = f"{label} {s.role or f'rank {s.local_rank}'}".strip()
            streams.append(s)
    return streams


def merge_run(root: str | Path, out: str | Path | None = None) -> MergeResult:
    """Merge every trace under a run directory into ``root/timeline.json`` (or ``out``); see :func:`load_run`."""
    root = Path(root)
    streams = load_run(root)
    if not streams:
        raise ConfigError(
            f"no trace in {root}: the run was not started with --timeline (add --timeline to nnlo train/optimize)"
        )
    return write_trace(streams, Path(out) if out is not None else root / MERGED_NAME)


def write_trace(
    streams: list[RankStream], out_path: Path, window_s: tuple[float | None, float | None] | None = None
) -> MergeResult:
    """Write ``streams`` as one Chrome trace, atomically (temp file + rename), metadata first.

    Timestamps stay as recorded: microseconds since the Unix epoch (viewers show them from the trace's
    start; ``otherData.start_unix_us`` is the earliest). ``window_s`` = (from, to) in seconds since that
    start (either may be None) keeps only the events overlapping it: a slice of a long run small enough
    for a browser.
    """
    window = None
    if window_s is not None and window_s != (None, None):
        t0 = _t0(streams)
        start, end = window_s
        window = (t0 + (start or 0.0) * 1e6, t0 + end * 1e6 if end is not None else math.inf)
    other = {"start_unix_us": _t0(streams), "generator": "nnlo", "ranks": len(streams),
             "roles": {str(s.rank): s.role for s in streams}}
    n = 0
    with atomic_open(out_path, "w") as f:
        f.write('{"displayTimeUnit":"ms","otherData":' + json.dumps(other) + ',"traceEvents":[\n')
        for event in _meta_events(streams):
            f.write((",\n" if n else "") + _strict_json(event))
            n += 1
        for s in streams:
            for line in s.event_lines(window):
                f.write((",\n" if n else "") + line)
                n += 1
        f.write("\n]}\n")
    return MergeResult(
        path=out_path,
        ranks=[s.rank for s in streams],
        events=n,
        dropped_lines=sum(s.dropped for s in streams),
        unclosed=[s.rank for s in streams if not s.closed],
    )


def _strict_json(event: dict[str, Any]) -> str:
    """JSON that browsers parse: NaN/inf (a diverged loss in a span's args) become strings."""
    try:
        return json.dumps(event, separators=(",", ":"), default=str, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(event), separators=(",", ":"), default=str, allow_nan=False)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def wait_closed(trace_dir: str | Path, ranks: list[int] | None, timeout: float) -> list[int]:
    """Wait up to ``timeout`` s until the given ranks' streams (all present if None) end with "closed".

    Rank 0 calls this before merging at the end of a run so the other ranks' last spans are included;
    ranks that never close (they died) only delay the merge by ``timeout``. Returns the ranks still open.
    """
    trace_dir = Path(trace_dir)
    deadline = time.monotonic() + timeout
    while True:
        files = rank_files(trace_dir) if ranks is None else [trace_dir / f"rank-{r}.jsonl" for r in ranks]
        still_open = [_rank_of(p) or 0 for p in files if not _ends_closed(p)]
        if not still_open or time.monotonic() >= deadline:
            return still_open
        time.sleep(0.05)


def _ends_closed(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 512))
            tail = f.read()
    except OSError:
        return False
    lines = [ln for ln in tail.split(b"\n") if ln.strip()]
    return bool(lines) and b'"nnlo":"closed"' in lines[-1]
