"""Fixtures of the fault-injection suite (its tools: tests/helpers/faults.py): a tiny HDF5 data set, a fake Slurm
site, a local chain of the stand-in payload."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.helpers.faults import BIN, REPO, write_standin
from tests.helpers.runtime import write_blobs


@pytest.fixture(scope="session")
def blobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_blobs(tmp_path_factory.mktemp("reliability-blobs"), n_train=240, files=1)


PROFILE = 'scheduler = "slurm"\nlauncher = "srun"\ncores_per_node = 8\nnodes = 1\n'


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake Slurm site: a profile, a runs home, a bin folder of stand-ins first on PATH, a model file."""
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / "fakeslurm.toml").write_text(PROFILE)
    monkeypatch.setenv("NNLO_CLUSTERS", str(clusters))
    monkeypatch.setenv("NNLO_HOME", str(tmp_path / "runs"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text("def get_model():\n    return None\n")
    for name in ("sacct", "scancel"):
        write_standin(tmp_path / "bin", name, "exit 0")
    return tmp_path


@pytest.fixture
def local_chain(tmp_path: Path) -> dict[str, str]:
    """Environment for real local chains whose payload is tests/chain/payload.py (epochs are sleeps, checkpoints
    real): profile ``chainlocal`` extends ``local`` with the chain tests' fake python; runs home in tmp_path."""
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    fake_python = REPO / "tests" / "chain" / "fake_python.sh"
    (clusters / "chainlocal.toml").write_text(f'extends = "local"\npython = "{fake_python}"\n')
    (tmp_path / "model.py").write_text("def get_model():\n    return None\n")
    return dict(os.environ, NNLO_CLUSTERS=str(clusters), NNLO_HOME=str(tmp_path / "home"),
                NNLO_TEST_REAL_PYTHON=sys.executable, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1",
                NNLO_LOCAL_KILL_WAIT="3", PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
