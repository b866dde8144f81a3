"""Which rank died, and how: rank records written at start-up, matched against the launcher's report.

Why: a rank killed by a signal (SIGKILL, the OOM killer, a segfault) cannot print anything itself, and the
launcher only reports a process id (MPICH's Hydra: ``PID 1234 RUNNING AT host`` / ``EXIT CODE: 9``) or a
task number (``srun: error: nid0012: task 3: Killed``). So every rank records itself at start-up
(``<out>/ranks/rank-<r>.json``: rank, role label, host, pid), and whoever watches the launcher (the ``-n``
relaunch in :mod:`nnlo_sched.launchers.local_launch`, the chain's ``nnlo job end`` on a job log) turns the
report into one line: ``rank R (role) on HOST was killed by SIGKILL (signal 9); the job was ended``.

The ranks that live on say so too (:mod:`nnlo.liveness`: :func:`died_line`, :func:`silent_line`), whatever the
launcher: every line naming a dead rank ends with :data:`ENDED`. A job's log is read in order
(:func:`first_event`): the first of a rank's death, a rank's own error, and the batch system ending the job (its
walltime, a cancel, a stop signal the ranks took) decides what ended it; what follows is the teardown (``srun``
reports every rank it killed after an ``MPI_Abort`` as ``Killed``).
The chain's ``nnlo job end`` (:func:`fate_line`) also keeps that fate beside the records (``ranks/fate.json``),
so the next job of a search knows which block lost a rank (the OOM killer's ``SIGKILL``: the trial that block
ran does not fit its memory) and takes it once (:func:`take_fate`).
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import signal
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nnlo.atomic import write_json
from nnlo.contract import ENV_RANK_RECORDS as RECORDS_ENV
from nnlo.contract import RANKS_DIR, RANK_FATE_FILE, status_signal
from nnlo.stop import STOP_WORDS

#: Folder (inside a run's output directory) holding one record per rank.
#: Extra folder for the records, set by the ``-n`` relaunch wrapper (which does not know the run's out dir).
#: The words of a rank-fate line, so that a log reader can recognise one.
FATE_WORDS = "was killed by"
#: How every line naming a dead rank ends (a launcher's report put in words, or the peers' own line).
ENDED = "the job was ended"

_HYDRA = re.compile(r"PID\s+(?P<pid>\d+)\s+RUNNING AT\s+(?P<host>\S+)\s*\n=?\s*(?:EXIT CODE|KILLED BY SIGNAL):"
                    r"\s*(?P<code>\d+)")
_SRUN = re.compile(r"srun: error: (?P<host>\S+): tasks? (?P<ranks>[\d,\-]+): (?P<what>Killed|Segmentation fault"
                   r"|Aborted|Bus error|Terminated|Out Of Memory)", re.IGNORECASE)
_SRUN_SIGNALS = {"killed": signal.SIGKILL, "segmentation fault": signal.SIGSEGV, "aborted": signal.SIGABRT,
                 "bus error": signal.SIGBUS, "terminated": signal.SIGTERM, "out of memory": signal.SIGKILL}
#: Cray PMI under aprun (ALPS): ``_pmiu_daemon(SIGCHLD): [NID 00012] [c0-0c0s3n0] [date] PE RANK 3 exit signal
#: Killed`` (the format of HPE's messages; not checked on a live system)
_CRAY = re.compile(r"\[NID (?P<nid>\d+)\][^\n]*?PE RANK (?P<ranks>\d+) exit signal (?P<what>Killed|Segmentation fault"
                   r"|Aborted|Bus error|Terminated)", re.IGNORECASE)
#: Open MPI's mpirun (and the launchers built on it): ``mpirun noticed that process rank 3 with PID 1234 on node
#: n12 exited on signal 9 (Killed).``
_OPEN_MPI = re.compile(r"process rank (?P<rank>\d+) with PID (?P<pid>\d+) on node (?P<host>\S+?) exited on signal "
                       r"(?P<code>\d+)")
#: A rank's own one-line error (``nnlo: error: ...``): a death's line from its peers, or its own failure.
_OWN = re.compile(r"nnlo: error: (?P<text>[^\n]*)")
#: The batch system ending the job, or the ranks taking its stop signal: what follows is the teardown.
_STOPPED = re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT|DUE TO TIME LIMIT|TERM_RUNLIMIT|TERM_OWNER"
                      r"|PBS: job killed|" + re.escape(STOP_WORDS))


@dataclass(frozen=True)
class RankRecord:
    """What a rank wrote about itself at start-up."""

    rank: int
    role: str
    host: str
    pid: int
    exited: bool = False  # set as the process leaves through Python's exit (any exit status): no kill


@dataclass(frozen=True)
class RankFate:
    """A rank the launcher reported dead by a signal (``rank``/``role`` None when no record matched)."""

    signal: int
    host: str
    rank: int | None = None
    role: str | None = None
    pid: int | None = None

    def line(self) -> str:
        """The one line the user sees (without the ``nnlo: error:`` prefix)."""
        try:
            name = signal.Signals(self.signal).name
        except ValueError:
            name = f"signal {self.signal}"
        who = f"rank {self.rank}" if self.rank is not None else f"a rank (pid {self.pid})" if self.pid else "a rank"
        role = f" ({self.role})" if self.role else ""
        how = f"{name} (signal {self.signal})" if self.signal else "a signal"
        return f"{who}{role} on {self.host} was killed by {how}; the job was ended"


def died_line(rank: int, role: str, host: str) -> str:
    """The peers' line for a rank whose process ended without exiting (:mod:`nnlo.liveness`)."""
    return (f"rank {rank} ({role}) on {host} died: its process ended without exiting (killed, out of memory or "
            f"crashed); {ENDED}")


