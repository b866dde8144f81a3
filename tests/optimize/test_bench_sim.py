"""The simulated benchmarks of heterogeneous blocks and parallel proposals run end to end (``--quick``)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.env import REPO

pytestmark = [pytest.mark.slow]


def run(name: str, tmp_path, nnlo_env) -> dict:
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / f"{name}.py"), "--quick", "--out", str(out)],
                          env=nnlo_env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def test_hetero_measures_where_placement_pays(tmp_path, nnlo_env):
    doc = run("hetero", tmp_path, nnlo_env)
    assert doc["benchmark"] == "hetero" and doc["seeds"] == 2
    for key in ("typed_speedup_throughput_ratio", "small_batch_makespan_ratio", "small_batch_makespan_ratio_learned",
                "hardware_aware_lost_rank_seconds", "fifo_lost_rank_seconds", "time_to_target_no_worse_seeds"):
        assert isinstance(doc[key], (int, float)), key
    typed = doc["typed"]["random"]
    assert [r["seed"] for r in typed["rows"]] == [0, 1]
    for r in typed["rows"]:
        assert r["fifo_trials"] > 0 and r["throughput_ratio"] == r["ha_trials"] / r["fifo_trials"]
    assert doc["typed_speedup_throughput_ratio"] == typed["median_throughput_ratio"]
    for r in doc["small_batch"]["declared"]["rows"]:
        assert r["ratio"] == r["fifo_makespan"] / r["ha_makespan"] and r["lower_bound"] <= r["ha_makespan"] + 1e-9
    chain = doc["chain"]
    assert doc["deadline_nothing_fits"] in ("cheaper", "end")
    assert doc["fifo_lost_rank_seconds"] == sum(r["fifo"]["lost_rank_s"] for r in chain["rows"])
    assert doc["hardware_aware_lost_rank_seconds"] == sum(r[doc["deadline_nothing_fits"]]["lost_rank_s"]
                                                          for r in chain["rows"])


def test_more_proposers_leave_blocks_less_idle(tmp_path, nnlo_env):
    doc = run("proposers", tmp_path, nnlo_env)
    idle = {r["proposers"]: r["mean_idle_fraction"] for r in doc["rows"]}
    assert set(idle) == {1, 2, 4} and idle[4] < idle[2] < idle[1]
