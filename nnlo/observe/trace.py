"""The tracing hook the runtime calls. The default tracer records nothing and costs nothing.

Categories used by the runtime (the time summary groups spans by them):
``compute`` (batch forward/backward, update application), ``comm`` (sends, receives, all-reduce),
``wait`` (blocked waiting for a peer), ``io`` (data loading, checkpoints), ``validate``.

Spans sit on hot paths (one per batch, per message), so the no-op tracer hands back one shared, reusable
context manager instead of building a generator per call: a disabled span costs a method call and a
``with`` statement, about 0.1 µs. Recording tracers live in :mod:`nnlo.observe.timeline`.
"""
from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any

#: The span categories the time summary understands; anything else is counted as "other".
CATEGORIES: tuple[str, ...] = ("compute", "comm", "wait", "io", "validate")

_NULL_SPAN: AbstractContextManager[None] = contextlib.nullcontext()


class Tracer:
    """No-op tracer; :mod:`nnlo.observe.timeline` provides the recording one.

    Subclasses override :meth:`span`, :meth:`instant`, :meth:`counter` and :meth:`close`. ``enabled`` lets a
    caller skip building expensive span arguments: ``if tracer.enabled: tracer.instant("x", big=...)``.
    """

    enabled = False

    def span(self, name: str, cat: str = "compute", **args: Any) -> AbstractContextManager[None]:
        """Time the enclosed block as one span of category ``cat`` (see :data:`CATEGORIES`)."""
        return _NULL_SPAN

    def instant(self, name: str, **args: Any) -> None:
        """Mark a moment (an epoch boundary, a new best trial, a signal)."""

    def counter(self, name: str, values: dict[str, float]) -> None:
        """Record numeric series (CPU %, memory, queue depth) drawn as a graph in the trace viewer."""

    def close(self) -> None:
        """Flush and release files; further calls record nothing."""


_tracer: Tracer = Tracer()


def get_tracer() -> Tracer:
    """The process-wide tracer: call this where the span is taken, not once at import time."""
    return _tracer


def set_tracer(tracer: Tracer) -> Tracer:
    """Install ``tracer`` process-wide and return the previous one (so a caller can put it back)."""
    global _tracer
    previous, _tracer = _tracer, tracer
    return previous