def silent_line(host: str, ranks: Iterable[int], seconds: float) -> str:
    """The peers' line for a node that stopped answering (:mod:`nnlo.liveness`)."""
    listed = sorted(ranks)
    which = f"rank {listed[0]}" if len(listed) == 1 else f"ranks {', '.join(map(str, listed))}"
    return f"node {host} ({which}) stopped answering for {seconds:g} s (lost, or frozen); {ENDED}"


def is_fate(line: str) -> bool:
    """Whether ``line`` (without ``nnlo: error:``) names a dead rank."""
    return line.rstrip().endswith(ENDED)


def record_rank(rank: int, role: str, out_dir: str | Path | None = None) -> list[Path]:
    """Record this rank (pid, host, role) in ``<out_dir>/ranks/`` and in ``$NNLO_RANK_RECORDS``; best effort.

    A record that cannot be written (read-only or full disk) is skipped: naming a dead rank is a courtesy,
    never a reason for a run to fail.
    """
    data = {"rank": int(rank), "role": str(role), "host": socket.gethostname(), "pid": os.getpid()}
    folders = [Path(out_dir) / RANKS_DIR] if out_dir is not None else []
    if os.environ.get(RECORDS_ENV):
        folders.append(Path(os.environ[RECORDS_ENV]))
    written = _write(folders, rank, data)
    if written:
        atexit.register(_write, folders, rank, dict(data, exited=True))
    return written


def _write(folders: list[Path], rank: int, data: dict) -> list[Path]:
    written = []
    for folder in folders:
        try:
            written.append(write_json(folder / f"rank-{int(rank)}.json", data))
        except OSError:
            continue
    return written


def read_records(folder: str | Path) -> list[RankRecord]:
    """Every readable rank record in ``folder`` (a ``ranks/`` folder); unreadable ones are skipped."""
    records = []
    for path in sorted(Path(folder).glob("rank-*.json")):
        try:
            d = json.loads(path.read_text())
            records.append(RankRecord(int(d["rank"]), str(d["role"]), str(d["host"]), int(d["pid"]),
                                      bool(d.get("exited", False))))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return records


