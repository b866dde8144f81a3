"""What the runtime calls to switch observability on for one rank.

The runtime calls :func:`start` once per rank after roles are known, :meth:`Session.epoch_end` at the end of
each epoch (its dict is merged into that epoch's history entry), :meth:`Session.summary` at the end and
:meth:`Session.close` at the end (also on errors). With everything off this is nearly free: the tracer is
the no-op one and only the per-rank log file is written.

Files under ``out_dir`` (the run's output directory, shared by all ranks)::

    logs/rank-<r>.log        every rank, at --log-level          logs/all-ranks.log   merged by rank 0
    trace/rank-<r>.jsonl     --timeline, streamed per event      timeline.json        merged by rank 0
    summary/rank-<r>.json    --timeline or --monitor             time_summary.json    per role, by rank 0

Rank 0 merges at its close after waiting briefly (``close_wait_s``) for the other ranks to close; a rank
that died only delays that by the wait, and ``nnlo timeline RUN`` redoes the merge at any time.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnlo.atomic import write_json
from nnlo.errors import ConfigError
from nnlo.observe import logs as _logs
from nnlo.observe import summary as _summary
from nnlo.observe import timeline
from nnlo.observe.timeline import RecordingTracer, trace_path
from nnlo.observe.trace import Tracer, get_tracer, set_tracer

log = logging.getLogger("nnlo.observe")

SUMMARY_DIR = "summary"
SUMMARY_NAME = "time_summary.json"
#: files of other ranks older than rank 0's start minus this are leftovers of an earlier job in the chain
_FRESH_MARGIN_S = 300.0


@dataclass
class Session:
    """One rank's observability: its tracer, monitor and log files. Made by :func:`start`, ended by
    :meth:`close`; ``rank`` is the rank within the communicator the run's files belong to."""

    rank: int
    role: str
    out_dir: Path | None
    tracer: Tracer = field(default_factory=get_tracer)
    monitor: Any = None  # nnlo.observe.monitor.Monitor when --monitor
    world_size: int | None = None
    close_wait_s: float = 10.0
    _logging: Any = None
    _previous_tracer: Tracer | None = None
    _started: float = field(default_factory=time.time)
    _t0_ns: int = field(default_factory=time.perf_counter_ns)
    _closed: bool = False

    @property
    def accounting(self) -> bool:
        """True when spans are timed (``--timeline``, ``--monitor`` or ``summary=True``)."""
        return hasattr(self.tracer, "account")

    def epoch_end(self, epoch: int) -> dict[str, Any]:
        """Resource aggregates since the previous epoch, flat keys for the history entry ({} without monitor).

        Keys: ``cpu_percent_mean``, ``cpu_percent_max``, ``rss_mb_max`` and either ``gpu_util_mean``,
        ``gpu_util_max``, ``gpu_mem_mb_max`` or ``gpu: "no GPU"``.
        """
        if self.tracer.enabled:
            self.tracer.instant("epoch end", epoch=epoch)
        if self.monitor is None:
            return {}
        out = self.monitor.epoch_end()
        out.pop("samples", None)
        return out

    def set_device(self, device: str) -> None:
        """Tell the monitor which device this rank computes on (``"cuda:1"``, ``"cpu"``); no-op without it."""
        if self.monitor is not None:
            self.monitor.set_device(device)
        if self.tracer.enabled:
            self.tracer.instant("device", device=device)

    def summary(self) -> dict[str, Any]:
        """This rank's time breakdown (and monitor totals): ``{}`` when spans are not timed."""
        if not self.accounting:
            return {}
        account = self.tracer.account  # type: ignore[attr-defined]
        now_ns, t0_ns = time.perf_counter_ns(), self._t0_ns
        first_ns = account.first_ns if account.first_ns is not None else now_ns
        out = _summary.rank_summary(self.rank, self.role, (now_ns - first_ns) / 1e9, account.seconds(),
                                    startup_s=max(0, first_ns - t0_ns) / 1e9)
        if self.monitor is not None:
            out["monitor"] = self.monitor.totals()
        return out

    def close(self) -> None:
        """Stop the monitor, flush this rank's files; on rank 0 also merge trace, summaries and logs.

        Idempotent and never raises: it runs on error paths, where a second error would hide the first.
        """
        if self._closed:
            return
        self._closed = True
        for step in (self._stop_monitor, self._write_summary, self._close_tracer, self._merge_all):
            try:
                step()
            except Exception as e:  # noqa: BLE001 - observability must never break the run's ending
                log.warning("observe: %s failed at close: %s", step.__name__.strip("_"), e)
        if self._logging is not None:
            self._logging.close()

    # -- close steps -------------------------------------------------------------------------------
    def _stop_monitor(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()

    def _write_summary(self) -> None:
        data = self.summary()
        if not data or self.out_dir is None:
            return
        _write_json(self.out_dir / SUMMARY_DIR / f"rank-{self.rank}.json", data)

    def _close_tracer(self) -> None:
        if self._previous_tracer is not None:
            set_tracer(self._previous_tracer)
        self.tracer.close()

    def _merge_all(self) -> None:
        if self.rank != 0 or self.out_dir is None:
            return

        ranks = self._peer_ranks()
        trace_dir = self.out_dir / timeline.TRACE_DIR
        deadline = time.monotonic() + self.close_wait_s
        if self.accounting:
            while time.monotonic() < deadline and self._missing_summaries(ranks):
                time.sleep(0.05)
        if trace_dir.is_dir():
            left = max(0.0, deadline - time.monotonic())
            timeline.wait_closed(trace_dir, ranks if self.world_size else None, left)
            result = timeline.merge(trace_dir)
            log.info("timeline: %s", result.describe())
        if self.accounting:
            combined = combine_summaries(self.out_dir, since=self._started - _FRESH_MARGIN_S)
            if combined["ranks"]:
                log.info("%s", _summary.format_table(combined["roles"]))
        _logs.merge_logs(self.out_dir)

    def _peer_ranks(self) -> list[int]:
        if self.world_size:
            return list(range(self.world_size))
        assert self.out_dir is not None
        since = self._started - _FRESH_MARGIN_S
        ranks = []
        for p in _logs.rank_logs(self.out_dir / _logs.LOG_DIR):
            if _mtime(p) >= since:
                ranks.append(int(p.stem.removeprefix("rank-")))
        return ranks or [self.rank]

    def _missing_summaries(self, ranks: list[int]) -> list[int]:
        assert self.out_dir is not None
        since = self._started - _FRESH_MARGIN_S
        return [r for r in ranks if _mtime(self.out_dir / SUMMARY_DIR / f"rank-{r}.json") < since]


def combine_summaries(out_dir: str | Path, since: float = 0.0) -> dict[str, Any]:
    """Read ``summary/rank-*.json`` (newer than ``since``) and write ``time_summary.json``: ranks and roles."""
    out_dir = Path(out_dir)
    ranks = []
    for p in sorted((out_dir / SUMMARY_DIR).glob("rank-*.json")):
        if _mtime(p) < since:
            continue
        try:
            ranks.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    ranks.sort(key=lambda r: r.get("rank", 0))
    combined = {"ranks": ranks, "roles": _summary.by_role(ranks)}
    if ranks:
        _write_json(out_dir / SUMMARY_NAME, combined)
    return combined


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return float("-inf")


def _write_json(path: Path, data: Any) -> None:
    write_json(path, data)


def start(
    out_dir: str | Path | None,
    rank: int,
    role: str,
    *,
    log_level: str = "info",
    timeline: bool = False,
    monitor: bool = False,
    summary: bool | None = None,
    world_size: int | None = None,
    monitor_interval: float = 1.0,
    console: bool = True,
    close_wait_s: float = 10.0,
) -> Session:
    """Switch on logging, and optionally tracing and monitoring, for one rank; returns its :class:`Session`.

    ``summary`` (default: on with ``timeline`` or ``monitor``) times spans per category without writing a
    trace. ``world_size`` lets rank 0 wait for exactly the ranks 0..n-1 at close (otherwise for the ranks
    whose log file this job touched). Bad values raise :class:`nnlo.errors.ConfigError` (one line).
    """
    if timeline and out_dir is None:
        raise ConfigError("--timeline needs an output directory to write trace/rank-<r>.jsonl; pass --checkpoint DIR")
    path = Path(out_dir) if out_dir is not None else None
    try:
        rank_logging = _logs.RankLogging(path, rank, role, log_level, console=console)
    except OSError as e:
        raise ConfigError(f"cannot write the logs of rank {rank} under {path} ({e.strerror or e}); "
                          "choose a writable output directory") from None
    if rank_logging.path is not None:
        os.utime(rank_logging.path)  # marks this rank as part of the current job (see Session._peer_ranks)
    session = Session(rank, role, path, world_size=world_size, close_wait_s=close_wait_s, _logging=rank_logging)
    if summary is None:
        summary = timeline or monitor
    try:
        if timeline or summary:
            tracer = RecordingTracer(trace_path(path, rank) if timeline and path else None, rank, role)
            session.tracer = tracer
            session._previous_tracer = set_tracer(tracer)
        if monitor:
            from nnlo.observe.monitor import Monitor  # lazy: psutil, only for --monitor

            session.monitor = Monitor(monitor_interval, tracer=session.tracer)
            if rank == 0:
                log.info("monitor: sampling every %g s; GPU: %s", monitor_interval, session.monitor.gpu_name)
    except OSError as e:
        session.close()
        raise ConfigError(f"cannot write the trace of rank {rank} under {path} ({e.strerror or e}); "
                          "choose a writable output directory") from None
    except Exception:
        session.close()
        raise
    return session
