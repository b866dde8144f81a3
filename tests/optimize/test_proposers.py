"""Parallel proposals: the coordinator's buffer (pure), the layout of proposer ranks, and one real MPI search
with heterogeneous blocks and two proposers on a small torch model, finished and then restored."""
from __future__ import annotations

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
from tests.conftest import REPO

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


@pytest.mark.mpi
def test_heterogeneous_blocks_and_two_proposers_finish_and_restore(mpirun, nnlo_env, tmp_path):
    """Blocks of 1 and 2 all-reduce replicas, 2 proposer ranks (6 ranks), a small torch model; then
    --opt-restore adds trials."""
    data = tmp_path / "data"
    subprocess.run([sys.executable, str(REPO / "examples" / "make_digits.py"), "--out", str(data)], check=True,
                   capture_output=True, timeout=120)
    out = tmp_path / "run"

    def search(n: int, *extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [mpirun, "-np", "6", sys.executable, "-m", "nnlo_sched", "optimize",
               "--model", str(REPO / "examples" / "digits_torch.py"), "--train", str(data / "train.list"),
               "--val", str(data / "val.list"), "--block-sizes", "1,2", "--proposers", "2", "--epochs", "1",
               "--batch", "64", "--mode", "allreduce", "--hyper-opt", "random", "--num-iterations", str(n),
               "--fom", "val_accuracy", "--output", str(out), *extra]
        return subprocess.run(cmd, env=nnlo_env, cwd=REPO, capture_output=True, text=True, timeout=300)

    r = search(2)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "1 coordinator, 2 proposer" in r.stderr and "2 block(s) of 1,2" in r.stderr
    assert "assignment: hardware-aware; 2 proposer ranks" in r.stderr
    first = json.loads((out / "trials.json").read_text())
    assert [t["status"] for t in first] == ["ok"] * 2
    r = search(4, "--opt-restore")
    assert r.returncode == 0, r.stderr[-3000:]
    table = json.loads((out / "trials.json").read_text())
    assert [t["id"] for t in table] == list(range(4)) and table[:2] == first  # nothing lost or repeated
    keys = {json.dumps(t["params"], sort_keys=True) for t in table}
    assert len(keys) == 4  # the proposers' points are merged without duplicates
    assert {t["block"] for t in table} <= {0, 1}