#: Signals that end a process from outside or on a fault; not SIGHUP (1) or SIGINT (2), which a launcher
#: cannot tell from exit codes 1 and 2 (an error, bad input), nor the other codes a program may choose.
FATAL = frozenset(int(s) for s in (signal.SIGQUIT, signal.SIGILL, signal.SIGABRT, signal.SIGBUS,
                                   signal.SIGFPE, signal.SIGKILL, signal.SIGSEGV, signal.SIGPIPE, signal.SIGTERM,
                                   signal.SIGXCPU, signal.SIGSYS))


def _signal_of(code: int) -> int | None:
    """The signal behind a launcher's exit code: Hydra reports the signal number, shells 128+n."""
    number = status_signal(code)
    code = code if number is None else number
    return code if code in FATAL else None


def find_fates(output: str, records: Iterable[RankRecord] = ()) -> list[RankFate]:
    """The ranks a launcher's ``output`` reports killed by a signal, named from ``records`` where possible."""
    records = list(records)
    by_pid = {(r.pid, r.host.split(".")[0]): r for r in records}
    by_pid_only = {r.pid: r for r in records}
    by_rank = {r.rank: r for r in records}
    fates = []
    for m in _HYDRA.finditer(output):
        sig = _signal_of(int(m["code"]))
        if sig is None:
            continue
        pid, host = int(m["pid"]), m["host"]
        rec = by_pid.get((pid, host.split(".")[0])) or by_pid_only.get(pid)
        fates.append(RankFate(sig, host, rec.rank if rec else None, rec.role if rec else None, pid))
    fates += [fate for _, fate in _task_reports(output, by_rank)]
    return fates


def _task_reports(output: str, by_rank: dict[int, RankRecord]) -> list[tuple[int, RankFate]]:
    """(position, fate) of every rank a launcher reports by its rank number (srun, Cray's aprun, Open MPI)."""
    found = []
    for pattern, host_of in ((_SRUN, lambda m: m["host"]), (_CRAY, lambda m: f"nid{m['nid']}")):
        for m in pattern.finditer(output):
            sig = int(_SRUN_SIGNALS[m["what"].lower()])
            for rank in _ranks(m["ranks"]):
                rec = by_rank.get(rank)
                found.append((m.start(), RankFate(sig, rec.host if rec and pattern is _CRAY else host_of(m), rank,
                                                  rec.role if rec else None, rec.pid if rec else None)))
    for m in _OPEN_MPI.finditer(output):
        number = _signal_of(int(m["code"]))
        if number is not None:
            rec = by_rank.get(int(m["rank"]))
            found.append((m.start(), RankFate(number, m["host"], int(m["rank"]), rec.role if rec else None,
                                              int(m["pid"]))))
    return found


@dataclass(frozen=True)
class Event:
    """What a job's log says happened at one point: a rank died (``line`` names it), a rank failed by itself
    (its own error line), or the batch system ended the job (``stop``)."""

    kind: str  # "death", "error" or "stop"
    line: str
    at: int = 0  # position in the log


def first_event(output: str, records: Iterable[RankRecord] = ()) -> Event | None:
    """The first death, own error or stop in a job's ``output`` (records name the ranks), or None."""
    records = list(records)
    by_pid = {(r.pid, r.host.split(".")[0]): r for r in records}
    by_pid_only = {r.pid: r for r in records}
    by_rank = {r.rank: r for r in records}
    events = [Event("death", fate.line(), at) for at, fate in _task_reports(output, by_rank)]
    for m in _HYDRA.finditer(output):
        sig = _signal_of(int(m["code"]))
        if sig is not None:
            pid, host = int(m["pid"]), m["host"]
            rec = by_pid.get((pid, host.split(".")[0])) or by_pid_only.get(pid)
            events.append(Event("death", RankFate(sig, host, rec.rank if rec else None, rec.role if rec else None,
                                                  pid).line(), m.start()))
    for m in _OWN.finditer(output):
        text = m["text"].strip()
        events.append(Event("death" if is_fate(text) else "error", text, m.start()))
    events += [Event("stop", m.group(0), m.start()) for m in _STOPPED.finditer(output)]
    return min(events, key=lambda e: e.at, default=None)


