"""What placement knows about a trial before it runs: its class, its size and the memory it declares. Pure.

**Trial class.** Trials of one class speed up alike on the same hardware: a convolutional net gains far more
from a GPU block than a small MLP does, so the cost model learns a speed per (class, block type)
(:mod:`.costs`). The class is, in order:

1. ``trial_class(params)`` in the model module, if it defines one: any short string (``"cnn"``);
2. else the values of a tree space's top-level choices (``model=cnn``; a choice with ``branches`` at the root);
3. else one class for every trial (``""``).

**Size hint.** ``trial_size(params)`` in the model module: a positive number the trial's duration is taken to be
proportional to within its class (say epochs x width). Without it every trial has size 1 and what a parameter
costs is learnt from the parameters themselves. A size also orders a class's trials by memory: a trial that ran
out of memory on a block type keeps the trials of its class at least as large off that type too (without a size
nothing orders them, and it keeps only itself off: :mod:`.memory`).

**Memory.** ``trial_memory(params)`` in the model module: the GiB a worker rank needs. Block types whose
known memory per rank (:class:`~.hardware.BlockType`) is smaller are skipped before anything is tried.

The three are optional and independent; each gets the trial's parameters as ``get_model`` would and must be
cheap (the coordinator calls it for every proposal). A hook that raises or answers wrongly is a one-line
error naming it and the module.
"""
from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nnlo.errors import ModelError

#: the optional model-module functions placement reads (documented in docs/optimization.md)
HOOKS = ("trial_class", "trial_size", "trial_memory")


@dataclass(frozen=True)
class Traits:
    """A trial as placement sees it before it runs (``point``: its parameters' :func:`point_key`, so that an
    out-of-memory fact without a size rules out exactly the trial it is about)."""

    cls: str = ""
    size: float = 1.0
    memory_gb: float | None = None
    point: str | None = field(default=None, compare=False)


def point_key(params: Mapping[str, Any]) -> str:
    """A trial's parameters as one comparable string (the same point gives the same key)."""
    return json.dumps(dict(params), sort_keys=True, default=str)


def top_level_choice(space: Any) -> Callable[[Mapping[str, Any]], str]:
    """The class a tree space gives a point: the values of its root choices (categorical parameters with
    ``branches``), e.g. ``model=cnn``; one class (``""``) for a flat space."""
    nested: set[str] = set()

    def walk(dim: Any) -> None:
        for _, dims in getattr(dim, "branches", None) or ():
            for d in dims:
                nested.add(d.name)
                walk(d)

    for dim in space:
        walk(dim)
    roots = [d.name for d in space if getattr(d, "branches", None) and d.name not in nested]
    if not roots:
        return lambda p: ""
    return lambda p: ",".join(f"{n}={p.get(n)}" for n in roots)


class TraitsOf:
    """``params -> Traits`` from the model module's hooks (``module`` may be None) and the space."""

    def __init__(self, space: Any, module: Any = None, where: str = "the model module") -> None:
        self.where = where
        self._space_class = top_level_choice(space)
        self._hooks = {name: getattr(module, name) for name in HOOKS if callable(getattr(module, name, None))}

    @property
    def declared(self) -> tuple[str, ...]:
        """The hooks the module defines."""
        return tuple(self._hooks)

    def __call__(self, params: Mapping[str, Any]) -> Traits:
        cls = self._call("trial_class", params, _as_class) if "trial_class" in self._hooks else None
        size = self._call("trial_size", params, _as_positive) if "trial_size" in self._hooks else 1.0
        memory = self._call("trial_memory", params, _as_positive) if "trial_memory" in self._hooks else None
        return Traits(self._space_class(params) if cls is None else cls, 1.0 if size is None else size, memory,
                      point_key(params))

    def _call(self, name: str, params: Mapping[str, Any], check: Callable[[Any], Any]) -> Any:
        try:
            value = self._hooks[name](dict(params))
        except Exception as e:  # noqa: BLE001 - the user's hook: one line naming it, never a traceback
            raise ModelError(f"{name}({dict(params)}) in {self.where} raised {type(e).__name__}: {e}; "
                              f"fix {name}() or remove it") from None
        try:
            return check(value)
        except ValueError as e:
            raise ModelError(f"{name}({dict(params)}) in {self.where} returned {value!r}: {e}") from None


def _as_class(value: Any) -> str:
    if isinstance(value, bool | numbers.Integral | str) and len(str(value)) <= 100:
        return str(value)
    raise ValueError("return a short string naming the trial's class, e.g. 'cnn'")


def _as_positive(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        v = float(value)
        if v > 0 and math.isfinite(v):
            return v
    raise ValueError("return a positive finite number (or None: not known)")
