"""Batch scripts: a run spec + a profile -> the script text (submitting it is the scheduler's work).

Templates (``templates/*.sh``, Jinja2) are chosen by the profile: a site template (``summit.sh``) extends its
scheduler's (``lsf.sh``), which extends ``base.sh``: the one job body every batch job of nnlo runs - a run's
chain job, a search's job array, or a submitit function's :class:`Program` - from one context
(:func:`render_context`). Three filters guard what users type:

* ``q`` shell-quotes a value for the script body (``shlex.quote``): names or paths with spaces, quotes,
  ``$()``, backticks or newlines are inert words there;
* ``comment`` makes a value safe inside a ``#`` comment (no line breaks);
* ``d`` checks a value bound for a scheduler directive line (``#SBATCH``/``#BSUB``/``#PBS``), which no shell
  reads but which a newline would end: only plain characters pass, anything else is a one-line error.

Undefined template variables are errors (``StrictUndefined``); autoescaping is off (this is shell, not HTML).
What differs between batch systems beyond the templates (directive prefix, account option, job names, the
warning signal) is a class attribute of the profile's scheduler (:func:`nnlo_sched.schedulers.scheduler_class`).
"""
from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import jinja2

from nnlo.contract import (  # LOG_DIR is created before the job starts (Slurm/LSF do not)
    ARRAY_LOG,
    ENV_DEADLINE,
    ENV_PARTICIPANT,
    ENV_RUN_DIR,
    EXIT_DONE,
    EXIT_FAILED,
    LOG_DIR,
    SCRIPT_FILE,
    SIGNAL_STATUS_BASE,
    job_log,
)
from nnlo.errors import ConfigError
from nnlo_sched.launchers import launcher_for
from nnlo_sched.layout import LayoutRecord
from nnlo_sched.profiles import Profile, user_dirs
from nnlo_sched.resources import templates_dir
from nnlo_sched.schedulers import scheduler_class
from nnlo_sched.spec import FUNCTION, RunSpec
from nnlo_sched.walltime import format_hms

_DIRECTIVE_SAFE = re.compile(r"^[A-Za-z0-9_.,:@%+=/~&|!\[\]*-]+$")


def directive_value(value: Any) -> str:
    """``value`` as text that may go onto a batch directive line (the ``d`` filter); else a one-line error."""
    text = str(value)
    if not _DIRECTIVE_SAFE.match(text):
        bad = sorted({c for c in text if not _DIRECTIVE_SAFE.match(c)})
        shown = ", ".join(repr(c) for c in bad[:5])
        raise ConfigError(
            f"{text!r} cannot go into a batch directive (contains {shown}); use letters, digits and ._-/ "
            "(for a run directory: a path without spaces or quotes)"
        )
    return text


def _comment_text(value: Any) -> str:
    """Text for a ``#`` comment line: control characters (a newline would end the comment) become ``?``."""
    return re.sub(r"[\x00-\x1f\x7f]", "?", str(value))


def job_name(name: str, scheduler: str) -> str:
    """A job name ``scheduler`` takes: other characters become ``_``; PBS names start with a letter, <= 15 chars."""
    return scheduler_class(scheduler).job_name(name)


def template_dirs() -> list[str]:
    """Where templates are looked up: the user's profile directories first (a site template such as
    ``mysite.sh`` may ``{% extends "slurm.sh" %}``), then the built-in ones."""
    users = [str(d) for d in reversed(user_dirs()) if d.is_dir()]
    return [*users, str(templates_dir())]


def _environment() -> jinja2.Environment:
    return _environment_for(tuple(template_dirs()))


