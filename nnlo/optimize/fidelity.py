"""What a staged search's own trials say about its fidelities: the best at each, and how early ranks predict late.

Pure functions of a search's successful rung results (``(trial id, rung record)`` pairs of the trials'
``rungs``: ``rung``, ``epochs``, ``fom``), written into ``best.json`` by
:func:`nnlo.optimize.results.write_results` and shown by ``nnlo status``:

* :func:`best_any_fidelity` - the best figure of merit any trial reached at any rung, with its epochs. The
  search's best (``best_trial``) is the best of the trials trained the most epochs; a figure reached after
  fewer epochs is not comparable with it, but hiding it hides that the top rung may be worse than an early
  one (overfitting, or a model that needs its early stop);
* :func:`rung_correlation` - for each lower rung, the Spearman rank correlation between the trials' values
  there and at the top rung: the highest rung at least :data:`MIN_PAIRS` trials reached. ASHA and Hyperband
  stop trials on their early rank; where early and late ranks cross (a low correlation) they stop the
  eventual best. The trials that reached the top rung were the early leaders, so the measured correlation is
  that of a narrowed range (lower than over all configurations): a low one is a warning, not a verdict.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol


class Direction(Protocol):
    """What is better (:class:`nnlo.optimize.results.Objective`)."""

    def value(self, fom: float) -> float: ...

    def better(self, a: float, b: float) -> bool: ...


#: a successful rung result: (trial id, its rung record)
Result = tuple[int, dict[str, Any]]

#: the fewest trials with a value at both rungs for a correlation to be reported
MIN_PAIRS = 4
#: below this, early ranks predict late ones poorly: ``nnlo status`` gives its advice
LOW_CORRELATION = 0.6


def _ranks(values: Sequence[float]) -> list[float]:
    """Ranks from 1, ties given their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation of paired values (None: fewer than 2 pairs, or one side constant)."""
    if len(xs) != len(ys):
        raise ValueError(f"spearman needs pairs: {len(xs)} values against {len(ys)}")
    if len(xs) < 2:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / (sxx * syy) ** 0.5


def best_any_fidelity(results: Iterable[Result], objective: Direction) -> dict[str, Any] | None:
    """The best figure of merit of any rung of any trial: ``{"trial", "fom", "epochs", "rung"}`` (None: no
    staged result)."""
    best: Result | None = None
    for tid, r in results:
        if best is None or objective.better(float(r["fom"]), float(best[1]["fom"])):
            best = (tid, r)
    if best is None:
        return None
    tid, r = best
    return {"trial": tid, "fom": float(r["fom"]), "epochs": r.get("epochs"), "rung": int(r["rung"])}


def rung_correlation(results: Iterable[Result], objective: Direction) -> dict[str, Any] | None:
    """How the trials' ranks at each lower rung predict their ranks at the top rung (see the module's text):
    ``{"top_rung", "top_epochs", "rungs": [{"rung", "epochs", "n", "rho"}], "low"}`` (``low``: some rho is below
    :data:`LOW_CORRELATION`), or None when no rung above another has :data:`MIN_PAIRS` trials to compare."""
    by_rung: dict[int, dict[int, float]] = {}
    epochs: dict[int, int] = {}
    for tid, r in results:
        rung = int(r["rung"])
        by_rung.setdefault(rung, {})[tid] = objective.value(float(r["fom"]))
        if r.get("epochs") is not None:
            epochs.setdefault(rung, int(r["epochs"]))
    rows: list[dict[str, Any]] = []
    for top in sorted(by_rung, reverse=True):
        for rung in sorted(r for r in by_rung if r < top):
            both = sorted(set(by_rung[rung]) & set(by_rung[top]))
            if len(both) < MIN_PAIRS:
                continue
            rho = spearman([by_rung[rung][i] for i in both], [by_rung[top][i] for i in both])
            if rho is not None:
                rows.append({"rung": rung, "epochs": epochs.get(rung), "n": len(both), "rho": round(rho, 3)})
        if rows:
            return {"top_rung": top, "top_epochs": epochs.get(top), "rungs": rows,
                    "low": any(row["rho"] < LOW_CORRELATION for row in rows)}
    return None
