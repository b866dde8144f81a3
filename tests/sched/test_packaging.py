"""A non-editable install (a built wheel) carries the templates and profiles and finds them."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_contains_and_finds_templates_and_profiles(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "README.md"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("nnlo", "nnlo_sched", "templates"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "-w", str(tmp_path / "whl"), "--no-deps",
         "--no-build-isolation", "-q"],
        cwd=src, capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    wheel = next((tmp_path / "whl").glob("*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    # this project's name (PyPI's "nnlo" is another project), and no top-level package but nnlo's two
    assert wheel.name.startswith("nnlo_hpc-"), wheel.name
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"nnlo", "nnlo_sched"}
    for t in ("base", "slurm", "lsf", "pbs", "local", "summit", "titan", "cscs", "flatiron"):
        assert f"nnlo_sched/templates/{t}.sh" in names
    for p in ("summit", "titan", "cscs", "flatiron", "local"):
        assert f"nnlo_sched/profiles/{p}.toml" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import nnlo_sched.resources as r, nnlo_sched.render as R\n"
        "from nnlo_sched.profiles import load_profile\n"
        "from nnlo_sched.spec import RunSpec\n"
        "assert str(r.templates_dir()).startswith(%r), r.templates_dir()\n"
        "p = load_profile('summit'); s = RunSpec.from_argv('train', ['--model', 'm.py'], 'summit', account='A', workers=5)\n"
        "print(R.render_script(s, p, '/r'))\n" % str(site)
    )
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "#BSUB -nnodes 1" in out.stdout
