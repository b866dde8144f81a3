"""What the submitit plugin tests share: nnlo's submitit entry points as an installed distribution declares them,
and submitit's plugin caches (cleared whenever a test changes which plugins are installed)."""
from __future__ import annotations

import configparser
from pathlib import Path

from tests.helpers.env import REPO


def clear_plugin_caches() -> None:
    from submitit.core import plugins

    plugins._get_plugins.cache_clear()
    plugins.get_executors.cache_clear()
    plugins.get_job_environments.cache_clear()


#: the distributions that declare nnlo's submitit entry points: nnlo itself (LSF) and the PBS one
DISTRIBUTIONS = {"nnlo-as-installed": REPO / "setup.cfg", "nnlo-submitit-pbs": REPO / "plugins" / "submitit-pbs" / "setup.cfg"}


def write_entry_points(target: Path, name: str, setup_cfg: Path) -> Path:
    """A dist-info folder declaring ``setup_cfg``'s ``submitit`` entry points (what pip writes at install)."""
    cfg = configparser.ConfigParser()
    cfg.read(setup_cfg)
    lines = [ln.strip() for ln in cfg["options.entry_points"]["submitit"].splitlines() if ln.strip()]
    dist = target / f"{name.replace('-', '_')}-0.0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.0\n")
    (dist / "entry_points.txt").write_text("[submitit]\n" + "\n".join(lines) + "\n")
    return dist
