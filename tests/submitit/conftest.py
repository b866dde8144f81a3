"""Fixtures of the submitit plugin tests: nnlo's entry points as the installed distributions (nnlo,
plugins/submitit-pbs) declare them, test cluster profiles, a folder, and recording stand-ins for bsub/bjobs/bkill and
qsub/qstat/qdel that run the jobs (submitit_standin.py)."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers.env import REPO
from tests.helpers.standins import install as install_standins
from tests.helpers.submitit import DISTRIBUTIONS, clear_plugin_caches, write_entry_points

HERE = Path(__file__).resolve().parent
STANDIN = HERE / "submitit_standin.py"
PROFILES = {
    "testlsf": 'scheduler = "lsf"\nlauncher = "mpirun"\ncores_per_node = 4\nnodes = 2\nsignal = "USR1"\n'
               'signal_lead_s = 60\naccount_required = true\nsetup = ["export FROM_PROFILE_SETUP=1"]\n'
               '[queues.debug]\nwalltime = "2h"\nmax_nodes = 2\nchaining = false\n',
    "testpbs": 'scheduler = "pbs"\nlauncher = "mpirun"\ncores_per_node = 4\nnodes = 2\n',
}


@pytest.fixture
def plugin_env(monkeypatch: pytest.MonkeyPatch):
    """A fresh folder (not under pytest's tmp_path: background jobs may outlive a pruned base folder), the
    test profiles, nnlo's entry points on the path of this process and of its jobs."""
    tmp = Path(tempfile.mkdtemp(prefix="nnlo-submitit-"))
    sites = []
    for name, cfg in DISTRIBUTIONS.items():
        sites.append(tmp / f"site-{name}")
        write_entry_points(sites[-1], name, cfg)
    clusters = tmp / "clusters"
    clusters.mkdir()
    for name, text in PROFILES.items():
        (clusters / f"{name}.toml").write_text(text)
    monkeypatch.setenv("NNLO_CLUSTERS", str(clusters))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), *map(str, sites)]))
    monkeypatch.setenv("NNLO_SCHED_RETRIES", "0")
    for site in sites:
        monkeypatch.syspath_prepend(str(site))
    monkeypatch.chdir(tmp)
    clear_plugin_caches()
    # the stand-ins count job ids from 1001 in every test: each test gets watchers that never saw them
    from nnlo_sched.submitit.lsf import LsfInfoWatcher, LsfJob
    from nnlo_sched.submitit.pbs import PbsInfoWatcher, PbsJob

    monkeypatch.setattr(LsfJob, "watcher", LsfInfoWatcher(delay_s=60))
    monkeypatch.setattr(PbsJob, "watcher", PbsInfoWatcher(delay_s=60))
    try:
        yield tmp
    finally:
        clear_plugin_caches()
        if not os.environ.get("NNLO_KEEP_TEST_RUNS"):
            shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def standins(plugin_env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return install_standins(plugin_env, STANDIN, monkeypatch, more_path=(str(Path(sys.executable).parent),))
