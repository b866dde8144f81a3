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
and ``out`` together (the tensor may be fused) and never probes (``docs/performance.md``, section 1, has the
measurements behind the threshold).

**The per-message Python is compiled once per header shape.** The exchange sends the same few header shapes
(the same keys, in the same order, with values of the same types) over and over, so the first header of a shape
is packed by the general rules (:func:`_encode`) and the shape then gets a writer: a small function compiled
from the schema that hands the values straight to one ``struct`` call, checking only what a type cannot say
(a word outside :data:`WORDS`, an integer past 2**53: pickled, as the general rules decide). A received block
is read the same way, by a reader compiled for its masks (which fields are present, which None). Both give
the very bytes and headers of the general rules (tests/transport/test_header_fast_path.py); they are about
three times faster, and the send and receive paths around them avoid per-message calls and allocations
(``docs/performance.md``, issue 29 row 3).

**Framed buffers: one message at any size, no copy.** :meth:`Link.frame` hands out a tensor buffer whose memory
is preceded by a header slot (one allocation: ``[header block | tensor]``). A compact header sent with a framed
tensor is packed into that slot and the two leave as *one contiguous message*; a framed ``out`` receives one
the same way. The runtime's exchange buffers (a worker's send and receive buffers, a master's center and
receive buffer) are framed, so a parameter-server round trip costs one message each way, as raw MPI does;
any other tensor keeps the rules above.

Tags: ``HEADER``/``ARRAY``/``BUFFERS`` for exchanges, ``ACK`` for "my checkpoint part is written" (a separate tag so a
worker that acknowledges and immediately sends its next update is never confused with it).

