"""What a cluster profile says, and the checks that turn a TOML table into one.

A profile is data, not code: built-in ones ship as ``*.toml`` beside this module, users add their own (see
:mod:`nnlo_sched.profiles.loader`). Every key is checked for its type here so that a typo in a user's file
gives one line naming the file, the key and the expected type instead of a KeyError deep in the layout.
"""
from __future__ import annotations

import difflib
import os
import re
import string
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nnlo.device import VENDORS
from nnlo.errors import ConfigError
from nnlo_sched.walltime import parse_walltime

SCHEDULERS = ("slurm", "lsf", "pbs", "pbspro", "flux", "local")
LAUNCHERS = ("srun", "jsrun", "aprun", "mpiexec", "flux", "mpirun")
#: Which launchers start ranks inside which batch system's allocation (the one table of pairs): srun needs
#: a Slurm allocation, jsrun LSF's CSM (Summit), aprun Cray ALPS under PBS/Torque (Titan); mpirun (Hydra,
#: Open MPI) runs under any of them and is the only launcher of the local scheduler; Cray PALS ``mpiexec`` runs
#: under PBS Pro (Aurora, Polaris), ``flux run`` inside a Flux job (El Capitan).
LAUNCHERS_FOR: dict[str, tuple[str, ...]] = {
    "slurm": ("srun", "mpirun"),
    "lsf": ("jsrun", "mpirun"),
    "pbs": ("aprun", "mpirun"),
    "pbspro": ("mpiexec", "mpirun"),
    "flux": ("flux",),
    "local": ("mpirun",),
}
#: GPU vendors (:data:`nnlo.device.VISIBLE_VARIABLES`: the variable that names a rank's GPUs)
GPU_VENDORS = VENDORS
#: who binds a rank's GPUs: the ``launcher``'s own option, or a ``wrapper`` in the launch line that sets the
#: vendor's variable from the launcher's node-local rank (LUMI's select_gpu, ALCF's affinity scripts)
GPU_BINDS = ("launcher", "wrapper")
#: ``retired = "yes"``: retired on a date nnlo's sources do not give
RETIRED_UNDATED = "yes"
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
#: Profile keys that describe a node and may differ per Slurm constraint (``[node_types.<constraint>]``).
NODE_KEYS = ("cores_per_node", "gpus_per_node", "memory_gb", "nodes", "setup", "description")
#: Placeholders a ``runs_home`` may use.
RUNS_HOME_FIELDS = ("account", "account_lower", "user")
GPU_DIRECTIVES = ("gres", "gpus-per-node", "none")
SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "XCPU")


class ProfileError(ConfigError):
    """A profile file is malformed; the message names the file, the key and what was expected."""


@dataclass(frozen=True)
class WalltimeBin:
    """Jobs of up to ``max_nodes`` nodes may run ``walltime_s`` (Summit's bins; one bin elsewhere)."""

    max_nodes: int
    walltime_s: int


@dataclass(frozen=True)
class Queue:
    """A queue (LSF, PBS) or partition (Slurm) and its limits."""

    name: str
    bins: tuple[WalltimeBin, ...]
    min_nodes: int = 1
    chaining: bool = True  # Summit forbids job chaining in ``debug``
    notes: str = ""
    qos: bool = False  # Slurm: a QOS (--qos=NAME: Perlmutter's regular/debug, Frontier's debug), not a partition

    @property
    def max_nodes(self) -> int | None:
        return self.bins[-1].max_nodes if self.bins else None

    def walltime_limit(self, nodes: int) -> int | None:
        """The longest walltime for ``nodes`` nodes (None: no limit known); raises past the queue's size."""
        for b in self.bins:
            if nodes <= b.max_nodes:
                return b.walltime_s
        return None


#: a set-up line that activates a Python environment: it sources an ``activate`` script (venv, virtualenv,
#: conda's ``bin/activate``) or runs ``conda|mamba|micromamba activate``; the job then runs ``python3`` from the
#: PATH that line leaves (:meth:`Profile.job_python`)
ACTIVATES = re.compile(r"(?:^|[\s;&|(])(?:source|\.)\s+\S*activate(?:$|[\s;&|)])"
                       r"|\b(?:conda|mamba|micromamba)\s+activate\b")
#: the interpreter a job looks up on its PATH after a set-up line that activates an environment
PATH_PYTHON = "python3"


