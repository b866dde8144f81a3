"""The peer watch (:mod:`nnlo.liveness`) with real processes, without a launcher: what ends a job under ``srun``
(which does not end a step when one task dies, and MPI does not tell the others).

Each rank is a forked process running a real :class:`~nnlo.liveness.Watch` over real TCP links; the rank to
die is killed with SIGKILL (or its whole "node" frozen with SIGSTOP) once every link is up - a forced point,
not a race with a clock. Two "hosts" on loopback make the links between them carry the heartbeat. Every other
rank must end with the contract's rank-died status and the line must name the dead rank, its role and its
node. The waits are generous bounds that separate "ended" from "hung", never measured times.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import socket
import time
from typing import Any

import pytest

from nnlo.contract import EXIT_RANK_DIED
from nnlo.liveness import Member, Watch, plan

pytestmark = [pytest.mark.slow]

HOSTS = ("node-a", "node-a", "node-b", "node-b", "node-c")  # rank -> its (pretended) host
ROLES = ("coordinator", "block 0 master", "block 0 worker", "block 1 master", "block 1 worker")
#: a job that has not ended this long after the fault hangs (the bound of issue 31 is 60 s)
HANG_S = 60.0
SILENT_S = 2.0  # NNLO_PEER_TIMEOUT of these tests: a frozen node is lost after it


def _rank(me: Member, members: list[Member], listener: socket.socket, conn: Any) -> None:
    def end(code: int) -> None:
        conn.send(("end", code))
        os._exit(code)

    watch = Watch(me, members, "tok", listener, end=end, say=lambda line: conn.send(("say", line)),
                  timeout=SILENT_S, grace_s=0.2, settle_s=0.5, follow_s=5.0)
    watch.start()
    wanted = watch.expected | set(watch.links_planned[me.rank])
    while not wanted <= watch.peers:
        time.sleep(0.05)
    conn.send(("linked", me.rank))
    if conn.recv() == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    while True:
        time.sleep(1)


def _job() -> tuple[list[mp.Process], list[Any], list[Member]]:
    listeners = []
    for _ in HOSTS:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        listeners.append(s)
    members = [Member(r, ROLES[r], HOSTS[r], 0, s.getsockname()[1], ("127.0.0.1",)) for r, s in enumerate(listeners)]
    ctx = mp.get_context("fork")
    procs, conns = [], []
    for r, me in enumerate(members):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_rank, args=(me, members, listeners[r], child), daemon=True)
        p.start()
        procs.append(p)
        conns.append(parent)
    for s in listeners:
        s.close()
    for r, c in enumerate(conns):
        assert c.poll(HANG_S), f"rank {r} never linked to its peers"
        assert c.recv() == ("linked", r)
    return procs, conns, members


def _messages(conn: Any) -> list[tuple[Any, ...]]:
    out = []
    with contextlib.suppress(EOFError, OSError):
        while conn.poll(0):
            out.append(conn.recv())
    return out


def _end_all(procs: list[mp.Process]) -> None:
    for p in procs:
        if p.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
        p.join(5)


def test_the_links_reach_every_rank() -> None:
    """Every rank holds a link a death closes: to its host's leader, the leaders in a ring."""
    members = [Member(r, ROLES[r], HOSTS[r], 0, 1) for r in range(len(HOSTS))]
    assert plan(members) == {0: (2,), 1: (0,), 2: (4,), 3: (2,), 4: (0,)}
    two = [Member(r, "x", f"h{r // 2}", 0, 1) for r in range(4)]
    assert plan(two) == {0: (2,), 1: (0,), 2: (), 3: (2,)}


@pytest.mark.parametrize("victim", [0, 1, 2, 4])
def test_a_killed_rank_ends_every_other_rank_with_a_line_naming_it(victim: int) -> None:
    procs, conns, members = _job()
    try:
        for r, c in enumerate(conns):
            c.send("die" if r == victim else "wait")
        for r, p in enumerate(procs):
            p.join(HANG_S)
            assert not p.is_alive(), f"HANG: rank {r} still runs {HANG_S:.0f} s after rank {victim} was killed"
        codes = [p.exitcode for p in procs]
        assert codes[victim] == -signal.SIGKILL
        assert all(code == EXIT_RANK_DIED for r, code in enumerate(codes) if r != victim), codes
        said = [m[1] for c in conns for m in _messages(c) if m[0] == "say"]
        dead = members[victim]
        assert said and all(line.startswith(f"rank {victim} ({dead.role}) on {dead.host} died") for line in said), said
    finally:
        _end_all(procs)


def test_a_frozen_node_is_taken_for_lost_after_the_peer_timeout() -> None:
    """A node that stops answering (SIGSTOP of both its ranks: no end of file) is lost after NNLO_PEER_TIMEOUT."""
    procs, conns, members = _job()
    frozen = [r for r, h in enumerate(HOSTS) if h == "node-b"]
    try:
        for r in frozen:
            os.kill(procs[r].pid, signal.SIGSTOP)
        for c in conns:
            c.send("wait")
        for r, p in enumerate(procs):
            if r not in frozen:
                p.join(HANG_S)
                assert not p.is_alive(), f"HANG: rank {r} still runs {HANG_S:.0f} s after node-b froze"
                assert p.exitcode == EXIT_RANK_DIED
        said = [m[1] for r, c in enumerate(conns) if r not in frozen for m in _messages(c) if m[0] == "say"]
        assert said and all(line.startswith("node node-b (ranks 2, 3) stopped answering") for line in said), said
    finally:
        for r in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(procs[r].pid, signal.SIGCONT)
        _end_all(procs)
