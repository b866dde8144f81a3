"""Per-rank utilisation from a trace: where the time went (stacked fractions) and the spans over time."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from nnlo.observe import summary
from nnlo.observe.plots.common import COLORS, load_json, plt, save
from nnlo.observe.timeline import RankStream
from nnlo.observe.trace import CATEGORIES


def plot_utilisation(streams: list[Any], out_dir: Path, max_gantt_ranks: int = 64,
                     max_gantt_spans: int = 20000) -> list[Path]:
    """``utilisation.png``: per-rank stacked fractions (exclusive time per category) and a Gantt of spans.

    ``streams`` are :class:`nnlo.observe.timeline.RankStream` (see :func:`nnlo.observe.timeline.load_run`).
    A rank with more than ``max_gantt_spans`` spans has its shortest ones left out of the Gantt chart only
    (they would be narrower than a pixel); the fractions always count every span.
    """
    streams = [s for s in streams if len(s.spans)]
    if not streams:
        return []
    ranks = summary.from_streams(streams)
    t0 = min(min(s.spans.ts) for s in streams)
    t1 = max(max(t + d for t, d in zip(s.spans.ts, s.spans.dur, strict=True)) for s in streams)
    height = max(4.0, 0.35 * len(streams) + 2)
    fig, (bars, gantt) = plt.subplots(1, 2, figsize=(14, min(height, 30)), gridspec_kw={"width_ratios": [1, 2.2]})
    labels = [f"{r['rank']} {r['role']}" for r in ranks]
    y = range(len(ranks))
    left = [0.0] * len(ranks)
    for cat in summary.COLUMNS:
        widths = [r["fractions"].get(cat, 0.0) for r in ranks]
        bars.barh(list(y), widths, left=left, color=COLORS.get(cat, "#8c564b"), label=cat)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    bars.set_yticks(list(y))
    bars.set_yticklabels(labels, fontsize=8)
    bars.invert_yaxis()
    bars.set_xlim(0, 1)
    bars.set_xlabel("fraction of wall time")
    bars.set_title("where the time went, per rank")
    bars.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    shown = streams[:max_gantt_ranks]
    thinned = False
    for i, s in enumerate(shown):
        spans = list(s.spans)
        if len(spans) > max_gantt_spans:
            spans.sort(key=lambda sp: -sp[1])
            spans = spans[:max_gantt_spans]
            thinned = True
        layers: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for depth, start, dur, cat in _nesting(spans):
            layers.setdefault((depth, cat), []).append(((start - t0) / 1e6, dur / 1e6))
        for (_depth, cat), bars_ in sorted(layers.items()):  # parents first, nested spans drawn on top
            gantt.broken_barh(bars_, (i - 0.4, 0.8), facecolors=COLORS.get(cat if cat in CATEGORIES else "other"))
    gantt.set_yticks(range(len(shown)))
    gantt.set_yticklabels([f"{s.rank} {s.role or ''}" for s in shown], fontsize=8)
    gantt.invert_yaxis()
    gantt.set_xlim(0, max(1e-6, (t1 - t0) / 1e6) * 1.01)
    gantt.set_xlabel("seconds since the first span")
    title = "spans over time (main thread)"
    if len(streams) > len(shown):
        title += f", first {max_gantt_ranks} ranks"
    if thinned:
        title += f", longest {max_gantt_spans} spans per rank"
    gantt.set_title(title)
    gantt.grid(axis="x", alpha=0.3)
    return [save(fig, out_dir / "utilisation.png")]


def _nesting(spans: list[tuple[float, float, str]]) -> list[tuple[int, float, float, str]]:
    """(depth, start, dur, cat) of one thread's spans; depth 0 = outermost."""
    out: list[tuple[int, float, float, str]] = []
    ends: list[float] = []  # end times of the open ancestors
    for start, dur, cat in sorted(spans, key=lambda x: (x[0], -x[1])):
        while ends and ends[-1] <= start:
            ends.pop()
        out.append((len(ends), start, dur, cat))
        ends.append(start + dur)
    return out


def streams_from_trace_json(path: Path) -> list[Any]:
    """RankStreams rebuilt from a merged ``timeline.json`` (when the per-rank lines are gone)."""
    data = load_json(path)
    events = data.get("traceEvents", []) if isinstance(data, dict) else data if isinstance(data, list) else []
    by_rank: dict[int, RankStream] = {}
    for e in events:
        if isinstance(e, dict) and isinstance(e.get("pid"), int):
            by_rank.setdefault(e["pid"], RankStream(rank=e["pid"], path=path, kept=False)).add(e)
    return [by_rank[r] for r in sorted(by_rank)]
