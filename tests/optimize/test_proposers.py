"""Parallel proposals: the coordinator's buffer (pure), the layout of proposer ranks, and one real MPI search
with heterogeneous blocks and two proposers on a small torch model, finished and then restored."""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from nnlo.optimize.engines import make_engine
from nnlo.optimize.proposers import STREAM_BASE, ProposalBuffer
from nnlo.optimize.space import Real, Space
from nnlo.roles import Shape
from nnlo_sched.layout import LayoutError, compute_layout
from nnlo_sched.profiles import load_profile
from tests.helpers.env import REPO, example
from tests.helpers.world import WorldRun

SPACE = Space([Real(0.0, 1.0, name="a")])


def test_the_buffer_keeps_every_proposer_busy_and_drops_duplicates():
    buf = ProposalBuffer(3, SPACE.key)
    assert buf.to_request() == [0, 1, 2]
    reqs = [buf.request(p, [{"a": 0.5}]) for p in (0, 1, 2)]
    assert len({r["stream"] for r in reqs}) == 3 and all(r["stream"] > STREAM_BASE for r in reqs)
    assert buf.to_request() == []  # all three under way
    buf.arrived(0, {"a": 0.1}, seen=set(), seconds=0.2)
    buf.arrived(1, {"a": 0.1}, seen=set())  # the same point twice: kept once
    buf.arrived(2, {"a": 0.5}, seen={SPACE.key({"a": 0.5})})  # pending elsewhere: dropped
    assert buf.ready == [{"a": 0.1}] and buf.duplicates == 2 and buf.ask_s == [0.2]
    assert buf.to_request() == [0, 1]  # depth 3: one buffered, two more requested
    assert buf.take(seen={SPACE.key({"a": 0.1})}) is None  # it ran meanwhile: never handed out twice
    buf.arrived(0, {"a": 0.3}, seen=set())
    assert buf.take(seen=set()) == {"a": 0.3}


def test_different_streams_are_different_acquisitions_of_the_same_state():
    coordinator = make_engine("random", SPACE, 7)
    for v in (0.1, 0.2):
        coordinator.tell({"a": v}, v)
    points = []
    for stream in (STREAM_BASE + 1, STREAM_BASE + 2):
        proposer = make_engine("random", SPACE, 7)
        proposer.load_state_dict(coordinator.state_dict())
        proposer.n_asked = stream
        points.append(proposer.ask([]))
    assert points[0] != points[1]


