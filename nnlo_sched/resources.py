"""Where packaged data files live, in a source checkout and in an installed package alike."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent


def templates_dir() -> Path:
    """The Jinja2 batch-script templates (``templates/`` in the source tree)."""
    try:
        path = Path(str(resources.files("nnlo_sched.templates")))
        if path.is_dir() and any(path.glob("*.sh")):
            return path
    except (ModuleNotFoundError, TypeError):
        pass
    return _REPO / "templates"


def profiles_dir() -> Path:
    """The built-in cluster profiles (TOML)."""
    return Path(__file__).resolve().parent / "profiles"
