"""Optimization plots: each trial's figure of merit with the best so far, and each parameter against it."""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nnlo.observe.plots.common import MaxNLocator, num, plt, save, spans_decades


def plot_trials(trials: list[dict[str, Any]], out_dir: Path, direction: str = "min",
                fom_name: str = "fom") -> list[Path]:
    """``convergence.png`` (fom per trial, best so far) and ``parameters.png`` (each parameter vs fom)."""
    done = [t for t in trials if isinstance(t, dict) and num(t.get("fom")) is not None
            and t.get("status", "ok") in ("ok", "done", "finished")]
    failed = [t for t in trials if isinstance(t, dict) and t not in done]
    if not done:
        return []
    done.sort(key=lambda t: num(t.get("id")) or 0.0)
    better = min if direction != "max" else max
    ids: list[float] = []
    for i, t in enumerate(done):
        trial_id = num(t.get("id"))
        ids.append(float(i) if trial_id is None else trial_id)
    foms = [float(t["fom"]) for t in done]
    best, best_so_far = None, []
    for f in foms:
        best = f if best is None else better(best, f)
        best_so_far.append(best)
    written = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    errs = [num(t.get("fom_std")) or 0.0 for t in done]
    ax.errorbar(ids, foms, yerr=errs if any(errs) else None, fmt="o", ms=4, alpha=0.6, label=f"trial {fom_name}")
    ax.step(ids, best_so_far, where="post", color="#d62728", lw=2, label=f"best so far ({direction})")
    for t in failed:
        if num(t.get("id")) is not None:
            ax.axvline(float(t["id"]), color="#7f7f7f", alpha=0.3, lw=1)
    ax.set_xlabel("trial")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(fom_name)
    if spans_decades([f + d for f, e in zip(foms, errs, strict=True) for d in (-e, e)]):
        ax.set_yscale("log")  # a figure of merit over decades: the later gains stay visible
    ax.set_title(f"optimization: {len(done)} finished" + (f", {len(failed)} failed (grey lines)" if failed else ""))
    ax.grid(alpha=0.3)
    ax.legend()
    written.append(save(fig, out_dir / "convergence.png"))

    names: list[str] = []
    for t in done:
        for name in (t.get("params") or {}):
            if name not in names:
                names.append(name)
    if names:
        cols = min(3, len(names))
        rows = math.ceil(len(names) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
        best_i = foms.index(best_so_far[-1])
        for ax, name in zip(axes.flat, names, strict=False):  # the grid may have spare axes
            values = [(t.get("params") or {}).get(name) for t in done]
            _param_panel(ax, name, values, foms, best_i)
            ax.set_ylabel(fom_name)
        for ax in list(axes.flat)[len(names):]:
            ax.axis("off")
        fig.suptitle(f"each parameter against {fom_name} (best trial in red)")
        written.append(save(fig, out_dir / "parameters.png"))
    return written


def _param_panel(ax: Any, name: str, values: Sequence[Any], foms: Sequence[float], best_i: int) -> None:
    # a tree space's inactive parameters are absent from a trial: no dot for that trial in this panel
    total = len(values)
    best_value = values[best_i]
    keep = [i for i, v in enumerate(values) if v is not None]
    values, foms = [values[i] for i in keep], [foms[i] for i in keep]
    if not values:
        ax.set_title(f"{name} (never active)", fontsize=10)
        return
    best_i = keep.index(best_i) if best_value is not None else -1
    numeric = [num(v) for v in values]
    if all(v is not None for v in numeric):
        xs: list[float] = [float(v) for v in numeric]  # type: ignore[arg-type]
        ax.scatter(xs, foms, s=18, alpha=0.7)
        if best_i >= 0:
            ax.scatter([xs[best_i]], [foms[best_i]], s=60, color="#d62728", zorder=3)
        if min(xs) > 0 and max(xs) / min(xs) > 100:
            ax.set_xscale("log")
    else:  # categorical: one column per category, in first-seen order
        cats: list[str] = []
        for v in values:
            if str(v) not in cats:
                cats.append(str(v))
        xs = [float(cats.index(str(v))) for v in values]
        ax.scatter(xs, foms, s=18, alpha=0.7)
        if best_i >= 0:
            ax.scatter([xs[best_i]], [foms[best_i]], s=60, color="#d62728", zorder=3)
        ax.set_xticks(range(len(cats)))
        ax.set_xticklabels(cats, rotation=30, ha="right", fontsize=8)
    ax.set_title(name if len(values) == total else f"{name} (active in {len(values)} of {total})", fontsize=10)
    ax.grid(alpha=0.3)
