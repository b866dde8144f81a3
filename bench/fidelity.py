"""Stopping bad trials early (issue 27): ASHA, Hyperband and PBT against training every trial fully.

Simulated clocks drive the real search code: ``nnlo.optimize.search.Search`` with its engine, the real
schedules (``nnlo.optimize.schedules``) and the real objective-hook runner (``HookRunner``: the trial's state
kept in its folder, PBT's children copied from their donors by ``trial_files.inherit``) on
``examples/curves.py`` - learning curves that cross (a high learning rate or a narrow model starts fast and
ends high) and where a schedule of the learning rate pays (its docstring has the family). A job's simulated
duration is the epochs it trains times ``--epoch-s``; the numbers are deterministic and do not depend on the
machine's load. Parts:

* **ratio** - ASHA and Hyperband against ``full`` (every trial ``--epochs``), the same engine, the same blocks
  and the same simulated time (so the same rank-seconds), ``--seeds`` seeds: rank-seconds until a trial
  *trained to --epochs* reaches the target (the 1 % quantile of the final loss over the prior), and the best
  such trial at the end. Targets (issue 27): median ASHA/full ratio <= 0.5; ASHA as good or better at equal
  rank-seconds on >= 8 of 10 seeds.
* **crossing** - the ratio part on ``CURVES_FAMILY=crossing``: curves whose early ranks mislead (rank
  correlation ~0.4 between 1 and 27 epochs over the prior, like a model on noisy labels). Reported beside the
  best losses: the rank correlation between rungs each ASHA and Hyperband run measured from its own trials
  (``best.json``'s ``rung_correlation``, what ``nnlo status`` shows), so the warning can be checked against
  the outcome.
* **pbt** - PBT (population 16, steps of 3 epochs) against ASHA and random search (``full``) with the rank-seconds
  PBT used; and the best a *constant* configuration can reach at all (from 20,000 draws without noise): PBT
  below it means it found a schedule.
* **busy** - 32 simulated blocks, 1-s epochs, ASHA: the fraction of block time spent training, the
  coordinator's real decision time (``record`` + ``next_trial``, measured on this machine) serialised on the
  simulated clock; a synchronous successive halving (a barrier at every rung) beside it. Target >= 95 %.
* **walltimes** (real processes) - a shared ASHA search as 3 local chains (``nnlo submit --cluster local
  --jobs 3``) whose jobs are SIGKILLed 3 times at random: every trial's rung history intact, no epoch trained
  twice beyond a killed stage's last checkpoint, no trial lost or run twice, and the best configuration
  against an uninterrupted run with the same seed.
* **digits** (real training, ``--digits``; minutes) - ``nnlo optimize`` on the digits example: ASHA against
  ``full`` with the same ranks and the same wall time (ASHA gets ``--deadline`` = full's duration).

    bench/run.sh fidelity                     # ratio, crossing, pbt, busy and walltimes (minutes)
    bench/run.sh fidelity --digits            # and the real training
    bench/run.sh fidelity --quick             # smoke test
"""
from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import _common as C

sys.path.insert(0, str(C.REPO / "examples"))
import curves  # the learning-curve family (examples/curves.py)

from nnlo.optimize.coordinator import SAVE_SHARE
from nnlo.optimize.engines import make_engine
from nnlo.optimize.fidelity import rung_correlation
from nnlo.optimize.results import Objective
from nnlo.optimize.runners import HookRunner
from nnlo.optimize.schedules import ScheduleSpec, make_schedule
from nnlo.optimize.search import Search
from nnlo.optimize.space import from_model
from nnlo.optimize.trial_files import read_hook_state, trial_dir

NAME = "fidelity"
SPACE = from_model(curves)
OBJECTIVE = Objective.parse("val_loss")


class _Comm:
    """The hook runner's group communicator: a group of one rank."""

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's spelling
        return 0


# -- the simulation -------------------------------------------------------------------------------------
def prior_final(epochs: int, n: int = 20000, seed: int = 12345) -> np.ndarray:
    """Final losses (no noise) of ``n`` configurations drawn from the prior, trained ``epochs`` at constant
    hyperparameters."""
    rng = np.random.default_rng(seed)
    return np.array([curves.loss_after(SPACE.sample(rng), epochs) for _ in range(n)])