def _ranks(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            out.extend(range(int(lo), int(hi) + 1) if hi.isdigit() else [int(lo)])
    return out


def fate_line(output: str, *folders: str | Path) -> str | None:
    """The rank-fate line for a failed job's ``output`` (records read from ``folders``); None unless the log's
    first event (:func:`first_event`) is a rank's death: the ranks Hydra or srun end afterwards are the job's
    teardown, and a rank's own error or the batch system's end of the job (a walltime) before it is the cause."""
    records: list[RankRecord] = []
    for folder in folders:
        records.extend(read_records(folder))
    first = first_event(output, records)
    if first is None or first.kind != "death":
        return None
    # the signal that took it, for the next job of a search (the OOM killer's SIGKILL): the launcher's report of
    # the rank the first event names (the peers' own line names no signal). A first event that names no rank (a
    # lost node) or a rank the launcher did not report keeps nothing: the launcher's other reports are the
    # teardown, and taking the first of them would blame an innocent block's trial for running out of memory
    named = _named_rank(first.line)
    fate = next((f for f in find_fates(output, records) if named is not None and f.rank == named), None)
    if fate is not None:
        keep_fate(fate, folders)
    return first.line


def _named_rank(line: str) -> int | None:
    """The rank a death's line starts with (``rank 3 (...)``), or None."""
    m = re.match(r"rank (\d+)\b", line)
    return int(m[1]) if m else None


def keep_fate(fate: RankFate, folders: Iterable[str | Path]) -> None:
    """Keep ``fate`` in the first of ``folders`` that holds the dead rank's record (else the first that
    exists), for the next job to :func:`take_fate`; best effort, like the records themselves."""
    existing = [Path(f) for f in folders if Path(f).is_dir()]
    holding = [f for f in existing if fate.rank is not None and (f / f"rank-{fate.rank}.json").exists()]
    for folder in (holding or existing)[:1]:
        with contextlib.suppress(OSError):
            write_json(folder / RANK_FATE_FILE, {"signal": fate.signal, "host": fate.host, "rank": fate.rank,
                                                 "role": fate.role, "pid": fate.pid})


def take_fate(folder: str | Path) -> RankFate | None:
    """The fate :func:`keep_fate` kept in ``folder``, removed as it is read (a job learns from it once)."""
    path = Path(folder) / RANK_FATE_FILE
    try:
        text = path.read_text()
        path.unlink()
    except OSError:
        return None
    try:
        d = json.loads(text)
        return RankFate(int(d["signal"]), str(d["host"]), None if d.get("rank") is None else int(d["rank"]),
                        None if d.get("role") is None else str(d["role"]), None if d.get("pid") is None
                        else int(d["pid"]))
    except (ValueError, KeyError, TypeError):
        return None


class FirstDeath(threading.Thread):
    """Watches the records' processes on this host while a launcher runs; remembers the first to vanish.

    Why: once a rank dies, Hydra SIGKILLs all the others and its banner then names whichever process it
    reports first, not necessarily the one that died first. The first to vanish is the cause; the rest are
    the teardown. The kernel wakes this thread the moment a watched process exits (a pidfd per rank, Linux
    5.3+), well before Hydra's proxy has noticed, told mpiexec and been told to kill the rest; without
    pidfds it checks every ``every`` seconds. Records are read again as they appear.
    """

    def __init__(self, folder: str | Path, every: float = 0.01) -> None:
        super().__init__(name="nnlo-rank-watch", daemon=True)
        self.folder, self.every = Path(folder), every
        self.first: RankRecord | None = None
        self.signal = 0
        self.watching: set[int] = set()  # the pids it watches now (a test waits for them before a kill)
        self.left: set[int] = set()  # watched pids that left through Python's exit (not the cause)
        self._done = threading.Event()
        self._host = socket.gethostname()

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=5)

    def run(self) -> None:
        import select

        watched: dict[int, tuple[RankRecord, int | None]] = {}  # pid -> (record, pidfd)
        poller = select.poll()
        by_fd: dict[int, RankRecord] = {}
        ended = self.left
        seen: object = None
        try:
            while not self._done.is_set() and self.first is None:
                stamp = _stamp(self.folder)
                if stamp != seen:  # records were added: watch them at once (a rank may be killed early)
                    seen = stamp
                    for rec in read_records(self.folder):
                        if rec.host != self._host or rec.pid in watched:
                            continue
                        fd = _pidfd(rec.pid)
                        watched[rec.pid] = (rec, fd)
                        self.watching.add(rec.pid)
                        if fd is not None:
                            poller.register(fd, select.POLLIN)
                            by_fd[fd] = rec
                ready = [by_fd[fd] for fd, _ in poller.poll(int(1000 * max(self.every, 0.05)))]
                ready += [rec for rec, fd in watched.values()
                          if fd is None and rec.pid not in ended and _gone(rec.pid)[0]]
                for rec in sorted(ready, key=lambda r: r.rank):
                    fd = watched[rec.pid][1]
                    if fd is not None:
                        poller.unregister(fd)
                        by_fd.pop(fd)
                        os.close(fd)
                    watched[rec.pid] = (rec, None)
                    if self._left_by_itself(rec):
                        ended.add(rec.pid)
                    else:
                        self.first, self.signal = rec, _gone(rec.pid)[1]
                        break
                if not by_fd:
                    self._done.wait(self.every)
        finally:
            for fd in by_fd:
                os.close(fd)

    def _left_by_itself(self, rec: RankRecord) -> bool:
        """True when the vanished rank's record says it left through Python's exit (an error, the end)."""
        now = [r for r in read_records(self.folder) if r.rank == rec.rank and r.pid == rec.pid]
        return bool(now and now[0].exited)

    def fate(self) -> RankFate | None:
        """The first rank seen to vanish (signal 0 when its exit status could not be read), or None."""
        rec = self.first
        return None if rec is None else RankFate(self.signal, rec.host, rec.rank, rec.role, rec.pid)


