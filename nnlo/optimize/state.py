"""Atomic files and the search checkpoint (``optimizer-state.json``).

Every write goes to a temporary file in the same directory, is flushed to disk, then renamed over the old
file: on a POSIX filesystem the rename is atomic, so a crash (or a walltime SIGKILL) leaves either the old
or the new complete file, never half of one. The state is plain JSON (engine observations, finished
trials, in-flight trials, options) - no pickles - so it survives library upgrades and can be inspected.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from nnlo.errors import ConfigError

STATE_FILE = "optimizer-state.json"
STATE_VERSION = 1


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False, default=_default) + "\n")


def _default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def save_state(out_dir: Path, state: dict[str, Any]) -> None:
    atomic_write_json(Path(out_dir) / STATE_FILE, {"version": STATE_VERSION, **state})


def load_state(out_dir: Path) -> dict[str, Any] | None:
    """The saved search state in ``out_dir``, or None if there is none. A corrupt file is a clear error."""
    path = Path(out_dir) / STATE_FILE
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path} is unreadable ({e}); move it away to start a new search") from None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise ConfigError(f"{path} is not an nnlo optimizer state (version {STATE_VERSION}); use another --output")
    return state
