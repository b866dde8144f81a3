"""The watchdog's two limits (nnlo/training/watchdog.py): the start-up limit until every rank has set up, the
run's limit after; each expiry names the variable that sets the limit it hit."""
from __future__ import annotations

import math
import threading

import pytest

from nnlo.training.watchdog import DEFAULT_TIMEOUT, Watchdog, start_timeout_from_env, timeout_from_env

BOUND_S = 120.0  # only separates "fired" from "never fires"; the limits under test are a tenth of a second


def expiring(timeout: float, start_timeout: float | None) -> tuple[Watchdog, threading.Event, list[str]]:
    fired, messages = threading.Event(), []

    def on_expire(message: str) -> None:
        messages.append(message)
        fired.set()

    return Watchdog(timeout, on_expire, start_timeout=start_timeout), fired, messages


def test_a_wait_at_start_up_has_the_start_limit_and_names_its_variable():
    dog, fired, messages = expiring(3600.0, 0.1)
    try:
        dog.arm("waiting for the other ranks to finish setting up")
        assert fired.wait(BOUND_S)
        assert messages == ["waiting for the other ranks to finish setting up for more than 0.1 s: a peer died or "
                            "hangs (NNLO_START_TIMEOUT sets this limit)"]
    finally:
        dog.close()


def test_once_started_a_wait_has_the_run_limit():
    dog, fired, messages = expiring(0.1, 3600.0)
    try:
        with dog.waiting("waiting for the initial weights"):
            assert not fired.wait(0.5)  # five times the run's limit: the start-up limit holds
        dog.started()
        dog.arm("waiting for a message from rank 2 (worker)")
        assert fired.wait(BOUND_S)
        assert messages == ["waiting for a message from rank 2 (worker) for more than 0.1 s: a peer died or hangs "
                            "(NNLO_COMM_TIMEOUT sets this limit)"]
    finally:
        dog.close()


def test_a_disarmed_watchdog_never_fires():
    dog, fired, _ = expiring(0.05, None)
    try:
        with dog.waiting("a wait that ends"):
            pass
        assert not fired.wait(0.5)
    finally:
        dog.close()


@pytest.mark.parametrize(("comm", "start", "limit", "start_limit"), [
    (None, None, DEFAULT_TIMEOUT, DEFAULT_TIMEOUT),
    ("5", None, 5.0, DEFAULT_TIMEOUT),           # a short run limit keeps the long start-up limit
    ("7200", None, 7200.0, 7200.0),             # never shorter than the run's limit
    ("5", "60", 5.0, 60.0),
    ("30", "5", 30.0, 30.0),
    ("0", "60", None, None),                    # 0: no watchdog at all
    ("5", "0", 5.0, math.inf),                  # the start-up limit alone switched off
    ("five", "soon", DEFAULT_TIMEOUT, DEFAULT_TIMEOUT),  # unreadable: the defaults
])
def test_limits_from_the_environment(monkeypatch, comm, start, limit, start_limit):
    for name, value in (("NNLO_COMM_TIMEOUT", comm), ("NNLO_START_TIMEOUT", start)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert timeout_from_env() == limit
    assert start_timeout_from_env(limit) == start_limit
