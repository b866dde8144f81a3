"""Per-rank log files and the merged log of all ranks.

Every rank writes ``<out_dir>/logs/rank-<r>.log`` (all ``nnlo.*`` loggers, at ``--log-level``). Lines start
with a UTC timestamp with microseconds, so the files of all ranks merge into one time-ordered
``<out_dir>/logs/all-ranks.log`` by a streaming k-way merge (rank 0 does it at the end; :func:`merge_logs`
does it on demand, e.g. for ``nnlo logs``). Multi-line records (tracebacks) stay with their first line.

On the console, rank 0 shows its records at the chosen level and the other ranks only warnings and errors,
each prefixed with the rank and role, so eight ranks do not print eight copies of every message. Two marks
(``extra=``) refine that, for every console handler nnlo installs (:class:`ConsoleFilter`):

* :data:`ONCE`: a warning every rank gives alike (it follows from the options, the data, or a signal that
  reaches every rank) is printed once per run, by the rank that speaks for the run (rank 0 of a training; in
  a search the first rank of its first block, see :func:`speaking_for_the_run`), and once per process however
  many trials repeat it; every rank's log file keeps its own copy;
* :data:`DETAIL`: a record for the log files whatever the level (the trimmed traceback of an error in the
  user's code, whose one line the screen shows anyway), on the screen only at ``--log-level debug``.
"""
from __future__ import annotations

import contextlib
import heapq
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from nnlo.atomic import atomic_open
from nnlo.contract import LOG_DIR
from nnlo.errors import ConfigError
from nnlo.observe.progress import live_on

LEVELS = ("debug", "info", "warning", "error", "critical")
#: ``log.warning(..., extra=ONCE)``: a warning every rank of the run gives alike: on the screen once per run
ONCE = {"nnlo_once": True}
#: ``log.error(..., extra=DETAIL)``: for the log files at any level; on the screen only at debug level
DETAIL = {"nnlo_detail": True}
_speaker: bool | None = None  # set by speaking_for_the_run(); None: rank 0 of the console's run speaks
MERGED_NAME = "all-ranks.log"
_STAMP_LEN = len("2026-11-21T09:30:01.123456Z")


def parse_level(level: str | int) -> int:
    """``"info"`` -> ``logging.INFO``; anything else is a one-line :class:`ConfigError`."""
    if isinstance(level, int) and level in (10, 20, 30, 40, 50):
        return level
    name = str(level).strip().lower()
    if name not in LEVELS:
        raise ConfigError(f"--log-level {level!r} is not a level; use one of {', '.join(LEVELS)}")
    return getattr(logging, name.upper())


class RankFormatter(logging.Formatter):
    """``2026-11-21T09:30:01.123456Z rank 3 worker:w2 INFO nnlo.training: message``."""

    def __init__(self, rank: int, role: str, prefix_only: bool = False) -> None:
        super().__init__()
        self.rank, self.role, self.prefix_only = rank, role, prefix_only

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="microseconds")[:-6] + "Z"

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        if self.prefix_only:
            return f"[rank {self.rank} {self.role}] {record.levelname.lower()}: {message}"
        return f"{self.formatTime(record)} rank {self.rank} {self.role} {record.levelname} {record.name}: {message}"


@contextlib.contextmanager
def speaking_for_the_run(speaker: bool) -> Iterator[None]:
    """Within the block, whether this process prints the run-wide warnings (:data:`ONCE`) on the screen (else
    rank 0 does). A search's blocks name the first rank of the first block: rank 0 is the coordinator, which
    trains nothing."""
    global _speaker
    previous, _speaker = _speaker, speaker
    try:
        yield
    finally:
        _speaker = previous


class ConsoleFilter(logging.Filter):
    """What a console handler of rank ``rank`` at ``level`` leaves out: :data:`DETAIL` records above debug
    level, :data:`ONCE` warnings unless this process speaks for the run, and those it has printed before."""

    def __init__(self, rank: int, level: int) -> None:
        super().__init__()
        self.rank, self.level = rank, level
        self._said: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "nnlo_detail", False) and self.level > logging.DEBUG:
            return False
        if getattr(record, "nnlo_once", False):
            if not (_speaker if _speaker is not None else self.rank == 0):
                return False
            text = record.getMessage()
            if text in self._said:
                return False
            self._said.add(text)
        return True


class _ConsoleHandler(logging.StreamHandler[IO[str]]):
    """A stream handler that steps around a live progress line on the same terminal."""

    def emit(self, record: logging.LogRecord) -> None:
        live = live_on(self.stream)
        if live is not None:
            live.suspend()
        super().emit(record)
        if live is not None:
            live.resume()


