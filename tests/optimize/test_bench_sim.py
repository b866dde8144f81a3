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


def test_hetero_compares_both_policies_at_equal_time(tmp_path, nnlo_env):
    doc = run("hetero", tmp_path, nnlo_env)
    assert doc["benchmark"] == "hetero" and len(doc["rows"]) == 2
    for r in doc["rows"]:
        assert r["fifo"]["trials"] > 0 and r["hardware_aware"]["trials"] > 0
        assert r["throughput_ratio"] == r["hardware_aware"]["throughput"] / r["fifo"]["throughput"]


def test_more_proposers_leave_blocks_less_idle(tmp_path, nnlo_env):
    doc = run("proposers", tmp_path, nnlo_env)
    idle = {r["proposers"]: r["mean_idle_fraction"] for r in doc["rows"]}
    assert set(idle) == {1, 2, 4} and idle[4] < idle[2] < idle[1]
