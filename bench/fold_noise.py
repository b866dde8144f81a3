#!/usr/bin/env python
"""Benchmark: k-fold spread as observation noise - trials to target, noise-aware vs mean-only surrogate.

Each trial is evaluated on ``--folds`` folds: fold f returns ``branin(x) + e_f`` with e_f ~ N(0, sd(x)^2), a
noise that is heteroscedastic (``sd(x) = --noise-low`` on most of the square, rising to ``--noise-high`` in
its upper part, where Branin's values are moderate, so lucky draws there look like minima). The search sees
what ``nnlo optimize --n-fold F`` records: the fold mean (``fom``) and the folds' population standard
deviation (``fom_std``). Two Bayesian engines (GP, same seed, same random initial points) are driven one
trial at a time:

* **noise-aware** - told ``variance = fom_std**2 / F`` with each mean, as :meth:`Search.record` does; the GP
  uses it as per-observation noise (``alpha``);
* **mean-only** - told the mean alone (the GP's learned homoscedastic white noise only), as before.

Trials to target counts the trials until one whose *true* value (``branin(x)``, not the noisy mean) is at
most ``minimum + --gap``; a run that misses within the budget counts as budget + 1 (censored, marked).
Target of issue 17: noise-aware needs fewer trials on >= 70 % of the seeds.

    bench/run.sh fold_noise                      # 10 seeds
    bench/run.sh fold_noise --seeds 20 --folds 2
    bench/run.sh fold_noise --quick              # smoke test
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any

import numpy as np

import _common as C
from search import OBJECTIVES, branin, first_reaching, nnlo_space

NAME = "fold_noise"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--budget", type=int, default=40)
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--gap", type=float, default=0.5, help="target = Branin's minimum + gap (default 0.5)")
    p.add_argument("--n-initial", type=int, default=8)
    p.add_argument("--noise-low", type=float, default=0.3, help="fold noise sd on most of the square")
    p.add_argument("--noise-high", type=float, default=12.0, help="fold noise sd in its upper part")
    p.add_argument("--jobs", type=int, default=2, help="seeds run in this many processes (default 2)")
    p.add_argument("--quick", action="store_true", help="tiny settings (smoke test)")
    p.add_argument("--out", help="result JSON path (default bench/results/fold_noise.json)")
    a = p.parse_args(argv)
    if a.quick:
        a.seeds, a.budget, a.n_initial, a.jobs = 1, 8, 5, 1  # one process: a pool's start-up is most of it
    if a.seeds < 1 or a.folds < 2 or a.budget <= a.n_initial:
        p.error("--seeds >= 1, --folds >= 2 and --budget > --n-initial")
    return a


def noise_sd(x: list[float], a: argparse.Namespace) -> float:
    """Quiet below x2 = 9, rising smoothly to --noise-high at the top edge (x2 = 15)."""
    t = min(1.0, max(0.0, (x[1] - 9.0) / 6.0))
    return a.noise_low + (a.noise_high - a.noise_low) * t * t


def run(aware: bool, seed: int, a: argparse.Namespace) -> tuple[list[float], list[float]]:
    """One search; returns (true values, noisy fold means) in trial order."""
    from nnlo.optimize.engines import make_engine

    space = nnlo_space(OBJECTIVES["branin"]["bounds"])
    engine = make_engine("bayesian", space, seed, n_initial_points=a.n_initial)
    rng = np.random.default_rng([seed, 7])  # the same fold noise stream for both engines
    true, means = [], []
    for _ in range(a.budget):
        point = engine.ask([])
        x = space.as_list(point)
        f = branin(x)
        folds = f + rng.normal(0.0, noise_sd(x, a), size=a.folds)
        mean, std = float(np.mean(folds)), float(np.std(folds))
        engine.tell(point, mean, std * std / a.folds if aware else None)
        true.append(f)
        means.append(mean)
    return true, means


def one_seed(args: tuple[int, argparse.Namespace]) -> dict[str, Any]:
    seed, a = args
    target = OBJECTIVES["branin"]["minimum"] + a.gap
    row: dict[str, Any] = {"seed": seed}
    for label, aware in (("noise_aware", True), ("mean_only", False)):
        t0 = time.perf_counter()
        true, _ = run(aware, seed, a)
        row[f"{label}_wall_s"] = time.perf_counter() - t0
        hit = first_reaching(true, target)
        row[label] = hit
        row[f"{label}_censored"] = hit is None
        row[f"{label}_best_true"] = min(true)
    print(f"  seed {seed}: noise-aware {row['noise_aware']}, mean-only {row['mean_only']} trials to target",
          flush=True)
    return row


def main(argv: list[str]) -> int:
    a = parse(argv)
    load0 = os.getloadavg()
    target = OBJECTIVES["branin"]["minimum"] + a.gap
    jobs = [(seed, a) for seed in range(a.seeds)]
    if a.jobs > 1:
        from multiprocessing import get_context

        with get_context("spawn").Pool(a.jobs) as pool:
            per_seed = pool.map(one_seed, jobs, chunksize=1)
    else:
        per_seed = [one_seed(j) for j in jobs]
    secs = {k: [r[f"{k}_wall_s"] for r in per_seed] for k in ("noise_aware", "mean_only")}

    def cens(h: int | None) -> int:
        return a.budget + 1 if h is None else h

    wins = sum(cens(r["noise_aware"]) < cens(r["mean_only"]) for r in per_seed)
    ties = sum(cens(r["noise_aware"]) == cens(r["mean_only"]) for r in per_seed)
    result = {
        "what": "trials until a trial's true value reaches the target, noisy k-fold Branin, noise-aware vs "
                "mean-only GP",
        "target": target, "budget": a.budget, "folds": a.folds, "n_initial_points": a.n_initial,
        "noise_sd": {"low": a.noise_low, "high": a.noise_high}, "seeds": a.seeds, "per_seed": per_seed,
        "median_trials_to_target": {k: float(np.median([cens(r[k]) for r in per_seed]))
                                    for k in ("noise_aware", "mean_only")},
        "noise_aware_fewer": wins, "ties": ties, "noise_aware_more": a.seeds - wins - ties,
        "fraction_fewer": wins / a.seeds, "target_fraction": 0.7, "met": wins / a.seeds >= 0.7,
        "wall_s_per_search": {k: C.summary(v) for k, v in secs.items()},
    }
    print(f"  noise-aware fewer trials on {wins}/{a.seeds} seeds ({ties} ties); median "
          f"{result['median_trials_to_target']}", flush=True)
    C.write_result(NAME, result, a.out, argv=argv, mpi=False, started_load=load0)
    return 0 if math.isfinite(wins) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