The same :class:`Link` serves any communicator (a whole world or a training group inside an optimization
block): ranks are always ranks of ``comm``. Sub-masters will use one Link towards their workers and one
towards the uber-master.
"""
from __future__ import annotations

import contextlib
import os
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnlo.contract import ENV_WAIT
from nnlo.errors import TrainingError
from nnlo.observe.trace import get_tracer

HEADER, ARRAY, ACK, BUFFERS = 101, 102, 103, 104


def _any_source() -> int:
    from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

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
    return _pack(header, out.data, fused)


def _pack(header: dict[str, Any], out: memoryview, fused: bool) -> bool:
    """:func:`pack_header` on the bytes of the block. The exchange sends a few header shapes over and over,
    so a shape seen before is packed by its writer (:func:`_writer`); a new one goes through :func:`_encode`,
    the general rules, which also decide whether the shape gets a writer."""
    shape = (*header, *map(type, header.values()))
    writer = _WRITERS.get(shape)
    if writer is not None:
        return writer(header, out, _FUSED if fused else 0)
    values = _encode(header)
    if values is None:
        return False
    _BLOCK.pack_into(out, 0, _MAGIC, values[0], values[1], _FUSED if fused else 0, *values[2])
    if len(_WRITERS) >= _PLANS_MAX:  # shapes are few; this bounds a caller that varies them without end
        _WRITERS.clear()
    _WRITERS[shape] = _writer(header)
    return True


def _encode(header: dict[str, Any]) -> tuple[int, int, list[float]] | None:
    """(present mask, None mask, one value a field) of a compact header, or None: it must be pickled. The
    general rules: :func:`_writer` and :func:`_reader` make their fast form for one shape, and must give the
    same bytes and headers (tests/transport)."""
    values = list(_ZEROS)
    present = nones = 0
    for key, v in header.items():
        slot = _SLOT.get(key)
        if slot is None:
            return None
        i, kind, bit = slot
        present |= bit
        if v is None:
            nones |= bit
        elif kind is float:  # python floats and numpy float64 are float64: exact
            if not isinstance(v, float):
                return None
            values[i] = v
        elif kind is str:
            index = _WORD_INDEX.get(v) if type(v) is str else None
            if index is None:
                return None
            values[i] = index
        elif kind is bool:
            if type(v) is not bool:
                return None
            values[i] = 1.0 if v else 0.0
        else:  # int
            if type(v) is not int or not -_INT_LIMIT < v < _INT_LIMIT:
                return None
            values[i] = v
    return present, nones, values


# -- the fast form of the rules, for the shapes the exchange repeats ----------------------------------------
# A writer packs headers of one shape (their keys in their order and each value's type) that _encode accepted;
# a reader decodes blocks of one (present, None) mask pair. Each is a small function compiled once from the
# schema (as dataclasses and namedtuple build theirs): the keys and word positions come from COMPACT_FIELDS,
# never from a message. Only a word outside WORDS or an integer past 2**53 is still checked per call (the
# writer then returns False and the header is pickled, as _encode decides). tests/transport checks that they
# give the same bytes and headers as _encode and _decode.

Writer = Callable[[dict[str, Any], memoryview, int], bool]
Reader = Callable[[tuple[Any, ...]], dict[str, Any]]


def _writer(header: dict[str, Any]) -> Writer:
    lines, args = [], ["0.0"] * len(COMPACT_FIELDS)
    present = nones = 0
    for key, v in header.items():
        i, kind, bit = _SLOT[key]
        present |= bit
        if v is None:
            nones |= bit
        elif kind is str:
            lines += [f"w{i} = index(h[{key!r}])", f"if w{i} is None: return False"]
            args[i] = f"w{i}"
        elif kind is int:
            lines += [f"n{i} = h[{key!r}]", f"if not -limit < n{i} < limit: return False"]
            args[i] = f"n{i}"
        else:  # a float, or a bool ('d' packs True as 1.0)
            args[i] = f"h[{key!r}]"
    lines.append(f"pack(out, 0, magic, {present}, {nones}, flags, {', '.join(args)})")
    return _compile("h, out, flags", [*lines, "return True"],
                    index=_WORD_INDEX.get, limit=_INT_LIMIT, pack=_BLOCK.pack_into, magic=_MAGIC)


def _reader(present: int, nones: int) -> Reader:
    items = []
    for i, (key, kind) in enumerate(COMPACT_FIELDS):
        if present >> i & 1:
            word = f"b[{_FIXED + i}]"
            value = ("None" if nones >> i & 1 else word if kind is float else f"words[int({word})]" if kind is str
                     else f"{word} != 0.0" if kind is bool else f"int({word})")
            items.append(f"{key!r}: {value}")
    return _compile("b", [f"return {{{', '.join(items)}}}"], words=WORDS)


def _compile(params: str, body: list[str], **names: Any) -> Any:
    source = f"def f({params}):\n" + "".join(f"    {line}\n" for line in body)
    exec(compile(source, "<nnlo.transport header code>", "exec"), names)  # built from the schema, never from a message
    return names["f"]


def mark_pickled(out: np.ndarray) -> None:
    """Make ``out`` the block that announces a pickled header."""
    words = out.view(np.uint64)
    words[0], words[1], words[2], words[3] = _MAGIC, 0, 0, _PICKLED


def unpack_header(block: np.ndarray) -> tuple[dict[str, Any], bool]:
    """The header :func:`pack_header` packed, and whether its tensor was fused into the same message. Pure."""
    words = _BLOCK.unpack_from(block.data)
    return _read(words), bool(words[3] & _FUSED)


def _read(words: tuple[Any, ...]) -> dict[str, Any]:
    """The header of an unpacked block (``_BLOCK.unpack_from``): by the reader of its masks
    (:func:`_reader`) once they were seen, else by :func:`_decode`, the general rules."""
    masks = (words[1], words[2])
    reader = _READERS.get(masks)
    if reader is None:
        if len(_READERS) >= _PLANS_MAX:
            _READERS.clear()
        _READERS[masks] = _reader(*masks)
        return _decode(words[1], words[2], words[_FIXED:])
    return reader(words)


def _decode(present: int, nones: int, values: Any) -> dict[str, Any]:
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
    return header


_PLANS_MAX = 256
_WRITERS: dict[tuple[Any, ...], Writer] = {}  # header shape -> its writer
_READERS: dict[tuple[int, int], Reader] = {}  # (present, None) masks -> their reader


@dataclass(frozen=True)
class Frame:
    """One allocation ``[header block | tensor]`` (:meth:`Link.frame`): ``whole`` travels as one message."""

    tensor: np.ndarray  # float32, what the caller uses
    block: memoryview  # the header slot's bytes
    whole: np.ndarray  # float32 view of both


class Link:
    """Point-to-point header+tensor messages on ``comm``.

    ``watchdog`` (a :class:`nnlo.training.watchdog.Watchdog`) is armed around every blocking wait, so a
    peer that died silently ends the job with a clear line instead of hanging it. ``timeout`` (seconds)
    makes waits poll instead and raise a TrainingError (for callers that want to handle it themselves).
    ``sleep``: a wait tests for its message and sleeps between tests instead of spinning in the MPI library
    (:func:`sleeping_waits`: where the node has more ranks than cores).
    """

    def __init__(self, comm: Any, timeout: float | None = None, watchdog: Any = None, sleep: bool = False) -> None:
        from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

        self.comm = comm
        self.timeout = timeout
        self.sleep = sleep
        self._poll = timeout is not None or sleep  # a wait tests and sleeps (_wait) before its receive
        self.watchdog = watchdog
        self._MPI = MPI
        self._hdr_out = np.zeros(HEADER_WORDS, dtype=np.float64)
        self._hdr_in = np.zeros(HEADER_WORDS, dtype=np.float64)
        self._out_mem, self._in_mem = self._hdr_out.data.cast("B"), self._hdr_in.data.cast("B")
        self._types: OrderedDict[tuple[int, int, int], Any] = OrderedDict()  # (header, tensor, size) -> type
        self._frames: dict[int, Frame] = {}  # id(tensor) -> its frame (the tensor object itself, not views)
        self._status = MPI.Status()
        self._waits: dict[tuple[str, int] | int, str] = {}  # the watchdog's words for (what, source), made once
        self.last_messages = 0  # messages the last recv took (1: header and tensor in one), for tests/traces

    def frame(self, n: int, alloc: Callable[[int], np.ndarray] | None = None) -> np.ndarray:
        """A float32 tensor buffer of ``n`` elements (contents undefined) that this link sends and receives as
        one contiguous message with its header. ``alloc(k)`` makes the float32 memory (default ``np.empty``;
        a GPU worker passes its backend's pinned :meth:`~nnlo.backends.base.Backend.host_buffer`)."""
        words = HEADER_BYTES // 4
        whole = (alloc or _empty)(words + n)
        if whole.dtype != np.float32 or whole.size != words + n or not whole.flags.c_contiguous:
            raise TypeError(f"frame memory must be {words + n} contiguous float32, got {whole.dtype} x {whole.size}")
        tensor = whole[words:]
        self._frames[id(tensor)] = Frame(tensor, whole[:words].data.cast("B"), whole)
        return tensor

    def frame_of(self, array: np.ndarray | None) -> Frame | None:
        frame = self._frames.get(id(array))  # id(None) is never a frame's key: frames hold their tensors
        return frame if frame is not None and frame.tensor is array else None

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
        frame = self._frames.get(id(array))  # frame_of, inline: this is the exchange's hot path
        if frame is None or frame.tensor is not array:
            frame = None
            if array is not None:  # (a frame was checked when made, and its memory is what travels)
                _check(array)  # before the header: a peer must never wait for an array that will not come
        if extra is not None:
            _check(extra)
            header["buffers_size"] = int(extra.size)
        tracer = get_tracer()
        if tracer.enabled:
            with tracer.span(f"send {header.get('kind', 'msg')}", "comm", dest=dest):
                self._send(dest, header, array, extra, frame)
        else:
            self._send(dest, header, array, extra, frame)

    def _send(self, dest: int, header: dict[str, Any], array: np.ndarray | None, extra: np.ndarray | None,
              frame: Frame | None) -> None:
        MPI, comm = self._MPI, self.comm
        if frame is not None and extra is None and _pack(header, frame.block, True):
            comm.Send([frame.whole, MPI.FLOAT], dest=dest, tag=HEADER)  # header slot and tensor: one message
            return
        fused = frame is None and array is not None and array.nbytes <= ONE_MESSAGE_BYTES
        compact = frame is None and extra is None and _pack(header, self._out_mem, fused)
        if compact and fused:
            assert array is not None
            comm.Send([MPI.BOTTOM, 1, self._fused_type(self._hdr_out, array)], dest=dest, tag=HEADER)
            return
        if not compact:  # the block only says "a pickled header follows"
            mark_pickled(self._hdr_out)
        comm.Send([self._hdr_out, MPI.BYTE], dest=dest, tag=HEADER)
        if not compact:
            comm.send(header, dest=dest, tag=HEADER)
        if array is not None:
            comm.Send([array, MPI.FLOAT], dest=dest, tag=ARRAY)
        if extra is not None:
            comm.Send([extra, MPI.FLOAT], dest=dest, tag=BUFFERS)

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
        status = self._status
        frame = self._frames.get(id(out))  # frame_of, inline: this is the exchange's hot path
        if frame is not None and frame.tensor is not out:
            frame = None
        # Whatever the sender does (a fused message, or the header alone), one receive takes it: into the frame,
        # or into the header block and ``out`` through a struct datatype (no copy), or the header block alone.
        if frame is not None:
            block, target = frame.block, [frame.whole, MPI.FLOAT]
        elif out is not None and out.dtype == np.float32 and out.nbytes > 0 and out.flags.c_contiguous:
            block, target = self._in_mem, [MPI.BOTTOM, 1, self._fused_type(self._hdr_in, out)]
        else:
            block, target = self._in_mem, [self._hdr_in, MPI.BYTE]
        watchdog = self.watchdog
        if watchdog is not None:
            watchdog.arm(self._waits.get(source) or self._wait_words("waiting for a message from", source))
        try:
            if tracer.enabled:
                with tracer.span("wait", "wait"):
                    self._receive(target, source, status)
            else:  # _receive, inline
                if self._poll:
                    self._wait(source, HEADER)
                self.comm.Recv(target, source=source, tag=HEADER, status=status)
        except MPI.Exception as e:  # a message longer than the header and the expected tensor
            who = "a rank" if source == ANY else f"rank {source}"
            raise TrainingError(f"{who} sent a tensor this rank cannot take ({e.Get_error_string()}); all "
                                f"ranks must load the same model") from None
        finally:
            if watchdog is not None:
                watchdog.disarm()
        src = status.Get_source()
        nbytes = status.Get_count(MPI.BYTE)
        words = _BLOCK.unpack_from(block) if nbytes >= HEADER_BYTES else None
        if words is None or words[0] != _MAGIC:
            raise TrainingError(f"rank {src} sent a message that is not an nnlo header ({nbytes} bytes); every "
                                f"rank must run the same nnlo")
        flags = words[3]
        if flags & _FUSED:
            header = _read(words)
            if out is None or nbytes != HEADER_BYTES + out.nbytes:
                expected = "none" if out is None else out.size
                raise TrainingError(f"rank {src} sent a tensor of {(nbytes - HEADER_BYTES) // 4} values, this rank "
                                    f"expects {expected}; all ranks must load the same model")
            self.last_messages = 1
            return src, header, out
        header = self.comm.recv(source=src, tag=HEADER) if flags & _PICKLED else _read(words)
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
        return self.watchdog.waiting(self._wait_words(what, source))

    def _wait_words(self, what: str, source: int) -> str:
        """The watchdog's words for a wait, made once (those of :meth:`recv` also under the bare ``source``)."""
        words = self._waits.get((what, source))
        if words is None:
            words = self._waits[what, source] = f"{what} {'any worker' if source == ANY else f'rank {source}'}"
            if what == "waiting for a message from":
                self._waits[source] = words
        return words

    def _receive(self, target: list[Any], source: int, status: Any) -> None:
        """The blocking receive of a header's message (under the watchdog), after :meth:`_wait`'s polling when
        a timeout is set or waits sleep."""
        if self._poll:
            self._wait(source, HEADER)
        self.comm.Recv(target, source=source, tag=HEADER, status=status)

    def _wait(self, source: int, tag: int) -> None:
        if self.timeout is None:
            if self.sleep:
                _sleep_until(lambda: self.comm.Iprobe(source=source, tag=tag), TRAINING_MAX_PAUSE)
            return
        if not _sleep_until(lambda: self.comm.Iprobe(source=source, tag=tag), timeout=self.timeout):
            who = "any worker" if source == ANY else f"rank {source}"
            raise TrainingError(
                f"no message from {who} for {self.timeout:g} s; a peer hangs (raise the timeout "
                f"if its steps are that slow)"
            )


_NO_SPAN = contextlib.nullcontext()


def _empty(n: int) -> np.ndarray:
    return np.empty(n, dtype=np.float32)


def _check(array: np.ndarray) -> None:
    if array.dtype != np.float32 or not array.flags.c_contiguous:
        raise TypeError(f"tensors travel as contiguous float32 arrays, got {array.dtype} "
                        f"(contiguous={array.flags.c_contiguous})")


# -- waiting without spinning ------------------------------------------------------------------------------
# MPICH (and most MPI libraries) busy-poll inside blocking calls: a rank waiting for a slow peer burns its
# core. Where a wait may be long (a block between trials, members while their leader evaluates), ranks sleep
# between tests instead, with a pause that grows from 0.1 ms to ``max_pause`` (so short waits stay short).
# A training's exchanges spin where every rank has a core of its own (the lowest latency), and sleep where the
# node has more ranks than cores (``nnlo train -n 5`` on a 4-core laptop, a test machine): there a spinning
# master takes the core a worker needs.

#: ``spin`` or ``sleep`` forces how a training's ranks wait for messages; unset or ``auto``: :func:`sleeping_waits`.
WAIT_VAR = ENV_WAIT
#: The longest pause between two tests of a training's sleeping wait: what a message may wait for its reader.
TRAINING_MAX_PAUSE = 0.002


def sleeping_waits(comm: Any) -> bool:
    """Whether this rank's waits should sleep rather than spin: ``NNLO_WAIT``, else whether the ranks of
    ``comm`` on this node outnumber the cores this process may run on. Collective over ``comm``."""
    from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    ranks_here = local.Get_size()
    local.Free()
    forced = os.environ.get(WAIT_VAR, "auto").strip().lower()
    if forced in ("spin", "sleep"):
        return forced == "sleep"
    return ranks_here > len(os.sched_getaffinity(0))


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

