"""Where packaged data files live, in a source checkout and in an installed package alike.

An installed wheel carries the templates as ``nnlo_sched/templates/`` (setup.py maps the top-level
``templates/`` folder there); a source checkout or an editable install keeps them at ``<repo>/templates``.
The templates folder has no ``__init__.py``, so ``importlib.resources`` would see a namespace package and
hand back a multiplexed path; looking beside this file is simpler and right in both layouts.
"""
from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent


def templates_dir() -> Path:
    """The Jinja2 batch-script templates."""
    installed = _HERE / "templates"
    if installed.is_dir() and any(installed.glob("*.sh")):
        return installed
    return _REPO / "templates"


def profiles_dir() -> Path:
    """The built-in cluster profiles (TOML)."""
    return _HERE / "profiles"
