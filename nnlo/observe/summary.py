"""Where the time went: per rank and per role, the fraction spent computing, communicating, waiting, ...

The first question when tuning an allocation is "are my workers computing or waiting?". Spans carry a
category (see :data:`nnlo.observe.trace.CATEGORIES`); nested spans are counted *exclusively* (a ``comm``
send inside an ``io`` checkpoint span counts as comm, and only the rest of the checkpoint as io), so the
fractions of a rank add up to at most 1 and the remainder is reported as ``other`` (Python overhead,
bookkeeping, time outside any span). Only the main thread's spans are summed: helper threads overlap it.

Two sources give the same numbers: :class:`TimeAccount`, fed live by the recording tracer (so the summary
exists even without a timeline file), and :func:`from_streams`, which recomputes it from a trace on disk
(so a killed job still gets its summary from ``nnlo timeline``).
"""
from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from nnlo.observe.trace import CATEGORIES
from nnlo.roles import Role

COLUMNS: tuple[str, ...] = (*CATEGORIES, "other")


class TimeAccount:
    """Exclusive nanoseconds per category, thread-safe, about 0.2 µs per :meth:`add`."""

    def __init__(self) -> None:
        self._ns: dict[str, int] = {}
        self._lock = threading.Lock()
        #: perf_counter_ns at the start of the earliest span, None before any
        self.first_ns: int | None = None

    def add(self, cat: str, ns: int, start_ns: int | None = None) -> None:
        with self._lock:
            self._ns[cat] = self._ns.get(cat, 0) + ns
            if start_ns is not None and (self.first_ns is None or start_ns < self.first_ns):
                self.first_ns = start_ns

    def seconds(self) -> dict[str, float]:
        with self._lock:
            return {cat: ns / 1e9 for cat, ns in self._ns.items()}


def role_kind(label: str | None) -> str:
    """``"b0f1:worker:w1.2"`` -> ``"worker"``; the role without block, fold and index decorations."""
    kinds = {r.value for r in Role}
    for part in (label or "").split(":"):
        if part in kinds:
            return part
    return label or "unknown"


def rank_summary(
    rank: int, role: str, wall_s: float, seconds: dict[str, float], startup_s: float = 0.0
) -> dict[str, Any]:
    """One rank's breakdown: seconds and fractions per category, unknown categories folded into other.

    ``wall_s`` runs from the rank's first span to its end; ``startup_s`` (imports, building the model,
    opening data: before the first span) is reported beside it, not in the fractions, so a short run on a
    slow file system still shows how its workers spend their training time.
    """
    known = {c: float(seconds.get(c, 0.0)) for c in CATEGORIES}
    spanned = sum(known.values()) + sum(v for c, v in seconds.items() if c not in CATEGORIES)
    wall = max(float(wall_s), spanned, 1e-9)
    known["other"] = max(0.0, wall - sum(known.values()))
    return {
        "rank": rank,
        "role": role,
        "kind": role_kind(role),
        "wall_s": round(wall, 6),
        "startup_s": round(float(startup_s), 6),
        "seconds": {c: round(v, 6) for c, v in known.items()},
        "fractions": {c: round(v / wall, 4) for c, v in known.items()},
    }


