"""nnlo.abort: ending the MPI job can never hang, even when MPI_Abort itself hangs holding the GIL.

The stand-in communicators run in a fresh Python process: one whose ``Abort`` blocks in C while holding the GIL
(as mpi4py's ``Comm.Abort`` does, and as a stuck ``exit()`` inside MPI would), one whose ``Abort`` returns.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.slow]

STUCK = textwrap.dedent("""
    import ctypes, threading, time
    from nnlo.abort import abort_job

    class StuckComm:
        def Abort(self, code):
            # libc sleep through PyDLL keeps the GIL: no Python thread of this process runs again
            ctypes.PyDLL(None).sleep(3600)

    # aborted from a helper thread, as the watchdog does, while the main thread waits in Python
    threading.Thread(target=abort_job, args=(StuckComm(), 3, 1.0), daemon=True).start()
    while True:
        time.sleep(0.05)
""")

RETURNS = textwrap.dedent("""
    from nnlo.abort import abort_job

    class ReturningComm:
        def Abort(self, code):
            print("abort asked", code, flush=True)

    abort_job(ReturningComm(), 75)
    print("went on after the abort", flush=True)
""")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    # a process still there after 600 s (a tenth of the stuck abort's hour) fails the test: it hung
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)


def test_an_abort_that_hangs_holding_the_gil_still_ends_the_process() -> None:
    proc = _run(STUCK)  # ends after the 1-s grace, never after the hour's sleep (the timeout above)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "Thread 0x" not in proc.stderr, proc.stderr  # no thread dump shown


def test_an_abort_that_returns_never_lets_the_rank_go_on() -> None:
    proc = _run(RETURNS)
    assert proc.returncode == 75, (proc.returncode, proc.stderr)
    assert proc.stdout.splitlines() == ["abort asked 75"], proc.stdout


def test_a_rank_abort_prints_its_one_line_first() -> None:
    proc = _run(textwrap.dedent("""
        from nnlo.abort import abort_rank

        class Comm:
            def Get_rank(self):
                return 3

            def Abort(self, code):
                pass

        abort_rank(Comm(), "worker:w2", "its batch failed (ValueError: bad)", 1)
    """))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == "nnlo: error: rank 3 (worker:w2): its batch failed (ValueError: bad)\n"
