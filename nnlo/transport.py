"""Messages between a master and its workers: a small header object, then (optionally) one flat tensor.

Why two parts: control information (what kind of message, sample counts, losses, "stop", "checkpoint into
this directory") is tiny and varied, so it travels as a pickled dict (lowercase ``send``/``recv``); tensors
are large, so they travel as contiguous float32 buffers with the uppercase ``Send``/``Recv`` into
preallocated arrays (no pickling, no copies). MPI keeps messages between one pair of ranks in order, so the
array always follows its header.

A header may carry a second, small tensor under ``"buffers"`` (a model's BatchNorm statistics, sent at epoch
ends): :meth:`Link.send` takes it out of the pickled header and sends it as its own contiguous message after the
array (tag ``BUFFERS``); :meth:`Link.recv` puts the received array back under the same key.

Tags: ``HEADER``/``ARRAY``/``BUFFERS`` for exchanges, ``ACK`` for "my checkpoint part is written" (a separate tag so a
worker that acknowledges and immediately sends its next update is never confused with it).

The same :class:`Link` serves any communicator (a whole world or a training group inside an optimization
block): ranks are always ranks of ``comm``. Sub-masters will use one Link towards their workers and one
towards the uber-master.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any

import numpy as np

from nnlo.errors import TrainingError
from nnlo.observe.trace import get_tracer

HEADER, ARRAY, ACK, BUFFERS = 101, 102, 103, 104


def _any_source() -> int:
    from mpi4py import MPI

    return int(MPI.ANY_SOURCE)


ANY = _any_source()  # MPI.ANY_SOURCE; its value differs between MPI libraries (MPICH: -2), never hard-code it


class Link:
    """Point-to-point header+tensor messages on ``comm``.

    ``watchdog`` (a :class:`nnlo.training.watchdog.Watchdog`) is armed around every blocking wait, so a
    peer that died silently ends the job with a clear line instead of hanging it. ``timeout`` (seconds)
    makes waits poll instead and raise a TrainingError (for callers that want to handle it themselves).
    """

    def __init__(self, comm: Any, timeout: float | None = None, watchdog: Any = None) -> None:
        from mpi4py import MPI

        self.comm = comm
        self.timeout = timeout
        self.watchdog = watchdog
        self._MPI = MPI

    # -- sending -----------------------------------------------------------------------------------
    def send(self, dest: int, header: dict[str, Any], array: np.ndarray | None = None) -> None:
        """Send ``header`` and, if given, ``array`` (flat, contiguous float32) to ``dest``."""
        header = dict(header, array=array is not None)
        extra = header.pop("buffers", None)
        for a in (array, extra):
            if a is not None:
                _check(a)  # before the header: a peer must never wait for an array that will not come
        if extra is not None:
            header["buffers_size"] = int(extra.size)
        tracer = get_tracer()
        with tracer.span(f"send {header.get('kind', 'msg')}", "comm", dest=dest):
            self.comm.send(header, dest=dest, tag=HEADER)
            if array is not None:
                self.comm.Send([array, self._MPI.FLOAT], dest=dest, tag=ARRAY)
            if extra is not None:
                self.comm.Send([extra, self._MPI.FLOAT], dest=dest, tag=BUFFERS)

    def ack(self, dest: int, error: str | None = None) -> None:
        """Tell ``dest`` that this rank's checkpoint part is written (or why it is not)."""
        self.comm.send({"kind": "ack", "error": error}, dest=dest, tag=ACK)

    # -- receiving ---------------------------------------------------------------------------------
    def recv(self, source: int = ANY, out: np.ndarray | None = None) -> tuple[int, dict[str, Any], np.ndarray | None]:
        """Wait for a header from ``source`` (any rank by default), then its array into ``out``.

        Returns ``(source rank, header, out or None)``. ``out`` must be given when an array may follow.
        """
        tracer = get_tracer()
        status = self._MPI.Status()
        with tracer.span("wait", "wait"), self._armed(source, "waiting for a message from"):
            self._wait(source, HEADER)
            header = self.comm.recv(source=source, tag=HEADER, status=status)
        src = status.Get_source()
        if header.get("array"):
            if out is None:
                raise TrainingError(f"rank {src} sent a tensor where none was expected ({header.get('kind')})")
            with tracer.span(f"recv {header.get('kind', 'msg')}", "comm", source=src):
                self.comm.Recv([out, self._MPI.FLOAT], source=src, tag=ARRAY)
        if header.get("buffers_size") is not None:
            extra = np.empty(int(header.pop("buffers_size")), dtype=np.float32)  # once an epoch: small, rare
            self.comm.Recv([extra, self._MPI.FLOAT], source=src, tag=BUFFERS)
            header["buffers"] = extra
        return src, header, (out if header.get("array") else None)

    def recv_ack(self, source: int) -> str | None:
        """Wait for ``source``'s checkpoint acknowledgement; returns its error message or None."""
        with get_tracer().span("wait checkpoint ack", "wait", source=source), \
                self._armed(source, "waiting for the checkpoint part of"):
            self._wait(source, ACK)
            msg = self.comm.recv(source=source, tag=ACK)
        return msg.get("error")

    def _armed(self, source: int, what: str) -> Any:
        if self.watchdog is None:
            return contextlib.nullcontext()
        who = "any worker" if source == ANY else f"rank {source}"
        return self.watchdog.waiting(f"{what} {who}")

    def _wait(self, source: int, tag: int) -> None:
        if self.timeout is None:
            return
        if not _sleep_until(lambda: self.comm.Iprobe(source=source, tag=tag), timeout=self.timeout):
            who = "any worker" if source == ANY else f"rank {source}"
            raise TrainingError(
                f"no message from {who} for {self.timeout:g} s; a peer hangs (raise the timeout "
                f"if its steps are that slow)"
            )


def _check(array: np.ndarray) -> None:
    if array.dtype != np.float32 or not array.flags.c_contiguous:
        raise TypeError(f"tensors travel as contiguous float32 arrays, got {array.dtype} "
                        f"(contiguous={array.flags.c_contiguous})")


# -- waiting without spinning ------------------------------------------------------------------------------
# MPICH (and most MPI libraries) busy-poll inside blocking calls: a rank waiting for a slow peer burns its
# core. Where a wait may be long (a block between trials, members while their leader evaluates), ranks sleep
# between tests instead, with a pause that grows from 0.1 ms to ``max_pause`` (so short waits stay short).

def _sleep_until(done: Any, max_pause: float = 0.05, timeout: float | None = None) -> bool:
    """Test ``done()`` until true (True), sleeping between tests; False once ``timeout`` seconds passed."""
    end = None if timeout is None else time.monotonic() + timeout
    pause = 1e-4
    while not done():
        if end is not None and time.monotonic() > end:
            return False
        time.sleep(pause)
        pause = min(pause * 2, max_pause)
    return True


def wait_for_message(comm: Any, source: int, tag: int, max_pause: float = 0.05) -> None:
    """Return once a message from ``source`` with ``tag`` can be received, sleeping meanwhile."""
    _sleep_until(lambda: comm.Iprobe(source=source, tag=tag), max_pause)


def wait_for_all(comm: Any, max_pause: float = 0.05) -> None:
    """A barrier over ``comm`` that sleeps while it waits (before a collective whose peers may be late)."""
    request = comm.Ibarrier()
    _sleep_until(request.Test, max_pause)

