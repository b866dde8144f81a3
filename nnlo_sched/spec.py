"""The run spec: everything ``nnlo submit`` (and ``nnlo train|optimize -n``) knows about a run, as one typed,
JSON-serialisable record, and reading it back from a run directory.

A run directory holds its spec (``spec.json``) so that every job of a checkpoint-restart chain renders the
same script and runs the same run. The inner command is parsed once (:mod:`nnlo_sched.inner`) and stored
typed: ``config`` (a :class:`~nnlo.config.TrainConfig`) and, for a search, ``search`` (a
:class:`~nnlo.optimize.options.SearchConfig`); ``layout`` is the placement computed for the cluster (a
:class:`~nnlo_sched.layout.LayoutRecord`). The verbatim argv (``args``) is kept beside them for display;
nothing reads options from it. A later change of the run replaces fields (``dataclasses.replace``).

:func:`load_spec` reads a run's record with its fields' types checked. A record written before the typed
options existed (no ``config`` key) is the one exception to "parsed once": it is converted on reading by
parsing its ``args`` (:func:`_typed_legacy`), as it was parsed when it was submitted.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from nnlo.config import TrainConfig
from nnlo.contract import SPEC_FILE
from nnlo.errors import ConfigError, NnloError
from nnlo.job import progress
from nnlo.optimize.options import SearchConfig
from nnlo.roles import Shape
from nnlo_sched.inner import SCRIPT, InnerCommand, parse_inner, run_shape, script_file
from nnlo_sched.layout import Layout, LayoutRecord, compute_layout
from nnlo_sched.options import KINDS
from nnlo_sched.profiles.schema import Profile
from nnlo_sched.state import StateError
from nnlo_sched.walltime import DEFAULT_WALLTIME_S

#: a Python function submitted through nnlo's submitit plugins (:mod:`nnlo_sched.submitit`): no run options,
#: a layout given by the executor; its job runs the function's program, not a run's payload
FUNCTION = "function"
#: what a spec may describe: a run (``nnlo train``/``nnlo optimize``), a user's script, or a function
SPEC_KINDS = (*KINDS, SCRIPT, FUNCTION)
DEFAULT_MAX_RESUBMITS = 10
#: Retries after a rank death (a signal, not a Python error) that left a checkpoint: a lost node or an OOM
#: kill is often transient, a deterministic crash is not, so a small bound.
DEFAULT_MAX_RETRIES = 2


class RunNotFound(NnloError):
    """No run matches what the user typed."""


@dataclass
class RunSpec:
    """A run as submitted: what to run (``kind``, the typed ``config``/``search``; ``args`` as typed), where,
    and with which resources.

    ``workers``/``blocks``/``nodes`` are what the user *asked* for (any may be None); ``layout`` is the
    computed placement, filled in by ``nnlo submit``.
    ``gpus_per_worker`` is per worker *rank*; a value below 1 (0.5, 0.25) shares one GPU between ranks.
    ``directives`` are extra scheduler lines passed through verbatim (e.g. ``#SBATCH --mail-type=END``).
    ``workdir`` is the directory ``nnlo submit`` ran in: every job of the chain starts there, so relative
    paths (``--model examples/x.py``) mean the same in a successor submitted from inside a job.
    """

    kind: str
    args: list[str]
    cluster: str
    name: str = "nnlo"
    walltime_s: int = DEFAULT_WALLTIME_S
    queue: str | None = None
    account: str | None = None
    nodes: int | None = None
    workers: int | None = None
    blocks: int | None = None
    gpus_per_worker: float | None = None
    constraint: str | None = None
    max_resubmits: int = DEFAULT_MAX_RESUBMITS
    max_retries: int = DEFAULT_MAX_RETRIES  # jobs retried after a rank death (separate from the walltime chain)
    directives: list[str] = field(default_factory=list)
    layout: LayoutRecord | None = None
    workdir: str | None = None
    config: TrainConfig | None = None  # the training options (the blocks' options in a search); required
    search: SearchConfig | None = None  # the search options (optimize runs)

    def __post_init__(self) -> None:
        if self.kind not in SPEC_KINDS:
            raise ConfigError(f"run kind must be one of {', '.join((*KINDS, SCRIPT))}, got {self.kind!r}")
        if self.walltime_s <= 0:
            raise ConfigError(f"walltime must be positive, got {self.walltime_s} s")
        if self.max_resubmits < 0:
            raise ConfigError(f"--max-resubmits must be 0 or more, got {self.max_resubmits}")
        if self.max_retries < 0:
            raise ConfigError(f"--max-retries must be 0 or more, got {self.max_retries}")
        for d in self.directives:
            if any(c in d for c in "\n\r\0"):
                raise ConfigError("an extra directive contains a line break; give one directive per option")
        self.args = [str(a) for a in self.args]
        if isinstance(self.config, dict):
            self.config = TrainConfig.from_dict(self.config)
        if isinstance(self.search, dict):
            self.search = SearchConfig.from_dict(self.search)
        if isinstance(self.layout, dict):
            self.layout = LayoutRecord.from_dict(self.layout)
        if self.kind == FUNCTION:
            if self.config is not None or self.search is not None or self.layout is None:
                raise ConfigError("a function's spec has no run options and needs its layout")
            return
        if self.config is None:
            raise ConfigError(f"the {self.kind} run spec needs its typed options (config); parse them once with "
                              "nnlo_sched.inner.parse_inner")
        if self.kind == "optimize" and self.search is None:
            raise ConfigError("an optimize run spec needs its search options (search)")
        if self.kind == "train":
            self.search = None
        if self.kind == SCRIPT:
            script_file(self.args)
            if self.search is not None:
                raise ConfigError("a script run spec has no search options")

    @classmethod
    def of(cls, inner: InnerCommand, args: list[str], cluster: str, **resources: Any) -> RunSpec:
        """The spec of the parsed run ``inner`` (``args``: its command line as typed, for display)."""
        return cls(kind=inner.kind, args=list(args), cluster=cluster, config=inner.train, search=inner.search,
                   **resources)

    @classmethod
    def from_argv(cls, kind: str, args: list[str], cluster: str, **resources: Any) -> RunSpec:
        """The spec of ``nnlo submit ... <kind> <args>``: ``args`` parsed once (``inner.parse_inner``)."""
        return cls.of(parse_inner(kind, args), args, cluster, **resources)

    # -- the run -----------------------------------------------------------------------------------
    @property
    def train(self) -> TrainConfig:
        """The training options of the run (the blocks' options in a search)."""
        if self.config is None:
            raise ConfigError(f"a {self.kind} spec has no training options")
        return self.config

    @property
    def inner(self) -> InnerCommand:
        return InnerCommand(self.kind, self.train, self.search)

    @property
    def shape(self) -> Shape:
        """The run's role shape (what the layout sizes and the runtime splits)."""
        return run_shape(self.train, self.search)

    def layout_on(self, profile: Profile) -> Layout:
        """Where this run's ranks go on ``profile``'s nodes (those its ``--constraint`` picks)."""
        return compute_layout(profile.for_constraint(self.constraint), self.shape, self.kind, workers=self.workers,
                              blocks=self.blocks, nodes=self.nodes, gpus_per_worker=self.gpus_per_worker,
                              walltime_s=self.walltime_s, queue=self.queue)

    # -- JSON --------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"run spec has unknown key(s) {', '.join(unknown)}; was it written by a newer nnlo?")
        try:
            return cls(**_typed_legacy(data))
        except TypeError as e:  # a missing required key, or a field of the wrong type
            raise ConfigError(f"run spec is incomplete or damaged: {e}") from None

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"run spec is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise ConfigError("run spec must be a JSON object")
        return cls.from_dict(data)


def _typed_legacy(data: dict[str, Any]) -> dict[str, Any]:
    """A record written before the typed options existed (no ``config``): its ``args`` parsed, as at its
    submission. Any other record is returned as it is."""
    complete = "cluster" in data and isinstance(data.get("args"), list) and data.get("kind") in KINDS
    if "config" in data or not complete:  # typed already, or damaged (the constructor says how)
        return data
    inner = parse_inner(data["kind"], [str(a) for a in data["args"]])
    return {**data, "config": inner.train.to_dict(),
            "search": inner.search.to_dict() if inner.search is not None else None}


def checkpoint_dir(run_dir: Path, spec: RunSpec) -> Path:
    """The training's output directory (``--checkpoint DIR``): the inner ``--checkpoint`` if the user gave
    one, else the run directory itself, so that ``history.json`` sits in the run directory and the
    checkpoints in ``<run>/checkpoints/`` (the runtime writes them into ``DIR/checkpoints``). A script run:
    the folder of the training (or search) its script runs now, as its job noted it (:mod:`nnlo.job`)."""
    if spec.kind == SCRIPT:
        folder = progress(run_dir).get("folder")
        return Path(folder) if isinstance(folder, str) and folder else Path(run_dir)
    value = spec.train.checkpoint
    if value:
        p = Path(value).expanduser()
        return p if p.is_absolute() else Path(spec.workdir or run_dir) / p
    return Path(run_dir)


# -- reading a run's spec -------------------------------------------------------------------------------
def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _object_or_null(v: object) -> bool:
    return v is None or isinstance(v, dict)


# a RunSpec field's annotation -> the check of its JSON value (a field with another annotation is not checked)
_SPEC_TYPES: dict[str, tuple[Callable[[object], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "str | None": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "int": (_whole, "an integer"),
    "int | None": (lambda v: v is None or _whole(v), "an integer or null"),
    "float | None": (lambda v: v is None or _finite(v), "a finite number or null"),
    "list[str]": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings"),
    "LayoutRecord | None": (_object_or_null, "an object or null"),
    "TrainConfig | None": (_object_or_null, "an object or null"),
    "SearchConfig | None": (_object_or_null, "an object or null"),
}


def _spec_problem(text: str) -> str:
    """What is wrong with the types of a spec record's fields ("" if nothing; RunSpec checks the rest)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return ""  # RunSpec.from_json says it
    if not isinstance(data, dict):
        return ""
    for f in fields(RunSpec):
        check = _SPEC_TYPES.get(str(f.type))
        if check is not None and f.name in data and not check[0](data[f.name]):
            return f"'{f.name}' must be {check[1]}, got {json.dumps(data[f.name])[:40]}"
    return ""


def load_spec(run_dir: Path) -> RunSpec:
    """The run's spec record, its fields' types checked; StateError (one line) if it is damaged."""
    path = Path(run_dir) / SPEC_FILE
    try:
        text = path.read_text()
        problem = _spec_problem(text)
        if problem:
            raise StateError(f"{path} is corrupt: {problem}; the run directory is damaged")
        return RunSpec.from_json(text)
    except StateError:
        raise
    except FileNotFoundError:
        raise RunNotFound(f"{run_dir} is not an nnlo run directory (no {SPEC_FILE})") from None
    except NnloError as e:
        raise StateError(f"{path}: {e}; the run directory is damaged") from None
    except (OSError, ValueError, TypeError, AttributeError, KeyError, RecursionError) as e:
        raise StateError(f"{path} cannot be read ({' '.join(str(e).split())[:200]}); the run directory is "
                         f"damaged") from None
