"""The run spec: everything ``nnlo submit`` knows about a run, as one JSON-serialisable record.

A run directory holds its spec (``spec.json``) so that every job of a checkpoint-restart chain renders the
same script and runs the same inner command. The inner command is parsed once, at submission, by the same
click command as ``nnlo train``/``nnlo optimize`` (:mod:`nnlo_sched.inner`), and stored typed: ``config``
(a :class:`~nnlo.config.TrainConfig`) and, for a search, ``search`` (a
:class:`~nnlo.optimize.options.SearchConfig`). The verbatim argv (``args``) is kept beside them for display
and for ``nnlo resume`` with changed options; nothing reads options from it. A spec written before the
typed record existed (no ``config`` key) is parsed from its ``args`` when it loads.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from nnlo.config import TrainConfig
from nnlo.errors import ConfigError

if TYPE_CHECKING:  # SearchConfig is imported where a search is read: a job's start and end need no numpy
    from nnlo.optimize.options import SearchConfig
    from nnlo.roles import Shape
    from nnlo_sched.inner import InnerCommand

KINDS = ("train", "optimize")
DEFAULT_MAX_RESUBMITS = 10
#: Retries after a rank death (a signal, not a Python error) that left a checkpoint: a lost node or an OOM
#: kill is often transient, a deterministic crash is not, so a small bound.
DEFAULT_MAX_RETRIES = 2


@dataclass
class RunSpec:
    """A run as submitted: what to run (``kind`` + ``args``), where, and with which resources.

    ``workers``/``blocks``/``nodes`` are what the user *asked* for (any may be None); ``layout`` is the
    computed placement (:meth:`nnlo_sched.layout.Layout.to_dict`), filled in by ``nnlo submit``.
    ``gpus_per_worker`` is per worker *rank*; a value below 1 (0.5, 0.25) shares one GPU between ranks.
    ``directives`` are extra scheduler lines passed through verbatim (e.g. ``#SBATCH --mail-type=END``).
    ``workdir`` is the directory ``nnlo submit`` ran in: every job of the chain starts there, so relative
    paths in ``args`` (``--model examples/x.py``) mean the same in a successor submitted from inside a job.
    """

    kind: str
    args: list[str]
    cluster: str
    name: str = "nnlo"
    walltime_s: int = 3600
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
    layout: dict[str, Any] | None = None
    workdir: str | None = None
    config: TrainConfig | None = None  # the inner command's training options (parsed from args if None)
    search: SearchConfig | None = None  # the inner command's search options (optimize runs)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"run kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
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
            from nnlo.optimize.options import SearchConfig

            self.search = SearchConfig.from_dict(self.search)
        if self.config is None or (self.kind == "optimize" and self.search is None):
            from nnlo_sched.inner import parse_inner

            parsed = parse_inner(self.kind, self.args)
            self.config, self.search = parsed.train, parsed.search
        if self.kind == "train":
            self.search = None

    # -- the inner command -------------------------------------------------------------------------
    @property
    def train(self) -> TrainConfig:
        """The training options of the inner command (the blocks' options in a search)."""
        assert self.config is not None  # set by __post_init__
        return self.config

    @property
    def inner(self) -> InnerCommand:
        from nnlo_sched.inner import InnerCommand

        return InnerCommand(self.kind, self.train, self.search)

    @property
    def shape(self) -> Shape:
        """The run's role shape (what the layout sizes and the runtime splits)."""
        return self.inner.shape

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
            return cls(**data)
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
