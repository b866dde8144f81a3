"""The peer watch's resources over many trainings in one process (a search's block trains many times): closing a
watch gives back every file descriptor it opened, and the exit hook is registered once per process, not once
per start. Process-free: watches are made and closed without starting their thread."""
from __future__ import annotations

import atexit
import os
import socket
from typing import Any

import pytest

from nnlo import liveness
from nnlo.liveness import Member, Watch


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    return s


def test_closing_a_watch_gives_back_every_descriptor_it_opened():
    before = _open_fds()
    for _ in range(5):
        listener = _listener()
        me = Member(0, "solo", "here", os.getpid(), listener.getsockname()[1], ("127.0.0.1",))
        watch = Watch(me, [me], "tok", listener, end=lambda code: None, say=lambda line: None)
        watch.close()
        watch.close()  # twice is harmless
    assert _open_fds() == before


class _World:
    """Two ranks (mpi4py's method names): rank 0 here, rank 1 behind a port nobody needs (no thread runs)."""

    def Get_size(self) -> int:
        return 2

    def Get_rank(self) -> int:
        return 0

    def allgather(self, mine: Any) -> list[Any]:
        other = Member(1, "worker", "elsewhere", 1, 9, ("127.0.0.1",))
        return [mine, (other, "tok")]


def test_the_exit_hook_is_registered_once_per_watch_however_many_trainings_start(monkeypatch: pytest.MonkeyPatch):
    registered: list[Any] = []
    monkeypatch.setattr(atexit, "register", lambda fn, *a, **k: registered.append(fn))
    monkeypatch.setattr(Watch, "start", lambda self: None)  # the links are not what this test is about
    monkeypatch.setattr(liveness, "_watch", None)
    monkeypatch.setattr(liveness, "_leaving_registered", False, raising=False)
    monkeypatch.setenv("NNLO_PEER_TIMEOUT", "30")
    before = _open_fds()
    first = liveness.start(_World(), "solo")
    for _ in range(3):  # more trainings of one job in one process (a search's block): the watch is kept
        assert liveness.start(_World(), "solo") is first
    assert registered == [liveness.leaving]
    # the job's exit (a warm test world's run end runs the hooks a run registered, as a real exit does): the
    # next job in the same process has a watch of its own, left at its own exit - its hook is registered anew,
    # else the next job's ranks would find the last job's watch and never connect to each other's
    liveness.leaving()
    assert liveness.current() is None
    second = liveness.start(_World(), "solo")
    assert second is not None and second is not first
    assert registered == [liveness.leaving, liveness.leaving]
    liveness.leaving()
    assert _open_fds() == before
