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
    trial-curves.png    every trial's validation loss per epoch in one figure (optimization runs; under a
                        --schedule the trials it stopped early grey and dashed)
    rungs.png           a --schedule search: each trial's fom at its rungs, those stopped early marked
    lineage.png         PBT: the exploits (donor -> child) and the best trial's hyperparameter schedule
    utilisation.png     per-rank fraction of time per category, and the spans over time  (trace)

Several histories without ``trials.json`` get ``<dir>-loss.png`` etc. each (at most 50). Plots that other
layers own are passed in by the caller and drawn with the same care: ``nnlo plot`` adds the search's
``objective.png`` (:mod:`nnlo.optimize.surrogate_plot`).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from nnlo.contract import BEST_FILE, HISTORY_FILE, TRIALS_JSON
from nnlo.observe import timeline
from nnlo.observe.plots.common import history_entries, load_json
from nnlo.observe.plots.curves import plot_history, plot_trial_curves
from nnlo.observe.plots.fidelity import plot_rungs, stopped_early
from nnlo.observe.plots.trials import plot_trials
from nnlo.observe.plots.utilisation import plot_utilisation, streams_from_trace_json

__all__ = ["ExtraPlot", "plot_history", "plot_rungs", "plot_run", "plot_trial_curves", "plot_trials",
           "plot_utilisation", "streams_from_trace_json"]

#: a plot another layer owns: (what it shows, for a problem line; draw(run_dir, out_dir) -> the PNGs written)
ExtraPlot = tuple[str, Callable[[Path, Path], list[Path]]]

_MAX_HISTORIES = 50

log = logging.getLogger("nnlo.observe")


def plot_run(run_dir: str | Path, out_dir: str | Path | None = None,
             problems: list[str] | None = None, extra: Sequence[ExtraPlot] = ()) -> list[Path]:
    """Every plot the files under ``run_dir`` allow, then the ``extra`` plots; returns the PNGs written.

    One plot failing (an odd file, a matplotlib corner case) does not cost the others: its one-line reason
    is appended to ``problems`` (and logged) and the next plot is drawn. An extra plot returns [] when the
    run left nothing for it to draw.
    """
    run_dir = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / "plots"
    written: list[Path] = []
    problems = problems if problems is not None else []

    def attempt(what: str, draw: Callable[[], list[Path]]) -> None:
        try:
            written.extend(draw())
        except Exception as e:  # noqa: BLE001 - reported, and the other plots still get drawn
            problems.append(f"could not draw {what}: {type(e).__name__}: {e}")
            log.warning("plots: %s", problems[-1])

    histories = _find(run_dir, HISTORY_FILE)
    trials_path = run_dir / TRIALS_JSON
    trials = load_json(trials_path) if trials_path.exists() else None
    if trials_path.exists() and len(histories) > 1:  # an optimization run: all trials' curves in one figure
        curves = [("/".join(p.parent.relative_to(run_dir).parts), history_entries(load_json(p))) for p in histories]
        stopped = stopped_early(trials) if isinstance(trials, list) else set()
        attempt("the trials' learning curves", lambda: plot_trial_curves(curves, out, stopped))
    else:
        for path in histories[:_MAX_HISTORIES]:
            rel = path.parent.relative_to(run_dir)
            prefix = "" if rel == Path(".") or len(histories) == 1 else "-".join(rel.parts)
            attempt(f"the learning curves of {path}", partial(_plot_one_history, path, out, prefix))
    if trials_path.exists():
        best = load_json(run_dir / BEST_FILE)
        best = best if isinstance(best, dict) else {}
        direction, fom_name = str(best.get("direction") or "min"), str(best.get("fom_name") or "fom")
        if isinstance(trials, list):
            listed = trials
            attempt("the optimization plots", lambda: plot_trials(listed, out, direction, fom_name))
            attempt("the rungs and lineage", lambda: plot_rungs(listed, out, direction, fom_name))
    if timeline.find_trace_dirs(run_dir):
        attempt("the utilisation", lambda: plot_utilisation(timeline.load_run(run_dir), out))
    elif (run_dir / timeline.MERGED_NAME).exists():
        attempt("the utilisation",
                lambda: plot_utilisation(streams_from_trace_json(run_dir / timeline.MERGED_NAME), out))
    for what, draw in extra:
        attempt(what, partial(draw, run_dir, out))
    return written


def _plot_one_history(path: Path, out: Path, prefix: str) -> list[Path]:
    return plot_history(history_entries(load_json(path)), out, prefix)


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