@functools.lru_cache(maxsize=8)
def _environment_for(directories: tuple[str, ...]) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(list(directories)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["q"] = lambda v: shlex.quote(str(v))
    env.filters["d"] = directive_value
    env.filters["comment"] = _comment_text
    return env


def spec_layout(spec: RunSpec, profile: Profile) -> LayoutRecord:
    """The spec's stored layout, or a freshly computed one."""
    if spec.layout is not None:
        return spec.layout
    return spec.layout_on(profile).record()


def _gpus_per_node_request(layout: LayoutRecord) -> int:
    """GPUs to ask the scheduler for on each node: every bound rank slot's, or those the layout uses."""
    gpw = Fraction(layout.gpus_per_worker).limit_denominator(64)
    if gpw == 0:
        return 0
    if layout.gpu_binding == "layout":
        return min(layout.gpus_per_node, layout.gpus_used)
    return min(layout.gpus_per_node, -(-layout.ranks_per_node * gpw // 1))


def warning_signal(spec: RunSpec, profile: Profile) -> tuple[str | None, int, str | None]:
    """The pre-walltime warning signal of ``spec``'s jobs: (signal or None, lead in seconds, note or None).

    A lead that would leave the job less than half its walltime is shrunk to half of it (in the scheduler's
    unit); when that is less than one unit there is no warning signal, and the runtime's deadline clock
    (``NNLO_DEADLINE``) alone stops the job in time. The note says so (``nnlo submit`` prints it).
    """
    sched = scheduler_class(profile.scheduler)
    if not (profile.signal and sched.warns_before_walltime):
        return None, profile.signal_lead_s, None
    unit = sched.warning_lead_unit_s
    lead = -(-profile.signal_lead_s // unit) * unit
    if 2 * lead <= spec.walltime_s:
        return profile.signal, lead, None
    shrunk = (spec.walltime_s // 2) // unit * unit
    head = (f"walltime {format_hms(spec.walltime_s)} is less than twice {profile.name}'s warning lead "
            f"({profile.signal_lead_s} s)")
    if shrunk <= 0:
        return None, 0, (f"{head}: no SIG{profile.signal} warning is asked for; the runtime's deadline clock "
                         "stops the job in time")
    return profile.signal, shrunk, f"{head}: SIG{profile.signal} comes {shrunk} s before the limit instead"


@dataclass(frozen=True)
class ArrayPlan:
    """A job array whose task I starts chain ``<prefix>I`` of a search (``chains_dir/<prefix>I``), I from
    ``first`` to ``last`` (the scheduler's own numbering: Slurm from 0, LSF and PBS from 1)."""

    first: int
    last: int
    chains_dir: Path
    prefix: str = "c"

    @property
    def tasks(self) -> int:
        return self.last - self.first + 1


def _array_context(array: ArrayPlan | None, profile: Profile) -> dict[str, Any] | None:
    if array is None:
        return None
    sched = scheduler_class(profile.scheduler)
    if not sched.has_arrays:
        raise ConfigError(f"{profile.name} ({profile.scheduler}) has no job arrays; submit without --array")
    if array.tasks < sched.array_min_tasks:
        raise ConfigError(f"a {profile.scheduler} job array needs at least {sched.array_min_tasks} tasks, got "
                          f"{array.tasks}; use --no-array or more --jobs")
    return {"range": sched.array_directive_range(array.first, array.last), "tasks": array.tasks,
            "chains_dir": str(array.chains_dir), "prefix": array.prefix, "index_var": sched.array_index_var,
            "job_id_expr": sched.array_job_id_expr}


@dataclass(frozen=True)
class Program:
    """What a job runs in place of a run's payload (a submitit function, :mod:`nnlo_sched.submitit`): ``command``
    (already shell words) exec'd after the set-up, through the layout's launcher if it has one, with ``env``
    exported and ``setup`` run after the profile's own set-up lines."""

    command: str
    env: tuple[tuple[str, str], ...] = ()
    setup: tuple[str, ...] = ()


def _is_qos(profile: Profile, queue: str | None) -> bool:
    """Whether the queue is a Slurm QOS (``--qos``) rather than a partition."""
    q = profile.queues.get(queue) if queue else None
    return bool(q is not None and q.qos)


def _python(profile: Profile) -> str:
    return profile.job_python().command


def render_context(spec: RunSpec, profile: Profile, run_dir: str | Path, *, participant: str | None = None,
                   array: ArrayPlan | None = None, program: Program | None = None) -> dict[str, Any]:
    """Everything the templates see (exposed for tests and for ``nnlo submit --dry-run``).

    ``participant``: the script is one chain's of a shared search; its jobs export it as ``NNLO_PARTICIPANT``.
    ``array``: the script is a job array whose tasks start the search's chains (each runs its chain's script).
    ``program``: the script runs this program (a function's spec, :data:`~nnlo_sched.spec.FUNCTION`).
    """
    if (program is not None) != (spec.kind == FUNCTION):
        raise ValueError("a function's spec is rendered with its program, a run's without one")
    profile = profile.for_constraint(spec.constraint)
    layout = spec_layout(spec, profile)
    sched = scheduler_class(profile.scheduler)
    if profile.account_required and not spec.account:
        raise ConfigError(
            f"cluster {profile.name!r} needs a project to charge ({sched.account_flag}); pass --account PROJECT"
        )
    if spec.constraint and not sched.takes_constraint:
        raise ConfigError(
            f"--constraint is a Slurm option and {profile.name!r} uses {profile.scheduler}; leave it out"
        )
    launcher = launcher_for(profile)
    python = _python(profile)
    nnlo = profile.nnlo or f"{shlex.quote(python)} -m nnlo_sched"
    shares = 0 < layout.gpus_per_worker < 1
    signal, lead_s, _ = warning_signal(spec, profile)
    roles = ", ".join(f"{n} {r}" for r, n in layout.roles.items())
    return {
        "name": spec.name,
        "job_name": sched.job_name(spec.name),
        "cluster": profile.name,
        "summary": f"{layout.world_size} ranks ({roles}) on {layout.nodes} node(s)",
        "workdir": spec.workdir,
        "run_dir": str(run_dir),
        "log_dir": f"{run_dir}/{LOG_DIR}",
        "walltime_s": spec.walltime_s,
        "walltime": sched.walltime_directive(spec.walltime_s),  # as the scheduler's directive spells it
        "account": spec.account,
        "queue": layout.queue or spec.queue,
        "queue_qos": _is_qos(profile, layout.queue or spec.queue),
        "constraint": spec.constraint or profile.constraint,
        "nodes": layout.nodes,
        "ranks_per_node": layout.ranks_per_node,
        "cores_per_rank": layout.cores_per_rank,
        "gpus_per_node_request": _gpus_per_node_request(layout),
        "gpu_directive": profile.gpu_directive,
        "filesystems": profile.filesystems,  # PBS Pro -l filesystems= (ALCF)
        "pbs_system": profile.system,  # PBS Pro -l select=N:system=NAME (Polaris)
        "shares_gpus": shares,
        "signal": signal,
        "signal_lead": sched.lead_directive(lead_s),
        # the batch shell relays every stop signal (the profile's warning first), whoever sends it
        "traps": list(launcher.relays(profile.signal).items()),
        "setup": [*profile.setup, *(profile.share_setup if shares else ()), *(program.setup if program else ())],
        "directives": [*profile.directives, *sched.directive_lines(spec.directives)],
        "python": python,
        "nnlo": nnlo,
        "launch": shlex.join(layout.launcher),
        "participant": participant,
        "array": _array_context(array, profile),
        "program": program,
        # the contract's names (nnlo/contract.py): the templates never spell them out
        "participant_var": ENV_PARTICIPANT,
        "run_dir_var": ENV_RUN_DIR,
        "deadline_var": ENV_DEADLINE,
        "script_file": SCRIPT_FILE,
        "log_dir_name": LOG_DIR,
        "job_log": job_log(sched.log_id_placeholder),
        "array_log": ARRAY_LOG.format(job_id=sched.array_log_id_placeholder),
        "job_log_of_shell_id": job_log("$id"),
        "exit_done": EXIT_DONE,
        "exit_failed": EXIT_FAILED,
        "signal_status_base": SIGNAL_STATUS_BASE,
    }


def render_script(spec: RunSpec, profile: Profile, run_dir: str | Path, *, participant: str | None = None,
                  array: ArrayPlan | None = None, program: Program | None = None) -> str:
    """The batch script of ``spec`` on ``profile``, whose jobs work in ``run_dir`` (see :func:`render_context`
    for ``participant``, ``array`` and ``program``)."""
    ctx = render_context(spec, profile, run_dir, participant=participant, array=array, program=program)
    try:
        return _environment().get_template(profile.template_name).render(**ctx)
    except jinja2.TemplateNotFound as e:
        raise ConfigError(
            f"template {e.name!r} (for profile {profile.name!r}) is in none of {', '.join(template_dirs())}"
        ) from None
    except jinja2.TemplateError as e:
        raise ConfigError(f"template {profile.template_name!r} of profile {profile.name!r}: {e}") from None
