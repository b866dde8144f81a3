"""Progress a person can watch: one live status line on a terminal, plain lines everywhere else.

On a terminal the line is redrawn in place (carriage return + clear-to-end-of-line), clipped to the
terminal's width so it never wraps. When the stream is not a terminal (a batch job's output file, a pipe,
CI logs) every update that changes something prints one plain line, without control characters, so the
file stays readable with ``less`` and greppable.

Usage (the training master, the optimization coordinator)::

    progress = Progress("train", total=epochs)          # or Progress("optimize", total=n_trials)
    progress.update(epoch=3, train_loss=0.51, val_loss=0.48, val_accuracy=0.87, samples_per_s=1234)
    progress.close()

Fields are merged, so ``update`` may carry only what changed. :func:`render` gives the same text for
other displays (``nnlo status --watch``). Log records printed through :mod:`nnlo.observe.logs` clear the
live line first and redraw it after, so the two never garble each other.
"""
from __future__ import annotations

import os
import sys
import time
from typing import IO, Any

from nnlo.contract import ENV_LIVE as LIVE_ENV

# field -> label, in display order; any other field is shown as "name value" after these
_TRAIN_FIELDS: tuple[tuple[str, str], ...] = (
    ("train_loss", "loss"), ("loss", "loss"), ("accuracy", "acc"), ("val_loss", "val_loss"),
    ("val_accuracy", "val_acc"), ("samples_per_s", "samples/s"),
)
_OPTIMIZE_FIELDS: tuple[tuple[str, str], ...] = (("fom", "last fom"), ("running", "running"), ("failed", "failed"))
_HIDDEN = {"epoch", "epochs", "trial", "trials", "best_fom", "best_trial", "total", "elapsed", "kind"}


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def _elapsed(seconds: float) -> str:
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def render(kind: str, fields: dict[str, Any], elapsed: float | None = None) -> str:
    """One status line, e.g. ``train epoch 3/10 | loss 0.512 | val_loss 0.48 | val_acc 0.87 | 0:00:12``."""
    parts: list[str] = [kind]
    if kind == "optimize":
        counter, total = fields.get("trial"), fields.get("trials", fields.get("total"))
        if counter is not None:
            parts[0] += f" trial {counter}" + (f"/{total}" if total else "")
        if fields.get("best_fom") is not None:
            best = f"best fom {_fmt(fields['best_fom'])}"
            if fields.get("best_trial") is not None:
                best += f" (trial {fields['best_trial']})"
            parts.append(best)
        known = _OPTIMIZE_FIELDS
    else:
        counter, total = fields.get("epoch"), fields.get("epochs", fields.get("total"))
        if counter is not None:
            parts[0] += f" epoch {counter}" + (f"/{total}" if total else "")
        if fields.get("best_fom") is not None:
            parts.append(f"best {_fmt(fields['best_fom'])}")
        known = _TRAIN_FIELDS
    shown = set(_HIDDEN)
    for key, label in known:
        if key in shown:
            continue
        shown.add(key)
        if key == "loss" and "train_loss" in fields:
            continue
        value = fields.get(key)
        if value is not None:
            parts.append(f"{_fmt(value)} {label}" if key == "samples_per_s" else f"{label} {_fmt(value)}")
    for key, value in fields.items():
        if key not in shown and value is not None:
            parts.append(f"{key} {_fmt(value)}")
    if elapsed is not None:
        parts.append(_elapsed(elapsed))
    return " | ".join(parts)


class Progress:
    """A live display when ``stream`` is a terminal (or ``live=True``), plain lines otherwise."""

    def __init__(
        self,
        kind: str = "train",
        stream: IO[str] | None = None,
        *,
        total: int | None = None,
        live: bool | None = None,
    ) -> None:
        if kind not in ("train", "optimize"):
            raise ValueError(f"Progress kind must be 'train' or 'optimize', got {kind!r}")
        self.kind = kind
        self.stream = stream if stream is not None else sys.stderr
        self.live = _on_terminal(self.stream) if live is None else live
        self.fields: dict[str, Any] = {}
        if total is not None:
            self.fields["epochs" if kind == "train" else "trials"] = total
        self._t0 = time.monotonic()
        self._last = ""
        self._drawn = False
        self._closed = False

    def update(self, **fields: Any) -> None:
        """Merge ``fields`` into the display and show it (a field set to None is removed)."""
        if self._closed:
            return
        for key, value in fields.items():
            if value is None:
                self.fields.pop(key, None)
            else:
                self.fields[key] = value
        text = render(self.kind, self.fields)
        try:
            if self.live:
                self._draw()
            elif text != self._last:
                self.stream.write(text + "\n")
            self._last = text
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream or a vanished terminal must not stop training
            self._closed = True

    def _draw(self) -> None:
        line = render(self.kind, self.fields, time.monotonic() - self._t0)
        width = _width(self.stream)
        if len(line) > width - 1:
            line = line[: max(1, width - 2)] + "…"
        self.stream.write("\r" + line + "\x1b[K")
        self._drawn = True
        _LIVE[id(self.stream)] = self

    def suspend(self) -> None:
        """Clear the live line so other output (a log record) starts at the left margin."""
        if self.live and self._drawn and not self._closed:
            try:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            except (OSError, ValueError):
                self._closed = True

    def resume(self) -> None:
        """Draw the live line again below what was printed since :meth:`suspend`."""
        if self.live and self._drawn and not self._closed:
            try:
                self._draw()
                self.stream.flush()
            except (OSError, ValueError):
                self._closed = True

    def close(self) -> None:
        """End the live line with a newline so later output starts on a fresh line; idempotent."""
        if self._closed:
            return
        self._closed = True
        if _LIVE.get(id(self.stream)) is self:
            del _LIVE[id(self.stream)]
        if self.live and self._drawn:
            try:
                self.stream.write("\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


#: set to "1" by ``nnlo train|optimize -n`` when its own stderr is a terminal: the ranks write into mpirun's
#: pipes, but what they write reaches that terminal unchanged (see :mod:`nnlo_sched.launchers.local_launch`)


def for_terminal(kind: str = "train", stream: IO[str] | None = None, total: int | None = None) -> Progress | None:
    """A live :class:`Progress` when ``stream`` (default stderr) is a terminal, else None.

    For callers that already log one line per epoch (the training master): on a terminal they add the
    live line, in a batch job's output file they add nothing, so no line is printed twice. A rank started
    by the ``-n`` launcher counts as on a terminal when the launcher is (``NNLO_LIVE=1``).
    """
    stream = stream if stream is not None else sys.stderr
    return Progress(kind, stream, total=total, live=True) if _on_terminal(stream) else None


#: the live display drawn on each stream (by id), so log output can step around it (see live_on)
_LIVE: dict[int, Progress] = {}


def live_on(stream: IO[str]) -> Progress | None:
    """The live progress line currently drawn on ``stream``, if any.

    The console log handler of :mod:`nnlo.observe.logs` uses it: ``suspend()``, print the record,
    ``resume()``, so log lines and the live line never share a row.
    """
    return _LIVE.get(id(stream))


def _on_terminal(stream: IO[str]) -> bool:
    """A terminal, or this process's own stderr/stdout when the ``-n`` launcher says they reach one."""
    if _isatty(stream):
        return True
    return os.environ.get(LIVE_ENV) == "1" and stream in (sys.stderr, sys.stdout)


def _isatty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _width(stream: IO[str]) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return int(os.environ.get("COLUMNS", "80") or 80)
