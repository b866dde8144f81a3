"""What the runtime calls to switch observability on for one rank.

The runtime calls :func:`start` once per rank after roles are known, :meth:`Session.epoch_end` at the end of
each epoch (its dict is merged into that epoch's history entry), and :meth:`Session.close` at the end (also on
errors). With everything off this is nearly free: the tracer is the no-op one.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnlo.observe.trace import Tracer, get_tracer


@dataclass
class Session:
    rank: int
    role: str
    out_dir: Path | None
    tracer: Tracer = field(default_factory=get_tracer)

    def epoch_end(self, epoch: int) -> dict[str, Any]:
        return {}

    def summary(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self.tracer.close()


def start(
    out_dir: str | Path | None,
    rank: int,
    role: str,
    *,
    log_level: str = "info",
    timeline: bool = False,
    monitor: bool = False,
) -> Session:
    logging.getLogger("nnlo").setLevel(log_level.upper())
    return Session(rank, role, Path(out_dir) if out_dir else None)
