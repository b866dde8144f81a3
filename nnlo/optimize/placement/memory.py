"""Which trials fit which block types' memory: :class:`MemoryModel`, and what counts as out of memory. Pure.

A trial that ran out of memory on a block type - a ``MemoryError``, a CUDA out-of-memory error (torch's
``OutOfMemoryError``, TensorFlow's ``ResourceExhaustedError``), ``ENOMEM``, or a rank of its block killed by
the OOM killer (``SIGKILL``, as the rank records and the launcher report it: :mod:`nnlo.rankfate`) - is
infeasible there: it is not sent again to a block of that type or of any type no larger
(:meth:`~.hardware.BlockType.no_larger_than`), and neither is any trial of its class at least as large - by its
declared memory, else by its size hint (``trial_size``). Without either nothing orders the class's trials, so one
trial's failure says nothing about another's: the ban is that trial's alone (its parameters), and the others of
its class are only *unproven* there (below), until :data:`CLASS_EVIDENCE` different trials of the class ran out
of memory on the type (or a larger one) and none of the class ever fitted on it (or a smaller one). So one
observation never rules out a class wholesale, and the search never records the rest of its budget as failed
unrun because of it. A model may also declare what a
trial needs up front (``trial_memory(params)``, GiB per worker rank): types whose known memory per rank is
smaller are skipped before anything is tried.

**Probing.** Once a class has run out of memory somewhere, it is *unproven* on every type where it has not
shown it fits - a job of it at least as large finished there or on a type no larger, or one has run there past
its first checkpoint, or it declares its memory and the type's is known - and placement runs at most one
unproven job of the class on such a type at a time (:mod:`.policy`): should that one run out of memory, no
second is already running out of memory beside it. Classes that never ran out of memory are not held back.
"""
from __future__ import annotations

import errno
import re
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nnlo.optimize.placement.costs import CostObservation
from nnlo.optimize.placement.hardware import BlockType
from nnlo.optimize.placement.traits import Traits, point_key

#: what an error message says when the trial ran out of memory (torch, TensorFlow, CUDA, Python, the OS)
_OOM_TEXT = re.compile(r"\bMemoryError\b|OutOfMemoryError|out of memory|ResourceExhaustedError|OOM when "
                       r"allocating|Cannot allocate memory|std::bad_alloc", re.IGNORECASE)
#: exception class names that mean out of memory wherever they come from
_OOM_TYPES = frozenset({"MemoryError", "OutOfMemoryError", "ResourceExhaustedError"})


def is_out_of_memory(error: BaseException | str | None) -> bool:
    """The exception (or a failed fold's one-line error) says the trial ran out of memory."""
    if error is None:
        return False
    if isinstance(error, BaseException):
        if any(k.__name__ in _OOM_TYPES for k in type(error).__mro__):
            return True
        if isinstance(error, OSError) and error.errno == errno.ENOMEM:
            return True
        error = f"{type(error).__name__}: {error}"
    return bool(_OOM_TEXT.search(error))


@dataclass(frozen=True)
class _Oom:
    cls: str
    size: float
    memory_gb: float | None
    block_type: BlockType
    point: str | None = None  # the trial's parameters (point_key), where known
    trial: int | None = None


#: without sizes, how many different trials of a class must have run out of memory on a type (or a larger one),
#: none of the class having fitted there, before the whole class is kept off it
CLASS_EVIDENCE = 2


