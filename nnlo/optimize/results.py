"""Trials and the results table: ``trials.json``, ``trials.csv`` and ``best.json`` in the run directory.

``trials.json`` is a list of finished trials (``id, params, status, fom, fom_std, fold_foms, metrics,
duration_s, block, error, epochs``; under a schedule also ``rung``, ``rungs`` - every rung's result -,
``bracket``, ``parent``, ``replaces``, ``start_epochs``) that ``nnlo status`` and ``nnlo plot`` read;
``best.json`` holds the best finished trial and counts (and, under a schedule, the trials per rung). Files are
replaced atomically, so a reader never sees half a table.

Under a schedule (:mod:`nnlo.optimize.schedules`) a trial reports once per rung: :meth:`Trial.finish_stage`
adds the rung's result to ``rungs`` and makes it the trial's current one (``fom``, ``epochs``, ``rung``).
The best trial is the best among those that trained the most epochs any trial trained (a trial stopped at
rung 0 is not compared with one trained to ``--epochs``); ``best.json`` says at which epochs and rung
(``best_epochs``, ``best_rung``), gives the best at any fidelity where it is another figure (``best_any``)
and how the trials' early ranks predicted their late ones (``rung_correlation``, :mod:`nnlo.optimize.fidelity`).
"""
from __future__ import annotations

import csv
import io
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnlo.atomic import write_text
from nnlo.contract import BEST_FILE, TRIALS_CSV, TRIALS_JSON
from nnlo.optimize.fidelity import best_any_fidelity, rung_correlation
from nnlo.optimize.state import atomic_write_json

OK = "ok"
FAILED = "failed"


@dataclass(frozen=True)
class Objective:
    """The figure of merit: a metric name and its direction (``--fom NAME[:min|max]``)."""

    name: str = "val_loss"
    direction: str = "min"

    @classmethod
    def parse(cls, text: str) -> Objective:
        from nnlo.errors import ConfigError

        name, _, direction = text.partition(":")
        name = name.strip()
        direction = (direction or _default_direction(name)).strip().lower()
        if not name or direction not in ("min", "max"):
            raise ConfigError(f"--fom {text!r}: use NAME or NAME:min / NAME:max, e.g. val_loss or val_accuracy:max")
        return cls(name, direction)

    def value(self, fom: float) -> float:
        """What engines minimise."""
        return fom if self.direction == "min" else -fom

    def better(self, a: float, b: float) -> bool:
        return a < b if self.direction == "min" else a > b

    def reached(self, fom: float, target: float | None) -> bool:
        return target is not None and (fom <= target if self.direction == "min" else fom >= target)

    def __str__(self) -> str:
        return f"{self.name}:{self.direction}"


def _default_direction(name: str) -> str:
    return "max" if any(k in name.lower() for k in ("acc", "auc", "precision", "recall", "f1", "r2")) else "min"


