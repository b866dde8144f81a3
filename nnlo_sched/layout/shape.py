"""The run shape (masters, ranks per worker, block size, folds) read from an inner command's argv.

``nnlo submit ... train --n-masters 2 ...`` keeps the inner argv verbatim; the layout only needs the few
options that decide the process hierarchy. When the inner commands' click definitions are importable their
own parsers decide (so defaults and aliases never drift); otherwise a small fallback parser reads just those
options. The runtime re-parses the same argv inside the job, so both sides agree on the shape.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

from nnlo.errors import ConfigError
from nnlo.roles import RoleError, Shape

_SHAPE_OPTIONS = {
    "--n-masters": "n_masters",
    "--n-processes": "n_processes",
    "--block-size": "block_size",
    "--n-fold": "n_fold",
    "--mode": "mode",
}


def shape_from_args(kind: str, args: list[str] | tuple[str, ...]) -> Shape:
    """The :class:`Shape` that the inner ``nnlo train``/``nnlo optimize`` argv asks for."""
    via_click = _from_click(kind, list(args))
    if via_click is not None:
        return via_click
    return shape_from_options(kind, _fallback_parse(list(args)))


def shape_from_options(kind: str, opts: dict[str, Any]) -> Shape:
    """A :class:`Shape` from already-parsed option values (``None`` = the option's default)."""
    mode = opts.get("mode")
    raw_masters = opts.get("n_masters")
    n_masters = 0 if mode == "allreduce" else (1 if raw_masters is None else int(raw_masters))
    n_processes = int(opts.get("n_processes") or 1)
    n_fold = int(opts.get("n_fold") or 1) if kind == "optimize" else 1
    block = opts.get("block_size")
    try:
        if kind == "optimize" and block is None:  # nnlo optimize's default: the smallest block
            block = n_fold * Shape(n_masters=n_masters, n_processes=n_processes).group_size(1)
        return Shape(
            n_masters=n_masters,
            n_processes=n_processes,
            block_size=int(block) if kind == "optimize" else None,
            n_fold=n_fold,
        )
    except RoleError as e:
        raise ConfigError(str(e)) from None


def _from_click(kind: str, args: list[str]) -> Shape | None:
    """Use the inner command's own parser and ``shape_from_params`` when they exist."""
    module_name = f"nnlo_sched.commands.{kind}"
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    command = getattr(module, f"{kind}_command", None)
    to_shape: Callable[[dict[str, Any]], Shape] | None = getattr(module, "shape_from_params", None)
    if to_shape is None and kind == "optimize":
        to_shape = getattr(importlib.import_module("nnlo_sched.commands.train"), "shape_from_params", None)
    if command is None or to_shape is None:
        return None
    try:
        params = command.make_context(kind, list(args), resilient_parsing=True).params
        return to_shape(params)
    except RoleError as e:
        raise ConfigError(str(e)) from None
    except ConfigError:
        raise
    except Exception:  # an inner parser we do not understand: fall back to reading the options ourselves
        return None


def _fallback_parse(args: list[str]) -> dict[str, Any]:
    """Read ``--opt value`` and ``--opt=value`` for the shape options; ignores everything else."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, val = a.partition("=")
        key = _SHAPE_OPTIONS.get(name)
        if key is not None:
            if not eq:
                if i + 1 >= len(args):
                    raise ConfigError(f"{name} needs a value")
                val = args[i + 1]
                i += 1
            out[key] = val if key == "mode" else _int(name, val)
        i += 1
    return out


def _int(name: str, val: str) -> int:
    try:
        return int(val)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {val!r}") from None
