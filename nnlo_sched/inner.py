"""The inner command of a submitted run (``nnlo submit ... train|optimize [options]``), parsed once.

``nnlo submit`` hands the options after ``train``/``optimize`` to the very click command that ``nnlo train``
or ``nnlo optimize`` uses, so defaults, choices, ranges and upstream spellings can never drift between the
two; the result is typed (:class:`~nnlo.config.TrainConfig` and, for a search,
:class:`~nnlo.optimize.options.SearchConfig`) and stored in the run's ``spec.json``. Every later reader —
the job's start, the chain, ``nnlo status``, the layout, ``nnlo resume`` — reads that record; nothing else
parses the inner argv.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from nnlo.errors import ConfigError

if TYPE_CHECKING:
    from nnlo.config import TrainConfig
    from nnlo.optimize.options import SearchConfig
    from nnlo.roles import Shape

class InnerOptionError(ConfigError):
    """An option the inner command does not have (``option``: as typed), so the caller can say where it goes."""

    def __init__(self, message: str, option: str) -> None:
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class InnerCommand:
    """A parsed inner command: what the job runs."""

    kind: str
    train: TrainConfig
    search: SearchConfig | None = None
    ranks: int | None = None  # the inner ``-n``: meaningless in a batch job, where the layout sizes the world

    @property
    def shape(self) -> Shape:
        """The run's role shape, by the one rule (:meth:`nnlo.roles.Shape.for_run`)."""
        if self.search is not None:
            return self.search.shape(self.train)
        from nnlo.roles import RoleError

        try:
            return self.train.training_group_shape
        except RoleError as e:
            raise ConfigError(str(e)) from None


def command_for(kind: str) -> click.Command:
    """The click command of ``nnlo <kind>``."""
    if kind == "train":
        from nnlo_sched.commands.train import train_command

        return train_command
    if kind == "optimize":
        from nnlo_sched.commands.optimize import optimize_command

        return optimize_command
    from nnlo_sched.spec import KINDS

    raise ConfigError(f"run kind must be one of {', '.join(KINDS)}, got {kind!r}")


def parse_inner(kind: str, argv: Sequence[str]) -> InnerCommand:
    """Parse ``argv`` with ``nnlo <kind>``'s own parser into typed, validated options.

    Bad options are a :class:`~nnlo.errors.ConfigError` naming the inner command (``train options: ...``).
    ``--deadline`` is kept only when given on the command line: its default (``$NNLO_DEADLINE``) belongs to
    the job that runs, not to the shell that submitted it.
    """
    from nnlo_sched.commands.train import config_from_params

    command = command_for(kind)
    try:
        ctx = command.make_context(f"nnlo {kind}", list(argv))
    except click.exceptions.Exit:  # --help: nothing to run
        raise ConfigError(f"{kind} options: --help is not an option of a submitted run; "
                          f"see `nnlo {kind} --help`") from None
    except click.NoSuchOption as e:
        raise InnerOptionError(f"{kind} options: {e.format_message()}", e.option_name) from None
    except click.ClickException as e:
        raise ConfigError(f"{kind} options: {e.format_message()}") from None
    params = dict(ctx.params)
    if ctx.get_parameter_source("deadline") is not click.core.ParameterSource.COMMANDLINE:
        params["deadline"] = None
    train = config_from_params(params).validate()
    search = None
    if kind == "optimize":
        from nnlo_sched.commands.optimize import search_from_params

        search = search_from_params(params)
    inner = InnerCommand(kind, train, search, params.get("np_"))
    inner.shape  # noqa: B018 - refuse an impossible shape now, not in the queue
    return inner
