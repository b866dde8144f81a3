"""A real ``nnlo optimize`` (MPI, the hook path, in the warm world) with blocks of 1 and 2 ranks: a trial that runs
out of memory on the one-rank block re-runs on the two-rank block; once a second trial has (the model declares no
size, so one trial's failure says nothing of another's), nothing of the class is sent to the small block again."""
from __future__ import annotations

import json

import pytest

from tests.helpers.env import REPO

pytestmark = pytest.mark.mpi
MODEL = str(REPO / "tests" / "optimize" / "oom_model.py")


def test_a_trial_out_of_memory_on_a_small_block_re_runs_on_a_larger_one(nnlo_mpi, tmp_path):
    out = tmp_path / "run"
    r = nnlo_mpi(4, "optimize", "--model", MODEL, "--block-sizes", "1,2", "--mode", "allreduce",
                 "--hyper-opt", "random", "--num-iterations", "4", "--seed", "2", "--output", str(out), cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    trials = json.loads((out / "trials.json").read_text())
    assert [t["id"] for t in trials] == [0, 1, 2, 3]
    assert all(t["status"] == "ok" and t["block"] == 1 for t in trials), trials  # none failed, all on the 2-rank
    costs = json.loads((out / "optimizer-state.json").read_text())["costs"]
    ooms = [c for c in costs if c["outcome"] == "oom"]
    # on the small block each trial at most once, and after two trials' evidence none of the class (whether the
    # small block probes a second trial before the big one has run them all is placement's choice)
    assert 1 <= len(ooms) <= 2 and {c["type"]["ranks"] for c in ooms} == {1}
    assert len({c["id"] for c in ooms}) == len(ooms)
    assert {c["type"]["ranks"] for c in costs if c["outcome"] == "ok"} == {2}
    assert f"trial {ooms[0]['id']} ran out of memory on block 0: it re-runs on another block type than 1 rank" \
        in r.stderr
    assert "assignment: hardware-aware" in r.stderr
