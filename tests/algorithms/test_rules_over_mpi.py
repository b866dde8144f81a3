"""The update rules on buffers that really travel between MPI ranks (uppercase, contiguous float32)."""
from __future__ import annotations

import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI
    from nnlo.algorithms import downpour, easgd, synchronous
    from nnlo.algorithms.optimizers import make_optimizer

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    n = 1000
    rng = np.random.default_rng(rank)
    delta = rng.normal(size=n).astype(np.float32)

    # synchronous: Allreduce(SUM) then scale_in_place == mean of the gathered updates
    total = np.empty(n, np.float32)
    comm.Allreduce(delta, total, op=MPI.SUM)
    synchronous.scale_in_place(total, size)
    gathered = comm.gather(delta, root=0)
    if rank == 0:
        np.testing.assert_allclose(total, np.mean(gathered, axis=0), rtol=1e-5, atol=1e-6)

    # Downpour: the master applies every worker's delta with sgd:lr=1 -> center + sum of the deltas
    center = np.zeros(n, np.float32)
    if rank == 0:
        opt, buf = make_optimizer("sgd:lr=1"), np.empty(n, np.float32)
        for _ in range(size - 1):
            status = MPI.Status()
            comm.Recv(buf, source=MPI.ANY_SOURCE, tag=1, status=status)
            downpour.apply(center, buf, opt)
        expected = np.sum(gathered[1:], axis=0, dtype=np.float32)
        np.testing.assert_allclose(center, expected, rtol=1e-5, atol=1e-5)
    else:
        comm.Send(delta, dest=0, tag=1)

    # EASGD: one exchange per worker; the master's and the workers' weights move by opposite amounts
    alpha = easgd.alpha(0.9, size - 1)
    weights = np.full(n, float(rank), np.float32)
    before = comm.allreduce(float(weights.sum()))
    if rank == 0:
        worker_w = np.empty(n, np.float32)
        for w in range(1, size):
            comm.Send(weights, dest=w, tag=2)          # the center before this exchange
            comm.Recv(worker_w, source=w, tag=3)       # the worker's weights before it
            easgd.master_update(weights, worker_w, alpha)
    else:
        center_w = np.empty(n, np.float32)
        comm.Recv(center_w, source=0, tag=2)
        comm.Send(weights, dest=0, tag=3)
        easgd.worker_update(weights, center_w, alpha)
    after = comm.allreduce(float(weights.sum()))
    if rank == 0:
        assert abs(after - before) < 1e-2 * n, (before, after)
        print("rules over mpi ok", flush=True)
""")


@pytest.mark.mpi
def test_rules_on_buffers_sent_between_ranks(tmp_path, nnlo_mpi):
    script = tmp_path / "rules.py"
    script.write_text(SCRIPT)
    proc = nnlo_mpi(3, script, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rules over mpi ok" in proc.stdout
