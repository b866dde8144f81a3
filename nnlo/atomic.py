"""Atomic file writes: a reader sees the old file or the new one, never a torn one.

Everything nnlo writes that another process may read while it is written (checkpoints, run state, trial
tables, history, merged traces and logs) goes through :func:`atomic_open`: the data goes to a temporary file
beside the target (named by host, process and thread, so writers on different nodes of a network filesystem
never share one), is flushed and fsynced, then renamed over the target, and the folder is fsynced so the
rename survives a crash. A failed write removes its temporary file and leaves the target as it was.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def _temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.{threading.get_ident()}.tmp")


def fsync_folder(folder: str | Path) -> None:
    """Make a rename in ``folder`` durable (best effort: some filesystems refuse to fsync folders)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file to write; on a clean exit it replaces ``path`` (``mode`` "w" or "wb")."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary_name(path)
    try:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_folder(path.parent)


def write_text(path: str | Path, text: str) -> Path:
    with atomic_open(path, "w") as f:
        f.write(text)
    return Path(path)


def json_default(obj: Any) -> Any:
    """numpy scalars and arrays, sets and tuples as plain JSON values; anything else as its text."""
    try:
        import numpy as np  # lazy: numpy off the command line's start-up

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)  # paths, enums, ...: their text


def write_json(path: str | Path, data: Any, *, indent: int | None = 1, sort_keys: bool = False,
               allow_nan: bool = True) -> Path:
    """``data`` as JSON (numpy values included), with a final newline (``indent=None``: one compact line)."""
    text = json.dumps(data, indent=indent, sort_keys=sort_keys, allow_nan=allow_nan, default=json_default)
    return write_text(path, text + "\n")
