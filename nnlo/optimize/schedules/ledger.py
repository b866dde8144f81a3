"""Between the trials table and the schedules: what a schedule sees of each trial, what the engine is told.

:func:`view` turns a :class:`~nnlo.optimize.results.Trial` record (a one-job search's, or one a shared search's
journal holds) into the schedules' :class:`~nnlo.optimize.schedules.base.TrialView`; :func:`ledger` builds the
schedules' :class:`~nnlo.optimize.schedules.base.Ledger` of many at once.

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

**What the engine must avoid** (:func:`pending`): every trial handed out whose value at the model's rung the
engine is not told - running, to re-run, and *paused below the model's rung* - counts as pending. Without the
paused ones, once the model moves to a higher rung the points of trials stopped below it are invisible to the
engine (neither observed nor pending) and it proposes them again: copies that spend the budget.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from nnlo.optimize.engines.base import Engine
from nnlo.optimize.results import FAILED, OK, Objective, Trial, mean_variance
from nnlo.optimize.schedules.base import Ledger, TrialView


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


def ledger(trials: Iterable[Trial], objective: Objective, running: Mapping[int, int | None]) -> Ledger:
    """Every trial (each id once, by id), with the rung its job trains toward where one is running."""
    seen: dict[int, Trial] = {}
    for t in trials:
        seen.setdefault(t.id, t)
    return Ledger(view(seen[i], objective, running.get(i)) for i in sorted(seen))


def model_rung(counts: Mapping[int, int], n_min: int) -> int:
    """The highest rung with at least ``n_min`` successful results, else the lowest rung with any (0)."""
    enough = [r for r, n in counts.items() if n >= n_min]
    return max(enough) if enough else min(counts, default=0)


Told = tuple[dict[str, Any], float | None]


class RungResults:
    """Every rung's results as an engine is told them, kept up to date one result at a time (:meth:`add`):
    for rung ``r``, every result at ``r`` and every failure below it, in the order they arrived. Feeding the
    engine (:meth:`feed`) then copies one list: the model's rung's."""

    def __init__(self, n_min: int) -> None:
        self.n_min = n_min
        self.ok: dict[int, int] = {}  # successful results per rung
        self.total = 0  # results added (every rung, failures included)
        self._told: dict[int, list[Told]] = {}
        self._noise: dict[int, list[float | None]] = {}
        self._failed: list[tuple[int, Told]] = []  # failures, for rungs whose first result comes later

    def add(self, params: dict[str, Any], rung: int, value: float | None, variance: float | None = None) -> None:
        self.total += 1
        if rung not in self._told:  # a new rung starts with the failures below it so far
            self._told[rung] = [obs for r, obs in self._failed if r < rung]
            self._noise[rung] = [None] * len(self._told[rung])
        if value is None:
            self._failed.append((rung, (params, None)))
            targets = [r for r in self._told if r >= rung]
        else:
            self.ok[rung] = self.ok.get(rung, 0) + 1
            targets = [rung]
        for r in targets:
            self._told[r].append((params, value))
            self._noise[r].append(variance if r == rung else None)

    def feed(self, engine: Engine) -> int:
        """Set the engine's observations to those of the model's rung (see the module's docstring); the rung."""
        rung = model_rung(self.ok, self.n_min)
        engine.observations = list(self._told.get(rung, ()))
        engine.variances = list(self._noise.get(rung, ()))
        return rung

    def told_keys(self) -> set[str]:
        """The points the engine is told at the model's rung (:meth:`feed`), as JSON keys."""
        return {_key(p) for p, _ in self._told.get(model_rung(self.ok, self.n_min), ())}

    @classmethod
    def of(cls, trials: Iterable[Trial], objective: Objective, n_min: int) -> RungResults:
        """Built from trial records, their rung results in the order they finished (ties by trial id)."""
        results = []
        for t in trials:
            for r in t.rungs:
                failed = r.get("status") != OK or r.get("fom") is None
                value = None if failed else objective.value(float(r["fom"]))
                noise = mean_variance(r.get("fom"), r.get("fom_std"), r.get("fold_foms") or ())
                results.append((float(r.get("finished") or 0.0), t.id, int(r["rung"]), t.params, value, noise))
        out = cls(n_min)
        for _, _, rung, params, value, variance in sorted(results, key=lambda x: (x[0], x[1], x[2])):
            out.add(params, rung, value, variance)
        return out


def min_results(engine: Engine) -> int:
    """How many results a rung needs before its model is used: the engine's initial points (at least 2)."""
    return max(2, int(getattr(engine, "n_initial_points", 2)))


def feed(engine: Engine, trials: Iterable[Trial], objective: Objective) -> int:
    """Set the engine's observations to those of the model's rung, from trial records (a restored or shared
    search; a running one keeps a :class:`RungResults` up to date instead); the rung."""
    return RungResults.of(trials, objective, min_results(engine)).feed(engine)


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def pending(trials: Iterable[Trial], results: RungResults) -> list[dict[str, Any]]:
    """The points of ``trials`` (every trial handed out: running, to re-run, finished or paused; each id once)
    the engine must take as pending, by id: all but those it observes - a result at the rung its model learns
    from (or a failure below it, :class:`RungResults`), or under ``--schedule full`` (no rungs) a final result."""
    told = results.told_keys()
    seen: dict[int, Trial] = {}
    for t in trials:
        seen.setdefault(t.id, t)
    out = []
    for tid in sorted(seen):
        t = seen[tid]
        observed = _key(t.params) in told if t.rungs else t.status in (OK, FAILED)
        if not observed:
            out.append(t.params)
    return out