@dataclass
class Trial:
    """One parameter set and, once finished, its result over all folds of a block."""

    id: int
    params: dict[str, Any]
    status: str = "pending"
    fom: float | None = None
    fom_std: float | None = None
    fold_foms: list[float | None] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)  # per fold, the final metrics reported
    duration_s: float | None = None
    block: int | None = None
    error: str | None = None
    error_code: int | None = None  # 2: bad input (the model/config is wrong), 1: a failure
    started: float | None = None
    finished: float | None = None
    epochs: int | None = None  # epochs trained (the most any fold trained; None: not reported)
    # under a schedule (None / empty under --schedule full):
    rung: int | None = None  # the highest rung with a result
    rungs: list[dict[str, Any]] = field(default_factory=list)  # each rung's result, in order
    bracket: int | None = None  # Hyperband's bracket
    parent: int | None = None  # PBT: the trial whose checkpoint this one started from (exploit)
    replaces: int | None = None  # PBT: the member whose place in the population it took
    start_epochs: int | None = None  # PBT: the epochs inherited with the parent's checkpoint
    target: int | None = None  # the rung a job of this trial is training toward (None when idle)

    def to_dict(self) -> dict[str, Any]:
        """A copy of every field, nested lists and dicts copied too (``asdict``, without its generic slowness)."""
        return {name: _copy(getattr(self, name)) for name in self.__dataclass_fields__}

    def fields(self) -> dict[str, Any]:
        """Every field, not copied: to be written out at once (the tables are rewritten after every result)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trial:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})

    def finish(self, fold_results: list[dict[str, Any]], objective: Objective, block: int,
               now: float | None = None) -> None:
        """Fill in the result from each fold's ``{"metrics": {...}} or {"error": "..."}``.

        The trial fails if any fold failed or lacks a finite figure of merit; otherwise ``fom`` is the mean
        over folds and ``fom_std`` their population standard deviation.
        """
        self.block = block
        self.finished = now if now is not None else time.time()
        if self.started is not None:
            self.duration_s = round(self.finished - self.started, 6)
        self.metrics = [_plain_metrics(r.get("metrics") or {}) for r in fold_results]
        trained = [int(r["epochs"]) for r in fold_results if isinstance(r.get("epochs"), int)]
        if trained:
            self.epochs = max(trained)
        foms: list[float | None] = []
        errors: list[str] = []
        codes: list[int] = []
        where = (lambda f: f"fold {f}: ") if len(fold_results) > 1 else (lambda f: "")
        for f, r in enumerate(fold_results):
            if r.get("error"):
                foms.append(None)
                errors.append(where(f) + str(r["error"]))
                codes.append(int(r.get("code") or 1))
                continue
            m = r.get("metrics") or {}
            v = m.get(objective.name)
            if v is None:
                foms.append(None)
                have = ", ".join(sorted(m)) or "nothing"
                errors.append(where(f) + f"no metric {objective.name!r} (reported: {have}); choose --fom from those")
                codes.append(2)
            elif not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                foms.append(None)
                errors.append(where(f) + f"{objective.name} is {v} (diverged)")
                codes.append(1)
            else:
                foms.append(float(v))
        self.fold_foms = foms
        if errors:
            self.status, self.error, self.error_code = FAILED, "; ".join(errors), max(codes)
            self.fom = self.fom_std = None
            return
        vals = [v for v in foms if v is not None]
        self.status, self.error = OK, None
        self.fom = statistics.fmean(vals)
        self.fom_std = statistics.pstdev(vals) if len(vals) > 1 else 0.0

    def finish_stage(self, fold_results: list[dict[str, Any]], objective: Objective, block: int, rung: int,
                     epochs: int, now: float | None = None) -> None:
        """A rung's result (a schedule's job trained the trial to ``epochs``, rung ``rung``): :meth:`finish`
        for the rung, recorded in ``rungs``; ``duration_s`` adds up over the trial's jobs."""
        before = sum(float(r.get("duration_s") or 0.0) for r in self.rungs)
        self.finish(fold_results, objective, block, now)
        if not any(isinstance(r.get("epochs"), int) for r in fold_results):
            self.epochs = epochs  # a runner that does not report epochs trained the job's budget
        job_s = self.duration_s
        self.duration_s = None if job_s is None else round(before + job_s, 6)
        self.rung, self.target = rung, None
        self.rungs.append({
            "rung": rung, "epochs": self.epochs, "status": self.status, "fom": self.fom, "fom_std": self.fom_std,
            "fold_foms": list(self.fold_foms), "duration_s": job_s, "block": block, "finished": self.finished,
            "checkpoints": [r.get("checkpoint") for r in fold_results],
        })


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _plain_metrics(m: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in m.items():
        if hasattr(v, "item"):
            v = v.item()
        if isinstance(v, float) and not math.isfinite(v):
            v = str(v)  # JSON has no NaN; keep it readable
        if isinstance(v, (int, float, str, bool)) or v is None:
            out[str(k)] = v
    return out


def best_trial(trials: list[Trial], objective: Objective) -> Trial | None:
    """The best finished trial; under a schedule, among those that trained the most epochs any trial did."""
    ok = [t for t in trials if t.status == OK and t.fom is not None]
    staged = [t for t in ok if t.rung is not None]
    if staged:
        most = max(t.epochs or 0 for t in staged)
        ok = [t for t in staged if (t.epochs or 0) == most]
    best: Trial | None = None
    for t in ok:
        if best is None or objective.better(t.fom, best.fom):  # type: ignore[arg-type]
            best = t
    return best


def per_rung(trials: list[Trial]) -> dict[str, int]:
    """Under a schedule: how many trials stand at each rung (their latest result), keyed by epochs."""
    counts: dict[int, int] = {}
    for t in trials:
        if t.rung is not None and t.status == OK:
            counts[int(t.epochs or 0)] = counts.get(int(t.epochs or 0), 0) + 1
    return {str(e): counts[e] for e in sorted(counts)}


def write_results(out_dir: Path, trials: list[Trial], objective: Objective, param_names: list[str],
                  n_fold: int, total: int | None = None) -> None:
    """(Re)write trials.json, trials.csv and best.json atomically."""
    done = sorted(trials, key=lambda t: t.id)
    atomic_write_json(out_dir / TRIALS_JSON, [t.fields() for t in done], compact=True)
    write_text(out_dir / TRIALS_CSV, _csv(done, param_names, n_fold))
    best = best_trial(done, objective)
    atomic_write_json(out_dir / BEST_FILE, {
        "fom_name": objective.name,
        "direction": objective.direction,
        "trials_done": len(done),  # finished, failed ones included (they count toward the budget)
        "trials_ok": sum(1 for t in done if t.status == OK),
        "trials_failed": sum(1 for t in done if t.status == FAILED),
        "trials_total": total,
        "best_trial": best.id if best else None,
        "best_fom": best.fom if best else None,
        "best_fom_std": best.fom_std if best else None,
        "best_params": best.params if best else None,
        "best_epochs": best.epochs if best else None,
        **(staged_summary(done, objective, best) if any(t.rung is not None for t in done) else {}),
        "updated": time.time(),
    })


def staged_summary(trials: list[Trial], objective: Objective, best: Trial | None) -> dict[str, Any]:
    """best.json's part under a schedule: trials per rung, the rung of the best, the best at any fidelity
    (``best_any``, where it is another figure than the best's), and the rung correlation
    (:mod:`nnlo.optimize.fidelity`)."""
    results = [(t.id, r) for t in trials for r in t.rungs if r.get("status") == OK and r.get("fom") is not None]
    anywhere = best_any_fidelity(results, objective)
    if anywhere is not None and best is not None and (anywhere["trial"], anywhere["epochs"]) == (best.id, best.epochs):
        anywhere = None  # the best is the best at any fidelity
    return {"rungs": per_rung(trials), "best_rung": best.rung if best else None, "best_any": anywhere,
            "rung_correlation": rung_correlation(results, objective)}


def _csv(trials: list[Trial], param_names: list[str], n_fold: int) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    folds = [f"fom_fold{f}" for f in range(n_fold)]
    # epochs trained and the rung reached (a parameter of the same name keeps its column: these get a suffix)
    trained = [c if c not in param_names else f"{c}_trained" for c in ("epochs", "rung")]
    lineage = ["parent"] if any(t.parent is not None for t in trials) else []
    w.writerow(["trial", "status", *param_names, "fom", "fom_std", *folds, *trained, *lineage, "duration_s",
                "block", "error"])
    for t in trials:
        ff = list(t.fold_foms) + [None] * (n_fold - len(t.fold_foms))
        w.writerow([t.id, t.status, *(t.params.get(n) for n in param_names), _num(t.fom), _num(t.fom_std),
                    *(_num(v) for v in ff[:n_fold]), _int(t.epochs), _int(t.rung),
                    *([_int(t.parent)] if lineage else []), _num(t.duration_s), t.block, t.error or ""])
    return buf.getvalue()


def _num(v: float | None) -> str:
    return "" if v is None else repr(v)


def _int(v: int | None) -> str:
    return "" if v is None else str(v)


def fold_variance(trial: Trial) -> float | None:
    """How noisy a k-fold trial's figure of merit (the fold mean) is: ``fom_std**2 / folds``; None with one
    fold or for a failed trial. The Bayesian engine uses it as the observation's noise."""
    return mean_variance(trial.fom, trial.fom_std, trial.fold_foms)


def mean_variance(fom: float | None, fom_std: float | None, fold_foms: Sequence[float | None]) -> float | None:
    """The variance of a fold mean ``fom`` (of a trial, or of one rung's result): ``fom_std**2 / folds``."""
    folds = [v for v in fold_foms if v is not None]
    if fom is None or fom_std is None or len(folds) < 2:
        return None
    return float(fom_std) ** 2 / len(folds)
