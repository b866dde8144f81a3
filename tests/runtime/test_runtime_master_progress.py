"""The master's live progress line: drawn only for the person at a terminal (the world's rank 0 of a plain
``nnlo train``), fed one update per epoch, and closed when training ends -- also when it fails."""
from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from mpi4py import MPI

from nnlo.config import TrainConfig
from nnlo.training.master import Master


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _master(epochs: int = 4, epoch: int = 0, comm=MPI.COMM_WORLD, top: int = 0) -> Master:
    """A Master with only what run()'s progress path reads (no workers, no backend)."""
    m = Master.__new__(Master)
    m.cfg = TrainConfig(model="m.py", epochs=epochs)
    m.ctx = SimpleNamespace(rank=comm.Get_rank(), group=SimpleNamespace(top=top, workers=()), comm=comm,
                            hierarchy=SimpleNamespace(rank_map=lambda: "test"))
    m.workers, m.epoch, m.failure, m.progress = (), epoch, None, None
    m.deadline = SimpleNamespace(describe=lambda: "no deadline")
    return m


def test_a_terminal_gets_a_live_line_that_starts_at_the_restored_epoch(monkeypatch):
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    progress = _master(epochs=4, epoch=2)._live_progress()
    assert progress is not None and progress.live
    progress.update(epoch=3, loss=0.5)
    progress.close()
    text = term.getvalue()
    assert "\r" in text and "3/4" in text and text.endswith("\n")


def test_no_live_line_off_a_terminal_or_off_the_top_or_inside_an_optimization(monkeypatch):
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert _master()._live_progress() is None  # a batch job's output file: the log lines are the progress
    monkeypatch.setattr("sys.stderr", Terminal())
    assert _master(top=1)._live_progress() is None  # not the training group's top rank
    group = SimpleNamespace(Get_size=lambda: MPI.COMM_WORLD.Get_size() + 1, Get_rank=lambda: 0)
    assert _master(comm=group)._live_progress() is None  # a training group smaller than the world: a trial


def test_the_live_line_is_closed_when_training_fails(monkeypatch):
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    m = _master()

    def fail() -> None:
        m.progress.update(epoch=1, loss=0.7)
        raise RuntimeError("worker lost")

    m._serve_async = fail
    with pytest.raises(RuntimeError, match="worker lost"):
        m.run()
    assert term.getvalue().endswith("\n")  # later output (the error line) starts on a fresh line
    assert m.progress._closed


@pytest.mark.mpi
def test_nnlo_train_n_on_a_terminal_shows_the_live_line(mpirun, nnlo_env, blobs, tmp_path):
    """`nnlo train -n 3` at a terminal: rank 0 writes into mpirun's pipe, yet the live line (carriage
    returns, redrawn in place) reaches the person's terminal through the launcher."""
    import os
    import pty
    import subprocess
    import sys

    from tests.helpers.runtime import MODELS, TIMEOUT

    leader, follower = pty.openpty()
    cmd = [sys.executable, "-m", "nnlo_sched", "train", "-n", "3", "--model", str(MODELS / "tiny.py"),
           "--train", str(blobs["train"]), "--val", str(blobs["val"]), "--epochs", "3",
           "--checkpoint", str(tmp_path / "run")]
    env = {k: v for k, v in nnlo_env.items() if k != "NNLO_LIVE"}
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: every writer is gone
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.wait(timeout=TIMEOUT) == 0, seen.decode(errors="replace")[-3000:]
    text = seen.decode(errors="replace")
    assert "\r" in text.replace("\r\n", "\n"), text[-2000:]  # redrawn in place, not only whole lines
    assert "3/3" in text, text[-2000:]