@dataclass(frozen=True)
class Interpreter:
    """The interpreter a job runs (``command``: a path, or a name looked up on the job's PATH), and why."""

    command: str
    why: str


@dataclass(frozen=True)
class Profile:
    """One cluster: its batch system, launcher, node hardware, queues and job-script set-up."""

    name: str
    scheduler: str
    launcher: str
    cores_per_node: int
    gpus_per_node: int = 0
    memory_gb: float | None = None
    nodes: int | None = None  # nodes in the machine (None: unknown / unbounded)
    description: str = ""
    template: str = ""  # template file; default: the scheduler's
    aliases: tuple[str, ...] = ()
    queues: dict[str, Queue] = field(default_factory=dict)
    default_queue: str | None = None
    constraint: str | None = None  # default Slurm --constraint
    constraints: tuple[str, ...] = ()  # known constraints (others are passed on with no check)
    account_required: bool = False
    setup: tuple[str, ...] = ()  # shell lines run before the launch (module loads, environment)
    share_setup: tuple[str, ...] = ()  # extra lines when ranks share a GPU (e.g. CRAY_CUDA_MPS=1)
    directives: tuple[str, ...] = ()  # extra scheduler directive lines, verbatim
    signal: str | None = None  # pre-walltime warning signal (None: only the NNLO_DEADLINE clock)
    signal_lead_s: int = 300
    gpu_directive: str = "gres"  # Slurm: --gres=gpu:N or --gpus-per-node=N
    node_types: dict[str, dict[str, Any]] = field(default_factory=dict)  # constraint -> node keys that differ
    node_type: str = ""  # the constraint whose node_types entry this profile was specialised to
    runs_home: str = ""  # where the site wants run directories, e.g. "$MEMBERWORK/{account_lower}/nnlo-runs"
    compute_read_only: tuple[str, ...] = ()  # folders that compute nodes cannot write (Summit: /ccs/home)
    launcher_command: str = ""  # program to run; default: the launcher's name ("auto" for mpirun: the venv's)
    launcher_flags: tuple[str, ...] = ()  # MPI flavour flags, e.g. srun --mpi=pmi2
    oversubscribe: bool = False  # allow more ranks than cores (local runs)
    python: str = ""  # interpreter on the compute nodes; default: the submitting one
    nnlo: str = ""  # command that runs nnlo in the batch shell; default: <python> -m nnlo_sched
    gpu_vendor: str = "nvidia"  # nvidia | amd | intel: which variable names a rank's GPUs (nnlo.device)
    # the node's GPUs in the order rank slots take them (() : 0, 1, 2, ...): Polaris [3, 2, 1, 0] (ALCF's
    # set_affinity_gpu_polaris.sh), Frontier [4, 5, 2, 3, 6, 7, 0, 1] (each GCD beside its slot's L3 cores)
    gpu_order: tuple[int, ...] = ()
    gpu_tiles: int = 1  # devices per physical GPU named "g.t" in the device variable (Aurora: 2 tiles)
    gpu_bind: str = "launcher"  # launcher | wrapper (see GPU_BINDS)
    reserved_cores: tuple[int, ...] = ()  # cores the site keeps for the system (Aurora: 0 and 52), not counted
    filesystems: str = ""  # PBS Pro -l filesystems=home:flare (ALCF: mandatory)
    system: str = ""  # PBS Pro -l select=N:system=NAME (Polaris)
    retired: str = ""  # YYYY-MM-DD the machine was retired ("" while in service)
    notes: str = ""
    source: str = ""  # file(s) it was read from

    @property
    def template_name(self) -> str:
        return self.template or f"{self.scheduler}.sh"

    def job_python(self) -> Interpreter:
        """The interpreter every program of a job runs with (``nnlo job start|end`` and the ranks): the
        ``python`` key; else, when a ``setup`` line activates a Python environment (:data:`ACTIVATES`),
        ``python3`` from the PATH the set-up leaves; else the interpreter nnlo runs with here (where it was
        submitted), by its absolute path, which no set-up line can change."""
        if self.python:
            return Interpreter(self.python, "the profile's python key")
        for line in self.setup:
            if ACTIVATES.search(line):
                return Interpreter(PATH_PYTHON, f"on the job's PATH after its set-up: set-up line {line!r} "
                                                "activates an environment")
        return Interpreter(sys.executable, "the interpreter nnlo runs with here; set python, or activate an "
                                           "environment in setup, for another")

    @property
    def retired_note(self) -> str:
        """"" for a machine in service; else one line saying it was retired and when (``nnlo clusters``, and
        once per process where the profile is used)."""
        if not self.retired:
            return ""
        when = "on a date not verified" if self.retired == RETIRED_UNDATED else f"on {self.retired}"
        return (f"cluster {self.name!r} was retired {when}; its profile is kept for reproducing old runs "
                f"(`nnlo clusters` lists the machines in service)")

    @property
    def label(self) -> str:
        """The name as users pick it, with the node type: ``cscs``, ``cscs -C mc``."""
        return f"{self.name} -C {self.node_type}" if self.node_type else self.name

    def for_constraint(self, constraint: str | None) -> Profile:
        """This profile with the node keys of ``constraint``'s ``node_types`` entry (itself if it has none).

        Idempotent: a profile already specialised to ``constraint`` is returned as it is.
        """
        if not constraint or constraint == self.node_type or constraint not in self.node_types:
            return self
        if self.node_type:
            raise ConfigError(f"profile {self.name!r} is already specialised to -C {self.node_type}")
        return replace(self, node_type=constraint, constraint=constraint, **self.node_types[constraint])

    def runs_home_for(self, account: str | None) -> str:
        """``runs_home`` with its placeholders and the environment variables set here filled in ("": none);
        a variable that is not set stays as ``$NAME`` (a login node has them, a laptop previewing may not)."""
        if not self.runs_home:
            return ""
        user = os.environ.get("USER") or os.environ.get("LOGNAME") or "$USER"
        acct = account or "PROJECT"
        text = self.runs_home.format(account=acct, account_lower=acct.lower(), user=user)
        return os.path.expanduser(os.path.expandvars(text))

    def expand_runs_home(self, account: str | None) -> str | None:
        """:meth:`runs_home_for` when every part of it is known here, else None."""
        text = self.runs_home_for(account)
        if not text or "$" in text or (account is None and "{account" in self.runs_home):
            return None
        return text

    def queue(self, name: str | None) -> Queue | None:
        """The named queue, the default one when ``name`` is None; raises for an unknown name."""
        name = name or self.default_queue
        if name is None:
            return None
        if self.queues and name not in self.queues:
            raise ConfigError(
                f"cluster {self.name!r} has no queue {name!r}; use one of {', '.join(sorted(self.queues))}"
            )
        return self.queues.get(name) or Queue(name, ())


