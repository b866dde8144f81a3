"""Peer liveness: every rank watches its peers without MPI, so a rank that dies ends its job within seconds.

Why: a rank killed outright (SIGKILL, the OOM killer, a segfault, its node lost) says nothing, and MPI does not
tell the others. Under ``srun`` their blocking receives then wait until ``--wait`` or the walltime ends the
step (measured on Slurm 22.05 with MPICH: the other ranks never noticed), so a whole allocation idles. Only
MPICH's own ``mpirun`` ends a job by itself when a rank dies. So every rank holds a TCP connection to a peer,
and the kernel closes it the moment a process ends, however it ended; the living end reads the end of file.

**Links** (:func:`plan`): every rank connects to the lowest rank of its host (the host's *leader*); the
leaders form a ring (two hosts: one link). Every death therefore closes a link a living rank holds: a member's
to its leader, a leader's to its members and its ring neighbours. A node that is lost closes nothing: links
between hosts carry a heartbeat, and a neighbour silent for ``NNLO_PEER_TIMEOUT`` seconds (default 40) is lost.
Links within a host carry no timeout: the kernel's end of file is certain there, and a rank that is alive but
frozen is the watchdog's business (:mod:`nnlo.training.watchdog`).

**Messages**, one line each: ``HELLO token rank`` (who connected), ``BYE`` (this rank leaves by itself: the end
of the run, exit 75 after a checkpoint, an error exit: not a death), ``END code`` (this rank ends the job,
:func:`leaving` from :mod:`nnlo.abort`), ``LOSS {...}`` (a death, passed on over every link), ``BEAT``.

**A death** (a link's end of file without ``BYE``, or a silent node): the rank that saw it waits a second
(when a job is killed as a whole - a walltime's SIGKILL, Hydra's teardown - it goes too, and says nothing),
then tells every rank (``LOSS``), prints one line naming the dead rank, its role and its node
(:func:`nnlo.rankfate.died_line`), runs this process's *last words* (:func:`last_words`: a search gives its
trials back to the pool) and, :data:`SETTLE_S` later so that every rank's last words are done, ends the job
through :func:`nnlo.abort.abort_job` with :data:`~nnlo.contract.EXIT_RANK_DIED`. A rank told of a death or of an
``END`` runs its last words and ends the job itself only if it still runs :data:`FOLLOW_S` later (the launcher
did not end it): one ``MPI_Abort`` normally ends every rank, and the chain of ``END`` messages ends the rest
even where it does not.

The watch is one daemon thread per rank; it never takes its rank down by failing itself (a link it cannot make
is a warning, never a loss). ``NNLO_PEER_TIMEOUT=0`` switches it off.
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import json
import logging
import os
import secrets
import select
import selectors
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from nnlo.abort import abort_job, on_leaving
from nnlo.contract import ENV_PEER_TIMEOUT, EXIT_RANK_DIED
from nnlo.rankfate import died_line, silent_line

log = logging.getLogger("nnlo.liveness")

#: Seconds a node may stay silent before its ring neighbours take it for lost (``NNLO_PEER_TIMEOUT``).
DEFAULT_TIMEOUT_S = 40.0
#: Seconds the rank that saw a death waits before it says so (a job killed as a whole takes it meanwhile).
DETECT_GRACE_S = 1.0
#: Seconds between the line and the end of the job: the other ranks' last words run meanwhile.
SETTLE_S = 5.0
#: Seconds a rank told of a death (or of an end) gives the job to end before it ends it itself.
FOLLOW_S = 15.0
#: The longest a process's last words may take.
LAST_WORDS_S = 4.0
#: Seconds the links have to be made at start-up (a missing one is a warning, never a loss).
SETUP_S = 60.0


def timeout_from_env(environ: dict[str, str] | None = None) -> float | None:
    """``NNLO_PEER_TIMEOUT`` seconds (None: the watch is off); a value that is not a number is the default."""
    raw = (os.environ if environ is None else environ).get(ENV_PEER_TIMEOUT, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        value = DEFAULT_TIMEOUT_S
    return value if value > 0 else None


# -- who connects to whom (pure) ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Member:
    """One rank as the others know it: what names it, and where it listens."""

    rank: int
    role: str
    host: str
    pid: int
    port: int
    addrs: tuple[str, ...] = ()  # its host's addresses the other hosts may reach it at


def plan(members: Sequence[Member]) -> dict[int, tuple[int, ...]]:
    """rank -> the ranks it connects to: its host's leader (the host's lowest rank), and for a leader the next
    leader of the ring (two hosts: only the first connects to the second; one host: no ring)."""
    by_host: dict[str, list[int]] = {}
    for m in sorted(members, key=lambda m: m.rank):
        by_host.setdefault(m.host, []).append(m.rank)
    out: dict[int, list[int]] = {m.rank: [] for m in members}
    for ranks in by_host.values():
        for r in ranks[1:]:
            out[r].append(ranks[0])
    leaders = sorted(ranks[0] for ranks in by_host.values())
    if len(leaders) == 2:
        out[leaders[0]].append(leaders[1])
    elif len(leaders) > 2:
        for i, leader in enumerate(leaders):
            out[leader].append(leaders[(i + 1) % len(leaders)])
    return {r: tuple(v) for r, v in out.items()}


def inbound(links: dict[int, tuple[int, ...]], rank: int) -> set[int]:
    """The ranks that connect to ``rank`` in ``links`` (:func:`plan`)."""
    return {r for r, targets in links.items() if rank in targets}


@dataclass(frozen=True)
class Loss:
    """A death one rank saw: the rank whose link ended, or the node that went silent."""

    rank: int
    role: str
    host: str
    silent_s: float | None = None  # the node stopped answering for this long (None: the process ended)
    ranks: tuple[int, ...] = ()  # a silent node's ranks

    def line(self) -> str:
        if self.silent_s is None:
            return died_line(self.rank, self.role, self.host)
        return silent_line(self.host, self.ranks or (self.rank,), self.silent_s)

    def to_json(self) -> str:
        return json.dumps({"rank": self.rank, "role": self.role, "host": self.host, "silent_s": self.silent_s,
                           "ranks": list(self.ranks)}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Loss:
        d = json.loads(text)
        silent = d.get("silent_s")
        return cls(int(d["rank"]), str(d["role"]), str(d["host"]), None if silent is None else float(silent),
                   tuple(int(r) for r in d.get("ranks", ())))


# -- one link ---------------------------------------------------------------------------------------------------
@dataclass
class _Link:
    sock: socket.socket
    peer: int | None = None  # None until its HELLO (an accepted connection)
    remote: bool = False  # to another host: heartbeats, and silence counts
    heard: float = field(default_factory=time.monotonic)
    bye: bool = False
    buf: bytes = b""


class Watch(threading.Thread):
    """The liveness watch of rank ``me`` among ``members`` (:func:`start` makes it from an MPI world).

    ``end(code)`` ends the job (never returns in a real rank: :func:`nnlo.abort.abort_job`); ``say(line)``
    prints the one line about a death. Both are parameters so that the protocol can be exercised in one
    process.
    """

    def __init__(self, me: Member, members: Sequence[Member], token: str, listener: socket.socket, *,
                 end: Callable[[int], None], say: Callable[[str], None], timeout: float = DEFAULT_TIMEOUT_S,
                 grace_s: float = DETECT_GRACE_S, settle_s: float = SETTLE_S, follow_s: float = FOLLOW_S) -> None:
        super().__init__(name="nnlo-liveness", daemon=True)
        self.me, self.token, self.timeout = me, token, timeout
        self.members = {m.rank: m for m in members}
        self.links_planned = plan(members)
        self.expected = inbound(self.links_planned, me.rank)
        self.grace_s, self.settle_s, self.follow_s = grace_s, settle_s, follow_s
        self._end, self._say = end, say
        self._listener: socket.socket | None = listener
        self._sel = selectors.DefaultSelector()
        self._links: list[_Link] = []
        self._send_lock = threading.Lock()
        self._words: list[Callable[[], None]] = []
        self._words_lock = threading.Lock()
        self._halt = threading.Event()
        self._born = time.monotonic()
        self._warned_setup = False
        self.lost: Loss | None = None  # the first death this rank learnt of
        self.ending: int | None = None  # the code of an END this rank learnt of
        self.said = False  # this rank printed the line about the death
        self.left = False  # this rank said BYE or END itself
        self._end_at: float | None = None
        self._beat_every = max(0.5, timeout / 8)
        self._next_beat = 0.0

    # -- the links -------------------------------------------------------------------------------------------
    @property
    def peers(self) -> set[int]:
        """The ranks this rank holds a link to now."""
        return {link.peer for link in self._links if link.peer is not None}

    def _connect_all(self) -> None:
        for target in self.links_planned.get(self.me.rank, ()):
            member = self.members[target]
            remote = member.host != self.me.host
            addrs = member.addrs if remote else ("127.0.0.1",)
            sock = self._connect(addrs, member.port)
            if sock is None:
                log.warning("cannot reach rank %d (%s) on %s at %s port %d: a death there is noticed only by the "
                            "launcher (or this rank's other links)", target, member.role, member.host,
                            ", ".join(addrs) or "no address", member.port)
                continue
            self._add(_Link(sock, target, remote))
            self._send(self._links[-1], f"HELLO {self.token} {self.me.rank}")

    def _connect(self, addrs: Sequence[str], port: int) -> socket.socket | None:
        end = time.monotonic() + SETUP_S
        while not self._halt.is_set():
            for addr in addrs:
                try:
                    sock = socket.create_connection((addr, port), timeout=5.0)
                except OSError:
                    continue
                sock.setblocking(False)
                return sock
            if time.monotonic() > end:
                return None
            time.sleep(0.5)
        return None

    def _add(self, link: _Link) -> None:
        with contextlib.suppress(OSError):
            link.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link.sock.setblocking(False)
        self._links.append(link)
        self._sel.register(link.sock, selectors.EVENT_READ, link)

    def _drop(self, link: _Link) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._sel.unregister(link.sock)
        with contextlib.suppress(ValueError):
            self._links.remove(link)
        with contextlib.suppress(OSError):
            link.sock.close()

    def _send(self, link: _Link, line: str) -> None:
        """Send one line; a link that cannot take it within 2 s is left to its reader (never blocks longer)."""
        view = memoryview((line + "\n").encode())
        end = time.monotonic() + 2.0
        with self._send_lock:
            while view:
                try:
                    view = view[link.sock.send(view):]
                except BlockingIOError:
                    if time.monotonic() > end:
                        return
                    select.select([], [link.sock], [], 0.1)
                except OSError:
                    return  # a broken link is seen by its reader

    def _send_all(self, line: str, but: int | None = None) -> None:
        for link in list(self._links):
            if link.peer is not None and link.peer != but:
                self._send(link, line)

    # -- the loop --------------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            if self._listener is not None:
                self._listener.setblocking(False)
                self._sel.register(self._listener, selectors.EVENT_READ, None)
            self._connect_all()
            while not self._halt.is_set():
                for key, _ in self._sel.select(timeout=min(1.0, self._beat_every)):
                    if key.data is None:
                        self._accept()
                    else:
                        self._read(key.data)
                self._tick(time.monotonic())
        except Exception as e:  # noqa: BLE001 - the watch must never take its rank down
            if not self._halt.is_set():  # (closed under it: the end it was asked for)
                log.warning("the liveness watch stopped (%s: %s); a dead peer is now noticed only by the "
                            "launcher", type(e).__name__, e)

    def close(self) -> None:
        """Stop watching and give back every descriptor the watch holds: its links, its listener and its
        selector (a process that trains many times, a search's block, would otherwise leak one per training)."""
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5)
        for link in list(self._links):
            self._drop(link)
        self._close_listener()
        with contextlib.suppress(OSError, ValueError):
            self._sel.close()

    def _close_listener(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._sel.unregister(self._listener)
            with contextlib.suppress(OSError):
                self._listener.close()
            self._listener = None

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        self._add(_Link(sock))

    def _read(self, link: _Link) -> None:
        try:
            data = link.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._ended(link)
            return
        link.heard = time.monotonic()
        link.buf += data
        while b"\n" in link.buf:
            raw, link.buf = link.buf.split(b"\n", 1)
            self._message(link, raw.decode(errors="replace").strip())
            if link not in self._links:
                return

    def _message(self, link: _Link, line: str) -> None:
        word, _, rest = line.partition(" ")
        if link.peer is None:  # an accepted connection says who it is first
            token, _, rank = rest.partition(" ")
            if word != "HELLO" or token != self.token or not rank.isdigit() or int(rank) not in self.expected:
                self._drop(link)
                return
            link.peer = int(rank)
            link.remote = self.members[link.peer].host != self.me.host
            if self.expected <= self.peers:
                self._close_listener()
            return
        if word == "BYE":
            link.bye = True
        elif word == "END":
            link.bye = True
            self._told_end(int(rest) if rest.strip().lstrip("-").isdigit() else EXIT_RANK_DIED)
        elif word == "LOSS":
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self._learn(Loss.from_json(rest), detector=False, via=link.peer)

    def _ended(self, link: _Link) -> None:
        """A link's end of file: its peer left (BYE) or died."""
        peer, bye = link.peer, link.bye
        self._drop(link)
        if peer is None or bye:
            return
        member = self.members[peer]
        self._detected(Loss(peer, member.role, member.host))

    def _tick(self, now: float) -> None:
        if self._end_at is not None and now >= self._end_at:
            self._finish()
        remote = [link for link in self._links if link.remote and link.peer is not None]
        if remote and now >= self._next_beat and not self.left:
            self._next_beat = now + self._beat_every
            for link in remote:
                self._send(link, "BEAT")
        for link in remote:
            if not link.bye and now - link.heard > self.timeout:
                assert link.peer is not None
                member = self.members[link.peer]
                ranks = tuple(sorted(m.rank for m in self.members.values() if m.host == member.host))
                self._drop(link)
                self._detected(Loss(member.rank, member.role, member.host, self.timeout, ranks))
        if not self._warned_setup and now - self._born > SETUP_S and not self.expected <= self.peers:
            self._warned_setup = True
            missing = sorted(self.expected - self.peers)
            log.warning("rank(s) %s never connected to this rank's liveness watch: their death is noticed only "
                        "by the launcher", ", ".join(map(str, missing)))
            self._close_listener()

    # -- deaths and ends ---------------------------------------------------------------------------------------
    def _detected(self, loss: Loss) -> None:
        if self.lost is not None or self.ending is not None or self.left:
            return  # the job is ending already (or this rank is leaving): the rest is its teardown
        time.sleep(self.grace_s)  # a job killed as a whole takes this rank meanwhile
        if self.lost is None and self.ending is None and not self.left:
            self._learn(loss, detector=True)

    def _learn(self, loss: Loss, *, detector: bool, via: int | None = None) -> None:
        if self.lost is not None or self.ending is not None:
            return
        self.lost = loss
        self._send_all(f"LOSS {loss.to_json()}", but=via)
        if detector:
            self._tell(loss)
        self._last_words()
        self._end_at = time.monotonic() + (self.settle_s if detector else self.follow_s)

    def _told_end(self, code: int) -> None:
        if self.lost is not None or self.ending is not None or self.left:
            return
        self.ending = code
        self._send_all(f"END {code}")
        self._end_at = time.monotonic() + self.follow_s

    def _tell(self, loss: Loss) -> None:
        if not self.said:
            self.said = True
            self._say(loss.line())

    def _finish(self) -> None:
        self._end_at = None
        if self.lost is not None:
            self._tell(self.lost)
            self._end(EXIT_RANK_DIED)
        elif self.ending is not None:
            self._end(self.ending)

    # -- this rank's own words ---------------------------------------------------------------------------------
    def add_last_words(self, fn: Callable[[], None]) -> None:
        with self._words_lock:
            self._words.append(fn)

    def remove_last_words(self, fn: Callable[[], None]) -> None:
        with self._words_lock, contextlib.suppress(ValueError):
            self._words.remove(fn)

    def _last_words(self) -> None:
        with self._words_lock:
            words = list(self._words)
        if not words:
            return

        def say_them() -> None:
            for fn in words:
                try:
                    fn()
                except Exception as e:  # noqa: BLE001 - one failing last word never stops the others or the end
                    log.warning("after the death of a peer: %s: %s", type(e).__name__, e)

        t = threading.Thread(target=say_them, name="nnlo-last-words", daemon=True)
        t.start()
        t.join(timeout=LAST_WORDS_S)

    def leave(self, code: int | None = None) -> None:
        """This rank leaves by itself (``code`` None: ``BYE``) or ends the job (``END code``)."""
        if self.left:
            return
        self.left = True
        self._send_all("BYE" if code is None else f"END {code}")


# -- the process's watch -------------------------------------------------------------------------------------------
_watch: Watch | None = None
#: :func:`leaving` is registered to run at exit once per watch, at its start (after MPI's own exit hook, so that
#: it runs before it), not once per training that keeps the watch; a watch ended by leaving registers anew
_leaving_registered = False


def current() -> Watch | None:
    """This process's watch (None before :func:`start`, in a world of one rank, or with the watch off)."""
    return _watch


def start(world: Any, role: str) -> Watch | None:
    """Start this rank's watch (collective over ``world``: every rank calls it once, at the same point).

    A process watches one job at a time: a second call while a watch runs (a Python caller training twice
    without leaving) keeps it; :func:`leaving` ends it.
    """
    global _watch, _leaving_registered
    timeout = timeout_from_env()
    if _watch is not None or world.Get_size() < 2 or timeout is None:
        return _watch
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("0.0.0.0", 0))
        listener.listen(128)
        port = listener.getsockname()[1]
    except OSError as e:
        log.warning("the liveness watch cannot listen (%s); a dead peer is noticed only by the launcher", e)
        listener.close()
        port = 0
    me = Member(world.Get_rank(), role, socket.gethostname(), os.getpid(), port, _local_addresses())
    token = secrets.token_hex(8)
    gathered = world.allgather((me, token))
    members = [m for m, _ in gathered]
    if port == 0 or any(m.port == 0 for m in members):
        listener.close()
        return None
    _watch = Watch(me, members, gathered[0][1], listener, end=functools.partial(_abort, world), say=_say,
                   timeout=timeout)
    if not _leaving_registered:
        atexit.register(leaving)
        _leaving_registered = True
    _watch.start()
    return _watch


