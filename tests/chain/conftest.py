"""Fixtures of the chain tests: a private runs home with the test cluster profiles (tests/helpers/chain.py), and
the session's private Slurm reachable from a test (tests/helpers/fixtures.py starts it once per session)."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers.chain import PROFILES
from tests.helpers.env import BIN, REPO


@pytest.fixture
def chain_env(monkeypatch: pytest.MonkeyPatch):
    """A fresh runs home and the test profiles, in this process's environment (jobs inherit it).

    Not under pytest's ``tmp_path``: pytest prunes old base folders of the same user at the start of every
    session, and on a shared machine another session could delete a folder that a background job of this
    test still writes to.
    """
    tmp_path = Path(tempfile.mkdtemp(prefix="nnlo-chain-"))
    try:
        clusters = tmp_path / "clusters"
        clusters.mkdir()
        for name, text in PROFILES.items():
            (clusters / f"{name}.toml").write_text(text)
        monkeypatch.setenv("NNLO_CLUSTERS", str(clusters))
        monkeypatch.setenv("NNLO_HOME", str(tmp_path / "runs"))
        monkeypatch.setenv("NNLO_TEST_REAL_PYTHON", sys.executable)
        monkeypatch.setenv("NNLO_LOCAL_KILL_WAIT", "3")
        monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
        monkeypatch.setenv("PYTHONPATH", str(REPO))
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        monkeypatch.chdir(tmp_path)
        yield tmp_path
    finally:
        if not os.environ.get("NNLO_KEEP_TEST_RUNS"):
            shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture
def slurm(slurm_cluster, chain_env, monkeypatch: pytest.MonkeyPatch):
    """The session's Slurm, reachable from this test's environment (sbatch, squeue, nnlo, the jobs)."""
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    return slurm_cluster