# -- parsing ---------------------------------------------------------------------------------------
def _want(src: str, key: str, value: Any, expected: str) -> ProfileError:
    got = type(value).__name__
    return ProfileError(f"profile {src}: key {key!r} must be {expected}, got {got} {value!r}")


def _int(src: str, key: str, v: Any, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _want(src, key, v, "an integer")
    if v < minimum:
        raise ProfileError(f"profile {src}: key {key!r} must be at least {minimum}, got {v}")
    return v


def _str(src: str, key: str, v: Any) -> str:
    if not isinstance(v, str):
        raise _want(src, key, v, "a string")
    return v


def _bool(src: str, key: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise _want(src, key, v, "true or false")
    return v


def _strs(src: str, key: str, v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise _want(src, key, v, "a list of strings")
    return tuple(v)


def _ints(src: str, key: str, v: Any) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        raise _want(src, key, v, "a list of core numbers (0 or more)")
    return tuple(v)


def _choice(options: tuple[str, ...]) -> Callable[[str, str, Any], str]:
    def check(src: str, key: str, v: Any) -> str:
        s = _str(src, key, v)
        if s not in options:
            raise ProfileError(f"profile {src}: key {key!r} must be one of {', '.join(options)}, got {s!r}")
        return s

    return check


def _walltime(src: str, key: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise _want(src, key, v, "a walltime string such as \"24h\" or \"02:00:00\"")
    try:
        return parse_walltime(v if isinstance(v, str) else f"{v}m")
    except ConfigError as e:
        raise ProfileError(f"profile {src}: key {key!r}: {e}") from None


def _cores(src: str, key: str, v: Any) -> int:
    if v == "auto":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return _int(src, key, v, 1)


def _positive_float(src: str, key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise _want(src, key, v, "a positive number")
    return float(v)


def _directive_word(src: str, key: str, v: Any) -> str:
    text = _str(src, key, v)
    if not re.fullmatch(r"[A-Za-z0-9_.:-]*", text):
        raise ProfileError(f"profile {src}: key {key!r} must be letters, digits and ._:- only "
                           f"(e.g. \"home:flare\"), got {text!r}")
    return text


def _date(src: str, key: str, v: Any) -> str:
    text = _str(src, key, v)
    if text not in ("", RETIRED_UNDATED) and not _DATE.fullmatch(text):
        raise ProfileError(f"profile {src}: key {key!r} must be a date YYYY-MM-DD (or {RETIRED_UNDATED!r} when "
                           f"the date is not known), got {text!r}")
    return text


def _removed_max_processes(src: str, key: str, v: Any) -> None:
    raise ProfileError(
        f"profile {src}: key 'max_processes' was removed: Titan's limit of 200 processes is on the batch "
        "job's service node (aprun instances, helpers), not on MPI ranks; delete the key"
    )


def _runs_home(src: str, key: str, v: Any) -> str:
    text = _str(src, key, v)
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    except ValueError as e:
        raise ProfileError(f"profile {src}: key {key!r}: {e}; write placeholders as {{account}}") from None
    bad = [f for f in fields if f not in RUNS_HOME_FIELDS]
    if bad:
        raise ProfileError(f"profile {src}: key {key!r} has unknown placeholder {{{bad[0]}}}; "
                           f"use {', '.join('{' + f + '}' for f in RUNS_HOME_FIELDS)}")
    return text


_SCALARS: dict[str, Callable[[str, str, Any], Any]] = {
    "scheduler": _choice(SCHEDULERS),
    "launcher": _choice(LAUNCHERS),
    "cores_per_node": _cores,
    "gpus_per_node": _int,
    "memory_gb": _positive_float,
    "nodes": lambda s, k, v: _int(s, k, v, 1),
    "description": _str,
    "template": _str,
    "aliases": _strs,
    "default_queue": _str,
    "constraint": _str,
    "constraints": _strs,
    "account_required": _bool,
    "setup": _strs,
    "share_setup": _strs,
    "directives": _strs,
    "signal": lambda s, k, v: None if v == "" else _choice(SIGNALS)(s, k, v),
    "signal_lead_s": lambda s, k, v: _int(s, k, v, 1),
    "gpu_directive": _choice(GPU_DIRECTIVES),
    "max_processes": _removed_max_processes,
    "runs_home": _runs_home,
    "compute_read_only": _strs,
    "launcher_command": _str,
    "launcher_flags": _strs,
    "oversubscribe": _bool,
    "gpu_vendor": _choice(GPU_VENDORS),
    "gpu_order": lambda s, k, v: _ints(s, k, v),
    "gpu_tiles": lambda s, k, v: _int(s, k, v, 1),
    "gpu_bind": _choice(GPU_BINDS),
    "reserved_cores": lambda s, k, v: _ints(s, k, v),
    "filesystems": lambda s, k, v: _directive_word(s, k, v),
    "system": lambda s, k, v: _directive_word(s, k, v),
    "retired": lambda s, k, v: _date(s, k, v),
    "python": _str,
    "nnlo": _str,
    "notes": _str,
}
REQUIRED = ("scheduler", "launcher", "cores_per_node")
# keys handled by the loader, not stored on the profile
LOADER_KEYS = ("extends",)


def _queue(src: str, name: str, table: Any) -> Queue:
    where = f"queues.{name}"
    if not isinstance(table, dict):
        raise _want(src, where, table, "a table")
    known = {"walltime", "max_nodes", "min_nodes", "bins", "chaining", "notes", "qos"}
    for k in table:
        if k not in known:
            raise _unknown_key(src, f"{where}.{k}", k, known)
    bins: list[WalltimeBin] = []
    if "bins" in table:
        if "walltime" in table or "max_nodes" in table:
            raise ProfileError(f"profile {src}: {where} has both bins and walltime/max_nodes; keep one")
        raw = table["bins"]
        if not isinstance(raw, list) or not raw:
            raise _want(src, f"{where}.bins", raw, "a non-empty list of {max_nodes, walltime} tables")
        for i, b in enumerate(raw):
            key = f"{where}.bins[{i}]"
            if not isinstance(b, dict) or set(b) != {"max_nodes", "walltime"}:
                raise _want(src, key, b, "a table with exactly max_nodes and walltime")
            bins.append(WalltimeBin(_int(src, f"{key}.max_nodes", b["max_nodes"], 1),
                                    _walltime(src, f"{key}.walltime", b["walltime"])))
        if [b.max_nodes for b in bins] != sorted({b.max_nodes for b in bins}):
            raise ProfileError(f"profile {src}: {where}.bins must have increasing max_nodes")
    elif "walltime" in table:
        max_nodes = _int(src, f"{where}.max_nodes", table.get("max_nodes", 10**9), 1)
        bins.append(WalltimeBin(max_nodes, _walltime(src, f"{where}.walltime", table["walltime"])))
    return Queue(
        name=name,
        bins=tuple(bins),
        min_nodes=_int(src, f"{where}.min_nodes", table.get("min_nodes", 1), 1),
        chaining=_bool(src, f"{where}.chaining", table.get("chaining", True)),
        notes=_str(src, f"{where}.notes", table.get("notes", "")),
        qos=_bool(src, f"{where}.qos", table.get("qos", False)),
    )


def _node_types(src: str, raw: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, dict):
        raise _want(src, "node_types", raw, "a table of {constraint = {node keys}} tables")
    out: dict[str, dict[str, Any]] = {}
    for constraint, table in raw.items():
        where = f"node_types.{constraint}"
        if not isinstance(table, dict):
            raise _want(src, where, table, "a table")
        entry: dict[str, Any] = {}
        for k, v in table.items():
            if k not in NODE_KEYS:
                raise _unknown_key(src, f"{where}.{k}", k, NODE_KEYS)
            entry[k] = _SCALARS[k](src, f"{where}.{k}", v)
        out[constraint] = entry
    return out


def _unknown_key(src: str, where: str, key: str, known: Iterable[str]) -> ProfileError:
    """A key the profile schema does not have, with the one it most resembles: one short line (``nnlo clusters``
    shows it in a table row), never the whole list of keys."""
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else " (the keys are listed in docs/clusters.md, Keys)"
    return ProfileError(f"profile {src}: unknown key {where!r}{hint}")


def profile_from_table(name: str, table: dict[str, Any], source: str) -> Profile:
    """Check every key of a (merged) profile table and build the :class:`Profile`."""
    values: dict[str, Any] = {}
    for key, raw in table.items():
        if key in LOADER_KEYS:
            continue
        if key == "node_types":
            values["node_types"] = _node_types(source, raw)
            continue
        if key == "queues":
            if not isinstance(raw, dict):
                raise _want(source, key, raw, "a table of queue tables")
            values["queues"] = {q: _queue(source, q, t) for q, t in raw.items()}
            continue
        check = _SCALARS.get(key)
        if check is None:
            raise _unknown_key(source, key, key, {*_SCALARS, "queues", "node_types", *LOADER_KEYS} - {"max_processes"})
        values[key] = check(source, key, raw)
    missing = [k for k in REQUIRED if k not in values]
    if missing:
        raise ProfileError(f"profile {source}: missing key(s) {', '.join(missing)}")
    queues = values.get("queues", {})
    dq = values.get("default_queue")
    if dq is not None and queues and dq not in queues:
        raise ProfileError(
            f"profile {source}: default_queue {dq!r} is not among its queues ({', '.join(sorted(queues))})"
        )
    scheduler, launcher = values["scheduler"], values["launcher"]
    if launcher not in LAUNCHERS_FOR[scheduler]:
        ok = LAUNCHERS_FOR[scheduler]
        hosts = [s for s, ls in LAUNCHERS_FOR.items() if launcher in ls]
        raise ProfileError(
            f"profile {source}: launcher {launcher!r} does not run under scheduler {scheduler!r} "
            f"({launcher} needs {' or '.join(hosts)}); use launcher {' or '.join(repr(x) for x in ok)}"
        )
    order = values.get("gpu_order", ())
    if order and sorted(order) != list(range(values.get("gpus_per_node", 0))):
        raise ProfileError(f"profile {source}: gpu_order {list(order)} must list each of the node's "
                           f"{values.get('gpus_per_node', 0)} GPUs (0 to gpus_per_node-1) once")
    tiles = values.get("gpu_tiles", 1)
    if tiles > 1 and values.get("gpus_per_node", 0) % tiles:
        raise ProfileError(f"profile {source}: gpus_per_node {values.get('gpus_per_node', 0)} is not a multiple "
                           f"of gpu_tiles {tiles}; count every tile as a device")
    return Profile(name=name, source=source, **values)


def profile_path_str(path: Path) -> str:
    home = Path.home()
    try:
        return "~/" + str(path.relative_to(home))
    except ValueError:
        return str(path)
