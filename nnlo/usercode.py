"""Where an error in the user's own code arose: their file and line, and their part of the traceback.

An exception raised while nnlo runs a user's code (``get_model()``, the forward pass and the loss of a training
step, the data functions of a model module, a callback, a data source, an objective hook) passes through frames
of three kinds: nnlo's own, those of libraries (the standard library and everything installed: torch,
TensorFlow, numpy...), and the user's: every other file, i.e. their model module and what it imports beside it.

:func:`locate` names the innermost of the user's frames (``model.py:12 in forward``) for the one-line error;
:func:`user_traceback` is the traceback from the outermost of them down to where it was raised, for the rank's
log. nnlo often re-raises a user's error as one of its own (``raise ModelError(...) from e``, or ``from None``):
both look through the exception's causes and contexts. Without a frame of the user's there is no location
and no user traceback: an error out of nnlo's own code is a defect, reported as before.

A model whose layers are all the framework's (``nn.Sequential(nn.Linear(63, 16), ...)``) fails inside the
framework with no frame of the user's; :func:`locate` then names the innermost torch module on the stack by its
place in the model (``layer '0': Linear(in_features=63, out_features=16, bias=True)``), found by duck typing
(``named_modules``): nothing here imports a framework.
"""
from __future__ import annotations

import contextlib
import os
import site
import sys
import sysconfig
import traceback
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any


@cache
def _library_roots() -> tuple[str, ...]:
    """Folders whose files are not the user's: nnlo (both halves) and every installed or standard module."""
    here = Path(__file__).resolve().parent
    roots = {str(here), str(here.parent / "nnlo_sched")}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        for base in (None, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
            try:
                path = sysconfig.get_path(key, vars=base) if base else sysconfig.get_path(key)
            except KeyError:  # pragma: no cover - a scheme without the key
                continue
            if path:
                roots.add(str(Path(path).resolve()))
    with contextlib.suppress(AttributeError):  # site without these (embedded interpreters)
        roots.update(str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()])
    return tuple(sorted(roots))


@cache
def is_user_file(filename: str) -> bool:
    """Whether ``filename`` (a frame's ``co_filename``) is the user's own code: not nnlo's, not a library's,
    not a synthetic one (``<frozen ...>``, ``<string>``)."""
    if not filename or filename.startswith("<"):
        return False
    path = str(Path(filename).resolve())
    return not any(path == root or path.startswith(root + os.sep) for root in _library_roots())


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling (``from e`` and ``from None`` alike)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _frames(tb: TracebackType | None) -> list[tuple[str, int, str, dict[str, Any]]]:
    out = []
    while tb is not None:
        code = tb.tb_frame.f_code
        out.append((code.co_filename, tb.tb_lineno, code.co_name, tb.tb_frame.f_locals))
        tb = tb.tb_next
    return out


def _users(exc: BaseException) -> BaseException | None:
    """The exception of the chain that passed through the user's code (the innermost such), if any."""
    found = None
    for e in _chain(exc):
        if any(is_user_file(f) for f, _, _, _ in _frames(e.__traceback__)) or _syntax_location(e):
            found = e
    return found


def _syntax_location(exc: BaseException) -> str | None:
    if isinstance(exc, SyntaxError) and exc.filename and is_user_file(exc.filename):
        return f"{shown(exc.filename)}:{exc.lineno}"
    return None


def shown(filename: str) -> str:
    """A file's name as the user knows it: relative to the working directory when inside it."""
    try:
        return os.path.relpath(filename) if not os.path.relpath(filename).startswith("..") else filename
    except ValueError:  # another drive (Windows)
        return filename


def locate(exc: BaseException) -> str | None:
    """Where the user's code raised ``exc``: ``at file:line in function`` of the innermost user frame; else, for
    a failure inside a torch model, ``in the model's layer 'name', repr``; None when the user's code is not
    involved."""
    for e in _chain(exc):
        syntax = _syntax_location(e)
        if syntax:
            return f"at {syntax}"
    user = _users(exc)
    if user is not None:
        frames = [f for f in _frames(user.__traceback__) if is_user_file(f[0])]
        filename, line, func, _ = frames[-1]
        return f"at {shown(filename)}:{line} in {func}"
    for e in _chain(exc):
        layer = _failing_layer(_frames(e.__traceback__))
        if layer:
            return layer
    return None


def _failing_layer(frames: list[tuple[str, int, str, dict[str, Any]]]) -> str | None:
    """``layer 'name': repr`` of the innermost module (an object with ``named_modules``) on the stack, named
    by its place in the outermost one (the model)."""
    modules: list[Any] = [f[3]["self"] for f in frames
                          if callable(getattr(f[3].get("self"), "named_modules", None))]
    if not modules:
        return None
    root, inner = modules[0], modules[-1]
    name = next((n for n, m in root.named_modules() if m is inner), None)
    text = " ".join(repr(inner).split())
    text = text if len(text) <= 120 else text[:117] + "..."
    return f"in the model's layer '{name}', {text}" if name else f"in the model, {text}"


def _in_model(exc: BaseException) -> BaseException | None:
    """The exception of the chain that failed inside a model's modules (no user frame on its way), if any."""
    return next((e for e in _chain(exc) if _failing_layer(_frames(e.__traceback__))), None)


def user_traceback(exc: BaseException) -> str | None:
    """The traceback of ``exc`` from the user's outermost frame down to the raise (a failure inside a model
    made of the framework's layers: from where nnlo called the model), what the rank's log shows of an error
    in the user's code; None when the user's code is not involved (an error of nnlo's own)."""
    user = _users(exc)
    inside = user is None and _in_model(exc)
    failed = user or inside
    if not failed:
        return None
    frames = traceback.extract_tb(failed.__traceback__)
    if user is not None:
        first = next((i for i, f in enumerate(frames) if is_user_file(f.filename)), 0)
    else:  # the first frame that is not nnlo's: the model's call
        first = next((i for i, f in enumerate(frames) if not _is_nnlo(f.filename)), 0)
    lines = ["Traceback (most recent call last, from your code on):\n",
             *traceback.StackSummary.from_list(frames[first:]).format(),
             *traceback.format_exception_only(type(failed), failed)]
    return "".join(lines).rstrip("\n")


def _is_nnlo(filename: str) -> bool:
    here = Path(__file__).resolve().parent
    path = Path(filename).resolve()
    return any(path.is_relative_to(root) for root in (here, here.parent / "nnlo_sched"))
