"""``nnlo train|optimize -n N`` on this machine: the batch jobs' own launcher, started from the command line.

``nnlo train -n 3 ...`` typed at a shell is not inside an MPI launch (no launcher variables), so it re-runs
itself on N ranks; the same command inside ``mpirun``/``srun``/``jsrun``/``aprun`` sees the launcher's
variables and runs in that world directly (:func:`inside_mpi_launch`).

Why this lives beside the launchers: there is one way to start ranks on this machine. The launch line comes
from the ``local`` cluster profile and its launcher class (:class:`~nnlo_sched.launchers.mpirun.Mpirun`:
the environment's own mpirun first, the profile's ``launcher_flags``), exactly as in the script of a
``nnlo submit --cluster local`` job, and every stop signal this process gets is passed on by the launcher's
one relay rule (:meth:`~nnlo_sched.launchers.base.Launcher.relays`), the rule that script's traps are
rendered from: MPICH's Hydra dies on SIGUSR2, so SIGUSR2 reaches the ranks as SIGUSR1, and the ranks stop
with a checkpoint on either (:mod:`nnlo.stop`). (Two carriers of the rule, one each where it can live: a
batch job has only its shell to catch the scheduler's signals; here the ``nnlo`` process catches them,
and also names a rank that died and stops at a second Ctrl-C.)

The launcher runs in a process group of its own, so a Ctrl-C at the terminal reaches it once, through this
process, and not also straight from the terminal (Hydra takes a second SIGINT as "abort now"); it gets
SIGKILL should this process die. A repeat of the same signal within :data:`nnlo.stop.INSIST_AFTER_S` is the
same event and is not passed on again; a later SIGTERM/SIGINT is, and the status is then 128+n unless the
run still stopped cleanly (75).

The launcher's output passes through as it comes, and is also watched: when the job fails because a rank
was killed by a signal and no rank printed its own ``nnlo: error:`` line, one line names that rank and its
role (from the rank records, :mod:`nnlo.rankfate`) and the status is 1, not the signal's number.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from types import FrameType
from typing import IO, Self

from nnlo import rankfate
from nnlo.contract import (
    ENV_LAUNCHED,
    ENV_LIVE,
    ENV_RANK_RECORDS,
    EXIT_FAILED,
    EXIT_RESUMABLE,
    INSISTING_SIGNALS,
    STOP_SIGNALS,
    signal_status,
)
from nnlo.errors import ConfigError
from nnlo.stop import INSIST_AFTER_S, Handler
from nnlo_sched.launchers import LaunchPlan, Launcher, launcher_for
from nnlo_sched.profiles import Profile, load_profile

#: Variables a launcher sets in every rank (MPICH/Hydra and PMI-2, Open MPI, PMIx, Cray ALPS, IBM jsrun).
LAUNCH_VARIABLES = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "ALPS_APP_PE",
                    "JSM_NAMESPACE_SIZE", "MPI_LOCALNRANKS")
#: Variables holding this process's rank in the launch, in the order they are trusted (Open MPI, MPICH/PMI,
#: PMIx, Slurm steps, IBM jsrun, Cray ALPS).
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK",
                  "ALPS_APP_PE")
#: The profile whose launcher starts ``-n`` runs (a user's ``local.toml`` replaces the built-in one).
PROFILE = "local"


def inside_mpi_launch(env: Mapping[str, str] | None = None) -> bool:
    """True when this process was started by an MPI launcher (or by :func:`relaunch`)."""
    env = os.environ if env is None else env
    if env.get(ENV_LAUNCHED) or any(env.get(v) for v in LAUNCH_VARIABLES):
        return True
    # Inside a Slurm job step (srun), not merely in a batch script: steps have a numeric id below 2**32-2.
    step = env.get("SLURM_STEP_ID", "")
    return step.isdigit() and int(step) < 4294967294 and "SLURM_PROCID" in env


def launch_rank(env: Mapping[str, str] | None = None) -> int | None:
    """This process's rank from its launcher's variables (before MPI is initialised), or None outside a
    launch, so that a message every rank would print is printed by rank 0 only."""
    env = os.environ if env is None else env
    if not inside_mpi_launch(env):
        return None
    for name in RANK_VARIABLES:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def launch_argv(n: int, argv: Sequence[str], profile: Profile | None = None) -> list[str]:
    """``<launcher of the local profile> -np N <this python> -m nnlo_sched <argv...>``."""
    if n < 1:
        raise ConfigError(f"-n must be at least 1, got {n}")
    profile = profile or load_profile(PROFILE)
    plan = LaunchPlan(ranks=n, nodes=1, ranks_per_node=n, cores_per_rank=max(1, profile.cores_per_node // n),
                      gpus_per_rank=Fraction(0))
    return [*launcher_for(profile).argv(plan), sys.executable, "-m", "nnlo_sched", *argv]


def relaunch(n: int, argv: Sequence[str]) -> int:
    """Run ``nnlo <argv>`` on ``n`` ranks with the local profile's launcher; returns its exit status."""
    profile = load_profile(PROFILE)
    cmd = launch_argv(n, argv, profile)
    sys.setswitchinterval(0.001)  # this process only waits: let the rank watcher run the moment it wakes
    with tempfile.TemporaryDirectory(prefix="nnlo-ranks-") as records, _Relay(launcher_for(profile)) as relay:
        env = dict(os.environ, **{ENV_LAUNCHED: "1", ENV_RANK_RECORDS: records})
        if _isatty(sys.stderr):  # the ranks' output reaches this terminal: let rank 0 draw its live line
            env[ENV_LIVE] = "1"
        try:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, process_group=0,
                                    preexec_fn=_die_with_parent())  # safe: no thread of ours runs yet
        except FileNotFoundError:
            raise ConfigError(f"no {cmd[0]} found to start -n ranks; install an MPI: pip install mpich "
                              "(or load your site's MPI)") from None
        relay.start(proc)
        deaths = rankfate.FirstDeath(records)
        deaths.start()
        watch = _Watch()
        pumps = [threading.Thread(target=watch.pump, args=(src, dst), daemon=True)
                 for src, dst in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))]
        for t in pumps:
            t.start()
        code = _status(proc.wait())
        deaths.stop()
        for t in pumps:
            t.join(timeout=30)
        if relay.insisted is not None and code != EXIT_RESUMABLE:
            return signal_status(relay.insisted)  # Hydra reports its forced abort as 0
        if code != 0 and not watch.own_error and not relay.relayed:  # a signal sent to us is not a death
            line = rankfate.launcher_fate(watch.text(), records, deaths.fate())
            if line is not None:
                sys.stderr.write(f"nnlo: error: {line}\n")
                sys.stderr.flush()
                return EXIT_FAILED
        return code


