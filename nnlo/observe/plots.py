"""PNG plots of a run: learning curves, optimization progress, per-rank utilisation.

Everything is read from files a run leaves behind (``history.json``, ``trials.json``/``best.json``, the
trace), so plots can be made on a login node, after the fact, from a killed run. Missing keys are tolerated:
a curve that has no data is left out, a plot with nothing to draw is not written. matplotlib runs with the
Agg backend: no display needed.

Files written into the output folder (default ``<run>/plots``)::

    loss.png            train and validation loss per epoch            (history.json)
    metrics.png         every other numeric per-epoch series, one panel each
    convergence.png     fom of each trial and the best so far          (trials.json)
    parameters.png      each hyperparameter against the fom, one panel each
    trial-curves.png    every trial's validation loss per epoch in one figure (optimization runs)
    utilisation.png     per-rank fraction of time per category, and the spans over time  (trace)

Several histories without ``trials.json`` get ``<dir>-loss.png`` etc. each (at most 50).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from nnlo.observe.trace import CATEGORIES  # noqa: E402

COLORS = {"compute": "#2ca02c", "comm": "#1f77b4", "wait": "#d62728", "io": "#9467bd", "validate": "#ff7f0e",
          "other": "#c7c7c7"}
_LOSS_KEYS = ("train_loss", "loss", "val_loss")
_NOT_METRICS = {"epoch", "time", "timestamp", "wall_time", "t", "step", "samples", "updates"}
_MAX_HISTORIES = 50
_MAX_PANELS = 12
_MAX_CURVES = 500
_LABELS = {"train_loss": "train loss", "loss": "train loss", "val_loss": "validation loss"}


# -- reading ---------------------------------------------------------------------------------------
def load_json(path: Path) -> Any:
    """Parsed JSON, or None for a missing/half-written file (plots are best effort per file)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def history_entries(data: Any) -> list[dict[str, Any]]:
    """The per-epoch list from ``history.json``: a list, or a dict holding one under a usual key."""
    if isinstance(data, dict):
        for key in ("history", "epochs", "entries"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if not isinstance(data, list):
        return []
    return [d for d in data if isinstance(d, dict)]


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _series(entries: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for i, entry in enumerate(entries):
        y = _num(entry.get(key))
        if y is None:
            continue
        x = _num(entry.get("epoch"))
        xs.append(x if x is not None else float(i + 1))
        ys.append(y)
    return xs, ys


# -- learning curves -------------------------------------------------------------------------------
def plot_history(entries: list[dict[str, Any]], out_dir: Path, prefix: str = "") -> list[Path]:
    """``loss.png`` (train/val loss per epoch) and ``metrics.png`` (other numeric series).

    A metric and its ``val_`` twin (``accuracy``/``val_accuracy``) share one panel: train against validation.
    """
    written: list[Path] = []
    curves = {k: _series(entries, k) for k in _LOSS_KEYS}
    if curves["train_loss"][0]:
        curves.pop("loss")
    curves = {k: v for k, v in curves.items() if v[0]}
    if curves:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for key, (xs, ys) in curves.items():
            ax.plot(xs, ys, marker="o", ms=3, label=_LABELS.get(key, key.replace("_", " ")))
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("loss")
        if all(y > 0 for _, ys in curves.values() for y in ys) and _spread(curves) > 30:
            ax.set_yscale("log")
        ax.set_title(f"{prefix or 'training'}: loss per epoch")
        ax.grid(alpha=0.3)
        ax.legend()
        written.append(_save(fig, out_dir / f"{prefix}{'-' if prefix else ''}loss.png"))
    keys: list[str] = []
    for entry in entries:
        for key, value in entry.items():
            if key not in keys and key not in _LOSS_KEYS and key not in _NOT_METRICS and _num(value) is not None:
                keys.append(key)
    panels: list[list[str]] = []
    for key in keys:
        base = key.removeprefix("val_")
        twin = next((p for p in panels if p[0].removeprefix("val_") == base), None)
        if twin is not None and key != twin[0]:
            twin.append(key)
        else:
            panels.append([key])
    panels = panels[:_MAX_PANELS]
    if panels:
        cols = min(3, len(panels))
        rows = math.ceil(len(panels) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
        for ax, panel in zip(axes.flat, panels):
            for key in sorted(panel, key=lambda k: k.startswith("val_")):
                xs, ys = _series(entries, key)
                label = "validation" if key.startswith("val_") else "train"
                ax.plot(xs, ys, marker="o", ms=3, label=label if len(panel) > 1 else None)
            ax.set_title(panel[0].removeprefix("val_").replace("_", " "), fontsize=10)
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
            if len(panel) > 1:
                ax.legend(fontsize=8)
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")
        fig.suptitle(f"{prefix or 'training'}: metrics per epoch")
        written.append(_save(fig, out_dir / f"{prefix}{'-' if prefix else ''}metrics.png"))
    return written


def plot_trial_curves(curves: list[tuple[str, list[dict[str, Any]]]], out_dir: Path) -> list[Path]:
    """``trial-curves.png``: the validation loss (else the loss) per epoch of every trial and fold.

    One thin line each, coloured from the best final value (dark) to the worst (light), the best labelled:
    shows at a glance whether bad trials could have been stopped early.
    """
    key = "val_loss" if any(_series(e, "val_loss")[0] for _, e in curves) else "loss"
    series = [(label, *_series(entries, key)) for label, entries in curves]
    series = [(label, xs, ys) for label, xs, ys in series if xs][:_MAX_CURVES]
    if not series:
        return []
    finals = [ys[-1] for _, _, ys in series]
    order = sorted(range(len(series)), key=lambda i: finals[i])
    rank_of = {i: r for r, i in enumerate(order)}
    cmap = plt.get_cmap("viridis")
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, (label, xs, ys) in enumerate(series):
        shade = rank_of[i] / max(1, len(series) - 1)
        best = rank_of[i] == 0
        ax.plot(xs, ys, lw=2.2 if best else 1.0, alpha=1.0 if best else 0.6, color=cmap(0.85 * shade),
                label=f"best: {label}" if best else None, zorder=3 if best else 2)
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(key.replace("_", " "))
    if all(y > 0 for _, _, ys in series for y in ys) and max(finals) / max(min(finals), 1e-300) > 30:
        ax.set_yscale("log")
    ax.set_title(f"{key.replace('_', ' ')} per epoch of {len(series)} trial runs (dark = better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return [_save(fig, out_dir / "trial-curves.png")]


def _spread(curves: dict[str, tuple[list[float], list[float]]]) -> float:
    ys = [y for _, v in curves.values() for y in v]
    return max(ys) / min(ys) if ys and min(ys) > 0 else 1.0


# -- optimization ----------------------------------------------------------------------------------
def plot_trials(trials: list[dict[str, Any]], out_dir: Path, direction: str = "min", fom_name: str = "fom") -> list[Path]:
    """``convergence.png`` (fom per trial, best so far) and ``parameters.png`` (each parameter vs fom)."""
    done = [t for t in trials if isinstance(t, dict) and _num(t.get("fom")) is not None
            and t.get("status", "ok") in ("ok", "done", "finished")]
    failed = [t for t in trials if isinstance(t, dict) and t not in done]
    if not done:
        return []
    done.sort(key=lambda t: _num(t.get("id")) if _num(t.get("id")) is not None else 0)
    better = min if direction != "max" else max
    ids = [(_num(t.get("id")) if _num(t.get("id")) is not None else i) for i, t in enumerate(done)]
    foms = [float(t["fom"]) for t in done]
    best, best_so_far = None, []
    for f in foms:
        best = f if best is None else better(best, f)
        best_so_far.append(best)
    written = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    errs = [_num(t.get("fom_std")) or 0.0 for t in done]
    ax.errorbar(ids, foms, yerr=errs if any(errs) else None, fmt="o", ms=4, alpha=0.6, label=f"trial {fom_name}")
    ax.step(ids, best_so_far, where="post", color="#d62728", lw=2, label=f"best so far ({direction})")
    for t in failed:
        if _num(t.get("id")) is not None:
            ax.axvline(float(t["id"]), color="#7f7f7f", alpha=0.3, lw=1)
    ax.set_xlabel("trial")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(fom_name)
    ax.set_title(f"optimization: {len(done)} finished" + (f", {len(failed)} failed (grey lines)" if failed else ""))
    ax.grid(alpha=0.3)
    ax.legend()
    written.append(_save(fig, out_dir / "convergence.png"))

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
        for ax, name in zip(axes.flat, names):
            values = [(t.get("params") or {}).get(name) for t in done]
            _param_panel(ax, name, values, foms, best_i)
            ax.set_ylabel(fom_name)
        for ax in list(axes.flat)[len(names):]:
            ax.axis("off")
        fig.suptitle(f"each parameter against {fom_name} (best trial in red)")
        written.append(_save(fig, out_dir / "parameters.png"))
    return written


def _param_panel(ax: Any, name: str, values: Sequence[Any], foms: Sequence[float], best_i: int) -> None:
    numeric = [_num(v) for v in values]
    if all(v is not None for v in numeric):
        xs: list[float] = [float(v) for v in numeric]  # type: ignore[arg-type]
        ax.scatter(xs, foms, s=18, alpha=0.7)
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
        ax.scatter([xs[best_i]], [foms[best_i]], s=60, color="#d62728", zorder=3)
        ax.set_xticks(range(len(cats)))
        ax.set_xticklabels(cats, rotation=30, ha="right", fontsize=8)
    ax.set_title(name, fontsize=10)
    ax.grid(alpha=0.3)


# -- utilisation -----------------------------------------------------------------------------------
def plot_utilisation(streams: list[Any], out_dir: Path, max_gantt_ranks: int = 64,
                     max_gantt_spans: int = 20000) -> list[Path]:
    """``utilisation.png``: per-rank stacked fractions (exclusive time per category) and a Gantt of spans.

    ``streams`` are :class:`nnlo.observe.timeline.RankStream` (see :func:`nnlo.observe.timeline.load_run`).
    A rank with more than ``max_gantt_spans`` spans has its shortest ones left out of the Gantt chart only
    (they would be narrower than a pixel); the fractions always count every span.
    """
    from nnlo.observe import summary

    streams = [s for s in streams if len(s.spans)]
    if not streams:
        return []
    ranks = summary.from_streams(streams)
    t0 = min(min(s.spans.ts) for s in streams)
    t1 = max(max(t + d for t, d in zip(s.spans.ts, s.spans.dur)) for s in streams)
    height = max(4.0, 0.35 * len(streams) + 2)
    fig, (bars, gantt) = plt.subplots(1, 2, figsize=(14, min(height, 30)), gridspec_kw={"width_ratios": [1, 2.2]})
    labels = [f"{r['rank']} {r['role']}" for r in ranks]
    y = range(len(ranks))
    left = [0.0] * len(ranks)
    for cat in summary.COLUMNS:
        widths = [r["fractions"].get(cat, 0.0) for r in ranks]
        bars.barh(list(y), widths, left=left, color=COLORS.get(cat, "#8c564b"), label=cat)
        left = [a + b for a, b in zip(left, widths)]
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
        for (depth, cat), bars_ in sorted(layers.items()):  # parents first, nested spans drawn on top
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
    return [_save(fig, out_dir / "utilisation.png")]


def _nesting(spans: list[tuple[float, float, str]]) -> list[tuple[int, float, float, str]]:
    """(depth, start, dur, cat) of one thread's spans; depth 0 = outermost."""
    out, ends = [], []  # ends: end times of the open ancestors
    for start, dur, cat in sorted(spans, key=lambda x: (x[0], -x[1])):
        while ends and ends[-1] <= start:
            ends.pop()
        out.append((len(ends), start, dur, cat))
        ends.append(start + dur)
    return out


def streams_from_trace_json(path: Path) -> list[Any]:
    """RankStreams rebuilt from a merged ``timeline.json`` (when the per-rank lines are gone)."""
    from nnlo.observe.timeline import RankStream

    data = load_json(path)
    events = data.get("traceEvents", []) if isinstance(data, dict) else data if isinstance(data, list) else []
    by_rank: dict[int, RankStream] = {}
    for e in events:
        if isinstance(e, dict) and isinstance(e.get("pid"), int):
            by_rank.setdefault(e["pid"], RankStream(rank=e["pid"], path=path, kept=False)).add(e)
    return [by_rank[r] for r in sorted(by_rank)]


# -- a whole run -----------------------------------------------------------------------------------
def plot_run(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Every plot the files under ``run_dir`` allow; returns the PNGs written (maybe none)."""
    from nnlo.observe import timeline

    run_dir = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / "plots"
    written: list[Path] = []
    histories = _find(run_dir, "history.json")
    trials_path = run_dir / "trials.json"
    if trials_path.exists() and len(histories) > 1:  # an optimization run: all trials' curves in one figure
        curves = [("/".join(p.parent.relative_to(run_dir).parts), history_entries(load_json(p))) for p in histories]
        written += plot_trial_curves(curves, out)
    else:
        for path in histories[:_MAX_HISTORIES]:
            rel = path.parent.relative_to(run_dir)
            prefix = "" if rel == Path(".") or len(histories) == 1 else "-".join(rel.parts)
            written += plot_history(history_entries(load_json(path)), out, prefix)
    if trials_path.exists():
        best = load_json(run_dir / "best.json")
        best = best if isinstance(best, dict) else {}
        trials = load_json(trials_path)
        if isinstance(trials, list):
            written += plot_trials(trials, out, str(best.get("direction") or "min"), str(best.get("fom_name") or "fom"))
    if timeline.find_trace_dirs(run_dir):
        written += plot_utilisation(timeline.load_run(run_dir), out)
    elif (run_dir / timeline.MERGED_NAME).exists():
        written += plot_utilisation(streams_from_trace_json(run_dir / timeline.MERGED_NAME), out)
    return written


def _find(root: Path, name: str, depth: int = 3) -> list[Path]:
    found = [root / name] if (root / name).is_file() else []
    level = [root]
    for _ in range(depth):
        level = sorted(p for d in level for p in _subdirs(d))
        found += [d / name for d in level if (d / name).is_file()]
    return found


def _subdirs(d: Path) -> list[Path]:
    try:
        return [p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != "plots"]
    except OSError:
        return []


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
