#!/usr/bin/env python
"""Benchmark 4: search efficiency and coordinator cost - nnlo's engines against scikit-optimize's gp_minimize.

Three parts:

1. **Trials to target** on synthetic objectives (Branin, 2-D, and Hartmann-3, 3-D; target = global minimum +
   ``--gap``), over several seeds: nnlo's Bayesian engine driven the way the coordinator drives it with 2
   blocks (every ask carries the other block's pending point, told with a constant lie), nnlo's random
   engine, and skopt's sequential ``gp_minimize`` (the strongest off-the-shelf alternative; it always
   knows every previous result, which an asynchronous search cannot). Runs that miss the target within
   the budget count as budget + 1 (a censored value, marked in the JSON).
2. **Coordinator time per ask/tell** after 10, 100, 500 and 1000 observations: nnlo's engines (Bayesian GP
   with its bounded fit, the same GP fitted on every observation as before, RF, random) with one pending
   point, against a persistent ``skopt.Optimizer`` (tell one, ask one). Part 1 also runs the Bayesian engine
   with ``--fit-limit`` (default 15) so the bounded fit bites inside the short searches.
3. **Block idle fraction** from a real ``nnlo optimize`` run (1 coordinator + 2 blocks of 2 ranks; a block
   is a master and a worker, the objective hook runs on its top rank) on a cheap objective
   (``bench/models/timed_branin.py``, a fixed sleep per evaluation): each block's busy time comes from the
   evaluations' own timestamps, idle = the rest of the search's wall time.

    bench/run.sh search                         # Branin + Hartmann-3, 3 seeds; 10/100/500 observations
    bench/run.sh search --seeds 10 --ask-sizes 10 100 500 1000
    bench/run.sh search --quick                 # smoke test
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

import _common as C

NAME = "search"

# -- objectives -----------------------------------------------------------------------------------------
_H3_A = np.array([[3.0, 10, 30], [0.1, 10, 35], [3.0, 10, 30], [0.1, 10, 35]])
_H3_P = 1e-4 * np.array([[3689, 1170, 2673], [4699, 4387, 7470], [1091, 8732, 5547], [381, 5743, 8828]])
_H3_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def branin(x: list[float]) -> float:
    x1, x2 = x
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def hartmann3(x: list[float]) -> float:
    d = np.asarray(x, float)
    return float(-np.sum(_H3_ALPHA * np.exp(-np.sum(_H3_A * (d - _H3_P) ** 2, axis=1))))


OBJECTIVES: dict[str, dict[str, Any]] = {
    "branin": {"fn": branin, "bounds": [(-5.0, 10.0), (0.0, 15.0)], "minimum": 0.397887, "budget": 25},
    "hartmann3": {"fn": hartmann3, "bounds": [(0.0, 1.0)] * 3, "minimum": -3.86278, "budget": 30},
}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--objectives", nargs="+", choices=list(OBJECTIVES), default=list(OBJECTIVES))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--budget", type=int, default=None, help="trials per search (default per objective: 25, 30)")
    p.add_argument("--gap", type=float, default=0.1, help="target = global minimum + gap (default 0.1)")
    p.add_argument("--n-initial", type=int, default=10, help="random points before the model (both libraries)")
    p.add_argument("--ask-sizes", type=int, nargs="+", default=[10, 100, 500, 1000])
    p.add_argument("--old-gp-max", type=int, default=1000,
                   help="time the unbounded GP and skopt's Optimizer only up to this many observations "
                        "(they cost ~12 s at 500 on an idle node, cubic beyond)")
    p.add_argument("--fit-limit", type=int, default=15,
                   help="GP fit subset in the trials-to-target comparison, small so that it bites (default 15)")
    p.add_argument("--ask-repeats", type=int, default=3, help="timed asks per size (1 above 200 observations)")
    p.add_argument("--optimize-trials", type=int, default=20, help="trials of the real nnlo optimize run")
    p.add_argument("--trial-seconds", type=float, default=1.0, help="sleep per evaluation in that run")
    p.add_argument("--skip", nargs="*", default=[], choices=["target", "ask", "idle"])
    p.add_argument("--quick", action="store_true", help="tiny settings (smoke test)")
    p.add_argument("--out", help="result JSON path (default bench/results/search.json)")
    a = p.parse_args(argv)
    if a.quick:
        a.objectives, a.seeds, a.budget, a.n_initial = ["branin"], 1, 8, 4
        a.ask_sizes, a.ask_repeats, a.optimize_trials, a.trial_seconds = [10], 1, 4, 0.05
        a.fit_limit = 6
    if a.seeds < 1 or (a.budget is not None and a.budget < a.n_initial):
        p.error("--seeds must be positive and --budget at least --n-initial")
    return a


def nnlo_space(bounds: list[tuple[float, float]]) -> Any:
    from nnlo.optimize.space import Real, Space

    return Space([Real(lo, hi, name=f"x{i}") for i, (lo, hi) in enumerate(bounds)])


def first_reaching(values: list[float], target: float) -> int | None:
    best = math.inf
    for i, v in enumerate(values):
        best = min(best, v)
        if best <= target:
            return i + 1
    return None


# -- part 1 ---------------------------------------------------------------------------------------------
def run_nnlo(engine_name: str, fn: Callable, bounds: list, budget: int, seed: int, n_initial: int,
             blocks: int = 2, fit_limit: int | None | str = "default") -> list[float]:
    """Drive an nnlo engine like the coordinator with ``blocks`` blocks: ask with the in-flight points as
    pending, and tell results in hand-out order (the oldest trial finishes first)."""
    from nnlo.optimize.engines import make_engine

    space = nnlo_space(bounds)
    kw = {"n_initial_points": n_initial} if engine_name == "bayesian" else {}
    engine = make_engine(engine_name, space, seed, **kw)
    if fit_limit != "default":
        engine.fit_limit = fit_limit  # type: ignore[attr-defined]
    pending: list[dict] = []
    values: list[float] = []
    asked = 0
    while len(values) < budget:
        while len(pending) < blocks and asked < budget:
            pending.append(engine.ask(pending))
            asked += 1
        point = pending.pop(0)
        v = fn(space.as_list(point))
        engine.tell(point, v)
        values.append(v)
    return values


def run_gp_minimize(fn: Callable, bounds: list, budget: int, seed: int, n_initial: int) -> list[float]:
    from skopt import gp_minimize
    from threadpoolctl import threadpool_limits

    # one BLAS thread, as nnlo's engine uses: the same arithmetic budget per step for both libraries
    with threadpool_limits(limits=1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = gp_minimize(fn, bounds, n_calls=budget, n_initial_points=n_initial, random_state=seed)
    return [float(v) for v in res.func_vals]


def part_target(a: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in a.objectives:
        obj = OBJECTIVES[name]
        budget = a.budget or obj["budget"]
        target = obj["minimum"] + a.gap
        methods: dict[str, Callable[[int], list[float]]] = {
            "nnlo_bayesian_2_blocks": lambda s: run_nnlo("bayesian", obj["fn"], obj["bounds"], budget, s, a.n_initial),
            # the bounded fit made to bite inside these short searches: quality with a subset of the data
            f"nnlo_bayesian_fit_limit_{a.fit_limit}": lambda s: run_nnlo(
                "bayesian", obj["fn"], obj["bounds"], budget, s, a.n_initial, fit_limit=a.fit_limit),
            "nnlo_random": lambda s: run_nnlo("random", obj["fn"], obj["bounds"], budget, s, a.n_initial),
            "skopt_gp_minimize": lambda s: run_gp_minimize(obj["fn"], obj["bounds"], budget, s, a.n_initial),
        }
        res: dict[str, Any] = {}
        for m, run in methods.items():
            per_seed, best, secs = [], [], []
            for seed in range(a.seeds):
                t0 = time.perf_counter()
                values = run(seed)
                secs.append(time.perf_counter() - t0)
                hit = first_reaching(values, target)
                per_seed.append(hit)
                best.append(min(values))
            censored = [budget + 1 if h is None else h for h in per_seed]
            res[m] = {"trials_to_target": per_seed, "median_trials_to_target": float(np.median(censored)),
                      "reached": sum(h is not None for h in per_seed), "best_values": best,
                      "median_best": float(np.median(best)), "wall_s_per_search": C.summary(secs)}
            print(f"  {name:9s} {m:24s} trials to target {per_seed} best {np.median(best):.4f}", flush=True)
        out[name] = {"target": target, "budget": budget, "seeds": a.seeds, "methods": res}
    return out


# -- part 2 ---------------------------------------------------------------------------------------------
def part_ask(a: argparse.Namespace) -> dict[str, Any]:
    from nnlo.optimize.engines import make_engine

    obj = OBJECTIVES["branin"]
    space = nnlo_space(obj["bounds"])
    rows = []
    for n in a.ask_sizes:
        rng = np.random.default_rng(n)
        xs = [space.sample(rng) for _ in range(n + 1)]
        ys = [obj["fn"](space.as_list(p)) for p in xs]
        reps = a.ask_repeats if n <= 200 else 1
        row: dict[str, Any] = {"observations": n, "repeats": reps, "seconds": {}}
        for label, eng, kw in (("nnlo_bayesian_GP", "bayesian", {"estimator": "GP"}),
                               ("nnlo_bayesian_GP_unbounded", "bayesian", {"estimator": "GP"}),
                               ("nnlo_bayesian_RF", "bayesian", {"estimator": "RF"}),
                               ("nnlo_random", "random", {})):
            if label.endswith("_unbounded") and n > a.old_gp_max:
                continue
            e = make_engine(eng, space, 0, **kw)
            if label.endswith("_unbounded"):  # the GP as it was before the bounded fit: every observation
                e.fit_limit = None  # type: ignore[attr-defined]
            for p, y in zip(xs[:n], ys[:n]):
                e.tell(p, y)

            def step(e=e) -> None:  # one coordinator step: ask with a pending point, then tell
                pt = e.ask([xs[n]])
                e.tell(pt, obj["fn"](space.as_list(pt)))
                e.observations.pop()  # keep n observations for the next repeat

            row["seconds"][label] = C.summary(C.timed(step, reps, warmup=0))
        if n <= a.old_gp_max:
            row["seconds"]["skopt_optimizer_GP"] = C.summary(C.timed(_skopt_stepper(obj, xs, ys, n), reps, 0))
        sec = row["seconds"]
        if "nnlo_bayesian_GP_unbounded" in sec:
            row["gp_bounded_over_unbounded"] = sec["nnlo_bayesian_GP"]["median"] / sec["nnlo_bayesian_GP_unbounded"]["median"]
        print(f"  ask/tell at {n} observations: " + ", ".join(
            f"{k} {C.fmt_time(v['median'])}" for k, v in row["seconds"].items()), flush=True)
        rows.append(row)
    return {"what": "one coordinator step (ask with 1 pending point + tell) after N observations",
            "rows": rows}


def _skopt_stepper(obj: dict, xs: list, ys: list, n: int) -> Callable[[], None]:
    """A persistent skopt.Optimizer already holding n - 1 observations (built untimed); each step tells one
    result (skopt refits its model on tell) and asks the next point, then forgets that result again."""
    from skopt import Optimizer
    from threadpoolctl import threadpool_limits

    def as_x(p: dict) -> list[float]:
        return [float(p[f"x{i}"]) for i in range(len(p))]

    opt = Optimizer(obj["bounds"], base_estimator="GP", n_initial_points=10, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt.tell([as_x(p) for p in xs[:n - 1]], ys[:n - 1], fit=False)

    def step() -> None:
        with threadpool_limits(limits=1), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt.tell(as_x(xs[n - 1]), ys[n - 1])
            opt.ask()
        opt.Xi.pop(), opt.yi.pop()
        if opt.models:
            opt.models.pop()

    return step


# -- part 3 ---------------------------------------------------------------------------------------------
def part_idle(a: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"trials": a.optimize_trials, "trial_seconds": a.trial_seconds, "blocks": 2,
                           "engines": {}}
    for engine in ("random", "bayesian"):
        with tempfile.TemporaryDirectory(prefix="nnlo-bench-search-") as tmp:
            log = Path(tmp) / "evals.jsonl"
            cmd = [sys.executable, "-m", "nnlo_sched", "optimize", "-n", "5", "--block-size", "2",
                   "--model", str(C.BENCH_DIR / "models" / "timed_branin.py"), "--hyper-opt", engine,
                   "--num-iterations", str(a.optimize_trials), "--output", str(Path(tmp) / "run")]
            if engine == "bayesian":
                cmd += ["--n-initial-points", str(min(a.n_initial, a.optimize_trials))]
            env = dict(os.environ, BENCH_SLEEP=str(a.trial_seconds), BENCH_EVAL_LOG=str(log),
                       OMP_NUM_THREADS="1", NNLO_LOG_LEVEL="warning")
            t0 = time.time()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=C.REPO)
            wall = time.time() - t0
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                raise RuntimeError(f"nnlo optimize ({engine}) exited {proc.returncode}: {' | '.join(tail)}")
            evals = [json.loads(line) for line in log.read_text().splitlines()]
        start, end = min(e["t0"] for e in evals), max(e["t1"] for e in evals)
        window = end - start
        blocks: dict[int, float] = {}
        for e in evals:
            blocks[e["pid"]] = blocks.get(e["pid"], 0.0) + e["t1"] - e["t0"]
        idle = {str(i): 1 - busy / window for i, busy in enumerate(sorted(blocks.values()))}
        out["engines"][engine] = {
            "evaluations": len(evals), "search_window_s": window, "command_wall_s": wall,
            "block_idle_fraction": idle, "mean_idle_fraction": float(np.mean(list(idle.values()))),
            "command": " ".join(cmd[1:]),
        }
        print(f"  nnlo optimize {engine}: {len(evals)} evaluations in {window:.1f} s, "
              f"blocks idle {np.mean(list(idle.values())):.0%}", flush=True)
    return out


def main(argv: list[str]) -> int:
    a = parse(argv)
    load0 = os.getloadavg()
    result: dict[str, Any] = {
        "what": "search efficiency (trials to target), coordinator cost per ask/tell, block idle fraction",
        "gap": a.gap, "n_initial_points": a.n_initial,
        "skopt": C._version("skopt"),
    }
    if "target" not in a.skip:
        result["trials_to_target"] = part_target(a)
    if "ask" not in a.skip:
        result["ask_tell"] = part_ask(a)
    if "idle" not in a.skip:
        result["idle"] = part_idle(a)
    C.write_result(NAME, result, a.out, argv=argv, mpi=False, started_load=load0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
