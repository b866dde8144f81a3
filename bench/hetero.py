"""Hardware-aware placement against FIFO where placement can pay: simulated clocks, the real search code.

A discrete-event simulation plays the coordinator (hand-outs to every idle block, results, out-of-memory
re-runs, the deadline, a chain of jobs) around the real ``nnlo.optimize.search.Search`` with its engine and the
real policies of ``nnlo.optimize.assign`` / ``nnlo.optimize.placement``; only the clock is simulated (a trial
takes its true duration on the block's type, x lognormal noise), so the figures do not depend on the machine's
load. Four measurements, each over ``--seeds`` seeds:

* ``typed_speedup_throughput_ratio`` - trials per unit time, hardware-aware / FIFO, steady state: three GPU-like
  and three CPU-like blocks (same ranks); class ``conv`` (a tree space's top-level branch) runs 10x faster on
  the GPU blocks, class ``mlp`` the same on both. The same runs give the time to a target figure of merit.
* ``small_batch_makespan_ratio`` - FIFO makespan / hardware-aware makespan of a whole search of 1x, 2x and 3x
  as many trials as blocks (blocks of 1, 1, 2, 2, 4, 4 ranks; trial costs spread 8x), the model module
  declaring the size hint (``trial_size``); ``..._learned`` the same without it (costs learnt online).
* ``hardware_aware_lost_rank_seconds`` - rank-seconds spent on trials that ran out of memory (beyond the first
  on each block type) or were cut by a job's deadline before any checkpoint, in a chain of jobs (walltime,
  queue wait between jobs) whose large class does not fit the small blocks' memory; FIFO's figure beside it
  (``fifo_lost_rank_seconds``). The same chain measures the two answers to "nothing fits before the deadline":
  take a cheaper trial (``cheaper``) or end the job early (``end``).

    bench/run.sh hetero                  # 10 seeds (~3 minutes of CPU)
    bench/run.sh hetero --quick          # smoke test
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import _common as C
import numpy as np

from nnlo.optimize.assign import Fifo, Policy, make_policy
from nnlo.optimize.engines import make_engine
from nnlo.optimize.placement import BlockType, TraitsOf
from nnlo.optimize.results import Objective
from nnlo.optimize.search import Search
from nnlo.optimize.space import Categorical, Integer, Real, Space
from nnlo.optimize.storage import LocalStorage
from nnlo.stop import Stop

NAME = "hetero"
Params = dict[str, Any]


def branin(p: Params) -> float:
    x1, x2 = p["x1"], p["x2"]
    return ((x2 - 5.1 / (4 * math.pi ** 2) * x1 ** 2 + 5 / math.pi * x1 - 6) ** 2
            + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x1) + 10)


# -- the simulated world ------------------------------------------------------------------------------------
@dataclass
class World:
    """The truth a simulation runs against (what the policy has to learn)."""

    space: Space
    types: list[BlockType]  # one per block
    seconds: Callable[[Params, BlockType], float]  # a whole trial's true duration on a type
    fom: Callable[[Params], float]  # to minimise
    oom_at: Callable[[Params, BlockType], float | None] = lambda p, t: None  # share of it run before OOM
    checkpoints: int = 1  # evenly spaced per trial (1: only at its end)
    module: Any = None  # the model module's placement hooks (trial_class, trial_size, ...)
    noise: float = 0.05


@dataclass
class Run:
    trials: int = 0  # finished ok
    failed: int = 0
    wall: float = 0.0
    curve: list[tuple[float, float]] = field(default_factory=list)  # (time, best so far)
    lost_oom: float = 0.0  # rank-seconds of out-of-memory runs started once one on that block type was known
    lost_oom_strict: float = 0.0  # ... of every out-of-memory run beyond the first on each block type
    lost_cut: float = 0.0  # rank-seconds of runs cut by a deadline before their first checkpoint
    ooms: int = 0
    cuts: int = 0
    jobs: int = 0
    allocation: float = 0.0  # rank-seconds held by the jobs
    conv_share_by_type: dict[str, float] = field(default_factory=dict)
    conv_share: float = 0.0

    @property
    def best(self) -> float:
        return self.curve[-1][1] if self.curve else math.inf

    def time_to(self, target: float) -> float:
        return next((t for t, b in self.curve if b <= target), math.inf)


def policy_for(name: str, world: World, **options: Any) -> Policy:
    traits = TraitsOf(world.space, world.module)
    return make_policy(name, world.space, world.types, traits, lambda p: 1.0 / world.checkpoints, **options)


def simulate(world: World, policy: Policy, seed: int, *, engine: str = "genetic", budget: int | None = None,
             horizon: float | None = None, walltime: float | None = None, queue: float = 0.0,
             out_dir: Path, trace: list[tuple[Any, ...]] | None = None) -> Run:
    """One search: until ``horizon`` (steady state) or until ``budget`` trials are done, as one job or as a
    chain of jobs of ``walltime`` each with ``queue`` between them (cut trials resume from their checkpoint)."""
    rng = np.random.default_rng([seed, 7])
    n = len(world.types)
    engine_ = make_engine(engine, world.space, seed, n_initial_points=10, population=10)
    storage = LocalStorage()  # the trials every job of the chain shares (a job's search is given its deadline)
    traits_of = TraitsOf(world.space, world.module)

    def job_search(deadline: float | None) -> Search:
        return Search(engine_, Objective.parse("val_loss"), num_iterations=budget or 10 ** 6, out_dir=out_dir,
                      storage=storage, blocks=n, assign=policy, block_types=world.types,
                      traits_of=traits_of, deadline=deadline)

    search = job_search(None)
    run, best, known_oom = Run(), math.inf, {}  # block type -> when its first out-of-memory run ended
    progress: dict[int, float] = {}  # trial -> share done at its last checkpoint (a cut trial resumes there)
    by_type: dict[BlockType, list[bool]] = {}
    job_start = 0.0
    while True:
        deadline = None if walltime is None else job_start + walltime
        search = job_search(deadline)
        stop = Stop(deadline, safety_s=0.0)
        running: dict[int, tuple[float, float, int, str, float]] = {}  # block -> (start, end, id, kind, full)
        now, ended = job_start, None
        while True:
            if horizon is None or now < horizon:
                gate = isinstance(policy, Fifo) and stop.no_time_for(search.typical_trial_s(), now)
                for b in range(n):
                    if b in running or gate:
                        continue
                    trial = search.next_trial(b, now)
                    if trial is None:
                        continue
                    t = world.types[b]
                    full = world.seconds(trial.params, t) * math.exp(world.noise * rng.standard_normal())
                    oom = world.oom_at(trial.params, t)
                    done = progress.get(trial.id, 0.0)
                    if oom is not None:
                        running[b] = (now, now + full * oom, trial.id, "oom", full)
                    else:
                        running[b] = (now, now + full * (1 - done), trial.id, "ok", full)
                    if trace is not None:
                        trace.append((b, round(now, 2), round(running[b][1], 2), trial.id, running[b][3]))
            if not running:
                ended = now
                break
            b = min(running, key=lambda k: running[k][1])
            start, end, tid, kind, full = running[b]
            if horizon is not None and end > horizon:
                ended = horizon
                break
            if deadline is not None and end > deadline:
                for blk, (s0, _, t_id, _, f) in sorted(running.items()):
                    done = progress.get(t_id, 0.0)
                    reached = math.floor((done + (deadline - s0) / f) * world.checkpoints + 1e-9) / world.checkpoints
                    if reached > done:
                        progress[t_id] = reached
                    else:
                        run.lost_cut += world.types[blk].ranks * (deadline - s0)
                        run.cuts += 1
                    search.interrupted(t_id)
                ended = deadline
                break
            now = end
            del running[b]
            params = search.in_flight[tid].params
            if kind == "oom":
                run.ooms += 1
                t = world.types[b]
                if t in known_oom:
                    run.lost_oom_strict += t.ranks * (end - start)
                    if start >= known_oom[t]:  # started when the search already knew
                        run.lost_oom += t.ranks * (end - start)
                known_oom.setdefault(t, end)
                folds = [{"error": "MemoryError: out of memory", "oom": True}]
                if search.out_of_memory(tid, folds, b, now) is None:
                    search.record(tid, folds, b, now)
                    run.failed += 1
                continue
            value = world.fom(params)
            search.record(tid, [{"metrics": {"val_loss": value}}], b, now)
            progress.pop(tid, None)
            run.trials += 1
            best = min(best, value)
            run.curve.append((now, best))
            by_type.setdefault(world.types[b], []).append(params.get("model") == "conv")
        run.jobs += 1
        run.allocation += (ended - job_start) * sum(t.ranks for t in world.types)
        run.wall = ended
        over = budget is not None and len(search.finished) >= budget and not search.in_flight and not search.requeue
        if walltime is None or over or run.jobs >= 200:
            break
        job_start = ended + queue
    run.conv_share_by_type = {t.key: float(np.mean(v)) for t, v in by_type.items()}
    run.conv_share = float(np.mean([x for v in by_type.values() for x in v])) if by_type else 0.0
    return run


# -- 1. trial classes that speed up differently -------------------------------------------------------------
TYPED_SPACE = Space([
    Categorical(["conv", "mlp"], name="model", branches={"conv": [Integer(8, 64, name="filters")],
                                                         "mlp": [Integer(16, 256, name="width")]}),
    Real(0.0, 1.0, name="epochs"), Real(-5.0, 10.0, name="x1"), Real(0.0, 15.0, name="x2")])
GPU = BlockType(2, gpus=1.0, memory_gb=40.0, node="gpu-node")
CPU = BlockType(2, memory_gb=64.0, node="cpu-node")


def typed_world(copies: int) -> World:
    def seconds(p: Params, t: BlockType) -> float:
        base = 1.0 + p["epochs"]
        return base * (10.0 if p["model"] == "conv" and t.gpus == 0 else 1.0)

    def fom(p: Params) -> float:
        return branin(p) / 10 + 0.5 * math.exp(-4 * p["epochs"]) + (0.0 if p["model"] == "conv" else 0.05)

    return World(TYPED_SPACE, [GPU] * copies + [CPU] * copies, seconds, fom)


def typed(a: argparse.Namespace, tmp: Path, engine: str) -> dict[str, Any]:
    world = typed_world(a.copies)
    rows = []
    for seed in range(a.seeds):
        fifo = simulate(world, Fifo(), seed, engine=engine, horizon=a.horizon, out_dir=tmp)
        ha = simulate(world, policy_for("hardware-aware", world), seed, engine=engine, horizon=a.horizon,
                      out_dir=tmp)
        t_fifo, t_ha = fifo.time_to(a.target), ha.time_to(a.target)
        rows.append({"seed": seed, "fifo_trials": fifo.trials, "ha_trials": ha.trials,
                     "throughput_ratio": ha.trials / max(1, fifo.trials),
                     "fifo_best": fifo.best, "ha_best": ha.best,
                     "fifo_time_to_target": t_fifo, "ha_time_to_target": t_ha,
                     "time_to_target_no_worse": t_ha <= t_fifo,
                     "fifo_conv": fifo.conv_share, "ha_conv": ha.conv_share,
                     "fifo_conv_share_by_type": fifo.conv_share_by_type,
                     "ha_conv_share_by_type": ha.conv_share_by_type})
        print(f"  typed ({engine}), seed {seed}: trials FIFO {fifo.trials} / HA {ha.trials} "
              f"({rows[-1]['throughput_ratio']:.2f}x); time to {a.target}: {t_fifo:.1f} / {t_ha:.1f}", flush=True)
    ratios = [r["throughput_ratio"] for r in rows]
    return {"engine": engine, "blocks": [t.key for t in world.types], "horizon": a.horizon, "target_fom": a.target,
            "cost_model": "conv: (1 + epochs) on GPU blocks, 10 x that on CPU blocks; mlp: (1 + epochs) on both",
            "rows": rows, "median_throughput_ratio": statistics.median(ratios),
            "conv_share_of_trials": {"fifo": statistics.mean(r["fifo_conv"] for r in rows),
                                     "hardware_aware": statistics.mean(r["ha_conv"] for r in rows)},
            "seeds_time_to_target_no_worse": sum(r["time_to_target_no_worse"] for r in rows)}


# -- 2. the tail of a small batch ---------------------------------------------------------------------------
BATCH_SPACE = Space([Integer(1, 8, name="epochs"), Real(-5.0, 10.0, name="x1"), Real(0.0, 15.0, name="x2")])


def batch_world(declared: bool) -> World:
    module = SimpleNamespace(trial_size=lambda p: float(p["epochs"])) if declared else None
    return World(BATCH_SPACE, [BlockType(r) for r in (1, 1, 2, 2, 4, 4)],
                 lambda p, t: float(p["epochs"]) / t.ranks, branin, module=module)


def small_batch(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for declared in (True, False):
        world = batch_world(declared)
        rows = []
        for seed in range(a.seeds):
            for budget in a.batches:
                trace: list[tuple[Any, ...]] = []
                fifo = simulate(world, Fifo(), seed, engine="random", budget=budget, out_dir=tmp, trace=trace)
                ha = simulate(world, policy_for("hardware-aware", world), seed, engine="random", budget=budget,
                              out_dir=tmp)
                # no schedule beats the work over the total speed, nor the largest trial on the fastest block
                work = [(e - s) * world.types[b].ranks for b, s, e, _, _ in trace]
                speeds = [t.ranks for t in world.types]
                bound = max(sum(work) / sum(speeds), max(work) / max(speeds))
                rows.append({"seed": seed, "trials": budget, "fifo_makespan": fifo.wall, "ha_makespan": ha.wall,
                             "lower_bound": bound, "ratio": fifo.wall / ha.wall})
        key = "declared" if declared else "learned"
        out[key] = {"rows": rows, "median_ratio": statistics.median(r["ratio"] for r in rows),
                    "median_ratio_by_batch": {n: statistics.median(r["ratio"] for r in rows if r["trials"] == n)
                                              for n in a.batches},
                    "median_fifo_over_bound_by_batch": {n: statistics.median(
                        r["fifo_makespan"] / r["lower_bound"] for r in rows if r["trials"] == n) for n in a.batches},
                    "median_ha_over_bound_by_batch": {n: statistics.median(
                        r["ha_makespan"] / r["lower_bound"] for r in rows if r["trials"] == n) for n in a.batches}}
        print(f"  small batch, size hint {key}: median makespan ratio {out[key]['median_ratio']:.2f} "
              f"{out[key]['median_ratio_by_batch']}", flush=True)
    return {"blocks": [t.key for t in batch_world(True).types], "cost_model": "epochs (1..8) / ranks",
            "batches": a.batches, **out}


# -- 3. memory and the deadline ----------------------------------------------------------------------------
CHAIN_SPACE = Space([Categorical(["small", "large"], name="model"), Real(0.0, 1.0, name="epochs"),
                     Real(-5.0, 10.0, name="x1"), Real(0.0, 15.0, name="x2")])
SMALL = BlockType(1, memory_gb=8.0, node="cpu-node")
BIG = BlockType(2, memory_gb=32.0, node="cpu-node")


def chain_world(copies: int, checkpoints: int) -> World:
    def seconds(p: Params, t: BlockType) -> float:
        return (1.0 + 4.0 * p["epochs"]) * (3.0 if p["model"] == "large" else 1.0) / t.ranks

    def fom(p: Params) -> float:
        return branin(p) / 10 + 0.5 * math.exp(-4 * p["epochs"]) + (0.0 if p["model"] == "large" else 0.2)

    return World(CHAIN_SPACE, [SMALL] * copies + [BIG] * copies, seconds, fom,
                 oom_at=lambda p, t: 0.1 if p["model"] == "large" and (t.memory_gb or 0) < 16 else None,
                 checkpoints=checkpoints, module=SimpleNamespace(trial_class=lambda p: p["model"]))


def chain(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    world = chain_world(a.copies, a.chain_checkpoints)
    policies: dict[str, Callable[[], Policy]] = {
        "fifo": Fifo, "cheaper": lambda: policy_for("hardware-aware", world, cheaper=True),
        "end": lambda: policy_for("hardware-aware", world, cheaper=False)}
    rows = []
    for seed in range(a.seeds):
        row: dict[str, Any] = {"seed": seed}
        for name, make in policies.items():
            r = simulate(world, make(), seed, budget=a.chain_budget, walltime=a.walltime, queue=a.queue,
                         out_dir=tmp)
            row[name] = {"lost_rank_s": r.lost_oom + r.lost_cut, "lost_oom_rank_s": r.lost_oom,
                         "lost_rank_s_strict": r.lost_oom_strict + r.lost_cut,
                         "lost_cut_rank_s": r.lost_cut, "ooms": r.ooms, "cuts": r.cuts, "failed": r.failed,
                         "trials": r.trials, "wall": r.wall, "jobs": r.jobs, "allocation_rank_s": r.allocation,
                         "best": r.best}
        rows.append(row)
        print(f"  chain, seed {seed}: lost rank-s " + ", ".join(
            f"{k} {row[k]['lost_rank_s']:.1f}" for k in policies) + "; wall " + ", ".join(
            f"{k} {row[k]['wall']:.1f}" for k in policies), flush=True)

    def med(policy: str, key: str) -> float:
        return statistics.median(r[policy][key] for r in rows)

    summary = {k: {m: med(k, m) for m in ("lost_rank_s", "wall", "allocation_rank_s", "jobs", "failed", "best")}
               for k in policies}
    return {"blocks": [t.key for t in world.types], "walltime": a.walltime, "queue": a.queue,
            "budget": a.chain_budget, "checkpoints_per_trial": world.checkpoints,
            "cost_model": "(1 + 4 epochs) x (3 for large) / ranks; large runs out of memory on 8-GiB blocks "
                          "after 10 % of its duration",
            "rows": rows, "median": summary}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--copies", type=int, default=3, help="blocks of each type (typed and chain measurements)")
    p.add_argument("--horizon", type=float, default=150.0, help="simulated time of the steady-state search")
    p.add_argument("--target", type=float, default=0.15, help="figure of merit to reach (typed measurement)")
    p.add_argument("--batches", type=int, nargs="+", default=[6, 9, 12, 15, 18],
                   help="small batches: trials in all (6 blocks)")
    p.add_argument("--walltime", type=float, default=10.0, help="each job of the chain")
    p.add_argument("--queue", type=float, default=5.0, help="wait between a job's end and its successor's start")
    p.add_argument("--chain-budget", type=int, default=60)
    p.add_argument("--chain-checkpoints", type=int, default=1, help="checkpoints per trial (1: at its end)")
    p.add_argument("--typed-engines", nargs="+", default=["random", "genetic"],
                   help="engines of the typed measurement (the first gives the headline)")
    p.add_argument("--quick", action="store_true", help="tiny settings (smoke test)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.quick:
        a.seeds, a.horizon, a.copies, a.batches, a.chain_budget = 2, 30.0, 1, [6, 18], 12
    return a


def main(argv: list[str]) -> int:
    a = parse(argv)
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        typed_results = {e: typed(a, Path(tmp), e) for e in a.typed_engines}
        typed_result = typed_results[a.typed_engines[0]]
        batch_result = small_batch(a, Path(tmp))
        chain_result = chain(a, Path(tmp))
    m = chain_result["median"]
    better = "cheaper" if m["cheaper"]["wall"] <= m["end"]["wall"] else "end"
    lost = {k: sum(r[k]["lost_rank_s"] for r in chain_result["rows"]) for k in ("fifo", "cheaper", "end")}
    strict = {k: sum(r[k]["lost_rank_s_strict"] for r in chain_result["rows"]) for k in ("fifo", "cheaper", "end")}
    result = {
        "what": "simulated clocks around the real Search and placement: hardware-aware vs FIFO where placement "
                "can pay (typed speed-ups, the tail of a small batch, memory, the deadline)",
        "seeds": a.seeds,
        "typed_speedup_throughput_ratio": typed_result["median_throughput_ratio"],
        "small_batch_makespan_ratio": batch_result["declared"]["median_ratio"],
        "small_batch_makespan_ratio_learned": batch_result["learned"]["median_ratio"],
        "hardware_aware_lost_rank_seconds": lost[better],
        "fifo_lost_rank_seconds": lost["fifo"],
        "hardware_aware_lost_rank_seconds_strict": strict[better],
        "fifo_lost_rank_seconds_strict": strict["fifo"],
        "time_to_target_no_worse_seeds": typed_result["seeds_time_to_target_no_worse"],
        "deadline_nothing_fits": better,
        "typed": typed_results, "small_batch": batch_result, "chain": chain_result,
    }
    print(f"hetero: typed speed-ups {result['typed_speedup_throughput_ratio']:.2f}x, small batch "
          f"{result['small_batch_makespan_ratio']:.2f}x (learned {result['small_batch_makespan_ratio_learned']:.2f}x), "
          f"lost rank-s HA {lost[better]:.1f} / FIFO {lost['fifo']:.1f}, time to target no worse on "
          f"{result['time_to_target_no_worse_seeds']}/{a.seeds}; nothing fits the deadline: {better} "
          f"(median wall cheaper {m['cheaper']['wall']:.1f}, end {m['end']['wall']:.1f})")
    C.write_result(NAME, result, a.out, argv=argv, mpi=False, started_load=load0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
