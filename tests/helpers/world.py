"""The warm MPI world: ``mpirun -np N`` started once per test session, with torch and nnlo imported, that runs
``nnlo train|optimize ...`` for many tests on sub-communicators of its ``COMM_WORLD``.

Why: a real launch of 3 ranks costs seconds of start-up (an interpreter, torch and nnlo imported per rank) for a
run that trains for a fraction of a second; a hundred such launches are most of the suite's time. A test that
needs a real MPI training or search but not a real *launch* (the launch, signals, kills and aborts have tests of
their own that start real jobs) sends a run description instead: ``world.run(3, ["train", ...])``. The ranks
(tests/helpers/world_rank.py) run the real command line in-process, the first ``np`` ranks on a communicator
split from ``COMM_WORLD``, and the result has what a launch gives: the exit status and the ranks' output.

A world imports torch and nnlo before its first run, or with ``warm="keras"`` TensorFlow and Keras too (see
:data:`WARMS`). A run that fails (exit status other than 0, 2 or 75), aborts the MPI job or hangs past its
timeout ends the world; the next run starts a fresh one, so a bad test never poisons the next.
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: Ranks of the world: the largest launch a test sends (5: a coordinator and two blocks of two, or an
#: uber-master with two masters and two workers).
SIZE = 5
#: A world whose ranks have not all connected this long after mpirun started is broken (a loaded 2-core
#: machine imports torch in N ranks at once).
START_TIMEOUT_S = 300.0
#: A run that has not ended after this long hangs (the runs themselves take seconds).
RUN_TIMEOUT_S = 240.0
GOOD = (0, 2, 75)  # exit statuses after which every rank is back, waiting for the next run


class WorldError(RuntimeError):
    """The world could not start or died; the message says why and where its log is."""


@dataclass
class WorldRun:
    """What ``subprocess.run([mpirun, "-np", NP, python, "-m", "nnlo_sched", *ARGV])`` would have given: the exit
    status and the output (the ranks' stdout and stderr, rank after rank)."""

    returncode: int
    stdout: str
    stderr: str


#: What a world imports before its first run (tests/helpers/world_rank.py ``_warm``): ``torch`` (torch and nnlo),
#: ``keras`` (TensorFlow and Keras too, with the thread pools nnlo sets in a rank of a ``size``-rank launch).
WARMS = ("torch", "keras")


class MpiWorld:
    """A warm world of ``size`` ranks (default :data:`SIZE`) with ``warm`` imported (one of :data:`WARMS`),
    started on first use; :meth:`close` ends it."""

    def __init__(self, mpirun: str, env: dict[str, str], size: int = SIZE, warm: str = "torch") -> None:
        if warm not in WARMS:
            raise ValueError(f"warm={warm!r}: one of {', '.join(WARMS)}")
        self.mpirun, self.env, self.size, self.warm = mpirun, dict(env), size, warm
        self.root = Path(tempfile.mkdtemp(prefix="nnlo-world-"))
        self.proc: subprocess.Popen | None = None
        self.conns: dict[int, socket.socket] = {}
        self.buffers: dict[int, bytes] = {}
        self.runs = 0
        self.starts = 0

    # -- life ------------------------------------------------------------------------------------------
    def start(self) -> None:
        self.starts += 1
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        with open(self.root / f"world-{self.starts}.log", "wb") as log:
            self.proc = subprocess.Popen(
                [self.mpirun, "-np", str(self.size), sys.executable, "-m", "tests.helpers.world_rank", str(port),
                 self.warm],
                env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                cwd=str(self.root))
        end = time.monotonic() + START_TIMEOUT_S
        listener.settimeout(1.0)
        try:
            while len(self.conns) < self.size:
                if self.proc.poll() is not None or time.monotonic() > end:
                    raise WorldError(f"the warm MPI world did not start (mpirun rc {self.proc.poll()}): "
                                     f"{self._log_tail()}")
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                conn.settimeout(None)
                hello = self._read_line(conn, end)
                self.conns[int(json.loads(hello)["rank"])] = conn
        except BaseException:
            self.kill()
            raise
        finally:
            listener.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and len(self.conns) == self.size

    def kill(self) -> None:
        """End the world at once (a failed, aborted or hung run): every rank, by its process group."""
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
        self.buffers.clear()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None

    def close(self) -> None:
        """End the world cleanly (its ranks exit normally, so coverage data is written), then remove its files."""
        if self.alive:
            for conn in self.conns.values():
                with contextlib.suppress(OSError):
                    conn.sendall(b'{"op": "exit"}\n')
            try:
                assert self.proc is not None
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- runs ------------------------------------------------------------------------------------------
    def run(self, np_: int, argv: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
            timeout: float = RUN_TIMEOUT_S) -> WorldRun:
        """``nnlo ARGV`` on ``np_`` ranks of the world, in ``cwd`` with ``env`` (default: the world's)."""
        if not 1 <= np_ <= self.size:
            raise ValueError(f"the warm world has {self.size} ranks; a run of {np_} needs a real launch")
        if not self.alive:
            self.kill()
            self.start()
        self.runs += 1
        capture = self.root / f"run-{self.runs}"
        capture.mkdir()
        req = {"op": "run", "id": self.runs, "np": np_, "argv": [str(a) for a in argv],
               "env": dict(env if env is not None else self.env), "cwd": str(cwd or os.getcwd()),
               "capture": str(capture)}
        line = json.dumps(req).encode() + b"\n"
        for conn in self.conns.values():
            conn.sendall(line)
        codes: dict[int, int] = {}
        problem = ""
        end = time.monotonic() + timeout
        try:
            for rank in range(np_):
                reply = json.loads(self._read_line(self.conns[rank], end))
                codes[rank] = int(reply["rc"])
        except TimeoutError:
            problem = f"HANG: the run did not end within {timeout:.0f} s (the warm world is restarted)"
        except (OSError, ValueError, KeyError) as e:
            problem = f"the warm world died during the run ({type(e).__name__}: {e}); {self._log_tail()}"
        out = "".join(_read(capture / f"rank-{r}.out") for r in range(np_))
        err = "".join(_read(capture / f"rank-{r}.err") for r in range(np_))
        shutil.rmtree(capture, ignore_errors=True)
        ended = self.proc.poll() if self.proc is not None else None
        if problem or any(c not in GOOD for c in codes.values()):
            self.kill()  # a failed run may leave ranks waiting on each other: the next run gets a fresh world
        if problem:
            return WorldRun(ended or 1, out, f"{err}\n{problem}\n")
        rc = next((codes[r] for r in sorted(codes) if codes[r] != 0), 0)
        return WorldRun(rc, out, err)

    # -- helpers ---------------------------------------------------------------------------------------
    def _read_line(self, conn: socket.socket, end: float) -> bytes:
        key = conn.fileno()
        buf = self.buffers.get(key, b"")
        while b"\n" not in buf:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([conn], [], [], min(left, 1.0))
            if not ready:
                if self.proc is not None and self.proc.poll() is not None:
                    raise OSError(f"mpirun exited with status {self.proc.returncode}")
                continue
            chunk = conn.recv(65536)
            if not chunk:
                raise OSError("a rank closed its connection")
            buf += chunk
        line, _, rest = buf.partition(b"\n")
        self.buffers[key] = rest
        return line

    def _log_tail(self) -> str:
        logs = sorted(self.root.glob("world-*.log"))
        text = _read(logs[-1]) if logs else ""
        return f"world log {logs[-1] if logs else '(none)'}: {text[-2000:]}"


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
