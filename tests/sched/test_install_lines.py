"""Every install line the project shows (README, docs, scripts, the plugin, error hints in the code) installs
this project: PyPI's ``nnlo`` is another project (a 2020 fork of NNLO whose wheel also installs top-level
``models/`` and ``examples/``), so nothing may say ``pip install nnlo`` or ``nnlo[extra]``. Process-free."""
from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

import nnlo
from tests.helpers.env import REPO

#: what users read or are told: the docs, the scripts, the plugin's set-up, and the messages in the code
SOURCES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "scripts").glob("*.sh")),
           *sorted((REPO / "plugins").rglob("setup.cfg")), *sorted((REPO / "nnlo").rglob("*.py")),
           *sorted((REPO / "nnlo_sched").rglob("*.py")), *sorted((REPO / "tests").rglob("*.py")),
           *sorted((REPO / "examples").rglob("*.py")), *sorted((REPO / "bench").rglob("*.py"))]

#: `pip install ARGS`, up to the end of its code span, quote or line
PIP_INSTALL = re.compile(r"pip3? install((?:\s+(?:'[^']*'|\"[^\"]*\"|[^\s`'\")]+))+)")
#: an extra of a distribution named nnlo, as prose names it: nnlo[tf] (not nnlo-hpc[tf], not nnlo['key'])
NNLO_EXTRA = re.compile(r"(?<![\w.\-/])nnlo\[[a-z_,]+\]")


def _metadata_name(setup_cfg: Path) -> str:
    cfg = configparser.ConfigParser()
    cfg.read(setup_cfg)
    return cfg["metadata"]["name"]


def _requirement_name(arg: str) -> str | None:
    """The distribution an argument of ``pip install`` names (None: an option, a path, a URL, a placeholder)."""
    arg = arg.strip("'\"")
    if not arg or arg.startswith(("-", ".", "/", "~", "$", "{", "git+", "http")) or "/" in arg:
        return None
    m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", arg)
    return re.sub(r"[-_.]+", "-", m.group(0)).lower() if m else None


def test_the_distribution_is_named_as_the_code_says_and_the_plugin_requires_it() -> None:
    assert _metadata_name(REPO / "setup.cfg") == nnlo.DISTRIBUTION != "nnlo"
    plugin = configparser.ConfigParser()
    plugin.read(REPO / "plugins" / "submitit-pbs" / "setup.cfg")
    requires = [ln.strip() for ln in plugin["options"]["install_requires"].splitlines() if ln.strip()]
    assert nnlo.DISTRIBUTION in requires and "nnlo" not in requires


def test_every_install_line_installs_this_project_never_pypis_nnlo() -> None:
    ours = {nnlo.DISTRIBUTION, _metadata_name(REPO / "plugins" / "submitit-pbs" / "setup.cfg")}
    wrong: list[str] = []
    seen = 0
    for path in SOURCES:
        if path == Path(__file__):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{path.relative_to(REPO)}:{n}"
            wrong += [f"{where}: {m.group(0)}" for m in NNLO_EXTRA.finditer(line)]
            for m in PIP_INSTALL.finditer(line):
                seen += 1
                try:
                    args = shlex.split(m.group(1))
                except ValueError:
                    args = m.group(1).split()
                names = [_requirement_name(a) for a in args]
                wrong += [f"{where}: pip install {a}" for a, name in zip(args, names, strict=True)
                          if name is not None and name.startswith("nnlo") and name not in ours]
    assert seen > 5  # the scan finds the install lines (README, docs, setup.sh, hints)
    assert not wrong, "install lines naming PyPI's nnlo (another project): " + "; ".join(wrong)


def test_the_readme_installs_from_a_clone_and_names_the_distribution() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "pip install '.[torch]'" in readme and f"`{nnlo.DISTRIBUTION}`" in readme
