"""Plots of a search that trains in stages (``--schedule asha|hyperband|pbt``), from ``trials.json``.

``rungs.png``: every trial's figure of merit at each rung it reached against the epochs trained (its learning
curve at the rungs), the trials trained to the most epochs in colour, the ones the schedule stopped early in
grey, dashed, ending in a cross. ``lineage.png`` (PBT): the same curves with each exploit drawn from the donor's
point to the child's first result (dotted), and, below, the hyperparameters the best final trial trained with
over its epochs, following its ancestors back: the schedule PBT found.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nnlo.observe.plots.common import MaxNLocator, num, plt, save

_MAX_CURVES = 500


def _curve(trial: dict[str, Any]) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in trial.get("rungs") or ():
        x, y = num(r.get("epochs")), num(r.get("fom"))
        if x is not None and y is not None:
            xs.append(x)
            ys.append(y)
    return xs, ys


def staged(trials: Sequence[Any]) -> list[dict[str, Any]]:
    """The trials that have rung results (empty for a search without a schedule)."""
    return [t for t in trials if isinstance(t, dict) and t.get("rungs")][:_MAX_CURVES]


def plot_rungs(trials: list[dict[str, Any]], out_dir: Path, direction: str = "min", fom_name: str = "fom"
               ) -> list[Path]:
    """``rungs.png`` (and ``lineage.png`` when trials have parents); [] when no trial has rung results."""
    shown = staged(trials)
    if not shown:
        return []
    written = [_rungs(shown, out_dir, direction, fom_name)]
    if any(t.get("parent") is not None for t in shown):
        written.append(_lineage(shown, out_dir, direction, fom_name))
    return written


def _most(trials: list[dict[str, Any]]) -> float:
    return max((num(t.get("epochs")) or 0.0) for t in trials)


def _rungs(trials: list[dict[str, Any]], out_dir: Path, direction: str, fom_name: str) -> Path:
    most = _most(trials)
    replaced = {t.get("replaces") for t in trials if t.get("replaces") is not None}
    full = [t for t in trials if (num(t.get("epochs")) or 0) >= most and t.get("id") not in replaced]
    cmap = plt.get_cmap("viridis")
    finals = sorted(_curve(t)[1][-1] for t in full if _curve(t)[1])
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    stopped = 0
    for t in trials:
        xs, ys = _curve(t)
        if not xs:
            continue
        if t in full:
            rank = finals.index(ys[-1]) / max(1, len(finals) - 1) if ys[-1] in finals else 0.5
            if direction == "max":
                rank = 1 - rank
            ax.plot(xs, ys, marker="o", ms=3, lw=1.4, color=cmap(0.85 * rank), zorder=3)
        else:
            stopped += 1
            ax.plot(xs, ys, ls="--", lw=0.8, color="#9a9a9a", alpha=0.7, zorder=2)
            ax.plot(xs[-1:], ys[-1:], marker="x", ms=5, color="#7f7f7f", ls="none", zorder=2)
    ax.plot([], [], color=cmap(0.0), marker="o", ms=3, label=f"trained {most:g} epochs ({len(full)}; dark = better)")
    ax.plot([], [], color="#9a9a9a", ls="--", marker="x", ms=5, label=f"stopped early ({stopped})")
    xs_all = [x for t in trials for x in _curve(t)[0]]
    if xs_all and min(xs_all) > 0 and max(xs_all) / min(xs_all) >= 9:
        ax.set_xscale("log")
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epochs trained")
    ax.set_ylabel(fom_name)
    ax.set_title(f"{len(trials)} trials at their rungs: {len(full)} trained {most:g} epochs, {stopped} stopped early",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out_dir / "rungs.png")


def _value_at(trial: dict[str, Any], epochs: float) -> float | None:
    """The trial's figure of merit at its last rung at or below ``epochs``."""
    best = None
    for x, y in zip(*_curve(trial), strict=True):
        if x <= epochs:
            best = y
    return best


