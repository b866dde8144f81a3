"""The recording tracer and the merge into one Chrome trace (``timeline.json``).

Why streamed lines: a job killed at its walltime never runs its clean-up, so a trace kept in memory and
written at the end would be lost exactly when it is most wanted. Each rank therefore appends one JSON
object per line to ``<out_dir>/trace/rank-<r>.jsonl`` with a single ``write(2)`` per event (no user-space
buffer), so a SIGKILL loses at most the line being written. :func:`merge` turns those files into one valid
trace at the end of a run or on demand (``nnlo timeline RUN``), dropping torn lines; the reading side lives
in :mod:`nnlo.observe.tracefile` and is re-exported here.

Each line is already a Chrome trace event (``pid`` = rank, ``ts``/``dur`` in microseconds since the Unix
epoch) or a private bookkeeping record ``{"nnlo": "start" | "closed", ...}`` that the merge consumes.
Timestamps come from ``perf_counter`` anchored once to the wall clock, so spans are precise within a rank
and comparable across ranks as far as the nodes' clocks agree (NTP keeps cluster nodes within ~1 ms).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from nnlo.observe.summary import TimeAccount
from nnlo.observe.trace import Tracer
from nnlo.observe.tracefile import (
    MERGED_NAME,
    TRACE_DIR,
    JobWindow,
    MergeResult,
    RankStream,
    Spans,
    find_trace_dirs,
    load_events,
    load_run,
    merge,
    merge_run,
    rank_files,
    read_stream,
    wait_closed,
    write_trace,
)

__all__ = [
    "RecordingTracer", "trace_path",
    # the reading and merging API of nnlo.observe.tracefile, re-exported
    "MERGED_NAME", "TRACE_DIR", "JobWindow", "MergeResult", "RankStream", "Spans", "find_trace_dirs",
    "load_events", "load_run", "merge", "merge_run", "rank_files", "read_stream", "wait_closed", "write_trace",
]

log = logging.getLogger("nnlo.observe")

def trace_path(out_dir: str | Path, rank: int) -> Path:
    return Path(out_dir) / TRACE_DIR / f"rank-{rank}.jsonl"


class _Span:
    """One timed block. A class with ``__enter__``/``__exit__`` is cheaper than a generator context."""

    __slots__ = ("_args", "_cat", "_children", "_name", "_t0", "_tracer")

    def __init__(self, tracer: RecordingTracer, name: str, cat: str, args: dict[str, Any]) -> None:
        self._tracer, self._name, self._cat, self._args = tracer, name, cat, args

    def __enter__(self) -> None:
        self._children = 0
        stack = self._tracer._stack()
        stack.append(self)
        self._t0 = time.perf_counter_ns()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        t1 = time.perf_counter_ns()
        dur = t1 - self._t0
        tracer = self._tracer
        stack = tracer._stack()
        if stack and stack[-1] is self:
            stack.pop()
        if stack:
            stack[-1]._children += dur
        if tracer._main is None or threading.get_ident() == tracer._main:
            tracer.account.add(self._cat, dur - self._children, self._t0)
        if tracer._fd is not None:
            args = self._args
            if exc_type is not None:
                args = {**args, "error": exc_type.__name__}
            tracer._complete(self._name, self._cat, self._t0, dur, args)


class RecordingTracer(Tracer):
    """Accounts time per category (for the summary) and, given a path, streams Chrome trace events.

    With ``path=None`` nothing is written: only the per-category totals are kept (about 1 µs per span).
    Write errors (a full disk) switch the event stream off with one warning; training goes on.
    """

    enabled = True

    def __init__(self, path: str | Path | None, rank: int, role: str) -> None:
        self.rank, self.role = rank, role
        self.path = Path(path) if path is not None else None
        self.account = TimeAccount()
        self._local = threading.local()
        self._main = threading.main_thread().ident
        self._tids: dict[int, int] = {}
        self._tid_lock = threading.Lock()
        self._wall0_ns = time.time_ns()
        self._perf0_ns = time.perf_counter_ns()
        self._fd: int | None = None
        self._heads: dict[tuple[str, str], str] = {}
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            _end_torn_line(self.path, self._fd)
            self._record({"nnlo": "start", "rank": rank, "role": role, "host": socket.gethostname(),
                          "os_pid": os.getpid(), "unix_us": self._wall0_ns // 1000})
            self._event({"name": "process_name", "ph": "M", "args": {"name": f"rank {rank} {role}"}})
            self._event({"name": "process_sort_index", "ph": "M", "args": {"sort_index": rank}})
            self._event({"name": "process_labels", "ph": "M",
                         "args": {"labels": f"{socket.gethostname()} pid {os.getpid()}"}})
            self._tid()

    # -- the Tracer API ----------------------------------------------------------------------------
    def span(self, name: str, cat: str = "compute", **args: Any) -> _Span:
        return _Span(self, name, cat, args)

    def instant(self, name: str, **args: Any) -> None:
        if self._fd is not None:
            self._event({"name": name, "ph": "i", "s": "p", "ts": self._us(time.perf_counter_ns()),
                         "tid": self._tid(), "args": args})

    def counter(self, name: str, values: dict[str, float]) -> None:
        if self._fd is not None:
            self._event({"name": name, "ph": "C", "ts": self._us(time.perf_counter_ns()), "args": values})

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, _line({"nnlo": "closed", "rank": self.rank, "unix_us": time.time_ns() // 1000}))
            os.close(fd)

    # -- internals ---------------------------------------------------------------------------------
    def _complete(self, name: str, cat: str, t0_ns: int, dur_ns: int, args: dict[str, Any]) -> None:
        """Write one "X" event; formatted by hand (half the cost of json.dumps on this hot path)."""
        key = (name, cat)
        head = self._heads.get(key)
        if head is None:
            head = self._heads[key] = (
                f'{{"name":{json.dumps(name)},"cat":{json.dumps(cat)},"ph":"X","pid":{self.rank:d}')
        ts = (self._wall0_ns + t0_ns - self._perf0_ns) / 1000
        tid = self._tid()
        args_json = json.dumps(args, separators=(",", ":"), default=str) if args else "{}"
        text = f'{head},"tid":{tid:d},"ts":{ts:.3f},"dur":{dur_ns / 1000:.3f},"args":{args_json}}}\n'
        fd = self._fd
        if fd is not None:
            try:
                os.write(fd, text.encode())
            except OSError as e:
                self._write_failed(fd, e)

    def _stack(self) -> list[_Span]:
        try:
            return self._local.stack
        except AttributeError:
            self._local.stack = []
            return self._local.stack

    def _tid(self) -> int:
        ident = threading.get_ident()
        tid = self._tids.get(ident)
        if tid is None:
            with self._tid_lock:
                tid = self._tids.setdefault(ident, len(self._tids))
            name = "main" if threading.current_thread() is threading.main_thread() else threading.current_thread().name
            self._event({"name": "thread_name", "ph": "M", "tid": tid, "args": {"name": name}})
        return tid

    def _us(self, perf_ns: int) -> float:
        return round((self._wall0_ns + perf_ns - self._perf0_ns) / 1000, 3)

    def _event(self, event: dict[str, Any]) -> None:
        event["pid"] = self.rank
        event.setdefault("tid", 0)
        self._record(event)

    def _record(self, obj: dict[str, Any]) -> None:
        fd = self._fd
        if fd is None:
            return
        try:
            os.write(fd, _line(obj))
        except OSError as e:
            self._write_failed(fd, e)

    def _write_failed(self, fd: int, error: OSError) -> None:
        self._fd = None
        log.warning("timeline: cannot write %s (%s); tracing stopped for rank %d", self.path, error, self.rank)
        with contextlib.suppress(OSError):
            os.close(fd)


def _end_torn_line(path: Path, fd: int) -> None:
    """A job killed mid-write left a line without its newline: end it, so our first line stays whole."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                os.write(fd, b"\n")
    except OSError:
        pass


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, separators=(",", ":"), default=str) + "\n").encode()