def rank_correlations(epochs: int, checkpoints: list[int], n: int = 3000) -> dict[str, float]:
    """Spearman correlation between the loss after ``e`` epochs and after ``epochs``, over random configs."""
    rng = np.random.default_rng(7)
    points = [SPACE.sample(rng) for _ in range(n)]
    final = np.argsort(np.argsort([curves.loss_after(p, epochs) for p in points]))
    out = {}
    for e in checkpoints:
        early = np.argsort(np.argsort([curves.loss_after(p, e) for p in points]))
        out[str(e)] = float(np.corrcoef(early, final)[0, 1])
    return out


def simulate(spec: ScheduleSpec | None, *, engine: str, seed: int, blocks: int, epochs: int, epoch_s: float,
             horizon: float, n_trials: int, out: Path, target: float | None = None,
             overhead: bool = False, jitter: float = 0.0) -> dict[str, Any]:
    """One search on the simulated clock; returns what the parts report.

    ``overhead``: the coordinator's real decision time (record + next_trial, wall clock here) is added to the
    simulated clock, one decision at a time (the coordinator is one process), and so is its save of the state
    and tables, done as the coordinator does it: once no other result is waiting. ``jitter``: a job takes its
    epochs x ``epoch_s`` x U(1 - jitter, 1 + jitter) (stragglers)."""
    slow = np.random.default_rng([seed, 0xB5])
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    schedule = make_schedule(spec or ScheduleSpec(max_epochs=epochs), SPACE)  # None: full, a schedule too
    search = Search(make_engine(engine, SPACE, seed, n_initial_points=10), OBJECTIVE, num_iterations=n_trials,
                    out_dir=out, schedule=schedule, blocks=blocks)
    runner = HookRunner(curves, OBJECTIVE.name)
    os.environ["CURVES_EPOCHS"] = str(epochs)
    events: list[tuple[float, int, int, dict[str, Any], float]] = []
    idle: set[int] = set()
    coordinator_free = 0.0
    decide_s: list[float] = []
    save_s: list[float] = []
    save_after = 0.0
    train_s = 0.0
    reached: float | None = None
    best: float | None = None
    curve: list[tuple[float, float]] = []  # (time, best full-fidelity fom so far)
    jobs = 0

    def start(b: int, now: float, spent: float) -> None:
        nonlocal coordinator_free, train_s, jobs
        t0 = time.perf_counter()
        trial = search.next_trial(b, now)
        spent += time.perf_counter() - t0
        begin = now
        if overhead:
            begin = max(now, coordinator_free) + spent
            coordinator_free = begin
            decide_s.append(spent)
        if trial is None:
            idle.add(b)
            return
        job_epochs = search.job_epochs(trial)
        before = read_hook_state(trial_dir(out, trial.id, 0))[1] if job_epochs is not None else 0
        outcome = runner.run(_Comm(), trial.id, trial.params, 0, 1, out, epochs=job_epochs)
        trained = ((job_epochs if job_epochs is not None else epochs) - before) * epoch_s
        if jitter:
            trained *= float(slow.uniform(1 - jitter, 1 + jitter))
        end = begin + trained
        train_s += max(0.0, min(end, horizon) - min(begin, horizon))
        jobs += 1
        heapq.heappush(events, (end, b, trial.id, outcome.to_dict(), trained))

    for b in range(blocks):
        start(b, 0.0, 0.0)
    now = 0.0
    while events:
        now, b, tid, outcome, _ = heapq.heappop(events)
        if now > horizon:
            now = horizon
            break
        t0 = time.perf_counter()
        trial = search.record(tid, [outcome], b, now=now)
        spent = time.perf_counter() - t0
        full = not schedule.spec.staged or trial.epochs == epochs
        if full and trial.fom is not None and (best is None or trial.fom < best):
            best = trial.fom
            curve.append((now, best))
            if target is not None and reached is None and best <= target:
                reached = now
        start(b, now, spent)
        for other in sorted(idle):  # a result may make a promotion (or PBT's next step) possible
            idle.discard(other)
            start(other, now, 0.0)
        clock = max(now, coordinator_free)
        if overhead and clock >= save_after and (not events or events[0][0] > clock):  # as the coordinator does
            t0 = time.perf_counter()
            search.save()
            save_s.append(time.perf_counter() - t0)
            coordinator_free = clock + save_s[-1]
            save_after = coordinator_free + save_s[-1] / SAVE_SHARE
    end = now if not events else horizon
    return {"reached_s": reached, "best": best, "end_s": end, "busy": train_s / (blocks * max(end, 1e-9)),
            "trials": search.next_id, "jobs": jobs, "curve": curve,
            "rung_correlation": rung_correlation([(t.id, r) for t in search.finished.values() for r in t.rungs
                                                  if r.get("status") == "ok" and r.get("fom") is not None],
                                                 OBJECTIVE),
            "decide_ms_median": 1e3 * statistics.median(decide_s) if decide_s else None,
            "decide_ms_p99": 1e3 * float(np.percentile(decide_s, 99)) if decide_s else None,
            "saves": len(save_s), "save_ms_median": 1e3 * statistics.median(save_s) if save_s else None,
            "save_ms_last": 1e3 * save_s[-1] if save_s else None,
            "completed": search.complete()}


