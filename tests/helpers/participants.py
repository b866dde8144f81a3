"""Two real participants of one shared search (``Popen`` objects in their own sessions): the first is SIGKILLed
as soon as the journal shows what a test waits for, then the second is left to finish the search."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nnlo.optimize.journal import SharedState, read_journal, rebuild


def kill_first_when(a: subprocess.Popen, b: subprocess.Popen, out: Path, pick: Callable[[SharedState], Any],
                    timeout: float = 150, finish: float = 200) -> tuple[Any, SharedState, str]:
    """SIGKILL ``a`` once ``pick(journal state)`` is truthy; returns what it picked, the journal's state just
    after ``a`` died, and ``b``'s stderr once ``b`` ended. Both process groups are gone when it returns."""
    try:
        victim = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not victim:
            victim = pick(rebuild(read_journal(out)[0]))
            if victim:
                os.killpg(a.pid, signal.SIGKILL)  # dies mid-work: its leases are never released
            elif a.poll() is not None:
                pytest.fail(f"the first participant ended before it could be killed: {a.stderr.read()[-3000:]}")
            time.sleep(0.05)
        assert victim, "the journal never showed what the test waited for"
        a.wait(timeout=30)
        at_death = rebuild(read_journal(out)[0])
        _, err = b.communicate(timeout=finish)
    finally:
        for p in (a, b):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return victim, at_death, err
