"""Parallel proposals (``--proposers P`` > 1): P ranks right after the coordinator propose points concurrently.

Why: the coordinator is one process, and a Bayesian ask costs 0.1 s to seconds; with many blocks and short
trials the blocks would wait for the optimizer. With P proposers, each proposer holds a copy of the engine;
the coordinator keeps them all busy: it sends an idle proposer the engine's state (its observations, plain
JSON), the points still pending (running trials, pooled and buffered proposals) and a *stream* number, and the
proposer asks its engine with that random stream (:meth:`Engine.ask` seeds its generator with
``(seed, n_asked)``: a different stream is a different acquisition optimisation of the same model, so
proposals differ). Answers are merged into a buffer on the coordinator, duplicates (of a finished, running,
pooled or buffered point) dropped, and blocks take from the buffer. The search state stays on the coordinator
(:class:`~nnlo.optimize.search.Search`); a proposer keeps nothing between requests, so a restore needs
nothing from it.

:class:`ProposalBuffer` is the pure part (what to request, what to keep), driven by the MPI coordinator here
and by the simulation in ``bench/proposers.py``.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from nnlo.optimize.engines.base import Engine, Point
from nnlo.training.failure import RankFailure
from nnlo.transport import wait_for_message

log = logging.getLogger("nnlo.optimize.proposers")

TAG_PROPOSE = 0x0B3  # coordinator -> proposer: {"state", "pending", "stream"} or {"stop": True}
TAG_PROPOSAL = 0x0B4  # proposer -> coordinator: {"point", "stream", "seconds"} or {"error": "..."}

#: random streams of the proposers start here, far from the coordinator's own ask counter
STREAM_BASE = 1_000_000


class ProposalBuffer:
    """Which proposer to ask next and which answers to keep (pure; no MPI, no clock)."""

    def __init__(self, n_proposers: int, key: Callable[[Point], str], depth: int | None = None) -> None:
        self.n = n_proposers
        self.key = key
        self.depth = n_proposers if depth is None else depth  # proposals kept ready beyond demand
        self.busy: dict[int, list[Point]] = {}  # proposer -> the points its request had pending
        self.ready: list[Point] = []
        self.streams = 0
        self.duplicates = 0
        self.ask_s: list[float] = []

    def idle(self) -> list[int]:
        return [p for p in range(self.n) if p not in self.busy]

    def to_request(self) -> list[int]:
        """Idle proposers to ask now: enough that buffered + under way covers ``depth`` points."""
        want = self.depth - len(self.ready) - len(self.busy)
        return self.idle()[:max(0, want)]

    def request(self, proposer: int, pending: Sequence[Point]) -> dict[str, Any]:
        """The request for ``proposer`` (``pending`` already holds the buffered points)."""
        self.busy[proposer] = list(pending)
        self.streams += 1
        return {"pending": list(pending), "stream": STREAM_BASE + self.streams}

    def arrived(self, proposer: int, point: Point | None, seen: set[str], seconds: float | None = None) -> None:
        """An answer: kept unless it repeats a point seen (finished, pending) or already buffered."""
        self.busy.pop(proposer, None)
        if seconds is not None:
            self.ask_s.append(seconds)
        if point is None:
            return
        taken = seen | {self.key(p) for p in self.ready}
        if self.key(point) in taken:
            self.duplicates += 1
            return
        self.ready.append(point)

    def take(self, seen: set[str]) -> Point | None:
        """The oldest buffered point not seen meanwhile (None: wait for a proposer)."""
        while self.ready:
            point = self.ready.pop(0)
            if self.key(point) not in seen:
                return point
            self.duplicates += 1
        return None


class MpiProposers:
    """The coordinator's side: ``propose(pending)`` returns a point, keeping every proposer rank busy."""

    def __init__(self, world: Any, ranks: Sequence[int], engine: Engine, poll_s: float = 0.005) -> None:
        self.world = world
        self.ranks = list(ranks)
        self.engine = engine
        self.poll_s = poll_s
        self.buffer = ProposalBuffer(len(self.ranks), engine.space.key)

    def _seen(self, pending: Sequence[Point]) -> set[str]:
        return self.engine.seen(pending)

    def pump(self, pending: Sequence[Point]) -> None:
        """Collect the answers that arrived, then give idle proposers new requests (never blocks)."""
        from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

        status = MPI.Status()
        while self.world.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_PROPOSAL, status=status):
            source = status.Get_source()
            msg = self.world.recv(source=source, tag=TAG_PROPOSAL)
            if msg.get("error"):
                self.buffer.busy.pop(self.ranks.index(source), None)
                raise RankFailure(f"its proposal failed ({msg['error']})", source, "proposer")
            self.buffer.arrived(self.ranks.index(source), msg.get("point"), self._seen(pending),
                                msg.get("seconds"))
        for p in self.buffer.to_request():
            everything = [*pending, *self.buffer.ready]
            request = self.buffer.request(p, everything)
            request["state"] = self.engine.state_dict()
            self.world.send(request, dest=self.ranks[p], tag=TAG_PROPOSE)

    def propose(self, pending: Sequence[Point]) -> Point:
        """A proposal not yet seen, waiting for a proposer if none is buffered."""
        while True:
            self.pump(pending)
            point = self.buffer.take(self._seen(pending))
            if point is not None:
                self.pump([*pending, point])  # the next requests start now, with this point pending
                return point
            if not self.buffer.busy:  # every answer was a duplicate: ask again at once
                continue
            time.sleep(self.poll_s)

    def stop(self, code: int) -> None:
        """Wait for requests under way (their answers are dropped), then stop every proposer rank."""
        from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

        while self.buffer.busy:
            status = MPI.Status()
            if self.world.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_PROPOSAL, status=status):
                source = status.Get_source()
                self.world.recv(source=source, tag=TAG_PROPOSAL)
                self.buffer.busy.pop(self.ranks.index(source), None)
            else:
                time.sleep(self.poll_s)
        for rank in self.ranks:
            self.world.send({"stop": True, "code": code}, dest=rank, tag=TAG_PROPOSE)


def run_proposer(world: Any, coordinator: int, engine: Engine) -> int:
    """A proposer rank: answer requests with one point each until the coordinator says stop."""
    while True:
        wait_for_message(world, coordinator, TAG_PROPOSE)
        msg = world.recv(source=coordinator, tag=TAG_PROPOSE)
        if msg.get("stop"):
            return int(msg.get("code", 0))
        t0 = time.perf_counter()
        try:
            engine.load_state_dict(msg["state"])
            engine.n_asked = int(msg["stream"])
            answer: dict[str, Any] = {"point": engine.ask(msg["pending"]), "stream": msg["stream"]}
        except Exception as e:  # reported to the coordinator, which prints it and ends the job
            log.debug("proposal failed", exc_info=True)  # the traceback at --log-level debug only
            answer = {"error": f"{type(e).__name__}: {e}"}
        answer["seconds"] = time.perf_counter() - t0
        world.send(answer, dest=coordinator, tag=TAG_PROPOSAL)
