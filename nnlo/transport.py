"""Messages between a master and its workers: a small header object, then (optionally) one flat tensor.

Why two parts: control information (what kind of message, sample counts, losses, "stop", "checkpoint into
this directory") is tiny and varied, so it travels as a pickled dict (lowercase ``send``/``recv``); tensors
are large, so they travel as contiguous float32 buffers with the uppercase ``Send``/``Recv`` into
preallocated arrays (no pickling, no copies). MPI keeps messages between one pair of ranks in order, so the
array always follows its header.

A header may carry a second, small tensor under ``"buffers"`` (a model's BatchNorm statistics, sent at epoch
ends): :meth:`Link.send` takes it out of the pickled header and sends it as its own contiguous message after the
array (tag ``BUFFERS``); :meth:`Link.recv` puts the received array back under the same key.

**Compact headers, one message for small tensors.** A header whose keys and values all fit
:data:`COMPACT_FIELDS` (the exchange's numbers, flags and well-known words: ``kind``, ``action``, ``samples``,
``loss_sum``, ...) is not pickled: it is packed into a fixed block of float64 words (:func:`pack_header`,
starting with a magic number a pickle can never start with). When the tensor is at most
:data:`ONE_MESSAGE_BYTES`, block and tensor travel as *one* message (an MPI struct datatype over the two
buffers, so neither is copied); larger tensors keep their own message after the header, where a second
message costs nothing measurable. Any other header (an error report, a checkpoint path, BatchNorm buffers,
a value of another type) is announced by a block flagged "pickled" and follows as a pickle (a second message
on the same tag). So the receiver always takes the first message with one ``Recv`` into its header block
(and ``out`` when the tensor may be fused) and never probes (``docs/performance.md``, section 1, has the
measurements behind the threshold).

Tags: ``HEADER``/``ARRAY``/``BUFFERS`` for exchanges, ``ACK`` for "my checkpoint part is written" (a separate tag so a
worker that acknowledges and immediately sends its next update is never confused with it).

The same :class:`Link` serves any communicator (a whole world or a training group inside an optimization
block): ranks are always ranks of ``comm``. Sub-masters will use one Link towards their workers and one
towards the uber-master.
"""
from __future__ import annotations

import contextlib
import struct
import time
from collections import OrderedDict
from typing import Any

import numpy as np

from nnlo.errors import TrainingError
from nnlo.observe.trace import get_tracer

HEADER, ARRAY, ACK, BUFFERS = 101, 102, 103, 104


def _any_source() -> int:
    from mpi4py import MPI

    return int(MPI.ANY_SOURCE)


ANY = _any_source()  # MPI.ANY_SOURCE; its value differs between MPI libraries (MPICH: -2), never hard-code it

# -- compact headers ---------------------------------------------------------------------------------------
#: tensors up to this many bytes travel in the header's message. Measured (bench/run.sh ps_exchange, "forced
#: 1 message" against "forced 2 messages"): MPICH's struct-datatype path lost to two contiguous messages at
#: every size from 10 KB up, so only tiny tensors are fused (docs/performance.md, section 1)
ONE_MESSAGE_BYTES = 4 * 1024
#: the words a compact header can carry (kind, action, a signal name); any other string: pickled
WORDS = ("update", "pull", "reply", "continue", "stop", "abort", "error", "ack",
         "SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP", "SIGXCPU", "SIGALRM", "SIGQUIT")
#: the keys a compact header can carry, each with its type; a header with any other key is pickled
COMPACT_FIELDS: tuple[tuple[str, type], ...] = (
    ("kind", str), ("action", str), ("array", bool), ("samples", int), ("loss_sum", float),
    ("correct", float), ("seconds", float), ("epoch", int), ("epoch_end", bool), ("stop_requested", str),
    ("updates", int), ("batch", int),
)
_MAGIC = int.from_bytes(b"NNLOhdr1", "little")  # first byte "N": a pickle starts with 0x80
_FIXED = 4  # words before the fields: magic, present mask, None mask, flags
HEADER_WORDS = _FIXED + len(COMPACT_FIELDS)
HEADER_BYTES = 8 * HEADER_WORDS
_FUSED = 1  # flag: the tensor follows the header in the same message
_PICKLED = 2  # flag: no fields here; the header follows as a pickle (a second message, same tag)
_INT_LIMIT = 2 ** 53  # integers a float64 holds exactly
_WORD_INDEX = {w: i for i, w in enumerate(WORDS)}


