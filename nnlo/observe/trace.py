"""The tracing hook the runtime calls. The default tracer records nothing and costs nothing.

Categories used by the runtime (the time summary groups spans by them):
``compute`` (batch forward/backward, update application), ``comm`` (sends, receives, all-reduce),
``wait`` (blocked waiting for a peer), ``io`` (data loading, checkpoints), ``validate``.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator


class Tracer:
    """No-op tracer; :mod:`nnlo.observe.timeline` provides the recording one."""

    enabled = False

    @contextlib.contextmanager
    def span(self, name: str, cat: str = "compute", **args: Any) -> Iterator[None]:
        yield

    def instant(self, name: str, **args: Any) -> None:
        pass

    def counter(self, name: str, values: dict[str, float]) -> None:
        pass

    def close(self) -> None:
        pass


_tracer: Tracer = Tracer()


def get_tracer() -> Tracer:
    return _tracer


def set_tracer(tracer: Tracer) -> Tracer:
    global _tracer
    previous, _tracer = _tracer, tracer
    return previous
