"""What the chain needs from a batch system: submit behind a dependency, query many jobs at once, cancel, signal.

One :class:`Scheduler` per batch system (``slurm``, ``lsf``, ``pbs``, ``local``) owns everything about it:
how its directives spell things (the prefix, the walltime, the warning lead, the output file's job-id
placeholder, an array's range, the account option; :mod:`nnlo_sched.render` puts them into the templates),
its submit command line (``submit_argv``, what ``nnlo submit --dry-run`` prints) and running it
(``submit``), its job-id syntax, reading the job id from what the submit program prints, its query, cancel
and signal programs and their output formats.

Every job id that goes onto a command line that acts on jobs (a dependency, a cancel) must match the
scheduler's own syntax (``job_id_syntax``), checked before any program runs: ``bkill 0`` kills all of the
user's jobs, ``qdel all`` every job, and an id such as ``--user=x`` would be an option.

``query`` takes every job id of interest and answers from ONE call of the scheduler's program
(``squeue -j a,b,c``; ``bjobs a b c``; ``qstat a b c``), because status over hundreds of runs must not
hammer a shared controller. A scheduler that cannot answer says ``unknown`` rather than failing.
"""
from __future__ import annotations

import os
import re
import shutil
import signal as signals
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from nnlo.contract import ENV_SCHED_RETRIES, ENV_SCHED_RETRY_DELAY
from nnlo.errors import ConfigError, NnloError
from nnlo_sched.walltime import format_hms