class RankLogging:
    """The handlers one rank installed on the ``nnlo`` logger; :meth:`close` removes exactly those."""

    def __init__(
        self,
        out_dir: str | Path | None,
        rank: int,
        role: str,
        level: str | int = "info",
        console: bool = True,
        stream: IO[str] | None = None,
    ) -> None:
        self.level = parse_level(level)
        self.rank, self.role = rank, role
        self.path: Path | None = None
        self._handlers: list[logging.Handler] = []
        self.logger = logging.getLogger("nnlo")
        self._previous_level = self.logger.level
        self._previous_propagate = self.logger.propagate
        # Lowering the logger's level for our file must not make handlers someone else installed (a
        # command's console handler set to warnings on non-zero ranks) print more: raise them to the level
        # they effectively had, and put everything back at close.
        before = self.logger.getEffectiveLevel()
        self._raised: list[tuple[logging.Handler, int]] = []
        if self.level < before:
            for h in self.logger.handlers:
                if h.level < before:
                    self._raised.append((h, h.level))
                    h.setLevel(before)
        self.logger.setLevel(self.level)
        if out_dir is not None:
            self.path = Path(out_dir) / LOG_DIR / f"rank-{rank}.log"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handler: logging.Handler = logging.FileHandler(self.path, mode="a", encoding="utf-8", delay=False)
            handler.setFormatter(RankFormatter(rank, role))
            handler.setLevel(self.level)
            self._add(handler)
        if console and not _has_console_handler(self.logger):
            handler = _ConsoleHandler(stream if stream is not None else sys.stderr)
            handler.setFormatter(RankFormatter(rank, role, prefix_only=True))
            handler.setLevel(self.level if rank == 0 else max(self.level, logging.WARNING))
            handler.addFilter(ConsoleFilter(rank, self.level))
            self._add(handler)
            self.logger.propagate = False  # a model's logging.basicConfig() must not print nnlo's records again

    def _add(self, handler: logging.Handler) -> None:
        self.logger.addHandler(handler)
        self._handlers.append(handler)

    def close(self) -> None:
        for handler in self._handlers:
            self.logger.removeHandler(handler)
            with contextlib.suppress(Exception):  # a handler that fails to close must not stop the others
                handler.close()
        self._handlers.clear()
        for handler, level in self._raised:
            handler.setLevel(level)
        self._raised.clear()
        self.logger.setLevel(self._previous_level)
        self.logger.propagate = self._previous_propagate


def console_logging(level: str, rank: int) -> None:
    """Console logging of a search's ranks (``nnlo optimize`` and :func:`nnlo.optimize`): rank 0 at the
    run's level, the others at warnings; nothing added when the ``nnlo`` logger already has a handler."""
    logger = logging.getLogger("nnlo")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(f"%(asctime)s [{rank}] %(name)s: %(message)s", "%H:%M:%S"))
        handler.addFilter(ConsoleFilter(rank, parse_level(level)))
        logger.addHandler(handler)
        # this handler prints nnlo's records: a root handler the user's model installs (logging.basicConfig())
        # would print each again in Python's default format, the log files' tracebacks too
        logger.propagate = False
    logger.setLevel(level.upper() if rank == 0 else "WARNING")


def _has_console_handler(logger: logging.Logger) -> bool:
    return any(
        isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler) for h in logger.handlers
    )


def _records(path: Path) -> Iterator[tuple[str, int, str]]:
    """(timestamp, rank, text) per record; lines that do not start with a timestamp continue the record."""
    rank = int(path.stem.removeprefix("rank-")) if path.stem.removeprefix("rank-").isdigit() else -1
    current: list[str] = []
    stamp = ""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if _starts_with_stamp(line):
                if current:
                    yield stamp, rank, "".join(current)
                stamp, current = line[:_STAMP_LEN], [line]
            elif current:
                current.append(line)
            else:  # text before the first record (e.g. a crash dump): keep it, at the start
                stamp, current = "", [line]
    if current:
        text = "".join(current)
        yield stamp, rank, text if text.endswith("\n") else text + "\n"


def _starts_with_stamp(line: str) -> bool:
    return (len(line) >= _STAMP_LEN and line[4] == "-" and line[10] == "T" and line[_STAMP_LEN - 1] == "Z"
            and line[:4].isdigit())


def rank_logs(log_dir: str | Path) -> list[Path]:
    files = [p for p in Path(log_dir).glob("rank-*.log") if p.stem.removeprefix("rank-").isdigit()]
    return sorted(files, key=lambda p: int(p.stem.removeprefix("rank-")))


def merge_logs(out_dir: str | Path, out: str | Path | None = None) -> Path | None:
    """Merge ``<out_dir>/logs/rank-*.log`` by time into ``all-ranks.log`` (atomic); None if no logs."""
    log_dir = Path(out_dir) / LOG_DIR
    files = rank_logs(log_dir)
    if not files:
        return None
    out_path = Path(out) if out is not None else log_dir / MERGED_NAME
    with atomic_open(out_path, "w") as f:
        for _, _, text in heapq.merge(*(_records(p) for p in files), key=lambda r: (r[0], r[1])):
            f.write(text)
    return out_path
