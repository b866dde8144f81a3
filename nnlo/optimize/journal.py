"""The journal of a shared search: one append-only file of JSON lines, and the pure fold of it into a state.

A search that spans several batch jobs (``nnlo optimize --shared``) keeps its state in
``<output>/search-journal.jsonl`` on the run directory's file system: no server, no network port, as compute
nodes of different jobs often cannot reach one another. Every participant (one job's coordinator) appends
records and re-reads the records of the others; :func:`rebuild` folds any sequence of records into the same
:class:`SharedState`, so any participant can rebuild the search at any time.

**Writing.** Every append holds an exclusive ``flock`` on the lock file beside the journal
(``search-journal.lock``), reads the records appended since its last read (so it decides on the newest state),
then writes its record with one ``os.write`` on an ``O_APPEND`` descriptor and ``fsync``\\ s it before the lock
is released: a record whose append returned is on disk (a node crash does not lose it) and every other
participant sees it on its next read. Locks must be coherent across nodes: GPFS and NFSv4 give that, Lustre
only when mounted with ``-o flock`` (``-o localflock`` locks per node, which nnlo cannot detect; without
either, ``flock`` fails and the search stops with one line naming the requirement). POSIX ``lockf`` is no
alternative: on Lustre it needs the same mount option, on NFS Linux already implements ``flock`` with it.

**Damage.** Each line is ``{"crc":"<crc32 of the record's JSON>","rec":<record>}``. A line whose checksum or
JSON does not hold (a garbage line, a record torn by a writer killed mid-write on a network file system, a
truncated last line) is skipped and reported (:class:`Skipped`, one line each); the search goes on from the
valid records. A torn last line is closed by the next writer (its record starts with a newline), so it never
swallows a valid record.

**Records** (``kind``; every record has the participant ``p`` and its wall time ``t``):
``search`` (the search's identity: space, engine, objective, folds, budget; the first one counts),
``join``/``leave`` (a participant starts / ends, with its exit code), ``propose`` (a new trial ``id`` with
its ``params``, leased to ``p`` until ``until``), ``lease`` (``p`` takes trial ``id`` back from the pool, or
over from ``from`` whose lease expired), ``renew`` (``p`` extends its leases ``ids`` to ``until``),
``release`` (``p`` gives trial ``id`` back: stopped at the deadline, or out of memory on its blocks), ``result``
(trial ``id`` finished: the whole trial as in ``trials.json``; the first result of a trial counts, a later one
is ignored), ``cost`` (what a job of trial ``id`` cost on ``p``'s block: class, size, block type, seconds,
outcome - :class:`~nnlo.optimize.placement.costs.CostObservation`; every one counts, so every participant's
placement learns from every block of every job). A reader that does not know a kind ignores the record, so
journals written before ``cost`` existed load, and older readers skip ``cost`` records.

Under a schedule (``--schedule asha|hyperband|pbt``) a trial reports once per rung and trains on between:
``propose`` also carries the job (``target``: the rung it trains toward; ``bracket``; for PBT's exploit
``parent``, ``replaces`` and ``start_epochs``); ``result`` carries ``rung`` and the whole trial with every rung
so far (``rungs``): the trial is then *paused* (finished for now, its checkpoint in ``trials/<id>``), and the
first result *at each rung* counts; ``resume`` (``p`` takes paused trial ``id`` on toward rung ``job.target``,
leased until ``until``: a promotion, or PBT's next step) reopens it. Leases, renewals, releases and expiry work
on such a job as on a new trial: a job whose participant died goes back to the pool with its target and is
re-run from the trial's last checkpoint. A journal without these fields is a ``full`` search, as before.

Leases expire by wall clock (``until`` against the reader's clock): clocks of the nodes must agree to well
within the lease timeout (NTP does).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnlo.atomic import json_default
from nnlo.contract import SEARCH_JOURNAL, SEARCH_LOCK
from nnlo.errors import ConfigError
from nnlo.optimize.placement import BlockType, CostObservation
from nnlo.optimize.results import Objective, Trial

#: errno values with which a file system says it has no (coherent) file locks
NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS})

_LINE = re.compile(rb'\A\{"crc":"([0-9a-f]{8})","rec":(.*)\}\Z', re.S)


# -- lines ------------------------------------------------------------------------------------------------
def encode(record: dict[str, Any]) -> bytes:
    """One journal line (with its newline) for ``record``."""
    body = json.dumps(record, separators=(",", ":"), sort_keys=True, allow_nan=False,
                      default=json_default).encode()
    return b'{"crc":"%08x","rec":%s}\n' % (zlib.crc32(body), body)


def decode(line: bytes) -> dict[str, Any] | str:
    """The record on ``line`` (without its newline), or why it is not one."""
    m = _LINE.match(line.rstrip(b"\r"))
    if m is None:
        return "not a journal record"
    crc, body = m.groups()
    if int(crc, 16) != zlib.crc32(body):
        return "checksum mismatch (torn or altered record)"
    try:
        record = json.loads(body)
    except ValueError:
        return "not JSON"
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        return "not a journal record"
    return record


@dataclass(frozen=True)
class Skipped:
    """A line of the journal that holds no valid record."""

    line: int  # 1-based line number
    offset: int  # byte offset of the line's start
    reason: str
    preview: str

    def describe(self, path: Path | str) -> str:
        return f"{path} line {self.line} (byte {self.offset}): {self.reason}, skipped: {self.preview!r}"


def parse(data: bytes, *, start_line: int = 1, start_offset: int = 0,
          final: bool = True) -> tuple[list[dict[str, Any]], list[Skipped], int]:
    """Records and skipped lines in ``data``; returns also how many bytes were consumed.

    ``final``: a last line without a newline is a torn record (its writer is gone: the caller holds the
    lock, or the file is read after the fact) and is skipped; otherwise it may still be under way and is
    left unconsumed.
    """
    records: list[dict[str, Any]] = []
    skipped: list[Skipped] = []
    pos, line_no = 0, start_line
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            if not final:
                break
            end = len(data)
            reason: str | None = "incomplete last record (its writer was killed mid-write)"
        else:
            reason = None
        line = data[pos:end]
        if line.strip():
            rec = decode(line)
            if isinstance(rec, str) or reason is not None:
                skipped.append(Skipped(line_no, start_offset + pos, reason or str(rec),
                                       line[:60].decode("utf-8", "replace")))
            else:
                records.append(rec)
        pos = min(end + 1, len(data))
        line_no += 1
    return records, skipped, pos


def read_journal(folder: Path | str, *, final: bool = True) -> tuple[list[dict[str, Any]], list[Skipped]]:
    """All valid records of the journal in ``folder`` (none if there is no journal) and the skipped lines.

    ``final=False`` for a reader while participants may be writing (``nnlo status``): a last line without
    its newline is left out instead of reported as torn.
    """
    path = Path(folder) / SEARCH_JOURNAL
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], []
    records, skipped, _ = parse(data, final=final)
    return records, skipped


# -- the file -----------------------------------------------------------------------------------------------
def lock_error(path: Path, e: OSError) -> ConfigError:
    return ConfigError(
        f"cannot lock {path} ({e.strerror or e}): a shared search needs file locks (flock) that hold across "
        "nodes on its --output file system (GPFS, NFSv4, Lustre mounted with -o flock, or a local disk for "
        "jobs on one node); choose an --output on such a file system or ask the admins to mount it with flock"
    )


class Journal:
    """The journal of the shared search in ``folder``, read incrementally (by byte offset).

    Use :meth:`locked` around every decision that appends (read the new records, decide, :meth:`append`).
    One instance per process; its lock is also a thread lock, so a heartbeat thread may append too.
    """

    def __init__(self, folder: Path | str, *, fsync: bool = True) -> None:
        self.folder = Path(folder)
        self.path = self.folder / SEARCH_JOURNAL
        self.lock_path = self.folder / SEARCH_LOCK
        self.fsync = fsync
        self._offset = 0
        self._line = 1
        self._clean_end = True  # the consumed part ends with a newline (or is empty)
        self._mutex = threading.RLock()
        self._depth = 0
        self._lock_fd: int | None = None
        self._write_fd: int | None = None

    # -- locking ---------------------------------------------------------------------------------------
    def _open(self) -> None:
        if self._lock_fd is not None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o664)
            self._write_fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o664)
        except OSError as e:
            self.close()
            raise ConfigError(f"cannot open the search journal {self.path}: {e.strerror}; choose another --output") \
                from None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the journal's lock (exclusive across processes and nodes, re-entrant in a thread)."""
        with self._mutex:
            self._open()
            assert self._lock_fd is not None
            if self._depth == 0:
                try:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
                except OSError as e:
                    if e.errno in NO_LOCKS:
                        raise lock_error(self.lock_path, e) from None
                    raise
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    @property
    def holding(self) -> bool:
        return self._depth > 0

    # -- reading ---------------------------------------------------------------------------------------
    def read_new(self) -> tuple[list[dict[str, Any]], list[Skipped]]:
        """The records appended since the last read (and the lines skipped among them).

        Under the lock a last line without its newline is torn (skipped, and the next append closes it);
        without the lock it may be under way and is left for the next read.
        """
        with self._mutex:
            try:
                with open(self.path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    f.seek(self._offset)
                    data = f.read()
            except FileNotFoundError:
                size, data = 0, b""
            if size < self._offset:
                raise ConfigError(f"{self.path} shrank from {self._offset} to {size} bytes while the search ran "
                                  "(truncated, replaced or removed by another program); restore it, or start a "
                                  "new search in another --output")
            if not self._clean_end and data[:1] == b"\n":  # the newline that closed a torn last line
                self._offset, self._clean_end, data = self._offset + 1, True, data[1:]
            records, skipped, used = parse(data, start_line=self._line, start_offset=self._offset,
                                           final=self.holding)
            if used:
                self._line += data[:used].count(b"\n") + (0 if data[used - 1:used] == b"\n" else 1)
                self._clean_end = data[used - 1:used] == b"\n"
                self._offset += used
            return records, skipped

    # -- writing ---------------------------------------------------------------------------------------
    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Append one record; call under :meth:`locked`, after :meth:`read_new` consumed everything."""
        with self._mutex:
            if not self.holding:
                raise RuntimeError("Journal.append outside Journal.locked()")
            assert self._write_fd is not None
            size = os.fstat(self._write_fd).st_size
            if size != self._offset:
                raise RuntimeError(f"{self.path}: {size - self._offset} unread byte(s); read_new() first")
            data = encode(record)
            if not self._clean_end:
                data = b"\n" + data  # close a torn last line, so it cannot swallow this record
            view = memoryview(data)
            while view:
                n = os.write(self._write_fd, view)
                view = view[n:]
            if self.fsync:
                os.fsync(self._write_fd)
            self._offset += len(data)
            self._line += data.count(b"\n") - (0 if self._clean_end else 1)
            self._clean_end = True
            return record

    def close(self) -> None:
        with self._mutex:
            for fd in (self._lock_fd, self._write_fd):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._lock_fd = self._write_fd = None


# -- the fold -----------------------------------------------------------------------------------------------
@dataclass
class Lease:
    """A trial of the shared search that has no result yet: who runs it, until when."""

    id: int
    params: dict[str, Any]
    holder: str | None  # None: in the pool (released, or its result lost)
    until: float | None
    job: dict[str, Any] = field(default_factory=dict)  # under a schedule: target, bracket, parent, replaces, ...

    @property
    def target(self) -> int | None:
        """The rung this job trains toward (None: a ``full`` search's trial)."""
        t = self.job.get("target")
        return None if t is None else int(t)

    def expired(self, now: float) -> bool:
        return self.holder is not None and self.until is not None and self.until < now


@dataclass
class SharedState:
    """The search state a journal describes: :func:`rebuild` (pure) folds records into it."""

    header: dict[str, Any] | None = None
    open: dict[int, Lease] = field(default_factory=dict)  # jobs without a result (new trials, or resumed ones)
    finished: dict[int, Trial] = field(default_factory=dict)  # trials with a result (under a schedule: paused too)
    order: list[int] = field(default_factory=list)  # finished trial ids in the journal order of their first result
    next_id: int = 0
    participants: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> join/leave facts
    costs: list[CostObservation] = field(default_factory=list)  # every job's cost, in journal order
    types: dict[str, set[BlockType]] = field(default_factory=dict)  # participant -> the block types it ran on
    ignored: int = 0  # records that did not apply (a second result, a lease on a finished trial, ...)

    # -- applying records ------------------------------------------------------------------------------
    def apply(self, rec: dict[str, Any]) -> bool:
        """Fold one record in; False if it did not apply (it changes nothing)."""
        kind, p = rec.get("kind"), str(rec.get("p", ""))
        try:
            applied = self._apply(kind, p, rec)
        except (KeyError, TypeError, ValueError):
            applied = False
        if not applied:
            self.ignored += 1
        return applied

    def _apply(self, kind: Any, p: str, rec: dict[str, Any]) -> bool:
        if kind == "search":
            if self.header is None:
                self.header = dict(rec["spec"])
                return True
            return False
        if kind in ("join", "leave"):
            info = self.participants.setdefault(p, {})
            info.update({k: v for k, v in rec.items() if k not in ("kind", "p")})
            info["state"] = kind
            return True
        if kind == "renew":
            until, renewed = float(rec["until"]), False
            for i in rec["ids"]:
                lease = self.open.get(int(i))
                if lease is not None and lease.holder == p:
                    lease.until, renewed = until, True
            return renewed
        if kind == "cost":
            obs = CostObservation.from_record(rec)
            self.costs.append(obs)
            self.types.setdefault(p, set()).add(obs.block_type)
            return True
        if kind == "result":
            return self._result(rec)
        tid = int(rec["id"])
        lease = self.open.get(tid)
        if kind == "propose":
            if lease is not None or tid < self.next_id:
                return False  # an id is proposed once
            self.open[tid] = Lease(tid, dict(rec["params"]), p, float(rec["until"]), job_of(rec))
            self.next_id = tid + 1
            return True
        if kind == "start":  # a PBT child's checkpoint copy is done: where it starts, the rung it trains toward
            if lease is None or lease.holder != p or not lease.job.pop(COPY, None):
                return False
            lease.job.update({k: rec[k] for k in ("target", "start_epochs") if rec.get(k) is not None})
            return True
        if kind == "resume":  # a paused trial trains on (a schedule's promotion or next step)
            paused = self.finished.get(tid)
            if lease is not None or paused is None or paused.status != "ok" or not paused.rungs:
                return False
            self.open[tid] = Lease(tid, dict(paused.params), p, float(rec["until"]), dict(rec["job"]))
            return True
        if lease is None:
            return False
        if kind == "lease":
            lease.holder, lease.until = p, float(rec["until"])
            return True
        if kind == "release" and lease.holder == p:
            lease.holder, lease.until = None, None
            return True
        return False

    def _result(self, rec: dict[str, Any]) -> bool:
        trial = Trial.from_dict(rec["trial"])
        trial.id = tid = int(rec["id"])
        have = self.finished.get(tid)
        rung = rec.get("rung")
        if rung is None:  # a full search's result: the trial's one and only
            if have is not None:
                return False
            self.open.pop(tid, None)
        else:  # a rung's result: the first at each rung counts
            rung = int(rung)
            if have is not None and have.rung is not None and have.rung >= rung:
                return False
            lease = self.open.get(tid)
            if lease is not None and (lease.target is None or lease.target <= rung):
                del self.open[tid]
            trial.target = None
        if have is None:
            self.order.append(tid)
        self.finished[tid] = trial
        self.next_id = max(self.next_id, tid + 1)
        return True

    # -- questions -------------------------------------------------------------------------------------
    @property
    def n_trials(self) -> int:
        """Trials proposed so far (finished or not): what the budget counts."""
        return len(set(self.open) | set(self.finished))

    def claimable(self, now: float, me: str, running: Iterable[int] = ()) -> list[Lease]:
        """Open trials ``me`` may run now, lowest id first: in the pool, leased by ``me`` but not running
        (a resubmitted job of the same participant), or leased by anyone whose lease expired."""
        mine_running = set(running)
        return sorted((lease for lease in self.open.values()
                       if lease.id not in mine_running
                       and (lease.holder is None or lease.holder == me or lease.expired(now))),
                      key=lambda lease: lease.id)

    def held_by_others(self, now: float, me: str) -> list[Lease]:
        return [lease for lease in self.open.values()
                if lease.holder not in (None, me) and not lease.expired(now)]

    def counts(self, now: float) -> dict[str, int]:
        """Trials by state at ``now``, for a status line: done (ok + failed), running (leased, alive),
        expired (leased, the participant silent past its lease) and pool (released, waiting for a job)."""
        leases = list(self.open.values())
        failed = sum(1 for t in self.finished.values() if t.status == "failed")
        return {"done": len(self.finished), "ok": len(self.finished) - failed, "failed": failed,
                "running": sum(1 for x in leases if x.holder is not None and not x.expired(now)),
                "expired": sum(1 for x in leases if x.expired(now)),
                "pool": sum(1 for x in leases if x.holder is None)}

    def observations(self, objective: Objective) -> list[tuple[dict[str, Any], float | None]]:
        """What an engine is told, in journal order: every finished trial's point and value (None: failed)."""
        return [(self.finished[i].params, _value(self.finished[i], objective)) for i in self.order]

    def results(self) -> list[Trial]:
        """The finished trials in journal order."""
        return [self.finished[i] for i in self.order]


#: a PBT child's ``propose`` record's mark: its checkpoint copy is under way, outside the lock (a ``start`` record
#: from its holder ends it; whoever takes the lease over before that copies it again)
COPY = "copy"
#: the fields of a schedule's job in a ``propose`` record (absent in a full search)
JOB_FIELDS = ("target", "bracket", "parent", "replaces", "start_epochs")


def job_of(rec: dict[str, Any]) -> dict[str, Any]:
    """The schedule's job a ``propose`` record carries (empty for a full search)."""
    return {k: rec[k] for k in (*JOB_FIELDS, COPY) if rec.get(k) is not None}


def _value(trial: Trial, objective: Objective) -> float | None:
    return None if trial.fom is None else objective.value(trial.fom)


def rebuild(records: Iterable[dict[str, Any]]) -> SharedState:
    """The state ``records`` describe (pure: the same records give the same state)."""
    state = SharedState()
    for rec in records:
        state.apply(rec)
    return state