# Normalised job states.
PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, CANCELLED, UNKNOWN = (
    "PENDING", "RUNNING", "COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "UNKNOWN")
ENDED = "ENDED"  # gone from the queue; how it ended is not known (e.g. squeue without accounting)
ALIVE_STATES = (PENDING, RUNNING)
QUERY_TIMEOUT_S = 60
#: a failed query is tried again this many times (env NNLO_SCHED_RETRIES), after 0.5 s, 1 s, 2 s ...
QUERY_RETRIES = 3
RETRY_DELAY_S = 0.5


class SchedulerError(NnloError):
    """A scheduler program failed or answered something unexpected; the message quotes it."""


class SchedulerTimeout(SchedulerError):
    """A scheduler program did not answer in time (it may still have done what it was asked)."""


@dataclass(frozen=True)
class JobInfo:
    """One job as the scheduler sees it. ``native`` is its own word (``TIMEOUT``, ``EXIT``, ``Q``...)."""

    job_id: str
    state: str
    native: str = ""
    reason: str = ""

    @property
    def alive(self) -> bool:
        return self.state in ALIVE_STATES


class Scheduler(ABC):
    """A batch system as the chain uses it."""

    name: str = ""
    #: environment variable holding the current job's id inside a job
    job_id_vars: tuple[str, ...] = ()
    #: a whole job id as the scheduler prints it; anything else is refused (:meth:`check_job_id`)
    job_id_syntax: re.Pattern[str]
    #: the submit program (named in errors) and the pattern whose first group is the new job's id
    submit_program: str = ""
    submit_pattern: re.Pattern[str] | None = None
    #: the cancel program, and words in its complaints that only mean "that job already ended"
    cancel_program: str = ""
    cancel_harmless: tuple[str, ...] = ()
    #: what the batch script's templates need: the prefix of directive lines, how a user names the
    #: account to charge (in errors), whether ``--constraint`` exists, whether a signal warns before the
    #: walltime, and the longest job name
    directive_prefix: str = "#"
    account_flag: str = "account"
    takes_constraint: bool = False
    warns_before_walltime: bool = True
    job_name_max: int = 64
    #: how a directive names the job's own id in its output file (Slurm ``%j``), and an array task's
    log_id_placeholder: str = ""
    array_log_id_placeholder: str = ""
    #: the unit of the warning signal's lead in its directive (LSF's ``-wt`` takes minutes)
    warning_lead_unit_s: int = 1
    #: the program that sends a signal to a job (named in errors; "" where :meth:`signal` sends it itself)
    signal_program: str = ""
    #: job arrays (``nnlo submit --jobs K``): whether the batch system has them, the first index, the fewest
    #: tasks an array may have, the variable holding a task's index inside it, the shell expression of a
    #: task's own job id (what :meth:`current_job_id` returns there), and the variables a task's environment
    #: carries that a job submitted from inside it must not inherit (it would take itself for a task)
    has_arrays: bool = False
    array_first_index: int = 0
    array_min_tasks: int = 1
    array_index_var: str = ""
    array_job_id_expr: str = ""
    array_env_vars: tuple[str, ...] = ()

    #: pending reasons (the scheduler's own words, as its query reports them) that mean the job can never
    #: start as submitted -> what to change; ``nnlo status`` flags them (:meth:`never_starts`)
    never_reasons: ClassVar[dict[str, str]] = {}

    def never_starts(self, reason: str) -> str | None:
        """The fix, when a pending job's ``reason`` means it will never start as submitted; else None."""
        word = reason.strip().split(" ", 1)[0].strip("()")
        return self.never_reasons.get(word)

    def submit(self, script: Path, *, depends_on: str | None, walltime_s: int, cwd: Path | None = None,
               env: Mapping[str, str] | None = None) -> str:
        """Submit ``script`` to start once job ``depends_on`` (if given) has ended in any state; return the new
        job's id (SchedulerError, one line, if it fails). A batch script's directives carry the walltime, so
        only the local scheduler reads ``walltime_s``."""
        argv = self.submit_argv(script, depends_on)
        if env is None and any(v in os.environ for v in self.array_env_vars):  # submitted from an array task
            env = {k: v for k, v in os.environ.items() if k not in self.array_env_vars}
        require_program(self.submit_program, what="submit", env=env)
        try:
            out = run_program(argv, cwd=cwd, env=env, what="submit", name=self.submit_program)
        except SchedulerTimeout as e:  # never retried: the controller may have queued the job before the timeout
            raise SchedulerTimeout(f"{e}; the job may have been submitted anyway: check the queue before "
                                   f"submitting again") from None
        return self.parse_submit_output(out)

    @abstractmethod
    def submit_argv(self, script: Path, depends_on: str | None = None) -> list[str]:
        """The command line that submits ``script`` behind job ``depends_on`` (checked by :meth:`check_job_id`)."""

    def check_job_id(self, job_id: str) -> str:
        """``job_id`` if it is one of this scheduler's job ids; else SchedulerError, and nothing runs with it."""
        if not self.is_job_id(job_id):
            raise SchedulerError(f"{job_id!r} is not a {self.name} job id; no {self.name} command was run with it")
        return job_id

    def is_job_id(self, job_id: object) -> bool:
        """Whether ``job_id`` is a whole job id of this scheduler (never ``0``, ``all``, an option, a list)."""
        return isinstance(job_id, str) and self.job_id_syntax.fullmatch(job_id) is not None

    def check_cancel(self, job_ids: Sequence[str]) -> None:
        """SchedulerError unless :meth:`cancel` of ``job_ids`` would run: every id well formed. Callers check
        first, then change their records, then cancel, so that a refused cancel changes nothing."""
        for j in job_ids:
            self.check_job_id(j)

    def parse_submit_output(self, text: str) -> str:
        """The job id from the submit program's standard output."""
        m = self.submit_pattern.search(text) if self.submit_pattern is not None else None
        if not m:
            raise SchedulerError(f"{self.submit_program} printed no job id: {' '.join(text.split())[:200]!r}")
        return m.group(1)

    # -- directives ------------------------------------------------------------------------------------
    @classmethod
    def walltime_directive(cls, seconds: int) -> str:
        """The walltime as this batch system's directive takes it (``HH:MM:SS``, never less than asked)."""
        return format_hms(seconds)

    @classmethod
    def lead_directive(cls, seconds: int) -> str:
        """The warning signal's lead before the walltime as the directive takes it (seconds)."""
        return str(int(seconds))

    @classmethod
    def directive_lines(cls, lines: Sequence[str]) -> list[str]:
        """Extra directives as the user gave them (``--mail-type=END`` or ``#SBATCH --mail-type=END``) as lines
        of this batch system; one of another batch system is a one-line error."""
        reads_directives = cls.directive_prefix != "#"  # where none are read (local), any comment will do
        out = []
        for d in lines:
            d = d.strip()
            if d.startswith("#") and reads_directives and not d.startswith(cls.directive_prefix + " "):
                raise ConfigError(f"directive {d!r} is not a {cls.name} directive; write it as "
                                  f"'{cls.directive_prefix} ...' or give only the option")
            out.append(d if d.startswith("#") else f"{cls.directive_prefix} {d}")
        return out

    @classmethod
    def job_name(cls, name: str) -> str:
        """A job name the scheduler takes: characters other than ``A-Za-z0-9_.-`` become ``_``."""
        return (re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "nnlo")[:cls.job_name_max]

    def query(self, job_ids: Sequence[str]) -> dict[str, JobInfo]:
        """State of every job in ``job_ids`` from one scheduler call; ``UNKNOWN`` where it cannot tell.

        Only well-formed ids (:meth:`is_job_id`) reach the scheduler's program; any other (a hand-edited or
        damaged record's ``0``, ``all``, ``-u``) is ``UNKNOWN`` and no program sees it.
        """
        ids = unique_ids(job_ids)
        bad = [j for j in ids if not self.is_job_id(j)]
        out = self.unknown(bad, f"not a {self.name} job id; no {self.name} command was run with it")
        good = [j for j in ids if j not in out]
        if good:
            out.update(self._query(good))
        return out

    @abstractmethod
    def _query(self, job_ids: list[str]) -> dict[str, JobInfo]:
        """:meth:`query` for ids that are all well formed, unique and non-empty."""

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancel the jobs (one call); jobs that already ended are not an error, a malformed id is."""
        ids = list(dict.fromkeys(job_ids))
        self.check_cancel(ids)
        if ids:
            cancel_tolerant(self.cancel_program, ids, self.cancel_harmless)

    def signal(self, job_ids: Sequence[str], sig: signals.Signals) -> None:
        """Send ``sig`` to the batch shell of each running job of ``job_ids`` (one call), as the batch system's
        own warning signal arrives (the job script relays it to the program); jobs that already ended are no
        error, a malformed id is (nothing runs). SchedulerError (one line) if the program fails."""
        ids = list(dict.fromkeys(job_ids))
        self.check_cancel(ids)  # every id well formed, or nothing is signalled
        if not ids:
            return
        require_program(self.signal_program, what="signal jobs")
        proc = run_capture(self.signal_argv(ids, sig), what="signal jobs")
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
            real = [ln for ln in lines if not any(h in ln for h in self.cancel_harmless)]
            if real:
                raise SchedulerError(f"{self.signal_program} failed (signal jobs): {one_line(' '.join(real))}")

    def signal_argv(self, job_ids: Sequence[str], sig: signals.Signals) -> list[str]:
        """The command line that sends ``sig`` to the batch shells of ``job_ids`` (ids checked by the caller)."""
        raise SchedulerError(f"nnlo cannot signal {self.name} jobs")

    def array_task_id(self, array_id: str, index: int) -> str:
        """The job id of task ``index`` of the array the submit program called ``array_id``."""
        raise SchedulerError(f"{self.name} has no job arrays in nnlo")

    @classmethod
    def array_directive_range(cls, first: int, last: int) -> str:
        """The index range of an array of tasks ``first``..``last`` as the directive takes it."""
        return f"{first}-{last}"

    def _array_job_id(self, environ: Mapping[str, str]) -> str | None:
        """Inside an array task: its own job id (None elsewhere)."""
        return None

    def current_job_id(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The id of the job this process runs in, from the scheduler's environment (an array task's own id,
        ``123_4`` / ``123[4]``, inside an array)."""
        environ = os.environ if environ is None else environ
        task = self._array_job_id(environ)
        if task is not None:
            return task
        for var in self.job_id_vars:
            if environ.get(var):
                return environ[var]
        return None

    def unknown(self, job_ids: Sequence[str], why: str = "") -> dict[str, JobInfo]:
        return {j: JobInfo(j, UNKNOWN, reason=why) for j in job_ids}


def unique_ids(job_ids: Sequence[str]) -> list[str]:
    """The non-empty ids, each once, in order."""
    return [j for j in dict.fromkeys(j for j in job_ids if isinstance(j, str)) if j]


def run_program(argv: list[str], *, what: str, cwd: Path | None = None, env: Mapping[str, str] | None = None,
                check: bool = True, timeout: float = QUERY_TIMEOUT_S, name: str = "") -> str:
    """Run a scheduler program; a missing program or a failure is one SchedulerError line quoting stderr.

    ``name`` is the program named in that line when ``argv[0]`` is a wrapper (LSF's ``sh -c 'bsub ...'``).
    """
    proc = run_capture(argv, what=what, cwd=cwd, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        msg = " ".join((proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}").split())
        raise SchedulerError(f"{name or argv[0]} failed ({what}): {msg[:400]}")
    return proc.stdout


def query_capture(argv: list[str], *, what: str, answers: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """Run a query program (squeue, sacct, bjobs, qstat: safe to repeat), retrying a failure with backoff.

    Why here: one transient controller hiccup ("Socket timed out", a daemon restarting) must not turn into
    ``UNKNOWN`` in ``nnlo status``, and every batch system needs the same policy. A non-zero exit whose output
    contains one of ``answers`` (e.g. squeue's "Invalid job id") is a real answer and is not retried; nor is a
    program that is missing or that hung for the whole timeout (retrying would multiply the wait). Submits
    never come here: a submit that failed may still have queued the job.
    """
    retries = _env_count(ENV_SCHED_RETRIES, QUERY_RETRIES)
    delay = _env_seconds(ENV_SCHED_RETRY_DELAY, RETRY_DELAY_S)
    for attempt in range(retries + 1):
        proc = run_capture(argv, what=what)
        if proc.returncode == 0 or attempt == retries:
            return proc
        if any(a in proc.stderr or a in proc.stdout for a in answers):
            return proc
        time.sleep(delay * 2 ** attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _env_count(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit():
        raise SchedulerError(f"{name} must be a whole number of retries (0 or more), not {value!r}")
    return int(value)


def _env_seconds(name: str, default: float) -> float:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise SchedulerError(f"{name} must be a number of seconds (0 or more), not {value!r}")
    return seconds


def run_capture(argv: list[str], *, what: str, cwd: Path | None = None, env: Mapping[str, str] | None = None,
                timeout: float = QUERY_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run a scheduler program and return its result; SchedulerError only if it is missing or hangs.

    Output is decoded with undecodable bytes replaced: a scheduler printing Latin-1 job names or a
    maintenance banner must not crash ``nnlo status``; lines that do not parse are the parser's business.
    """
    require_program(argv[0] if argv else "", what=what, env=env)
    try:
        proc = subprocess.run(argv, cwd=cwd, env=dict(env) if env is not None else None, capture_output=True,
                              text=True, errors="replace", timeout=timeout, stdin=subprocess.DEVNULL,
                              check=False)
    except subprocess.TimeoutExpired:
        raise SchedulerTimeout(f"{argv[0]} did not answer within {timeout:.0f} s ({what})") from None
    except OSError as e:
        raise SchedulerError(f"{argv[0]} cannot run ({e.strerror}); cannot {what}") from None
    return proc


def require_program(program: str, *, what: str, env: Mapping[str, str] | None = None) -> None:
    """SchedulerError, one line, unless ``program`` is in PATH (``env``'s, else this process's)."""
    if not program or shutil.which(program, path=(env or os.environ).get("PATH")) is None:
        raise SchedulerError(f"{program or '?'} not found: cannot {what} "
                             f"(is this a login node of the cluster, with its batch system in PATH?)")


def cancel_tolerant(program: str | Sequence[str], ids: Sequence[str], harmless: tuple[str, ...]) -> None:
    """Cancel ``ids`` with ``program`` (a program, or the words before the ids: ``flux cancel``) in one call;
    complaints about jobs that already ended are no error."""
    head = [program] if isinstance(program, str) else list(program)
    program = " ".join(head)
    proc = run_capture([*head, *ids], what="cancel jobs")
    if proc.returncode == 0:
        return
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    real = [ln for ln in lines if not any(h in ln for h in harmless) and "is being terminated" not in ln]
    if real:
        raise SchedulerError(f"{program} failed: {one_line(' '.join(real))}")


def one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]
