"""Parallel proposals: mean block idle time with P = 1, 2, 4 proposers, 32 blocks, 1-s trials.

A discrete-event simulation drives the real coordinator-side code without MPI: ``Search`` (hand-out, pending
points, results) and ``nnlo.optimize.proposers.ProposalBuffer`` (which proposer to ask, merging and dropping
duplicates); each proposer answers with the real engine's ask on a copy of the engine state it was sent
(``Engine.load_state_dict`` + its own random stream), delivered ``--ask-s`` seconds after the request (the
time a proposal costs; default 0.1 s, a Gaussian-process ask at ~10 observations on one core,
docs/performance.md). Trials take 1 s (+-10 %). P = 1 is today's coordinator asking ahead (one proposal
under way at a time). A block is idle from the moment it reports until its next trial starts.

Target (issue 17): mean block idle time < 10 % with the best P.

    bench/run.sh proposers               # P = 1, 2, 4; 30 s of simulated search, 2 seeds
    bench/run.sh proposers --quick       # smoke test
"""
from __future__ import annotations

import argparse
import heapq
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import _common as C

from nnlo.optimize.engines import make_engine
from nnlo.optimize.proposers import ProposalBuffer
from nnlo.optimize.results import Objective
from nnlo.optimize.search import Search
from nnlo.optimize.space import Real, Space

NAME = "proposers"
SPACE = Space([Real(0.0, 1.0, name="a"), Real(0.0, 1.0, name="b"), Real(0.0, 1.0, name="c")])


def simulate(n_proposers: int, blocks: int, trial_s: float, ask_s: float, horizon: float, seed: int,
             engine: str, out_dir: Path) -> dict[str, Any]:
    rng = np.random.default_rng([seed, 7])
    search = Search(make_engine(engine, SPACE, seed), Objective.parse("val_loss"), num_iterations=10 ** 6,
                    out_dir=out_dir, blocks=blocks, propose=lambda pending: taken.pop())
    taken: list[dict[str, Any]] = []  # the proposal the next hand-out takes (the proposer ranks' buffer)
    buffer = ProposalBuffer(n_proposers, SPACE.key)
    events: list[tuple[float, int, str, int, Any]] = []  # (time, order, kind, who, payload)
    order = 0
    idle_since: dict[int, float] = dict.fromkeys(range(blocks), 0.0)
    idle_total = [0.0] * blocks
    done = 0

    def push(t: float, kind: str, who: int, payload: Any = None) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (t, order, kind, who, payload))

    def pump(now: float) -> None:
        for p in buffer.to_request():
            request = buffer.request(p, [*search.pending(), *buffer.ready])
            proposer = make_engine(engine, SPACE, seed)
            proposer.load_state_dict(search.engine.state_dict())
            proposer.n_asked = request["stream"]
            push(now + ask_s, "proposal", p, proposer.ask(request["pending"]))

    def dispatch(now: float) -> None:
        for b in sorted(idle_since, key=lambda k: idle_since[k]):
            point = buffer.take(search.engine.seen(search.pending()))
            if point is None:
                break
            taken.append(point)
            trial = search.next_trial(b, now)
            assert trial is not None
            idle_total[b] += now - idle_since.pop(b)
            push(now + trial_s * (1 + 0.1 * (2 * rng.random() - 1)), "result", b, trial.id)

    pump(0.0)
    now = 0.0
    while events:
        now, _, kind, who, payload = heapq.heappop(events)
        if now > horizon:
            break
        if kind == "proposal":
            buffer.arrived(who, payload, search.engine.seen(search.pending()))
        else:
            search.record(payload, [{"metrics": {"val_loss": float(rng.random())}}], who, now=now)
            done += 1
            idle_since[who] = now
        dispatch(now)
        pump(now)
    for b, since in idle_since.items():
        idle_total[b] += horizon - since
    return {"proposers": n_proposers, "trials": done, "mean_idle_fraction": float(np.mean(idle_total) / horizon),
            "duplicates_dropped": buffer.duplicates}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=32)
    p.add_argument("--trial-s", type=float, default=1.0)
    p.add_argument("--ask-s", type=float, default=0.1, help="seconds one proposal costs a proposer")
    p.add_argument("--horizon", type=float, default=30.0, help="simulated seconds")
    p.add_argument("--proposers", default="1,2,4")
    p.add_argument("--engine", default="random", choices=["random", "genetic"])
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="tiny settings (smoke test)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.quick:
        a.horizon, a.seeds, a.blocks = 8.0, 1, 16
    return a


def main(argv: list[str]) -> int:
    a = parse(argv)
    load0 = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in [int(x) for x in a.proposers.split(",")]:
            runs = [simulate(p, a.blocks, a.trial_s, a.ask_s, a.horizon, s, a.engine, Path(tmp))
                    for s in range(a.seeds)]
            idle = float(np.mean([r["mean_idle_fraction"] for r in runs]))
            rows.append({"proposers": p, "mean_idle_fraction": idle,
                         "trials_per_s": float(np.mean([r["trials"] for r in runs])) / a.horizon,
                         "duplicates_dropped": sum(r["duplicates_dropped"] for r in runs)})
            print(f"  P={p}: blocks idle {idle:.1%}, {rows[-1]['trials_per_s']:.1f} trials/s", flush=True)
    best = min(rows, key=lambda r: r["mean_idle_fraction"])
    result = {"what": "simulated 32 blocks: mean block idle time with P proposers",
              "blocks": a.blocks, "trial_s": a.trial_s, "ask_s": a.ask_s, "horizon_s": a.horizon,
              "engine": a.engine, "seeds": a.seeds, "rows": rows,
              "best_proposers": best["proposers"], "best_mean_idle_fraction": best["mean_idle_fraction"]}
    print(f"proposers: best P={best['proposers']} with {best['mean_idle_fraction']:.1%} idle")
    C.write_result(NAME, result, a.out, argv=argv, mpi=False, started_load=load0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