def ancestry(trials: list[dict[str, Any]], tid: Any) -> list[dict[str, Any]]:
    """``tid`` and its parents, the oldest first (stops at a missing or repeated id)."""
    by_id = {t.get("id"): t for t in trials}
    chain, seen = [], set()
    while tid in by_id and tid not in seen:
        seen.add(tid)
        chain.append(by_id[tid])
        tid = by_id[tid].get("parent")
    return chain[::-1]


def _lineage(trials: list[dict[str, Any]], out_dir: Path, direction: str, fom_name: str) -> Path:
    by_id = {t.get("id"): t for t in trials}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 8.0), sharex=True)
    cmap = plt.get_cmap("tab10")
    for i, t in enumerate(trials):
        xs, ys = _curve(t)
        if not xs:
            continue
        colour = cmap(i % 10)
        top.plot(xs, ys, marker="o", ms=3, lw=1.0, color=colour, alpha=0.8)
        parent = by_id.get(t.get("parent"))
        start = num(t.get("start_epochs"))
        if parent is not None and start is not None:
            y0 = _value_at(parent, start)
            if y0 is not None:
                top.plot([start, xs[0]], [y0, ys[0]], ls=":", lw=1.0, color=colour)
                top.annotate("", xy=(xs[0], ys[0]), xytext=(start, y0),
                             arrowprops={"arrowstyle": "->", "color": colour, "lw": 0.8})
    replaced = {t.get("replaces") for t in trials if t.get("replaces") is not None}
    for t in trials:
        if t.get("id") in replaced:
            xs, ys = _curve(t)
            if xs:
                top.plot(xs[-1:], ys[-1:], marker="x", ms=6, color="#333333", ls="none")
    top.set_ylabel(fom_name)
    top.set_title(f"PBT: {len(trials)} trials, {sum(1 for t in trials if t.get('parent') is not None)} exploits "
                  "(dotted: donor -> child; x: replaced)", fontsize=10)
    top.grid(alpha=0.3)
    final = [t for t in trials if t.get("id") not in replaced and _curve(t)[1]]
    pick = min if direction != "max" else max
    best = pick(final, key=lambda t: _curve(t)[1][-1]) if final else None
    if best is not None:
        _schedule_panel(bottom, ancestry(trials, best.get("id")))
    bottom.set_xlabel("epochs trained")
    return save(fig, out_dir / "lineage.png")


def _schedule_panel(ax: Any, chain: list[dict[str, Any]]) -> None:
    """Each numeric hyperparameter of the best trial's ancestry over the epochs it was in force."""
    names = [n for n, v in (chain[-1].get("params") or {}).items() if num(v) is not None]
    if not names:
        ax.axis("off")
        return
    for name in names:
        xs, ys = [], []
        for i, t in enumerate(chain):
            start = num(t.get("start_epochs")) or 0.0
            end = num(chain[i + 1].get("start_epochs")) if i + 1 < len(chain) else num(t.get("epochs"))
            value = num((t.get("params") or {}).get(name))
            if value is None or end is None:
                continue
            xs += [start, end]
            ys += [value, value]
        if ys:
            top = max(abs(y) for y in ys) or 1.0
            ax.plot(xs, [y / top for y in ys], lw=1.6, label=f"{name} (/ {top:.3g})")
    ax.set_ylabel("value / its largest")
    ax.set_title(f"the schedule of trial {chain[-1].get('id')}'s hyperparameters, through "
                 f"{len(chain)} generation(s)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def stopped_early(trials: Sequence[Any]) -> set[int]:
    """Ids of the trials a schedule stopped below the most epochs any trial trained, or replaced (PBT)."""
    shown = staged(trials)
    if not shown:
        return set()
    most = _most(shown)
    replaced = {t.get("replaces") for t in shown if t.get("replaces") is not None}
    return {int(t["id"]) for t in shown if isinstance(t.get("id"), int)
            and ((num(t.get("epochs")) or 0) < most or t.get("id") in replaced)}