def _stamp(folder: Path) -> object:
    """Changes when a record is added to ``folder`` (its modification time and entry count)."""
    try:
        st = folder.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_nlink, st.st_size)


def _pidfd(pid: int) -> int | None:
    """A file descriptor that becomes readable when ``pid`` exits; None where pidfds do not exist."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return opener(pid)
    except OSError:  # already gone (ESRCH), or an old kernel: the polling check decides
        return None


def _gone(pid: int) -> tuple[bool, int]:
    """(the process is dead or a zombie, its killing signal if the zombie's exit code could be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True, 0
    except OSError:  # no /proc (not Linux): existence only
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True, 0
        except PermissionError:
            return False, 0
        return False, 0
    fields = stat.rsplit(")", 1)[-1].split()
    if fields and fields[0] in ("Z", "X"):
        code = int(fields[-1]) if fields[-1].isdigit() else 0  # exit_code (Linux >= 3.5): the wait status
        return True, code & 0x7F
    return False, 0


def launcher_fate(output: str, folder: str | Path, first: RankFate | None) -> str | None:
    """The fate line after a failed launch: the first rank seen to vanish (its signal from the banner when
    the banner names it too), else the launcher's own report matched against the records."""
    reported = find_fates(output, read_records(folder))
    if first is None:
        return reported[0].line() if reported else None
    if not first.signal and not reported:  # no signal anywhere: a rank that exited by itself, not a kill
        return None
    if not first.signal:
        same = [f for f in reported if f.pid == first.pid]
        if same:
            first = RankFate(same[0].signal, first.host, first.rank, first.role, first.pid)
    return first.line()