_BLOCK = struct.Struct(f"<4Q{len(COMPACT_FIELDS)}d")  # magic, present mask, None mask, flags, one double a field
_SLOT = {key: (i, kind, 1 << i) for i, (key, kind) in enumerate(COMPACT_FIELDS)}
_ZEROS = (0.0,) * len(COMPACT_FIELDS)


def pack_header(header: dict[str, Any], out: np.ndarray, fused: bool = False) -> bool:
    """Pack ``header`` into ``out`` (``HEADER_WORDS`` float64, its bytes written by one ``struct`` call); False
    (``out`` untouched) if it does not fit the compact schema, so it must be pickled. Pure."""
    values = list(_ZEROS)
    present = nones = 0
    for key, v in header.items():
        slot = _SLOT.get(key)
        if slot is None:
            return False
        i, kind, bit = slot
        present |= bit
        if v is None:
            nones |= bit
        elif kind is float:  # python floats and numpy float64 are float64: exact
            if not isinstance(v, float):
                return False
            values[i] = v
        elif kind is str:
            index = _WORD_INDEX.get(v) if type(v) is str else None
            if index is None:
                return False
            values[i] = index
        elif kind is bool:
            if type(v) is not bool:
                return False
            values[i] = 1.0 if v else 0.0
        else:  # int
            if type(v) is not int or not -_INT_LIMIT < v < _INT_LIMIT:
                return False
            values[i] = v
    _BLOCK.pack_into(out.data, 0, _MAGIC, present, nones, _FUSED if fused else 0, *values)
    return True


def mark_pickled(out: np.ndarray) -> None:
    """Make ``out`` the block that announces a pickled header."""
    words = out.view(np.uint64)
    words[0], words[1], words[2], words[3] = _MAGIC, 0, 0, _PICKLED


def flags_of(block: np.ndarray) -> int:
    return int(block.view(np.uint64)[3])


def is_compact(block: np.ndarray) -> bool:
    return block.size >= HEADER_WORDS and int(block.view(np.uint64)[0]) == _MAGIC


