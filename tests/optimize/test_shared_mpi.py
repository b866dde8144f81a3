"""Two real ``nnlo optimize --shared`` jobs (mpirun, Branin hook) on one output folder; one is SIGKILLed
mid-trial: the other takes its trial over after the lease timeout and finishes the search with exactly the
requested number of trials, no id twice, and the engine state equal to one rebuilt from the journal."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nnlo.contract import OPTIMIZER_STATE_FILE
from nnlo.optimize.journal import read_journal, rebuild
from nnlo.optimize.results import Objective
from nnlo.optimize.shared import rebuilt_engine_state
from tests.helpers.env import REPO
from tests.helpers.participants import kill_first_when

pytestmark = pytest.mark.mpi
BRANIN = str(REPO / "examples" / "branin.py")
N = 8


def start(mpirun, env, out, name, log):
    cmd = [mpirun, "-np", "3", sys.executable, "-m", "nnlo_sched", "optimize", "--model", BRANIN,
           "--block-size", "2", "--hyper-opt", "random", "--num-iterations", str(N), "--output", str(out),
           "--shared", "--lease-timeout", "3"]
    e = dict(env, NNLO_PARTICIPANT=name, BRANIN_SLEEP="0.5", BRANIN_LOG=str(log))
    return subprocess.Popen(cmd, env=e, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def running(out, name):
    """Trials ``name`` holds a lease on and that have no result yet."""
    state = rebuild(read_journal(out)[0])
    return [lease.id for lease in state.open.values() if lease.holder == name], len(state.finished)


def test_a_killed_participants_trial_is_rerun_by_the_other(mpirun, nnlo_env, tmp_path):
    out, log = tmp_path / "run", tmp_path / "evals.jsonl"
    a = start(mpirun, nnlo_env, out, "A", log)
    b = start(mpirun, nnlo_env, out, "B", log)

    def held_by_a(state):  # A holds a trial and two trials are done: kill it mid-trial
        held = [lease.id for lease in state.open.values() if lease.holder == "A"]
        return held if held and len(state.finished) >= 2 else None

    _, at_death, err = kill_first_when(a, b, out, held_by_a, timeout=120, finish=180)
    victim = [lease.id for lease in at_death.open.values() if lease.holder == "A"]  # what A held when it died
    assert victim, "A died between trials"
    assert b.returncode == 0, err[-3000:]
    records, skipped = read_journal(out)
    assert skipped == []
    results = [r for r in records if r["kind"] == "result"]
    assert sorted(r["id"] for r in results) == list(range(N))  # exactly N, no id twice
    state = rebuild(records)
    taken = {r["id"] for r in records if r["kind"] == "lease" and r.get("from") == "A"}
    assert taken == set(victim), err[-3000:]
    for tid in victim:  # A's trial was taken over by B with the same parameters and finished there
        took = [r for r in records if r["kind"] == "lease" and r["id"] == tid and r["p"] == "B"]
        assert took and took[0].get("from") == "A", err[-3000:]
        assert state.finished[tid].params == next(r for r in records if r["kind"] == "propose"
                                                  and r["id"] == tid)["params"]
        assert next(r for r in results if r["id"] == tid)["p"] == "B"
    assert "taken over from A (lease expired)" in err
    saved = json.loads((out / OPTIMIZER_STATE_FILE).read_text())
    rebuilt = [[p, v] for p, v in state.observations(Objective.parse("val_loss"))]
    assert saved["engine_state"]["observations"] == rebuilt and saved["engine_state"]["n_asked"] == N
    assert saved["engine_state"] == rebuilt_engine_state(out)
    assert [t["id"] for t in json.loads((out / "trials.json").read_text())] == list(range(N))
