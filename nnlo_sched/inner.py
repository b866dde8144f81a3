"""The inner command of a run (``train|optimize [options]``): parsed once into the typed run, then changed
only by replacing fields.

``nnlo train``/``nnlo optimize`` typed at a shell and the words after ``nnlo submit ... train|optimize`` go
through the same click command (:func:`nnlo_sched.options.command`), so defaults, choices, ranges and upstream
spellings can never drift; the result is typed (:class:`~nnlo.config.TrainConfig` and, for a search,
:class:`~nnlo.optimize.options.SearchConfig`) and stored in the run's ``spec.json``. Every later reader - the
job's start and payload, the chain, ``nnlo status``, the layout - reads that record; nothing parses the inner
argv again. Options that change a run later (``nnlo resume RUN --epochs 50``) are parsed on their own
(:func:`parse_changes`) and replace fields of the record (:func:`changed`).
"""
from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from nnlo.config import TrainConfig
from nnlo.errors import ConfigError
from nnlo.models import run_name
from nnlo.optimize.options import SearchConfig
from nnlo.roles import RoleError, Shape
from nnlo_sched.options import command, config_from_params, parse_model_arg, search_from_params


class InnerOptionError(ConfigError):
    """An option the inner command does not have (``option``: as typed), so the caller can say where it goes."""

    def __init__(self, message: str, option: str) -> None:
        super().__init__(message)
        self.option = option


def run_shape(train: TrainConfig, search: SearchConfig | None) -> Shape:
    """A run's role shape, by the one rule (:meth:`nnlo.roles.Shape.for_run`): a search's coordinator, blocks
    and folds of training groups, or one training group; an impossible one is a one-line ConfigError."""
    if search is not None:
        return search.shape(train)
    try:
        return train.training_group_shape
    except RoleError as e:
        raise ConfigError(str(e)) from None


@dataclass(frozen=True)
class InnerCommand:
    """A parsed inner command: what the job runs, and how ``-n`` would start it here."""

    kind: str
    train: TrainConfig
    search: SearchConfig | None = None
    ranks: int | None = None  # the inner ``-n``: meaningless in a batch job, where the layout sizes the world
    check: bool = True  # False: ``--no-check`` (skip the pre-queue checks)

    @property
    def shape(self) -> Shape:
        """The run's role shape (:func:`run_shape`)."""
        return run_shape(self.train, self.search)

    def run_name(self, workdir: str | Path) -> str:
        """The run's name, by the one rule train and optimize follow (:func:`nnlo.models.run_name`), without
        running the model module in this process: a relative ``--model`` is read in ``workdir``."""
        model = self.train.model
        return run_name(model if os.path.isabs(model) else os.path.join(workdir, model), self.train.trial_name,
                        import_module=False)


@functools.cache
def parser(kind: str, *, required: bool = True) -> click.Command:
    """``nnlo <kind>``'s options as a parser only (``required=False``: ``--model`` may be left out)."""
    return command(kind, required=required)


def _context(kind: str, argv: Sequence[str], *, required: bool = True) -> click.Context:
    """``argv`` parsed by ``nnlo <kind>``'s options; bad options are one line naming the inner command."""
    cmd = parser(kind, required=required)  # a kind that is none of KINDS is a one-line error here
    try:
        return cmd.make_context(f"nnlo {kind}", list(argv))
    except click.exceptions.Exit:  # --help: nothing to run
        raise ConfigError(f"{kind} options: --help is not an option of a submitted run; "
                          f"see `nnlo {kind} --help`") from None
    except click.NoSuchOption as e:
        raise InnerOptionError(f"{kind} options: {e.format_message()}", e.option_name) from None
    except click.ClickException as e:
        raise ConfigError(f"{kind} options: {e.format_message()}") from None


def inner_from_context(kind: str, ctx: click.Context, *, submitted: bool) -> InnerCommand:
    """The typed, validated run of a parsed ``nnlo <kind>`` command line (the first and only parse).

    ``submitted``: the run goes into a queue, so ``--deadline`` is kept only when given on the command line -
    its default (``$NNLO_DEADLINE``) belongs to the job that runs, not to the shell that submitted it.
    """
    params = dict(ctx.params)
    if submitted and ctx.get_parameter_source("deadline") is not click.core.ParameterSource.COMMANDLINE:
        params["deadline"] = None
    train = config_from_params(params).validate()
    search = search_from_params(params) if kind == "optimize" else None
    inner = InnerCommand(kind, train, search, params.get("np_"), not params.get("no_check"))
    inner.shape  # noqa: B018 - refuse an impossible shape now, not in the queue
    return inner


#: a user's own Python file run on every rank of each job of a chain (``nnlo submit ... script FILE.py ARGS``)
SCRIPT = "script"


def script_file(argv: Sequence[str]) -> str:
    """The Python file of a script run's words (``FILE.py ARGS...``); one line when there is none."""
    if not argv or not str(argv[0]).strip() or str(argv[0]).startswith("-"):
        raise ConfigError("script needs the Python file to run first, then its own arguments: "
                          "nnlo submit --cluster C [resources] script FILE.py [ARGS...]")
    return str(argv[0])


def parse_inner(kind: str, argv: Sequence[str]) -> InnerCommand:
    """``argv`` of a submitted run parsed with ``nnlo <kind>``'s own options into the typed run.

    Bad options are a :class:`~nnlo.errors.ConfigError` naming the inner command (``train options: ...``).
    A script run (:data:`SCRIPT`) keeps its words verbatim: the file and the script's own arguments; its job
    has the shape of a training with the default options (a master and the ``--workers``).
    """
    if kind == SCRIPT:
        script_file(argv)
        return InnerCommand(SCRIPT, TrainConfig())
    return inner_from_context(kind, _context(kind, argv), submitted=True)


@dataclass(frozen=True)
class Changes:
    """Options given to change a run (``nnlo resume RUN --epochs 50``): the fields they set, nothing else."""

    train: dict[str, Any]
    search: dict[str, Any]
    model_args: dict[str, Any]

    def __bool__(self) -> bool:
        return bool(self.train or self.search or self.model_args)


def parse_changes(kind: str, argv: Sequence[str]) -> Changes:
    """The fields that the options ``argv`` set (only those typed: no defaults), parsed by ``nnlo <kind>``'s
    options; ``--model-arg NAME=VALUE`` adds to the model's keyword arguments."""
    ctx = _context(kind, argv, required=False)
    given = {name: value for name, value in ctx.params.items()
             if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE}
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    search_names = {f.name for f in dataclasses.fields(SearchConfig)} if kind == "optimize" else set()
    return Changes(train={k: v for k, v in given.items() if k in names},
                   search={k: v for k, v in given.items() if k in search_names},
                   model_args=dict(map(parse_model_arg, given.get("model_arg", ()))))


def changed(inner: InnerCommand, changes: Changes) -> InnerCommand:
    """``inner`` with ``changes`` applied (later options win, as on a command line), validated."""
    train = dataclasses.replace(inner.train, **changes.train,
                                model_args={**inner.train.model_args, **changes.model_args}).validate()
    search = dataclasses.replace(inner.search, **changes.search) if inner.search is not None else None
    new = dataclasses.replace(inner, train=train, search=search)
    new.shape  # noqa: B018 - an impossible shape is refused here
    return new


__all__ = ["SCRIPT", "Changes", "InnerCommand", "InnerOptionError", "changed", "inner_from_context", "parse_changes",
           "parse_inner", "parser", "run_shape", "script_file"]
