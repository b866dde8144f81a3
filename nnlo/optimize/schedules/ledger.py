"""Between the trials table and the schedules: what a schedule sees of each trial, what the engine is told.

:func:`views` turns :class:`~nnlo.optimize.results.Trial` records (a one-job search's, or those a shared
search's journal holds) into the schedules' :class:`~nnlo.optimize.schedules.base.TrialView`\\ s.

**What the engine learns from the rungs** (:func:`feed`): one model per rung, and the engine proposes with
the model of the *highest rung that has enough results* (at least the engine's number of initial points;
BOHB's rule, Falkner et al. 2018). Early on that is rung 0, fed by many cheap results; as promotions fill the
higher rungs the proposals follow the results that are closest to the full training. Why not the fidelity as
one more input dimension of a single surrogate: the figure of merit after 1 epoch and after 27 lives on
different scales with a different shape (crossing learning curves), which a stationary kernel over
(parameters, epochs) models poorly, and the proposal would still have to be made at the top fidelity, which
skopt's optimiser cannot pin; and why not only the latest result of each trial: it would mix values of
different epochs in one model, rewarding trials for having trained longer. A trial that failed at a rung at
or below the model's rung is told as a failure (the engine's usual "worst value seen"); trials stopped below
the model's rung are left out (their value there is unknown).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nnlo.optimize.engines.base import Engine
from nnlo.optimize.results import OK, Objective, Trial
from nnlo.optimize.schedules.base import TrialView


def values(trial: Trial, objective: Objective) -> dict[int, float | None]:
    """The minimised value of ``trial`` at each rung it reported (None: failed there)."""
    out: dict[int, float | None] = {}
    for r in trial.rungs:
        fom = r.get("fom")
        out[int(r["rung"])] = objective.value(float(fom)) if r.get("status") == OK and fom is not None else None
    return out


def view(trial: Trial, objective: Objective, running: int | None = None) -> TrialView:
    return TrialView(id=trial.id, results=values(trial, objective), running=running,
                     bracket=int(trial.bracket or 0), params=dict(trial.params), parent=trial.parent,
                     replaces=trial.replaces)


def views(trials: Iterable[Trial], objective: Objective, running: Mapping[int, int | None]) -> list[TrialView]:
    """Every trial (each id once, by id), with the rung its job trains toward where one is running."""
    seen: dict[int, Trial] = {}
    for t in trials:
        seen.setdefault(t.id, t)
    return [view(seen[i], objective, running.get(i)) for i in sorted(seen)]


def rung_counts(trials: Iterable[Trial]) -> dict[int, int]:
    """How many successful results each rung has."""
    counts: dict[int, int] = {}
    for t in trials:
        for r in t.rungs:
            if r.get("status") == OK and r.get("fom") is not None:
                counts[int(r["rung"])] = counts.get(int(r["rung"]), 0) + 1
    return counts


def model_rung(counts: Mapping[int, int], n_min: int) -> int:
    """The highest rung with at least ``n_min`` successful results, else the lowest rung with any (0)."""
    enough = [r for r, n in counts.items() if n >= n_min]
    return max(enough) if enough else min(counts, default=0)


def observations(trials: Sequence[Trial], objective: Objective, rung: int
                 ) -> list[tuple[dict[str, Any], float | None, float | None]]:
    """(point, value, variance of the fold mean) for every trial that reported at ``rung``, in the order the
    results arrived, and every trial that failed at a rung below it."""
    out: list[tuple[float, int, dict[str, Any], float | None, float | None]] = []
    for t in trials:
        for r in t.rungs:
            at = int(r["rung"])
            failed = r.get("status") != OK or r.get("fom") is None
            if at == rung or (failed and at < rung):
                value = None if failed else objective.value(float(r["fom"]))
                out.append((float(r.get("finished") or 0.0), t.id, t.params, value, _variance(r)))
    out.sort(key=lambda o: (o[0], o[1]))
    return [(p, v, var) for _, _, p, v, var in out]


def _variance(rung: Mapping[str, Any]) -> float | None:
    folds = [v for v in rung.get("fold_foms") or () if v is not None]
    std = rung.get("fom_std")
    if rung.get("fom") is None or std is None or len(folds) < 2:
        return None
    return float(std) ** 2 / len(folds)


def min_results(engine: Engine) -> int:
    """How many results a rung needs before its model is used: the engine's initial points (at least 2)."""
    return max(2, int(getattr(engine, "n_initial_points", 2)))


def feed(engine: Engine, trials: Sequence[Trial], objective: Objective) -> int:
    """Set the engine's observations to those of the model's rung (see the module's docstring); the rung.
    Linear in the results, cheap next to a proposal (the points are the trials' own, already valid)."""
    rung = model_rung(rung_counts(trials), min_results(engine))
    obs = observations(trials, objective, rung)
    engine.observations = [(p, v) for p, v, _ in obs]
    engine.variances = [var for _, _, var in obs]
    return rung
