"""Epoch-end callbacks of the Python API: ``callback(epoch, logs) -> bool | None`` on the master.

The rank that decides the end of every epoch (the master, the uber-master, all-reduce rank 0) calls each
callback after validation, with ``epoch`` the 1-based number of the epoch just finished and ``logs`` a copy
of its history entry (``loss``, ``accuracy``, ``val_loss``, ``val_accuracy``, ``samples``, ``seconds``, ...).
A callback that returns True, or raises :class:`StopTraining`, ends the training there exactly as early
stopping does: the epoch's history entry and the final model are written, a checkpoint when
``--checkpoint`` asks for one at the end, and every rank leaves together (``stopped_reason``
``"callback"``). Any other exception fails the run with one line naming the callback.

The seam: the deciding rank asks its early-stopping rule (:class:`nnlo.training.stopping.Stopper`) whether
to stop after every epoch; :class:`CallbackStopper` is that rule with the callbacks after it, so the roles
need not know about callbacks, and a checkpoint keeps the rule's state as before.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nnlo.errors import ConfigError, TrainingError

log = logging.getLogger("nnlo.train")

#: ``callback(epoch, logs)``: True stops the training; None/False go on
Callback = Callable[[int, dict[str, Any]], "bool | None"]
#: the ``stopped_reason`` of a training a callback ended
REASON = "callback"


class StopTraining(Exception):
    """Raise it in a callback to end the training cleanly after this epoch (the message is logged)."""


def check_callbacks(callbacks: Any) -> tuple[Callback, ...]:
    """``callbacks`` as a tuple of callables; one callable alone is accepted too. ConfigError otherwise."""
    if callbacks is None:
        return ()
    if callable(callbacks):
        return (callbacks,)
    try:
        out = tuple(callbacks) if not isinstance(callbacks, (str, bytes)) else None
    except TypeError:
        out = None
    if out is None:
        raise ConfigError(f"callbacks must be a list of functions callback(epoch, logs), got "
                          f"{type(callbacks).__name__}")
    for cb in out:
        if not callable(cb):
            raise ConfigError(f"callbacks must be functions callback(epoch, logs); {cb!r:.60} is not callable")
    return out


def _name(cb: Any) -> str:
    return getattr(cb, "__qualname__", None) or getattr(cb, "__name__", None) or type(cb).__name__


def run_callbacks(callbacks: Sequence[Callback], entry: Mapping[str, Any]) -> bool:
    """Call every callback with the epoch's entry; True when one asked to stop (all of them are called)."""
    stop = False
    epoch = int(entry.get("epoch", 0))
    for cb in callbacks:
        try:
            answer = cb(epoch, dict(entry))
        except StopTraining as e:
            log.info("callback %s stopped the training after epoch %d%s", _name(cb), epoch, f": {e}" if str(e) else "")
            stop = True
            continue
        except Exception as e:  # user code: one line naming it
            raise TrainingError(f"callback {_name(cb)} raised {type(e).__name__} after epoch {epoch}: {e}") from e
        if answer is True:
            log.info("callback %s stopped the training after epoch %d", _name(cb), epoch)
            stop = True
    return stop


class CallbackStopper:
    """An early-stopping rule followed by the callbacks: ``update(entry)`` returns the rule's reason, else
    ``"callback"`` when a callback asked to stop, else None. State is the rule's (checkpoints unchanged)."""

    def __init__(self, rule: Any, callbacks: Sequence[Callback]) -> None:
        self.rule, self.callbacks = rule, tuple(callbacks)

    def update(self, metrics: Mapping[str, Any]) -> str | None:
        reason = self.rule.update(metrics)
        stop = run_callbacks(self.callbacks, metrics)
        return reason or (REASON if stop else None)

    def state_dict(self) -> dict[str, Any]:
        return dict(self.rule.state_dict())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rule.load_state_dict(state)


def attach(role: Any, callbacks: Sequence[Callback]) -> None:
    """Give ``role`` (the rank that decides epochs) the callbacks, through its early-stopping rule."""
    if callbacks and hasattr(role, "stopper"):
        role.stopper = CallbackStopper(role.stopper, callbacks)