class _Relay:
    """While the launch runs: passes each stop signal this process gets on to the launcher, once per event.

    Installed before the launcher starts; a signal that comes before it runs is passed on once it does.
    """

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.sends = launcher.relays()  # the rule a batch script's traps are rendered from
        self.relayed: list[signal.Signals] = []
        self.insisted: int | None = None  # a repeated SIGTERM/SIGINT: the user wants the run ended now
        self._proc: subprocess.Popen[bytes] | None = None
        self._pending: list[signal.Signals] = []
        self._first: dict[signal.Signals, float] = {}
        self._previous: dict[signal.Signals, Handler] = {}

    def __enter__(self) -> Self:
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            if handler is not None:  # None: set outside Python, cannot be put back
                signal.signal(sig, handler)

    def start(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        for sig in self._pending:
            self._send(sig)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        sig, now = signal.Signals(signum), time.monotonic()
        first = self._first.setdefault(sig, now)
        if first != now:
            if now - first < INSIST_AFTER_S:
                return  # the same event delivered twice
            if sig in INSISTING_SIGNALS:
                self.insisted = signum
        self.relayed.append(sig)
        if self._proc is None:
            self._pending.append(sig)
        else:
            self._send(sig)

    def _send(self, sig: signal.Signals) -> None:
        assert self._proc is not None
        name = self.sends[sig.name.removeprefix("SIG")]
        with contextlib.suppress(ProcessLookupError):  # already gone
            self._proc.send_signal(signal.Signals[f"SIG{name}"])


def _die_with_parent() -> Callable[[], None] | None:
    """What the launcher's process runs before it starts: SIGKILL it should this process die (Linux only;
    elsewhere a killed ``nnlo`` leaves its launch running)."""
    if not sys.platform.startswith("linux"):
        return None  # pragma: no cover
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child
    return lambda: prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


#: Hydra's answer to a relayed Ctrl-C ("Press Ctrl-C again to force abort"): the second Ctrl-C goes to nnlo,
#: whose own line says what it does, so the copy of the launch's output leaves these lines out
_LAUNCHER_CHATTER = re.compile(rb"\[mpiexec@[^\]\n]*\] (?:Sending Ctrl-C to processes as requested|"
                               rb"Press Ctrl-C again to force abort)\n")


class _Watch:
    """Copies a child's output through (less the launcher's Ctrl-C advice) and keeps its tail and whether nnlo
    printed its own error line."""

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
            shown = _LAUNCHER_CHATTER.sub(b"", chunk) if b"Ctrl-C" in chunk else chunk
            try:
                if out is not None:
                    out.write(shown)
                else:  # a text-only stream (a test's capture)
                    dst.write(shown.decode(errors="replace"))
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


def _status(code: int) -> int:
    return signal_status(-code) if code < 0 else code