def leaving(code: int | None = None) -> None:
    """Tell the peers this rank leaves: by itself (at exit: ``BYE``), or ending the job with ``code``
    (:func:`nnlo.abort.abort_job`, a second stop signal): they end it too should the launcher not.

    Leaving by itself also ends this process's watch, so that a process running several jobs one after another
    (a warm test world, a Python caller) watches each job's own ranks: :func:`start` is collective, and every
    rank of the next job must find no watch left from the last one.
    """
    global _watch, _leaving_registered
    watch = _watch
    if watch is None:
        return
    watch.leave(code)
    if code is None:
        _watch = None
        _leaving_registered = False  # the next job's watch is left at that job's exit (a warm world's run end)
        with contextlib.suppress(Exception):  # the exit of a rank never fails on its watch
            watch.close()


@contextlib.contextmanager
def last_words(fn: Callable[[], None]) -> Iterator[None]:
    """Run ``fn`` (in the watch's thread, at most :data:`LAST_WORDS_S`) should a peer die while inside."""
    watch = _watch
    if watch is None:
        yield
        return
    watch.add_last_words(fn)
    try:
        yield
    finally:
        watch.remove_last_words(fn)


def _abort(world: Any, code: int) -> None:
    abort_job(world, code)


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"nnlo: error: {line}\n")
        sys.stderr.flush()


def _forget() -> None:
    """In a forked child: drop the parent's links without a word (the parent still holds them)."""
    global _watch
    watch, _watch = _watch, None
    if watch is not None:
        for link in list(watch._links):
            with contextlib.suppress(OSError):
                link.sock.close()
        if watch._listener is not None:
            with contextlib.suppress(OSError):
                watch._listener.close()


os.register_at_fork(after_in_child=_forget)
on_leaving(leaving)  # a rank that ends the job (an abort, a second stop signal) tells its peers first


def _local_addresses() -> tuple[str, ...]:
    """This host's IPv4 addresses other hosts may connect to: what its name resolves to, then every interface's
    (Linux; the name may resolve to a loopback address only, as Debian's 127.0.1.1); loopback left out."""
    found: list[str] = []
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET, socket.SOCK_STREAM):
            found.append(str(info[4][0]))
    with contextlib.suppress(OSError, AttributeError, ImportError):
        for _, name in socket.if_nameindex():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                try:
                    packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
                except OSError:
                    continue
                found.append(socket.inet_ntoa(packed[20:24]))
    return tuple(dict.fromkeys(a for a in found if not a.startswith("127.")))