def sync_halving_busy(blocks: int, epoch_s: float, budgets: tuple[int, ...], eta: float, horizon: float, n0: int,
                      jitter: float, seed: int = 0) -> float:
    """Block-busy fraction of *synchronous* successive halving: brackets of ``n0`` configurations, every rung
    waiting for its slowest job (a job's duration: its epochs x ``epoch_s`` x U(1 - jitter, 1 + jitter)),
    the next bracket after the last rung; jobs go to the first free block."""
    rng = np.random.default_rng(seed)
    now, busy = 0.0, 0.0
    while now < horizon:
        n, previous = n0, 0
        for b in budgets:
            free = [now] * blocks
            for _ in range(n):
                i = int(np.argmin(free))
                d = (b - previous) * epoch_s * rng.uniform(1 - jitter, 1 + jitter)
                busy += max(0.0, min(free[i] + d, horizon) - min(free[i], horizon))
                free[i] += d
            now, previous, n = max(free), b, max(1, int(n / eta))
            if now >= horizon:
                break
    return busy / (blocks * horizon)


# -- the parts ------------------------------------------------------------------------------------------
def part_ratio(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    finals = prior_final(a.epochs)
    target = float(np.quantile(finals, a.target_quantile))
    asha = ScheduleSpec("asha", max_epochs=a.epochs, min_epochs=1, eta=3)
    hyperband = ScheduleSpec("hyperband", max_epochs=a.epochs, min_epochs=1, eta=3)
    rows = []
    for seed in range(a.seeds):
        row: dict[str, Any] = {"seed": seed}
        for name, spec in (("full", None), ("asha", asha), ("hyperband", hyperband)):
            r = simulate(spec, engine=a.engine, seed=seed, blocks=a.blocks, epochs=a.epochs, epoch_s=a.epoch_s,
                         horizon=a.horizon, n_trials=10 ** 6, out=tmp / name, target=target)
            row[name] = {k: r[k] for k in ("reached_s", "best", "trials", "jobs", "rung_correlation")}
        for name in ("asha", "hyperband"):
            mine, full = row[name]["reached_s"], row["full"]["reached_s"]
            row[f"{name}_over_full"] = (math.inf if mine is None else mine / (full if full is not None else a.horizon))
            row[f"{name}_as_good"] = row[name]["best"] is not None and (
                row["full"]["best"] is None or row[name]["best"] <= row["full"]["best"])
        rows.append(row)
        print(f"  seed {seed}: time to target full {_s(row['full']['reached_s'])}, asha {_s(row['asha']['reached_s'])}"
              f" ({row['asha_over_full']:.2f}), hyperband {_s(row['hyperband']['reached_s'])}; best full "
              f"{_f(row['full']['best'])} asha {_f(row['asha']['best'])} hyperband {_f(row['hyperband']['best'])}",
              flush=True)
    out: dict[str, Any] = {
        "what": "time (rank-seconds) until a trial trained to --epochs reaches the target, and the best such trial "
                "at equal rank-seconds: ASHA and Hyperband against full, same engine, same simulated blocks",
        "engine": a.engine, "blocks": a.blocks, "epochs": a.epochs, "epoch_s": a.epoch_s, "horizon_s": a.horizon,
        "rank_seconds_budget": a.blocks * a.horizon, "target_quantile": a.target_quantile, "target": target,
        "full_fidelity_oracle_best": float(finals.min()),
        "rank_correlation_with_final": rank_correlations(a.epochs, [1, 3, 9]), "seeds": rows}
    for name in ("asha", "hyperband"):
        out[f"{name}_over_full_rank_seconds_median"] = statistics.median(r[f"{name}_over_full"] for r in rows)
        out[f"{name}_as_good_seeds"] = sum(r[f"{name}_as_good"] for r in rows)
        out[f"{name}_best_median"] = _median([r[name]["best"] for r in rows])
    out["full_best_median"] = _median([r["full"]["best"] for r in rows])
    out["full_reached_seeds"] = sum(r["full"]["reached_s"] is not None for r in rows)
    return out


def part_crossing(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    os.environ["CURVES_FAMILY"] = "crossing"  # early ranks mislead
    try:
        return part_ratio(a, tmp)
    finally:
        os.environ.pop("CURVES_FAMILY", None)


def _first_rho(row: dict[str, Any]) -> float | None:
    """The lowest rung's correlation with the top one a run measured from its own trials (None: too few)."""
    corr = row.get("rung_correlation")
    return corr["rungs"][0]["rho"] if corr else None


def part_pbt(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    os.environ["CURVES_FAMILY"] = "schedule"  # the setting of the family where a schedule pays
    try:
        return _pbt(a, tmp)
    finally:
        os.environ.pop("CURVES_FAMILY", None)


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _pbt(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    population, interval = a.population, 3
    n = population + (population // 4) * (a.epochs // interval - 1)  # a child per bottom quarter, every step
    pbt = ScheduleSpec("pbt", max_epochs=a.epochs, population=population, interval=interval)
    asha = ScheduleSpec("asha", max_epochs=a.epochs, min_epochs=1, eta=3)
    rows = []
    for seed in range(a.seeds):
        p = simulate(pbt, engine="random", seed=seed, blocks=a.blocks, epochs=a.epochs, epoch_s=a.epoch_s,
                     horizon=10 ** 9, n_trials=n, out=tmp / "pbt")
        budget = p["end_s"]
        row = {"seed": seed, "rank_seconds": a.blocks * budget, "pbt": p["best"], "pbt_trials": p["trials"]}
        for name, spec in (("asha", asha), ("random", None)):
            r = simulate(spec, engine="random", seed=seed, blocks=a.blocks, epochs=a.epochs, epoch_s=a.epoch_s,
                         horizon=budget, n_trials=10 ** 6, out=tmp / name)
            row[name] = r["best"]
        rows.append(row)
        print(f"  seed {seed}: best after {a.blocks * budget:.0f} rank-s: pbt {row['pbt']:.4f}, asha "
              f"{_f(row['asha'])}, random {_f(row['random'])}", flush=True)
    constant = float(prior_final(a.epochs).min())
    med = {k: _median([r[k] for r in rows]) for k in ("pbt", "asha", "random")}
    gain = {k: _median([None if r[k] is None or r["pbt"] is None else r[k] - r["pbt"] for r in rows])
            for k in ("asha", "random")}
    return {"what": "best final loss at PBT's rank-seconds on the 'schedule' curves: PBT (population, steps of 3 "
                    "epochs) against ASHA and random search; the best constant configuration of 20,000 draws "
                    "(no noise) beside", "family": "schedule",
            "population": population, "interval": interval, "budget_trials": n, "blocks": a.blocks,
            "epochs": a.epochs, "seeds": rows, "median": med, "best_constant_configuration": constant,
            "pbt_gain_over_asha_median": gain["asha"], "pbt_gain_over_random_median": gain["random"],
            "pbt_below_every_constant_seeds": sum(r["pbt"] is not None and r["pbt"] < constant for r in rows)}


def part_busy(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    spec = ScheduleSpec("asha", max_epochs=a.epochs, min_epochs=1, eta=3)
    r = simulate(spec, engine="random", seed=0, blocks=a.busy_blocks, epochs=a.epochs, epoch_s=1.0,
                 horizon=a.busy_horizon, n_trials=10 ** 6, out=tmp / "busy", overhead=True, jitter=a.jitter)
    budgets = make_schedule(spec, SPACE).budgets  # type: ignore[union-attr]
    k = len(budgets) - 1
    sync = {str(n0): sync_halving_busy(a.busy_blocks, 1.0, budgets, 3, a.busy_horizon, n0, a.jitter)
            for n0 in (3 ** (k + 1), a.busy_blocks * 3 ** k)}
    print(f"  {a.busy_blocks} blocks, 1-s epochs (+-{a.jitter:.0%}): ASHA busy {r['busy']:.1%} ({r['jobs']} jobs, "
          f"decisions median {r['decide_ms_median']:.2f} ms, p99 {r['decide_ms_p99']:.2f} ms; {r['saves']} saves, "
          f"the last {r['save_ms_last']:.0f} ms); synchronous halving "
          + ", ".join(f"{v:.1%} (brackets of {n})" for n, v in sync.items()), flush=True)
    return {"what": "fraction of block time spent training, 1-s epochs, the coordinator's real decision time on "
                    "the simulated clock", "blocks": a.busy_blocks, "horizon_s": a.busy_horizon, "engine": "random",
            "jitter": a.jitter, "asha_busy": r["busy"], "asha_jobs": r["jobs"], "asha_trials": r["trials"],
            "decide_ms_median": r["decide_ms_median"], "decide_ms_p99": r["decide_ms_p99"],
            "saves": r["saves"], "save_ms_median": r["save_ms_median"], "save_ms_last": r["save_ms_last"],
            "sync_halving_busy": sync}


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}s"


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


# -- across walltimes: real local chains, SIGKILLed -----------------------------------------------------
def _nnlo(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nnlo_sched", *args], env=env, cwd=C.REPO, capture_output=True,
                          text=True, timeout=timeout)


def _inner(a: argparse.Namespace) -> list[str]:
    return ["optimize", "--model", str(C.REPO / "examples" / "curves.py"), "--block-size", "1", "--mode",
            "allreduce", "--schedule", "asha", "--epochs", str(a.wall_epochs), "--num-iterations",
            str(a.wall_trials), "--hyper-opt", "random", "--seed", "5", "--lease-timeout", "4"]


def _journal(folder: Path) -> list[dict[str, Any]]:
    from nnlo.optimize.journal import read_journal

    return read_journal(folder)[0]


def part_walltimes(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    env = dict(os.environ, NNLO_HOME=str(tmp / "home"), PYTHONPATH=str(C.REPO), CURVES_EPOCH_S=str(a.wall_epoch_s))
    env.pop("CURVES_EPOCHS", None)
    results: dict[str, Any] = {}
    for kind in ("uninterrupted", "killed"):
        log = tmp / f"{kind}-epochs.jsonl"
        e = dict(env, CURVES_LOG=str(log))
        t0 = time.monotonic()
        sub = _nnlo("submit", "--cluster", "local", "--jobs", "3", "--blocks", "1", "-t", "20m", "--max-retries",
                    "6", "--name", kind, *_inner(a), env=e)
        if sub.returncode != 0:
            raise RuntimeError(f"nnlo submit failed: {sub.stderr}")
        run_id = sub.stdout.split()[2]
        search_dir = tmp / "home" / run_id
        kills = _kill_randomly(search_dir, a.kills if kind == "killed" else 0, a.wall_timeout, seed=a.kill_seed)
        wait = _nnlo("wait", run_id, "--every", "1", "--timeout", str(a.wall_timeout), env=e,
                     timeout=a.wall_timeout + 60)
        results[kind] = _check_walltimes(search_dir, log, kills, wait.returncode, time.monotonic() - t0)
        print(f"  {kind}: {json.dumps({k: v for k, v in results[kind].items() if k != 'kills'})}", flush=True)
    same = results["killed"]["best_params"] == results["uninterrupted"]["best_params"]
    order = results["killed"]["promotion_order"] == results["uninterrupted"]["promotion_order"]
    return {"what": "a shared ASHA search as 3 local chains, jobs SIGKILLed at random", **results,
            "same_best_configuration": same, "same_promotions": order}


def _kill_randomly(search_dir: Path, kills: int, timeout: float, seed: int) -> list[dict[str, Any]]:
    """SIGKILL the process group of a running chain job ``kills`` times, each while it trains a stage and after it
    has recorded something (so the chain resubmits rather than stops)."""
    from nnlo_sched.schedulers.base import RUNNING
    from nnlo_sched.search import search_state
    from nnlo_sched.state import ACTIVE_STATES

    rng = random.Random(seed)
    done: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(done) < kills and time.monotonic() < deadline:
        time.sleep(rng.uniform(1.0, 4.0))
        if search_state(search_dir)[0] not in ACTIVE_STATES:
            break  # the search ended before every kill
        candidates = []
        for qf in sorted(search_dir.glob("chains/c*/local/queue.json")):
            try:
                q = json.loads(qf.read_text())
            except (OSError, ValueError):
                continue
            for j in q.get("jobs", []):
                if j.get("state") == RUNNING and j.get("pid") and time.time() - (j.get("started") or 0) > 3:
                    candidates.append((qf.parent.parent.name, j))
        records = _journal(search_dir)
        open_by = {}
        from nnlo.optimize.journal import rebuild

        for lease in rebuild(records).open.values():
            open_by.setdefault(lease.holder, []).append(lease.id)
        candidates = [(c, j) for c, j in candidates if open_by.get(c)]
        if not candidates:
            continue
        chain, job = rng.choice(candidates)
        try:
            os.killpg(int(job["pid"]), signal.SIGKILL)
        except ProcessLookupError:
            continue
        done.append({"chain": chain, "job": job["id"], "at": time.time(), "trials": open_by[chain]})
    return done


def _check_walltimes(search_dir: Path, log: Path, kills: list[dict[str, Any]], rc: int, wall: float
                     ) -> dict[str, Any]:
    from collections import Counter

    from nnlo.optimize.journal import rebuild

    records = _journal(search_dir)
    state = rebuild(records)
    rung_results = Counter((r["id"], r.get("rung")) for r in records if r["kind"] == "result")
    intact = all([x["rung"] for x in t.rungs] == list(range((t.rung or 0) + 1)) for t in state.finished.values())
    trained: dict[str, list[int]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        ev = json.loads(line)
        trained.setdefault(json.dumps(ev["params"], sort_keys=True), []).append(ev["epoch"])
    killed_trials = {tid for k in kills for tid in k["trials"]}
    twice_beyond, twice_killed = 0, 0
    for t in state.finished.values():
        epochs = trained.get(json.dumps(t.params, sort_keys=True), [])
        extra = sum(n - 1 for n in Counter(epochs).values())
        if t.id in killed_trials:
            # allowed: the epochs after the stage's last checkpoint (the previous rung), trained again
            paused = {x["epochs"] for x in t.rungs}
            twice_killed += extra
            twice_beyond += sum(1 for e, n in Counter(epochs).items() if n > 1 and e in paused)
        else:
            twice_beyond += extra
    best = min((t for t in state.finished.values() if t.fom is not None and t.epochs == max(
        x.epochs or 0 for x in state.finished.values())), key=lambda t: t.fom, default=None)
    promotions = [r["id"] for r in records if r["kind"] == "resume"]
    return {"exit": rc, "wall_s": round(wall, 1), "trials": len(state.finished), "open": len(state.open),
            "lost": sorted(set(range(state.next_id)) - set(state.finished)),
            "rung_results_twice": sum(1 for n in rung_results.values() if n > 1), "rung_histories_intact": intact,
            "epochs_retrained_of_killed_stages": twice_killed, "epochs_trained_twice_beyond_checkpoints": twice_beyond,
            "kills": kills, "best_trial": best.id if best else None, "best_params": best.params if best else None,
            "best_fom": best.fom if best else None, "promotion_order": promotions}


# -- real training: digits ----------------------------------------------------------------------------------
def part_digits(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """ASHA against full on real training, at equal search time: both clocks start when the run's first trial
    starts (start-up excluded); ASHA runs until full's search time has passed (plus its start-up) and is judged
    on the trials it trained to --epochs within that time."""
    data = tmp / "digits"
    subprocess.run([sys.executable, str(C.REPO / "examples" / "make_digits.py"), "--out", str(data)], check=True,
                   capture_output=True, timeout=300)
    space = C.BENCH_DIR / "models" / "digits_space.toml"
    common = ["--model", str(C.REPO / "examples" / "digits_torch.py"), "--train", str(data / "train.list"),
              "--val", str(data / "val.list"), "--block-size", "2", "--space", str(space), "--hyper-opt", "random",
              "--fom", "val_accuracy", "--epochs", str(a.digits_epochs), "--batch", "64", "--seed", "1"]
    env = dict(os.environ, PYTHONPATH=str(C.REPO))
    out: dict[str, Any] = {"ranks": a.digits_np, "epochs": a.digits_epochs,
                           "what": "nnlo optimize on examples/digits_torch.py, random engine, equal search time"}
    t0 = time.time()
    full = subprocess.run([sys.executable, "-m", "nnlo_sched", "optimize", "-n", str(a.digits_np), *common,
                           "--num-iterations", str(a.digits_trials), "--output", str(tmp / "digits-full")],
                          env=env, capture_output=True, text=True, timeout=a.digits_timeout)
    out["full"] = _digits_result(tmp / "digits-full", full.returncode, time.time() - t0)
    budget = out["full"]["search_s"]
    t0 = time.time()
    asha = subprocess.run([sys.executable, "-m", "nnlo_sched", "optimize", "-n", str(a.digits_np), *common,
                           "--schedule", "asha", "--min-epochs", "1", "--num-iterations", "100000", "--deadline",
                           str(t0 + budget + a.digits_startup_s), "--output", str(tmp / "digits-asha")],
                          env=env, capture_output=True, text=True, timeout=a.digits_timeout + a.digits_startup_s)
    out["asha"] = _digits_result(tmp / "digits-asha", asha.returncode, time.time() - t0, budget)
    target = out["full"]["best"]
    out["target"] = target
    for name in ("full", "asha"):
        hit = [s for s, f in out[name]["completed"] if target is not None and f >= target]
        out[name]["rank_seconds_to_target"] = None if not hit else a.digits_np * min(hit)
    f, s = out["full"]["rank_seconds_to_target"], out["asha"]["rank_seconds_to_target"]
    out["asha_over_full_rank_seconds"] = None if not f or s is None else s / f
    out["rank_seconds"] = a.digits_np * budget
    print(f"  digits: {budget:.0f} s of search on {a.digits_np} ranks: best val_accuracy full {_f(out['full']['best'])}"
          f", asha {_f(out['asha']['best'])}; asha/full rank-seconds to full's best "
          f"{out['asha_over_full_rank_seconds']}", flush=True)
    return out


def _digits_result(folder: Path, rc: int, wall: float, budget: float | None = None) -> dict[str, Any]:
    """A run's trials on its search clock (0 = its first trial's start); within ``budget`` seconds if given."""
    try:
        table = json.loads((folder / "trials.json").read_text())
    except (OSError, ValueError):
        table = []
    origin = min((t["started"] for t in table if t.get("started")), default=None)
    if origin is None:
        return {"exit": rc, "wall_s": round(wall, 1), "trials": 0, "search_s": 0.0, "best": None, "completed": []}
    most = max((t.get("epochs") or 0 for t in table), default=0)
    done = [((t["rungs"][-1]["finished"] if t.get("rungs") else t["finished"]) - origin, t["fom"])
            for t in table if t.get("fom") is not None and (t.get("epochs") or 0) == most]
    search_s = max((s for s, _ in done), default=0.0)
    if budget is not None:
        done = [(s, f) for s, f in done if s <= budget]
    return {"exit": rc, "wall_s": round(wall, 1), "trials": len(table), "search_s": round(search_s, 1),
            "trained_full": len(done), "best": max((f for _, f in done), default=None), "completed": sorted(done)}


# -- main ---------------------------------------------------------------------------------------------------
def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default="ratio,crossing,pbt,busy,walltimes", help="comma-separated parts to run")
    p.add_argument("--digits", action="store_true", help="also the real training part (minutes)")
    p.add_argument("--engine", default="random", choices=["random", "bayesian", "genetic"],
                   help="the engine of the ratio part (the same for ASHA, Hyperband and full)")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--epochs", type=int, default=27)
    p.add_argument("--epoch-s", type=float, default=1.0)
    p.add_argument("--horizon", type=float, default=1200.0, help="simulated seconds of the ratio part")
    p.add_argument("--target-quantile", type=float, default=0.01)
    p.add_argument("--population", type=int, default=16)
    p.add_argument("--busy-blocks", type=int, default=32)
    p.add_argument("--busy-horizon", type=float, default=300.0)
    p.add_argument("--jitter", type=float, default=0.2, help="busy part: job durations x U(1 -+ jitter)")
    p.add_argument("--wall-trials", type=int, default=54)
    p.add_argument("--wall-epochs", type=int, default=27)
    p.add_argument("--wall-epoch-s", type=float, default=0.5)
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--kill-seed", type=int, default=11)
    p.add_argument("--wall-timeout", type=float, default=900.0)
    p.add_argument("--digits-np", type=int, default=5)
    p.add_argument("--digits-epochs", type=int, default=9)
    p.add_argument("--digits-trials", type=int, default=8)
    p.add_argument("--digits-timeout", type=float, default=1800.0)
    p.add_argument("--digits-startup-s", type=float, default=90.0,
                   help="seconds the ASHA run gets beyond full's search time for its start-up")
    p.add_argument("--quick", action="store_true", help="tiny settings (smoke test)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.quick:
        a.seeds, a.horizon, a.blocks, a.population, a.busy_blocks, a.busy_horizon = 2, 200.0, 4, 8, 8, 30.0
        a.wall_trials, a.wall_epochs, a.wall_epoch_s, a.kills = 12, 3, 0.4, 1
        a.digits_epochs, a.digits_trials, a.digits_np = 3, 2, 3
    return a


def main(argv: list[str]) -> int:
    a = parse(argv)
    load0 = os.getloadavg()
    parts = [x for x in a.parts.split(",") if x] + (["digits"] if a.digits else [])
    result: dict[str, Any] = {"curves": "examples/curves.py (its docstring: the learning-curve family)"}
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=shm) as tmpdir:  # the trials' state files: fsync on memory is free
        tmp = Path(tmpdir)
        for part in parts:
            print(f"{part}:", flush=True)
            result[part] = {"ratio": part_ratio, "crossing": part_crossing, "pbt": part_pbt, "busy": part_busy,
                            "walltimes": part_walltimes, "digits": part_digits}[part](a, tmp)
    summary = {}
    if "ratio" in result:
        r = result["ratio"]
        summary.update(asha_over_full_rank_seconds_median=r["asha_over_full_rank_seconds_median"],
                       asha_as_good_seeds=f"{r['asha_as_good_seeds']}/{a.seeds}",
                       hyperband_over_full_rank_seconds_median=r["hyperband_over_full_rank_seconds_median"],
                       hyperband_as_good_seeds=f"{r['hyperband_as_good_seeds']}/{a.seeds}")
    if "crossing" in result:
        r = result["crossing"]
        summary.update(crossing_asha_as_good_seeds=f"{r['asha_as_good_seeds']}/{a.seeds}",
                       crossing_hyperband_as_good_seeds=f"{r['hyperband_as_good_seeds']}/{a.seeds}",
                       crossing_best_median={k: r[f"{k}_best_median"] for k in ("full", "asha", "hyperband")},
                       crossing_asha_measured_rung0_rho=[_first_rho(row["asha"]) for row in r["seeds"]])
    if "pbt" in result:
        summary.update(pbt_gain_over_asha_median=result["pbt"]["pbt_gain_over_asha_median"],
                       pbt_gain_over_random_median=result["pbt"]["pbt_gain_over_random_median"])
    if "busy" in result:
        summary.update(asha_busy_32_blocks=result["busy"]["asha_busy"],
                       sync_halving_busy_32_blocks=result["busy"]["sync_halving_busy"])
    if "walltimes" in result:
        w = result["walltimes"]["killed"]
        summary.update(walltimes_lost=len(w["lost"]), walltimes_rung_results_twice=w["rung_results_twice"],
                       walltimes_epochs_twice_beyond_checkpoints=w["epochs_trained_twice_beyond_checkpoints"],
                       walltimes_same_best=result["walltimes"]["same_best_configuration"])
    result["summary"] = summary
    print(json.dumps(summary, indent=1))
    C.write_result(NAME, result, a.out, argv=argv, mpi=False, started_load=load0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