def unpack_header(block: np.ndarray) -> tuple[dict[str, Any], bool]:
    """The header :func:`pack_header` packed, and whether its tensor was fused into the same message. Pure."""
    _, present, nones, flags, *values = _BLOCK.unpack_from(block.data)
    header: dict[str, Any] = {}
    for i, (key, kind) in enumerate(COMPACT_FIELDS):
        if not present >> i & 1:
            continue
        if nones >> i & 1:
            header[key] = None
        elif kind is float:
            header[key] = values[i]
        elif kind is str:
            header[key] = WORDS[int(values[i])]
        elif kind is bool:
            header[key] = values[i] != 0.0
        else:
            header[key] = int(values[i])
    return header, bool(flags & _FUSED)


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
        self._hdr_out = np.zeros(HEADER_WORDS, dtype=np.float64)
        self._hdr_in = np.zeros(HEADER_WORDS, dtype=np.float64)
        self._types: OrderedDict[tuple[int, int, int], Any] = OrderedDict()  # (header, tensor, size) -> type
        self.last_messages = 0  # messages the last recv took (1: header and tensor in one), for tests/traces

    def _fused_type(self, block: np.ndarray, array: np.ndarray) -> Any:
        """An MPI struct datatype over ``block`` and ``array`` (absolute addresses): one message, no copy.
        Cached: the runtime sends and receives from the same few buffers every exchange."""
        key = (block.ctypes.data, array.ctypes.data, array.size)
        t = self._types.get(key)
        if t is None:
            MPI = self._MPI
            t = MPI.Datatype.Create_struct([HEADER_BYTES, array.size],
                                           [MPI.Get_address(block), MPI.Get_address(array)],
                                           [MPI.BYTE, MPI.FLOAT]).Commit()
            self._types[key] = t
            if len(self._types) > 16:
                self._types.popitem(last=False)[1].Free()
        else:
            self._types.move_to_end(key)
        return t

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
        MPI = self._MPI
        with tracer.span(f"send {header.get('kind', 'msg')}", "comm", dest=dest):
            fused = array is not None and array.nbytes <= ONE_MESSAGE_BYTES
            compact = extra is None and pack_header(header, self._hdr_out, fused)
            if not compact:  # the block only says "a pickled header follows"
                fused = False
                mark_pickled(self._hdr_out)
            if fused:
                assert array is not None
                self.comm.Send([MPI.BOTTOM, 1, self._fused_type(self._hdr_out, array)], dest=dest, tag=HEADER)
                return
            self.comm.Send([self._hdr_out, MPI.BYTE], dest=dest, tag=HEADER)
            if not compact:
                self.comm.send(header, dest=dest, tag=HEADER)
            if array is not None:
                self.comm.Send([array, MPI.FLOAT], dest=dest, tag=ARRAY)
            if extra is not None:
                self.comm.Send([extra, MPI.FLOAT], dest=dest, tag=BUFFERS)

    def ack(self, dest: int, error: str | None = None) -> None:
        """Tell ``dest`` that this rank's checkpoint part is written (or why it is not)."""
        self.comm.send({"kind": "ack", "error": error}, dest=dest, tag=ACK)

    # -- receiving ---------------------------------------------------------------------------------
    def recv(self, source: int = ANY, out: np.ndarray | None = None) -> tuple[int, dict[str, Any], np.ndarray | None]:
        """Wait for a header from ``source`` (any rank by default), then its array into ``out``.

        Returns ``(source rank, header, out or None)``. ``out`` must be given when an array may follow.
        """
        tracer = get_tracer()
        MPI = self._MPI
        status = MPI.Status()
        may_fuse = out is not None and out.dtype == np.float32 and 0 < out.nbytes <= ONE_MESSAGE_BYTES
        with tracer.span("wait", "wait"), self._armed(source, "waiting for a message from"):
            self._wait(source, HEADER)
            target = ([MPI.BOTTOM, 1, self._fused_type(self._hdr_in, out)] if may_fuse  # type: ignore[arg-type]
                      else [self._hdr_in, MPI.BYTE])
            try:
                self.comm.Recv(target, source=source, tag=HEADER, status=status)
            except MPI.Exception as e:  # a message longer than the header and the expected tensor
                who = "a rank" if source == ANY else f"rank {source}"
                raise TrainingError(f"{who} sent a tensor this rank cannot take ({e.Get_error_string()}); all "
                                    f"ranks must load the same model") from None
        src = status.Get_source()
        nbytes = status.Get_count(MPI.BYTE)
        if nbytes < HEADER_BYTES or not is_compact(self._hdr_in):
            raise TrainingError(f"rank {src} sent a message that is not an nnlo header ({nbytes} bytes); every "
                                f"rank must run the same nnlo")
        flags = flags_of(self._hdr_in)
        if flags & _FUSED:
            header, _ = unpack_header(self._hdr_in)
            if out is None or nbytes != HEADER_BYTES + out.nbytes:
                expected = "none" if out is None else out.size
                raise TrainingError(f"rank {src} sent a tensor of {(nbytes - HEADER_BYTES) // 4} values, this rank "
                                    f"expects {expected}; all ranks must load the same model")
            self.last_messages = 1
            return src, header, out
        if flags & _PICKLED:
            header = self.comm.recv(source=src, tag=HEADER)
        else:
            header, _ = unpack_header(self._hdr_in)
        self.last_messages = (1 + bool(flags & _PICKLED) + bool(header.get("array"))
                              + (header.get("buffers_size") is not None))
        if header.get("array"):
            if out is None:
                raise TrainingError(f"rank {src} sent a tensor where none was expected ({header.get('kind')})")
            with tracer.span(f"recv {header.get('kind', 'msg')}", "comm", source=src):
                self.comm.Recv([out, MPI.FLOAT], source=src, tag=ARRAY)
        if header.get("buffers_size") is not None:
            extra = np.empty(int(header.pop("buffers_size")), dtype=np.float32)  # once an epoch: small, rare
            self.comm.Recv([extra, MPI.FLOAT], source=src, tag=BUFFERS)
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

