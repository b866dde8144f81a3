"""A failure of one rank, known to every rank of the training group.

Why: when a worker's model raises or its loss turns NaN, the other ranks must not hang and the user must see
*one* line naming the cause and the rank. The failing rank tells its master, the master tells every other
worker at its next message, and each rank raises :class:`RankFailure` carrying the original message; only
the originating rank has ``report=True``, so the command line prints the line once. Callers inside Python
(the optimization engine) catch it like any :class:`~nnlo.errors.NnloError` and may record a failed trial.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from nnlo.contract import EXIT_BAD_INPUT, EXIT_FAILED
from nnlo.errors import NnloError, TrainingError
from nnlo.legacy import with_hint
from nnlo.observe.logs import DETAIL
from nnlo.roles import RoleError
from nnlo.usercode import locate, user_traceback

T = TypeVar("T")


class RankFailure(NnloError):
    """``rank R (role): message`` - raised on every rank of a group when one of them failed."""

    def __init__(self, message: str, rank: int, role: str, *, exit_code: int = 1, report: bool = True) -> None:
        super().__init__(message)
        self.message, self.rank, self.role = message, rank, role
        self.exit_code = exit_code
        self.report = report

    def __str__(self) -> str:
        return f"rank {self.rank} ({self.role}): {self.message}"

    def to_dict(self) -> dict[str, object]:
        return {"message": self.message, "rank": self.rank, "role": self.role, "exit_code": self.exit_code}

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, report: bool) -> RankFailure:
        return cls(str(data["message"]), int(data["rank"]), str(data["role"]),
                   exit_code=int(data.get("exit_code", EXIT_FAILED)), report=report)


def describe_exception(exc: BaseException) -> tuple[str, int]:
    """(one-line message, exit code) for any exception: NnloErrors as they are, others with their type; an
    error raised in the user's own code names where (:func:`nnlo.usercode.locate`: ``(at model.py:12 in
    forward)``, or the failing layer of a torch model)."""
    if isinstance(exc, RankFailure):
        return exc.message, exc.exit_code
    message, code = _described(exc)

    where = locate(exc)
    if where and where not in message:
        message = f"{message} ({where})"
    return message, code


def _described(exc: BaseException) -> tuple[str, int]:
    if isinstance(exc, NnloError):
        return str(exc), getattr(exc, "exit_code", EXIT_BAD_INPUT)

    if isinstance(exc, RoleError):
        return str(exc), 2
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__, 1


def failure_line(exc: BaseException, logger: logging.Logger, what: str = "failed") -> tuple[str, int]:
    """:func:`describe_exception` of this rank's own failure, with its traceback in the rank's log: an error in
    the user's code trimmed to their part (:func:`nnlo.usercode.user_traceback`), in the log file whatever the
    level and on the screen at ``--log-level debug``; any other at debug level, whole."""
    if not isinstance(exc, RankFailure):
        trimmed = user_traceback(exc)
        if trimmed is not None:
            logger.error("%s:\n%s", what, trimmed, extra=DETAIL)
        else:
            logger.debug(what, exc_info=exc)
    return describe_exception(exc)


def in_model(what: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` where ``fn`` runs the user's model (a training step): an exception from the model becomes
    a TrainingError that says so ("the model raised ValueError while training: ..."); nnlo's own errors and
    MemoryError pass unchanged."""
    try:
        return fn(*args)
    except (NnloError, MemoryError):
        raise
    except Exception as e:  # the user's model raised: name it
        raise TrainingError(with_hint(f"the model raised {type(e).__name__} while {what}: {e}", e)) from e
