"""``objective.png``: scikit-optimize's partial-dependence plot of a search, from the files it left.

Which parameters matter, and where their good values lie, is what a person asks after a search; skopt's
:func:`skopt.plots.plot_objective` answers it from a Gaussian-process surrogate fitted to the finished
trials. The search space comes from ``optimizer-state.json`` (``"space"``: per parameter ``type`` real,
integer or categorical with ``low``/``high``/``prior`` or ``values``), the points from ``trials.json``.
skopt minimizes, so a ``max`` figure of merit is plotted negated (the title says so). In a tree space the
surrogate is fitted on the embedding the Bayesian engine uses (an inactive parameter at its default), so a
branch parameter's panel shows its effect where it is active.

It lives with the search, not with the other plots (:mod:`nnlo.observe.plots`), because it reads the
search's own files into the search's own types (:class:`~nnlo.optimize.space.Space`) and fits the Bayesian
engine's surrogate; it draws with the plots' shared helpers, so the dependency points down. ``nnlo plot``
hands it to :func:`nnlo.observe.plots.plot_run` as an extra plot.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from nnlo.contract import OPTIMIZER_STATE_FILE, TRIALS_JSON
from nnlo.errors import ConfigError
from nnlo.observe.plots.common import load_json, num, plt, save
from nnlo.optimize.engines.bayesian import plot_partial_dependence
from nnlo.optimize.space import Space

MIN_TRIALS = 3  # fewer points than this fit no useful surrogate


def plot_surrogate(run_dir: Path, out_dir: Path) -> list[Path]:
    """The partial dependence of the fom on each parameter (and pairs); [] when the files do not allow it."""
    state = load_json(run_dir / OPTIMIZER_STATE_FILE)
    trials = load_json(run_dir / TRIALS_JSON)
    if not isinstance(state, dict) or not isinstance(state.get("space"), dict) or not isinstance(trials, list):
        return []
    try:
        space = Space.from_dict(state["space"], source=str(run_dir / OPTIMIZER_STATE_FILE))
    except ConfigError:
        return []
    direction = str((state.get("objective") or {}).get("direction") or "min")
    fom_name = str((state.get("objective") or {}).get("name") or "fom")
    points, values = [], []
    for t in trials:
        if not isinstance(t, dict) or t.get("status", "ok") != "ok" or num(t.get("fom")) is None:
            continue
        params = t.get("params") or {}
        if not isinstance(params, dict) or not space.contains(params):
            continue
        # a tree space's inactive parameters sit at their default, as in the Bayesian engine's embedding
        points.append(space.as_list(params))
        values.append(float(t["fom"]) if direction != "max" else -float(t["fom"]))
    if len(points) < MIN_TRIALS:
        return []
    # scikit-optimize is used only through the Bayesian engine's module, and only when there is a search to draw.

    axes = plot_partial_dependence(space, points, values, n_points=20, size=2.4)
    fig = _figure_of(axes)
    width, height = fig.get_size_inches()
    fig.set_size_inches(max(width, 6.0), max(height, 5.0))
    fig.suptitle(f"partial dependence of {fom_name}" + (" (negated: higher is better)" if direction == "max" else "")
                 + f"\nGaussian-process surrogate of {len(points)} trials (red: best)", fontsize=9)
    return [save(fig, out_dir / "objective.png")]


def _figure_of(axes: Any) -> Any:
    """plot_objective returns one Axes or an array of them; the figure they share."""
    first = axes.flat[0] if hasattr(axes, "flat") else axes
    return first.figure if first is not None else plt.gcf()