class MemoryModel:
    """The out-of-memory facts so far, and what they rule out.

    ``sized``: the trials' sizes are declared (a ``trial_size`` hook), so they order a class's trials by memory;
    else every trial has the same size, and an out-of-memory rules out the trial itself only - the class only
    once :data:`CLASS_EVIDENCE` different trials of it ran out of memory there and none of it ever fitted.
    """

    def __init__(self, sized: bool = True) -> None:
        self.sized = sized
        self._ooms: list[_Oom] = []
        self._fitted: dict[tuple[str, BlockType], float] = {}  # (class, type) -> the largest size that ran

    def learn(self, observations: Iterable[CostObservation | tuple[CostObservation, Mapping[str, Any] | None]]
              ) -> MemoryModel:
        """Every observation so far (each alone, or with its trial's parameters where known)."""
        self._ooms, self._fitted = [], {}
        for item in observations:
            o, params = item if isinstance(item, tuple) else (item, None)
            if o.outcome == "oom":
                point = None if params is None else point_key(params)
                self._ooms.append(_Oom(o.cls, o.size, o.memory_gb, o.block_type, point, o.trial))
            elif o.outcome == "ok":
                key = (o.cls, o.block_type)
                self._fitted[key] = max(self._fitted.get(key, 0.0), o.size)
        return self

    def proven(self, traits: Traits, block_type: BlockType) -> bool:
        """The class never ran out of memory, or a job of it at least as large ran on this type or a smaller
        one, or the trial declares its memory and the type's is known (see *Probing*)."""
        if traits.memory_gb is not None and block_type.memory_gb is not None:
            return True
        if not any(oom.cls == traits.cls for oom in self._ooms):
            return True
        return any(cls == traits.cls and size >= traits.size and t.no_larger_than(block_type)
                   for (cls, t), size in self._fitted.items())

    def fits(self, traits: Traits, block_type: BlockType) -> bool:
        return self.why_not(traits, block_type) is None

    def why_not(self, traits: Traits, block_type: BlockType) -> str | None:
        """Why a trial with ``traits`` does not fit ``block_type`` (None: it may)."""
        need, have = traits.memory_gb, block_type.memory_gb
        if need is not None and have is not None and need > have:
            return f"it needs {need:g} GiB per rank (trial_memory), blocks of {block_type} have {have:g}"
        what = f"class {traits.cls!r}" if traits.cls else "a trial"
        unordered: set[int | str | None] = set()  # trials of the class out of memory here, no size to order them
        for oom in self._ooms:
            if oom.cls != traits.cls or not block_type.no_larger_than(oom.block_type):
                continue
            if oom.memory_gb is not None and need is not None:
                larger = need >= oom.memory_gb
            elif self.sized:
                larger = traits.size >= oom.size
            else:  # no size orders the class: the very trial that ran out of memory, else evidence from several
                if oom.point is not None and oom.point == traits.point:
                    return f"it ran out of memory on blocks of {oom.block_type}"
                unordered.add(oom.trial if oom.trial is not None else oom.point)
                continue
            if larger:
                return f"{what} at least as large ran out of memory on blocks of {oom.block_type}"
        if len(unordered) >= CLASS_EVIDENCE and not any(
                cls == traits.cls and t.no_larger_than(block_type) for cls, t in self._fitted):
            of = f" of class {traits.cls!r}" if traits.cls else ""
            return (f"{len(unordered)} trials{of} ran out of memory on blocks of {block_type} or larger and none of "
                    f"them fitted there")
        return None


def killed_out_of_memory(sig: int, block: int | None, rerun: Iterable[Mapping[str, Any]]) -> list[CostObservation]:
    """The out-of-memory observations a job's end teaches when block ``block``'s rank died by signal ``sig``:
    the OOM killer's ``SIGKILL`` marks the trial that block ran (a search state's ``rerun`` entry with its
    ``running_on``: block, type, class, size) as out of memory on that type; nothing for another signal, a rank
    of no block, or an entry written without its type (an earlier version)."""
    if sig != signal.SIGKILL or block is None:
        return []
    out = []
    for entry in rerun:
        on = entry.get("running_on") or {}
        if on.get("block") != block:
            continue
        try:
            out.append(CostObservation.from_record({**on, "id": entry["id"], "seconds": 0.0, "outcome": "oom"}))
        except (KeyError, TypeError, ValueError):
            continue
    return out