@pytest.mark.mpi
def test_a_failing_proposer_is_named_in_one_line_not_a_traceback(mpirun, nnlo_env, tmp_path):
    run = subprocess.run([mpirun, "-np", "2", sys.executable, str(REPO / "tests/optimize/proposer_failure_ranks.py"),
                          str(tmp_path)], capture_output=True, text=True, env=nnlo_env, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads((tmp_path / "rank-0.json").read_text())
    assert got == {"raised": "rank 1 (proposer): its proposal failed (ValueError: the acquisition found no finite "
                             "point)", "rank": 1, "role": "proposer", "busy": []}


def test_layout_sizes_and_places_proposers_and_heterogeneous_blocks():
    local = load_profile("local")
    shape = Shape.for_run(search=True, block_sizes=(6, 6, 3, 3), proposers=2)
    layout = compute_layout(local, shape, "optimize")
    assert layout.world_size == 21 and layout.blocks == 4
    d = layout.to_dict()
    assert d["block_sizes"] == [6, 6, 3, 3] and d["roles"]["proposer"] == 2 and d["shape"]["proposers"] == 2
    assert [r["role"] for r in d["ranks"][:4]] == ["coordinator", "proposer:p0", "proposer:p1", "b0:master:m0"]
    with pytest.raises(LayoutError, match="makes 4 blocks, not 2"):
        compute_layout(local, shape, "optimize", blocks=2)
    summit = load_profile("summit")
    filled = compute_layout(summit, Shape.for_run(search=True, block_size=6, proposers=2), "optimize", nodes=2)
    assert (filled.world_size - 3) % 6 == 0 and filled.hierarchy.proposers == (1, 2)
    with pytest.raises(LayoutError, match="cannot hold the 21 ranks of --block-sizes 6,6,3,3"):
        compute_layout(summit, shape, "optimize", nodes=1, gpus_per_worker=1)


TREE_SPACE = """
[dropout]
type = "real"
low = 0.0
high = 0.3

[arch]
type = "categorical"
values = ["mlp", "linear"]

[arch.branches.mlp.hidden]
type = "integer"
low = 8
high = 48

[arch.branches.mlp.act]
type = "categorical"
values = ["relu", "tanh"]

[arch.branches.mlp.act.branches.tanh.gain]
type = "real"
low = 0.5
high = 2.0
"""

TREE_MODEL = """
import json, os
import torch
from torch import nn

def get_name():
    return "digits_tree"

def get_features():
    return "features"

def get_labels():
    return "labels"

class Scaled(nn.Module):
    def __init__(self, gain):
        super().__init__()
        self.gain = gain
    def forward(self, x):
        return torch.tanh(self.gain * x)

def get_model(dropout=0.0, arch="linear", hidden=16, act="relu", gain=1.0):
    with open(os.environ["TREE_LOG"], "a") as f:  # what the model was built with (active parameters only)
        f.write(json.dumps({"arch": arch, **({"hidden": hidden, "act": act} if arch == "mlp" else {}),
                            **({"gain": gain} if act == "tanh" and arch == "mlp" else {})}) + "\\n")
    if arch == "linear":
        return nn.Sequential(nn.Dropout(dropout), nn.Linear(64, 10))
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU() if act == "relu" else Scaled(gain), nn.Dropout(dropout),
                         nn.Linear(hidden, 10))
"""


@pytest.mark.mpi
def test_heterogeneous_blocks_tree_space_kfold_and_two_proposers_finish_and_restore(nnlo_env, nnlo_mpi, tmp_path):
    """Issue 17's whole search in one real run: blocks of 2 and 4 ranks (each split into 2 folds), a tree
    space of two levels, the folds' spread told to the GP as noise, 2 proposer ranks (9 ranks), a small torch
    model; then --opt-restore adds trials, in another allocation: one block of 2 (5 ranks: the warm world; a
    second 9-rank launch reached no code of its own, docs/testing.md "What was merged or moved")."""
    data = tmp_path / "data"
    example("make_digits").make_digits(data)
    (tmp_path / "tree_model.py").write_text(TREE_MODEL)
    (tmp_path / "space.toml").write_text(TREE_SPACE)
    out, built = tmp_path / "run", tmp_path / "built.jsonl"
    env = dict(nnlo_env, TREE_LOG=str(built))

    def search(n: int, *extra: str, blocks: str = "2,4", ranks: int = 9) -> WorldRun:
        """``mpirun -np RANKS python -m nnlo_sched optimize ...``: 9 ranks are a real launch, 5 the warm world."""
        return nnlo_mpi(ranks, "optimize", "--model", tmp_path / "tree_model.py", "--space", tmp_path / "space.toml",
                        "--train", data / "train.list", "--val", data / "val.list", "--block-sizes", blocks,
                        "--n-fold", "2", "--proposers", "2", "--epochs", "1", "--batch", "64", "--mode", "allreduce",
                        "--hyper-opt", "bayesian", "--n-initial-points", "2", "--num-iterations", str(n),
                        "--seed", "3", "--fom", "val_loss", "--output", out, *extra, env=env, cwd=REPO, timeout=300)

    r = search(3)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "1 coordinator, 2 proposer" in r.stderr and "2 block(s) of 2,4" in r.stderr
    assert "assignment: hardware-aware; 2 proposer ranks" in r.stderr
    first = json.loads((out / "trials.json").read_text())
    assert [t["status"] for t in first] == ["ok"] * 3
    r = search(5, "--opt-restore", blocks="2", ranks=5)
    assert r.returncode == 0, r.stderr[-3000:]
    table = json.loads((out / "trials.json").read_text())
    assert [t["id"] for t in table] == list(range(5)) and table[:3] == first  # nothing lost or repeated
    assert len({json.dumps(t["params"], sort_keys=True) for t in table}) == 5  # proposals merged, no duplicates
    assert {t["block"] for t in table} <= {0, 1}
    for t in table:  # two folds each, their spread recorded; only a branch's own parameters are present
        assert len(t["fold_foms"]) == 2 and t["fom_std"] is not None
        p = t["params"]
        assert ("hidden" in p) == ("act" in p) == (p["arch"] == "mlp")
        assert ("gain" in p) == (p.get("act") == "tanh")
    models = [json.loads(line) for line in built.read_text().splitlines()]
    assert {json.dumps(m, sort_keys=True) for m in models} <= {
        json.dumps({k: v for k, v in t["params"].items() if k != "dropout"}, sort_keys=True) for t in table}
    state = json.loads((out / "optimizer-state.json").read_text())
    assert "branches" in state["space"]["arch"]
    assert len(state["engine_state"]["variances"]) == 5  # the fold noise reached the surrogate
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert [r["gain"] == "" for r in rows] == ["gain" not in t["params"] for t in table]
