"""Starting MPI jobs on this machine: detect an existing launch, else re-launch with ``mpirun -np N``.

``nnlo train -n 3 ...`` typed at a shell is not inside an MPI launch (world size 1, no launcher
variables), so it re-runs itself as ``mpirun -np 3 <python> -m nnlo_sched train ...``. The same command
inside ``mpirun``/``srun``/``jsrun``/``aprun`` sees the launcher's variables and runs in that world directly.
The ``mpirun`` next to the running Python (a virtual environment's MPICH from ``pip install mpich``) comes
first, then the one on ``PATH``.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Mapping, Sequence

from nnlo.errors import ConfigError

#: Variables a launcher sets in every rank (MPICH/Hydra and PMI-2, Open MPI, PMIx, Cray ALPS, IBM jsrun).
LAUNCH_VARIABLES = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "ALPS_APP_PE",
                    "JSM_NAMESPACE_SIZE", "MPI_LOCALNRANKS")
#: Set by :func:`relaunch` in the children, so they never re-launch again.
MARKER = "NNLO_LAUNCHED"
#: Signals the parent passes on to mpirun (which passes them to the ranks).
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


def inside_mpi_launch(env: Mapping[str, str] | None = None) -> bool:
    """True when this process was started by an MPI launcher (or by :func:`relaunch`)."""
    env = os.environ if env is None else env
    if env.get(MARKER) or any(env.get(v) for v in LAUNCH_VARIABLES):
        return True
    # Inside a Slurm job step (srun), not merely in a batch script: steps have a numeric id below 2**32-2.
    step = env.get("SLURM_STEP_ID", "")
    return step.isdigit() and int(step) < 4294967294 and "SLURM_PROCID" in env


def find_mpirun() -> str:
    """The mpirun (or mpiexec) next to this Python first, then on PATH; a one-line error if none."""
    here = Path(sys.executable).parent
    for name in ("mpirun", "mpiexec"):
        candidate = here / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    for name in ("mpirun", "mpiexec"):
        found = shutil.which(name)
        if found:
            return found
    raise ConfigError("no mpirun found to start -n ranks; install an MPI: pip install mpich (or load your site's MPI)")


def mpirun_command(n: int, argv: Sequence[str], mpirun: str | None = None) -> list[str]:
    """``mpirun -np N <python> -m nnlo_sched <argv...>``."""
    if n < 1:
        raise ConfigError(f"-n must be at least 1, got {n}")
    return [mpirun or find_mpirun(), "-np", str(n), sys.executable, "-m", "nnlo_sched", *argv]


def relaunch(n: int, argv: Sequence[str]) -> int:
    """Run ``nnlo <argv>`` on ``n`` ranks under mpirun; returns its exit status (signals passed on).

    mpirun's output passes through as it comes, and is also watched: when the job fails because a rank was
    killed by a signal and no rank printed its own ``nnlo: error:`` line, one line names that rank and its
    role (from the rank records, :mod:`nnlo.rankfate`) and the status is 1, not the signal's number.
    """
    from nnlo import rankfate

    cmd = mpirun_command(n, argv)
    sys.setswitchinterval(0.001)  # this process only waits: let the rank watcher run the moment it wakes
    with tempfile.TemporaryDirectory(prefix="nnlo-ranks-") as records:
        env = dict(os.environ, **{MARKER: "1", rankfate.RECORDS_ENV: records})
        if _isatty(sys.stderr):  # the ranks' output reaches this terminal: let rank 0 draw its live line
            from nnlo.observe.progress import LIVE_ENV

            env[LIVE_ENV] = "1"
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deaths = rankfate.FirstDeath(records)
        deaths.start()
        watch = _Watch()
        pumps = [threading.Thread(target=watch.pump, args=(src, dst), daemon=True)
                 for src, dst in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))]
        for t in pumps:
            t.start()
        forwarded: list[int] = []
        code = _wait(proc, forwarded)
        deaths.stop()
        for t in pumps:
            t.join(timeout=30)
        if code != 0 and not watch.own_error and not forwarded:  # a signal sent to us is the user's, not a death
            line = rankfate.launcher_fate(watch.text(), records, deaths.fate())
            if line is not None:
                sys.stderr.write(f"nnlo: error: {line}\n")
                sys.stderr.flush()
                return 1
        return code


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


class _Watch:
    """Copies a child's output through and keeps its tail and whether nnlo printed its own error line."""

    KEEP = 64 * 1024

    def __init__(self) -> None:
        self.own_error = False
        self._tail = bytearray()
        self._lock = threading.Lock()

    def pump(self, src: IO[bytes], dst: IO[str]) -> None:
        """Copy as it comes, not line by line: a live progress line is redrawn with carriage returns."""
        out = getattr(dst, "buffer", None)
        fd = src.fileno()
        recent = b"\n"  # the stream's last bytes: an error line may be split between two reads
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            try:
                if out is not None:
                    out.write(chunk)
                else:  # pragma: no cover - a text-only stream (a test's capture)
                    dst.write(chunk.decode(errors="replace"))
                dst.flush()
            except (OSError, ValueError):  # our own output closed: keep draining the child
                pass
            with self._lock:
                probe = recent + chunk
                if b"\nnnlo: error:" in probe:
                    self.own_error = True
                recent = probe[-len(b"\nnnlo: error:"):]
                self._tail += chunk
                del self._tail[:-self.KEEP]

    def text(self) -> str:
        with self._lock:
            return self._tail.decode(errors="replace")


def _wait(proc: subprocess.Popen, forwarded: list[int] | None = None) -> int:
    """Wait for mpirun, passing the forwarded signals on to it meanwhile (noted in ``forwarded``)."""
    previous = {}

    def forward(signum: int, frame: object) -> None:
        if forwarded is not None:
            forwarded.append(signum)
        try:
            proc.send_signal(signum)
        except ProcessLookupError:  # pragma: no cover - already gone
            pass

    for sig in FORWARDED:
        previous[sig] = signal.signal(sig, forward)
    try:
        while True:
            try:
                return _status(proc.wait())
            except InterruptedError:  # pragma: no cover
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _status(code: int) -> int:
    return 128 - code if code < 0 else code
