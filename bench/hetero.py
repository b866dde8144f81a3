"""Heterogeneous blocks: hardware-aware assignment vs FIFO, trials per unit time and best figure of merit.

A discrete-event simulation drives the real search code (``nnlo.optimize.search.Search`` with its engine and
the real policies of ``nnlo.optimize.assign``) without MPI: blocks of speeds 1x, 2x and 4x (``--copies`` of
each) run trials whose cost depends on their parameters, a duration being cost / speed (with a little noise).
The objective has a top-level choice (``model``: small or large, each a subspace), an ``epochs``-like parameter
that makes trials dearer and better, and two shape parameters (a Branin valley). Each policy runs for the same
simulated wall time; per seed we count finished trials and take the best figure of merit at that time.

Target (issue 17): hardware-aware >= 1.5x the throughput of FIFO and a best figure of merit at least as good
on >= 80 % of seeds.

    bench/run.sh hetero                  # 10 seeds
    bench/run.sh hetero --quick          # smoke test
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import _common as C

from nnlo.optimize.assign import Fifo, HardwareAware, Policy
from nnlo.optimize.engines import make_engine
from nnlo.optimize.results import Objective
from nnlo.optimize.search import Search
from nnlo.optimize.space import Categorical, Real, Space

NAME = "hetero"
SPACE = Space([Categorical(["small", "large"], name="model"), Real(0.0, 1.0, name="epochs"),
               Real(-5.0, 10.0, name="x1"), Real(0.0, 15.0, name="x2")])
COST = {"small": 1.0, "large": 4.0}


def cost(p: dict[str, Any]) -> float:
    """Time units on a 1x block: the large model costs 4x, epochs up to 5x."""
    return COST[p["model"]] * (1.0 + 4.0 * p["epochs"])


def fom(p: dict[str, Any]) -> float:
    """To minimise: a Branin valley (min 0.398) + what the model and the epochs leave on the table."""
    x1, x2 = p["x1"], p["x2"]
    b = (x2 - 5.1 / (4 * math.pi ** 2) * x1 ** 2 + 5 / math.pi * x1 - 6) ** 2 + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x1) + 10
    return b / 10 + (0.0 if p["model"] == "large" else 0.3) + 0.5 * math.exp(-4 * p["epochs"])


def simulate(policy: Policy, speeds: list[float], horizon: float, seed: int, engine: str,
             out_dir: Path, budget: int | None = None) -> dict[str, Any]:
    """Run until ``horizon`` (steady state), or until ``budget`` trials have finished (a budgeted search)."""
    rng = np.random.default_rng([seed, 99])
    search = Search(make_engine(engine, SPACE, seed, n_initial_points=10, population=10),
                    Objective.parse("val_loss"), num_iterations=budget or 10 ** 6, out_dir=out_dir)
    search.blocks, search.assign = len(speeds), policy
    running: dict[int, tuple[float, int]] = {}

    def start(b: int, now: float) -> None:
        t = search.next_trial(b, now)
        if t is not None:
            running[b] = (now + cost(t.params) / speeds[b] * math.exp(0.05 * rng.standard_normal()), t.id)

    for b in range(len(speeds)):
        start(b, 0.0)
    best = math.inf
    done_per_block = [0] * len(speeds)
    curve: list[tuple[float, float]] = []  # (time, best so far)
    now = 0.0
    while running:
        b = min(running, key=lambda k: running[k][0])
        now, tid = running.pop(b)
        if budget is None and now > horizon:
            now = horizon
            break
        trial = search.in_flight[tid]
        value = fom(trial.params)
        search.record(tid, [{"metrics": {"val_loss": value}}], b, now=now)
        best = min(best, value)
        curve.append((now, best))
        done_per_block[b] += 1
        start(b, now)
    ok = list(search.finished.values())
    share_large = {s: float(np.mean([t.params["model"] == "large" for t in ok if speeds[int(t.block)] == s]))
                   for s in sorted(set(speeds)) if any(speeds[int(t.block)] == s for t in ok)}
    return {"trials": len(ok), "wall": now, "throughput": len(ok) / now, "best": best, "curve": curve,
            "mean_cost": float(np.mean([cost(t.params) for t in ok])),
            "large_share_by_speed": share_large, "dropped_proposals": search.dropped,
            "trials_per_block": done_per_block}


def best_at(curve: list[list[float]] | list[tuple[float, float]], t: float) -> float:
    """The best figure of merit found by time ``t``."""
    return min((b for when, b in curve if when <= t), default=math.inf)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--copies", type=int, default=2, help="blocks of each speed (1x, 2x, 4x)")
    p.add_argument("--horizon", type=float, default=150.0, help="simulated wall time (1x-block time units)")
    p.add_argument("--budget", type=int, default=36, help="trials of the budgeted search (0: skip it)")
    p.add_argument("--engine", default="genetic", choices=["genetic", "random", "bayesian"])
    p.add_argument("--quick", action="store_true", help="tiny settings (smoke test)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.quick:
        a.seeds, a.horizon, a.copies, a.budget = 2, 40.0, 1, 12
    return a


def main(argv: list[str]) -> int:
    a = parse(argv)
    load0 = os.getloadavg()
    speeds = [s for s in (1.0, 2.0, 4.0) for _ in range(a.copies)]
    rows: list[dict[str, Any]] = []
    budgeted: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(a.seeds if a.budget else 0):
            fifo = simulate(Fifo(), speeds, 0.0, seed, a.engine, Path(tmp), budget=a.budget)
            ha = simulate(HardwareAware(SPACE, [int(s) for s in speeds], subspace_of=lambda p: p["model"]),
                          speeds, 0.0, seed, a.engine, Path(tmp), budget=a.budget)
            equal = min(fifo["wall"], ha["wall"])  # both searches have run this long
            row = {"seed": seed, "fifo_wall": fifo["wall"], "ha_wall": ha["wall"],
                   "throughput_ratio": fifo["wall"] / ha["wall"],
                   "fifo_best_at_equal_time": best_at(fifo["curve"], equal),
                   "ha_best_at_equal_time": best_at(ha["curve"], equal)}
            row["fom_as_good"] = row["ha_best_at_equal_time"] <= row["fifo_best_at_equal_time"]
            budgeted.append(row)
            print(f"  budget {a.budget}, seed {seed}: done after {fifo['wall']:.1f} (FIFO) / {ha['wall']:.1f} "
                  f"(hardware-aware) = {row['throughput_ratio']:.2f}x; best at {equal:.1f}: "
                  f"{row['fifo_best_at_equal_time']:.4f} / {row['ha_best_at_equal_time']:.4f}", flush=True)
        for seed in range(a.seeds):
            fifo = simulate(Fifo(), speeds, a.horizon, seed, a.engine, Path(tmp))
            # block sizes as a heterogeneous layout would give them: ranks in proportion to speed
            ha = simulate(HardwareAware(SPACE, [int(s) for s in speeds], subspace_of=lambda p: p["model"]),
                          speeds, a.horizon, seed, a.engine, Path(tmp))
            ratio = ha["throughput"] / fifo["throughput"]
            for run in (fifo, ha):
                run.pop("curve")
            rows.append({"seed": seed, "fifo": fifo, "hardware_aware": ha, "throughput_ratio": ratio,
                         "fom_as_good": ha["best"] <= fifo["best"]})
            print(f"  seed {seed}: trials FIFO {fifo['trials']} / hardware-aware {ha['trials']} "
                  f"({ratio:.2f}x), best {fifo['best']:.4f} / {ha['best']:.4f}", flush=True)
    ratios = [r["throughput_ratio"] for r in rows]
    result = {
        "what": "simulated heterogeneous blocks: hardware-aware vs FIFO assignment at equal wall time",
        "speeds": speeds, "horizon": a.horizon, "engine": a.engine, "seeds": a.seeds,
        "cost_model": "small 1 / large 4 x (1 + 4 epochs), duration = cost / speed x lognormal(0.05)",
        "rows": rows,
        "median_throughput_ratio": float(np.median(ratios)),
        "seeds_with_ratio_at_least_1_5": sum(r >= 1.5 for r in ratios),
        "seeds_fom_as_good": sum(r["fom_as_good"] for r in rows),
        "seeds_meeting_both": sum(r["throughput_ratio"] >= 1.5 and r["fom_as_good"] for r in rows),
        "budget": a.budget,
        "budgeted": budgeted,
    }
    if budgeted:
        br = [r["throughput_ratio"] for r in budgeted]
        result.update(budget_median_throughput_ratio=float(np.median(br)),
                      budget_seeds_with_ratio_at_least_1_5=sum(r >= 1.5 for r in br),
                      budget_seeds_fom_as_good=sum(r["fom_as_good"] for r in budgeted),
                      budget_seeds_meeting_both=sum(r["throughput_ratio"] >= 1.5 and r["fom_as_good"]
                                                    for r in budgeted))
        print(f"hetero, budget of {a.budget} trials: median throughput ratio "
              f"{result['budget_median_throughput_ratio']:.2f}x; best fom at equal time as good on "
              f"{result['budget_seeds_fom_as_good']}/{a.seeds} seeds; both on {result['budget_seeds_meeting_both']}")
    print(f"hetero: median throughput ratio {result['median_throughput_ratio']:.2f}x; best fom as good on "
          f"{result['seeds_fom_as_good']}/{a.seeds} seeds; both targets on {result['seeds_meeting_both']}/{a.seeds}")
    C.write_result(NAME, result, a.out, argv=argv, mpi=False, started_load=load0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