def by_role(ranks: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Combine rank summaries per role kind: fractions weighted by wall time, monitor peaks and means."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in ranks:
        groups.setdefault(r.get("kind") or role_kind(r.get("role")), []).append(r)
    order = {"coordinator": 0, "uber-master": 1, "master": 2, "worker": 3}
    out: dict[str, dict[str, Any]] = {}
    for kind in sorted(groups, key=lambda k: (order.get(k, 9), k)):
        members = groups[kind]
        wall = sum(m.get("wall_s", 0.0) for m in members) or 1e-9
        seconds = {c: sum(m.get("seconds", {}).get(c, 0.0) for m in members) for c in COLUMNS}
        entry: dict[str, Any] = {
            "ranks": len(members),
            "wall_s": round(max(m.get("wall_s", 0.0) for m in members), 6),
            "startup_s": round(max(m.get("startup_s", 0.0) for m in members), 6),
            "fractions": {c: round(s / wall, 4) for c, s in seconds.items()},
        }
        monitors = [m["monitor"] for m in members if isinstance(m.get("monitor"), dict)]
        if monitors:
            entry["monitor"] = _combine_monitors(monitors)
        out[kind] = entry
    return out


def _combine_monitors(monitors: list[dict[str, Any]]) -> dict[str, Any]:
    def values(key: str) -> list[float]:
        return [float(m[key]) for m in monitors if isinstance(m.get(key), (int, float))]

    out: dict[str, Any] = {}
    if cpu := values("cpu_percent_mean"):
        out["cpu_percent_mean"] = round(sum(cpu) / len(cpu), 1)
    if cpu_max := values("cpu_percent_max"):
        out["cpu_percent_max"] = round(max(cpu_max), 1)
    if rss := values("rss_mb_max"):
        out["rss_mb_max"] = round(max(rss), 1)
    if util := values("gpu_util_mean"):
        out["gpu_util_mean"] = round(sum(util) / len(util), 1)
    if mem := values("gpu_mem_mb_max"):
        out["gpu_mem_mb_max"] = round(max(mem), 1)
    if "gpu_util_mean" not in out and any(m.get("gpu") == "no GPU" for m in monitors):
        out["gpu"] = "no GPU"
    return out


def format_table(roles: dict[str, dict[str, Any]]) -> str:
    """A fixed-width text table, one row per role kind, as printed at the end of a run."""
    head = f"{'role':<12} {'ranks':>5} " + " ".join(f"{c:>8}" for c in COLUMNS)
    lines = ["where the time went (fraction of wall time per role)", head]
    for kind, entry in roles.items():
        fr = entry.get("fractions", {})
        lines.append(f"{kind:<12} {entry.get('ranks', 0):>5} " + " ".join(f"{fr.get(c, 0.0):>8.1%}" for c in COLUMNS))
    startup = max((e.get("startup_s", 0.0) for e in roles.values()), default=0.0)
    wall = max((e.get("wall_s", 0.0) for e in roles.values()), default=0.0)
    lines.append(f"over {wall:.1f} s from the first span to the end; start-up before it: up to {startup:.1f} s")
    monitored = [(k, e["monitor"]) for k, e in roles.items() if e.get("monitor")]
    for kind, mon in monitored:
        bits = []
        if "cpu_percent_mean" in mon:
            bits.append(f"cpu {mon['cpu_percent_mean']:.0f}% mean / {mon.get('cpu_percent_max', 0):.0f}% max")
        if "rss_mb_max" in mon:
            bits.append(f"rss {mon['rss_mb_max']:.0f} MB max")
        if "gpu_util_mean" in mon:
            bits.append(f"gpu {mon['gpu_util_mean']:.0f}% mean, {mon.get('gpu_mem_mb_max', 0):.0f} MB max")
        elif mon.get("gpu"):
            bits.append(str(mon["gpu"]))
        lines.append(f"{kind:<12} " + "; ".join(bits))
    return "\n".join(lines)


def format_rank_table(ranks: list[dict[str, Any]]) -> str:
    """One row per rank (its role label, wall seconds and fractions): finds the one straggler among many."""
    width = max([len("rank role")] + [len(f"{r.get('rank')} {r.get('role')}") for r in ranks])
    head = f"{'rank role':<{width}} {'wall s':>8} " + " ".join(f"{c:>8}" for c in COLUMNS)
    lines = [head]
    for r in ranks:
        fr = r.get("fractions", {})
        label = f"{r.get('rank')} {r.get('role')}"
        lines.append(f"{label:<{width}} {r.get('wall_s', 0.0):>8.1f} "
                     + " ".join(f"{fr.get(c, 0.0):>8.1%}" for c in COLUMNS))
    return "\n".join(lines)


def exclusive_seconds(spans: Iterable[tuple[float, float, str]] | Any) -> dict[str, float]:
    """Exclusive seconds per category from (start_us, dur_us, cat) spans of ONE thread.

    Takes tuples or a :class:`nnlo.observe.timeline.Spans` (sorted with numpy, no tuple per span).
    Children are clipped to their parent, so a malformed trace can never give more time than its wall.
    """
    totals: dict[str, float] = {}
    stack: list[list[Any]] = []  # [end_us, cat, dur_us, children_us]

    def finish(item: list[Any]) -> None:
        totals[item[1]] = totals.get(item[1], 0.0) + max(0.0, item[2] - item[3]) / 1e6

    for start, dur, cat in _sorted_spans(spans):
        while stack and stack[-1][0] <= start:
            finish(stack.pop())
        if stack:
            end = min(start + dur, stack[-1][0])
            dur = max(0.0, end - start)
            stack[-1][3] += dur
        stack.append([start + dur, cat, dur, 0.0])
    while stack:
        finish(stack.pop())
    return totals


def _sorted_spans(spans: Any) -> Iterable[tuple[float, float, str]]:
    """By start, the longer first (a parent before the child that starts with it)."""
    if hasattr(spans, "ts") and hasattr(spans, "names"):
        import numpy as np  # lazy: numpy off the command line's start-up

        ts = np.frombuffer(spans.ts, dtype=np.float64) if len(spans.ts) else np.zeros(0)
        dur = np.frombuffer(spans.dur, dtype=np.float64) if len(spans.dur) else np.zeros(0)
        cat = np.frombuffer(spans.cat, dtype=np.uint8) if len(spans.cat) else np.zeros(0, np.uint8)
        order = np.lexsort((-dur, ts))
        names = spans.names
        return ((t, d, names[c])
                for t, d, c in zip(ts[order].tolist(), dur[order].tolist(), cat[order].tolist(), strict=True))
    return sorted(spans, key=lambda s: (s[0], -s[1]))


def from_streams(streams: Iterable[Any]) -> list[dict[str, Any]]:
    """Rank summaries recomputed from :class:`nnlo.observe.timeline.RankStream` objects (a trace on disk)."""
    out = []
    for s in streams:
        seconds = exclusive_seconds(s.spans)
        wall_s = sum(w.active_s for w in s.sessions)
        startup_s = sum(w.startup_s for w in s.sessions)
        out.append(rank_summary(s.rank, s.role or f"rank {s.rank}", wall_s, seconds, startup_s))
    return out
