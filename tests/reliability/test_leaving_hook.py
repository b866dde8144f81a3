"""Ending the job tells the peers through a hook (:func:`nnlo.abort.on_leaving`) that :mod:`nnlo.liveness`
registers, so the abort path and the stop signals import nothing above them (no abort -> liveness -> rankfate ->
stop -> liveness cycle; the import contracts in pyproject.toml check the layers). Process-free."""
from __future__ import annotations

import pytest

from nnlo import abort, liveness


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> list:
    saved = list(abort._leaving_hooks)
    monkeypatch.setattr(abort, "_leaving_hooks", saved)
    return saved


def test_liveness_registers_its_leaving_with_the_abort_path() -> None:
    assert liveness.leaving in abort._leaving_hooks


def test_every_hook_hears_the_code_and_a_failing_one_stops_none(hooks: list) -> None:
    heard: list[tuple[str, int]] = []

    def failing(code: int) -> None:
        raise OSError("the peers' sockets are gone")

    abort.on_leaving(failing)
    abort.on_leaving(lambda code: heard.append(("second", code)))
    abort.on_leaving(failing)  # registered once
    abort.tell_leaving(143)
    assert heard == [("second", 143)]
    assert hooks.count(failing) == 1
