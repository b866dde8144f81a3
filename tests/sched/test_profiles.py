"""Built-in and user cluster profiles: loading, aliases, ``extends``, and one-line errors for bad files."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from nnlo.errors import ConfigError
from nnlo_sched.profiles import ProfileError, list_profiles, load_profile


@pytest.fixture
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "clusters"
    d.mkdir()
    monkeypatch.setenv("NNLO_CLUSTERS", str(d))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return d


def test_builtin_profiles_match_clusters_md() -> None:
    summit = load_profile("summit")
    assert (summit.scheduler, summit.launcher) == ("lsf", "jsrun")
    assert (summit.cores_per_node, summit.gpus_per_node, summit.nodes) == (42, 6, 4608)
    batch = summit.queue("batch")
    assert [batch.walltime_limit(n) for n in (1, 45, 46, 91, 92, 921, 922, 2764, 2765, 4608)] == [
        7200, 7200, 21600, 21600, 43200, 43200, 86400, 86400, 86400, 86400]
    assert batch.walltime_limit(4609) is None
    assert not summit.queue("debug").chaining
    titan = load_profile("titan")
    assert (titan.scheduler, titan.launcher, titan.cores_per_node, titan.gpus_per_node) == ("pbs", "aprun", 16, 1)
    assert titan.signal is None and not hasattr(titan, "max_processes")  # a service-node limit, not ranks
    tbatch = titan.queue("batch")
    assert [tbatch.walltime_limit(n) for n in (1, 125, 126, 312, 313, 3749, 3750, 18688)] == [
        7200, 7200, 21600, 21600, 43200, 43200, 86400, 86400]
    assert titan.queue("debug").walltime_limit(1) == 3600
    assert summit.runs_home.startswith("$MEMBERWORK/") and "/ccs/home" in summit.compute_read_only
    daint = load_profile("cscs")  # Piz Daint XC, retired; "daint" now names the Alps GH200 cluster
    assert daint.name == "cscs" and daint.constraint == "gpu" and daint.gpus_per_node == 1 and daint.retired
    assert daint.nodes is not None and "unverified" in Path(daint.source).read_text().split("nodes =")[1][:120]
    mc = daint.for_constraint("mc")
    assert (mc.cores_per_node, mc.gpus_per_node, mc.node_type) == (36, 0, "mc") and mc.nodes is not None
    assert daint.for_constraint("gpu") is daint and mc.for_constraint("mc") is mc
    flatiron = load_profile("flatiron")
    assert "unverified" in flatiron.notes and flatiron.gpus_per_node == 4 and flatiron.nodes is not None
    local = load_profile("local")
    assert local.cores_per_node == len(os.sched_getaffinity(0))
    assert local.scheduler == "local" and local.launcher == "mpirun"


def test_unknown_cluster() -> None:
    with pytest.raises(ConfigError, match="unknown cluster 'nope'.*summit"):
        load_profile("nope")


def test_unknown_queue_names_the_choices() -> None:
    with pytest.raises(ConfigError, match="no queue 'gpu'.*batch"):
        load_profile("summit").queue("gpu")


def test_user_profile_extends_builtin(user_dir: Path) -> None:
    (user_dir / "mysite.toml").write_text(
        'extends = "flatiron"\ngpus_per_node = 8\nconstraint = "a100"\n'
        '[queues.gpu]\nwalltime = "2-00:00:00"\n[queues.short]\nwalltime = "1h"\nmax_nodes = 2\n'
    )
    p = load_profile("mysite")
    assert p.name == "mysite" and p.gpus_per_node == 8 and p.cores_per_node == 36
    assert p.constraint == "a100" and p.scheduler == "slurm" and p.template_name == "flatiron.sh"
    assert p.queue("gpu").walltime_limit(1) == 2 * 86400 and p.queue("short").max_nodes == 2
    assert p.aliases == ()  # the parent's alias "rusty" stays the parent's
    assert load_profile("rusty").name == "flatiron"
    assert "mysite.toml" in p.source and "flatiron.toml" in p.source


def test_user_profile_overrides_builtin_of_same_name(user_dir: Path) -> None:
    (user_dir / "summit.toml").write_text('extends = "summit"\nsetup = ["module load open-ce"]\n')
    p = load_profile("summit")
    assert p.setup == ("module load open-ce",) and p.gpus_per_node == 6


def test_xdg_config_dir_is_searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "cfg" / "nnlo" / "clusters"
    d.mkdir(parents=True)
    (d / "box.toml").write_text('scheduler = "slurm"\nlauncher = "srun"\ncores_per_node = 8\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.delenv("NNLO_CLUSTERS", raising=False)
    assert load_profile("box").cores_per_node == 8


@pytest.mark.parametrize(
    "body, needle",
    [
        ('extends = "local"\ngpus_per_node = "four"\n', "key 'gpus_per_node' must be an integer, got str 'four'"),
        ('extends = "local"\ngpus_per_node = -1\n', "'gpus_per_node' must be at least 0"),
        ('extends = "local"\nsetup = "module load x"\n', "key 'setup' must be a list of strings"),
        ('extends = "local"\ncores_per_nod = 4\n', "unknown key 'cores_per_nod'"),
        ('extends = "local"\nscheduler = "sge"\n', "'scheduler' must be one of slurm, lsf, pbs, pbspro, flux, local"),
        ('extends = "nowhere"\n', "extends unknown profile 'nowhere'"),
        ('extends = 3\n', "'extends' must be a string"),
        ('scheduler = "slurm"\nlauncher = "srun"\n', "missing key(s) cores_per_node"),
        ('scheduler = "slurm"\nlauncher = "srun"\ncores_per_node = 4\n[queues.a]\nwalltime = "forever"\n',
         "queues.a.walltime"),
        ('scheduler = "slurm"\nlauncher = "srun"\ncores_per_node = 4\n[queues.a]\nbins = [{max_nodes = 2}]\n',
         "queues.a.bins[0]"),
        ('scheduler = "slurm"\nlauncher = "srun"\ncores_per_node = 4\ndefault_queue = "b"\n[queues.a]\n',
         "default_queue 'b' is not among"),
        ('scheduler = "slurm"\nlauncher = "srun"\ncores_per_node = 4\naccount_required = "yes"\n',
         "'account_required' must be true or false"),
        ("scheduler = [\n", "is not valid TOML"),
        # a misspelt key: the key meant, in one short line, never the whole list of keys (nnlo clusters shows
        # the message in a table row)
        ('extends = "local"\ngpu_per_node = 4\n', "unknown key 'gpu_per_node'; did you mean 'gpus_per_node'?"),
        ('extends = "local"\nsetpu = ["module load x"]\n', "unknown key 'setpu'; did you mean 'setup'?"),
        ('scheduler = "slurm"\nlauncher = "srun"\ncores_per_node = 4\n[queues.a]\nwaltime = "2h"\n',
         "unknown key 'queues.a.waltime'; did you mean 'walltime'?"),
        ('extends = "cscs"\n[node_types.mc]\ncore_per_node = 36\n',
         "unknown key 'node_types.mc.core_per_node'; did you mean 'cores_per_node'?"),
        ('extends = "local"\ncolour = "blue"\n',
         "unknown key 'colour' (the keys are listed in docs/clusters.md, Keys)"),
    ],
)
def test_malformed_user_profile(user_dir: Path, body: str, needle: str) -> None:
    (user_dir / "bad.toml").write_text(body)
    with pytest.raises(ProfileError) as e:
        load_profile("bad")
    msg = str(e.value)
    assert needle in msg and msg.startswith(f"profile {user_dir / 'bad.toml'}") and "\n" not in msg
    assert "oversubscribe" not in msg and "share_setup" not in msg  # no list of every key


def test_extends_cycle(user_dir: Path) -> None:
    (user_dir / "a.toml").write_text('extends = "b"\n')
    (user_dir / "b.toml").write_text('extends = "a"\n')
    with pytest.raises(ProfileError, match="cycle"):
        load_profile("a")


def test_list_profiles_reports_broken_files_without_failing(user_dir: Path) -> None:
    (user_dir / "broken.toml").write_text('extends = "local"\nnodes = "many"\n')
    (user_dir / "fine.toml").write_text('extends = "local"\n')
    got = {pf.name: p for pf, p in list_profiles()}
    assert isinstance(got["broken"], ProfileError)
    assert got["fine"].scheduler == "local"
    assert {"summit", "titan", "cscs", "flatiron", "local"} <= set(got)


def test_nnlo_clusters_keeps_the_row_of_a_misspelt_profile_short(user_dir: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from tests.sched.cli_runner import run

    (user_dir / "typo.toml").write_text('extends = "local"\ngpu_per_node = 4\n')
    code, out, _ = run(capsys, "clusters")
    row = next(line for line in out.splitlines() if line.startswith("typo "))
    assert code == 0 and "BROKEN" in row and "did you mean 'gpus_per_node'?" in row and "oversubscribe" not in row
