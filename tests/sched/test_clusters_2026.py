"""The 2026 machines (issue 41), checked against the facts of ``shared/reference/clusters-2026.md``: each new
profile's dry-run script of a two-node training and of a search, parsed directive by directive and launch word by
launch word (not a golden file); the per-rank device each launch line gives, evaluated with the sites' own
affinity formulas; ``nnlo layout`` on Frontier; the PBS Pro and Flux dialects (job ids, submit/query/cancel/signal
command lines, their output formats) and the refusals before queueing. Process-free: ``bash -n`` of the same
scripts is ``test_every_new_script_passes_bash_n`` (slow)."""
from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from nnlo.allreduce.torchdist import backend_for, leader_address
from nnlo.device import VISIBLE_VARIABLES, device_variable, visible_view
from nnlo.errors import ConfigError
from nnlo_sched.profiles import load_profile
from nnlo_sched.render import render_script
from nnlo_sched.schedulers import get_scheduler
from nnlo_sched.schedulers.base import COMPLETED, ENDED, FAILED, PENDING, RUNNING, TIMEOUT, UNKNOWN, SchedulerError
from nnlo_sched.schedulers.flux import parse_jobs
from nnlo_sched.schedulers.pbspro import parse_qstat_json
from nnlo_sched.spec import RunSpec
from tests.sched.cli_runner import run

PY = "/sw/nnlo/bin/python"
NEW = ("frontier", "perlmutter", "aurora", "polaris", "daint", "clariden", "lumi", "elcapitan", "tuolumne")
#: a queue that takes two nodes where the default one does not (ALCF's prod routes jobs of 256+ / 10+ nodes)
TWO_NODE_QUEUE = {"aurora": "debug-scaling", "polaris": "debug"}


def script(name: str, kind: str = "train") -> str:
    """The batch script of a two-node run on ``name``: an all-reduce training, or a search of 3-rank blocks."""
    args = ["--model", "m.py", *(("--mode", "allreduce") if kind == "train" else ("--block-size", "3"))]
    profile = replace(load_profile(name, quiet=True), python=PY)
    spec = RunSpec.from_argv(kind, args, name, name="r", walltime_s=3600, workdir="/w", account="ABC123", nodes=2,
                             queue=TWO_NODE_QUEUE.get(name))
    return render_script(spec, profile, "/scratch/r")


def directives(text: str, prefix: str) -> list[str]:
    return [line[len(prefix):].strip() for line in text.splitlines() if line.startswith(prefix + " ")]


def launch(text: str) -> list[str]:
    """The launch line's words up to the interpreter."""
    line = next(ln for ln in text.splitlines() if f"{PY} -m nnlo_sched run" in ln)
    words = shlex.split(line.rstrip(" &"))
    return words[:words.index(PY)]


def option(words: list[str], name: str) -> str | None:
    for i, w in enumerate(words):
        if w == name:
            return words[i + 1]
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
    return None


def wrapper_devices(words: list[str], local_ranks: int) -> tuple[str, list[str], str]:
    """(variable, the value each node-local rank gets, the local-rank expression) of a device wrapper."""
    body = words[words.index("bash") + 2]
    m = re.search(r'd=\(([^)]*)\); export (\w+)="\$\{d\[(.*)\]\}"; exec "\$@"$', body)
    assert m is not None, body
    values = m.group(1).split()
    return m.group(2), [values[r] for r in range(local_ranks)], m.group(3)


def setup_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith(("module ", "export ", "conda "))]


# -- the profiles' facts -----------------------------------------------------------------------------------------
def test_frontier_two_nodes_one_gcd_per_rank_beside_its_cores() -> None:
    s = script("frontier")
    d = directives(s, "#SBATCH")
    for fact in ("--account=ABC123", "--nodes=2", "--partition=batch", "--time=01:00:00", "--signal=B:USR2@300",
                 "--network=disable_rdzv_get", "--ntasks-per-node=8", "--cpus-per-task=7"):
        assert fact in d, (fact, d)
    assert not [x for x in d if x.startswith(("--gres", "--gpus"))]  # whole nodes; GPUs per step (OLCF)
    w = launch(s)
    assert w[0] == "srun" and option(w, "-n") == "16" and option(w, "--cpus-per-task") == "7"
    assert option(w, "--gpus-per-task") == "1"
    # slot i runs on cores 7i+1..7i+7 (-S 8); OLCF's NUMA note: GPU4 is beside cores 0-7, GPU5 8-15, ...
    assert option(w, "--gpu-bind") == "map_gpu:4,5,2,3,6,7,0,1"
    env = setup_lines(s)
    assert "module load rccl-net-plugin" in env and "export MASTER_PORT=3442" in env
    assert "export MASTER_ADDR=$(hostname -i)" in env
    assert load_profile("frontier").cores_per_node == 56 and load_profile("frontier").gpu_vendor == "amd"


def test_perlmutter_qos_constraint_and_four_gpus() -> None:
    s = script("perlmutter")
    d = directives(s, "#SBATCH")
    for fact in ("--constraint=gpu", "--qos=regular", "--gpus-per-node=4", "--ntasks-per-node=4", "--account=ABC123"):
        assert fact in d, (fact, d)
    assert not [x for x in d if x.startswith("--partition")]  # NERSC's queues are QOS
    w = launch(s)
    assert option(w, "-n") == "8" and option(w, "--gpu-bind") == "map_gpu:0,1,2,3"
    assert "export MASTER_PORT=29500" in setup_lines(s)


def test_aurora_pbs_pro_directives_and_one_tile_per_rank() -> None:
    s = script("aurora")
    assert s.startswith("#!/bin/bash -l\n")
    d = directives(s, "#PBS")
    for fact in ("-A ABC123", "-q debug-scaling", "-l select=2", "-l place=scatter", "-l walltime=01:00:00",
                 "-l filesystems=home:flare", "-k doe"):
        assert fact in d, (fact, d)
    assert not [x for x in d if "signal" in x or x.startswith("-W")]  # ALCF documents no warning signal
    w = launch(s)
    assert w[:5] == ["mpiexec", "-n", "24", "--ppn", "12"]
    # ALCF's 12-rank list: cores 0 and 52 stay free
    assert option(w, "--cpu-bind") == ("list:1-8:9-16:17-24:25-32:33-40:41-48:53-60:61-68:69-76:77-84:85-92:"
                                       "93-100")
    variable, masks, local = wrapper_devices(w, 12)
    assert variable == "ZE_AFFINITY_MASK" and "PALS_LOCAL_RANKID" in local
    # gpu_tile_compact.sh: gpu = (PALS_LOCAL_RANKID / 2) % 6, tile = PALS_LOCAL_RANKID % 2
    assert masks == [f"{(r // 2) % 6}.{r % 2}" for r in range(12)]
    assert "ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE" in w[w.index("bash") + 2]
    assert "module load frameworks" in setup_lines(s)


def test_polaris_reverse_gpu_order_and_depth_binding() -> None:
    s = script("polaris")
    d = directives(s, "#PBS")
    for fact in ("-l select=2:system=polaris", "-l place=scatter", "-l filesystems=home:eagle", "-k doe", "-q debug"):
        assert fact in d, (fact, d)
    w = launch(s)
    assert w[:9] == ["mpiexec", "-n", "8", "--ppn", "4", "--depth", "8", "--cpu-bind", "depth"]
    variable, gpus, local = wrapper_devices(w, 4)
    # set_affinity_gpu_polaris.sh: gpu = num_gpus - 1 - PMI_LOCAL_RANK % num_gpus
    assert variable == "CUDA_VISIBLE_DEVICES" and gpus == [str(3 - r % 4) for r in range(4)]
    assert "PMI_LOCAL_RANK" in local


@pytest.mark.parametrize("name, normal_h, debug", [("daint", 24, (2, "30m")), ("clariden", 12, (4, "90m"))])
def test_alps_one_rank_per_gpu_and_the_clusters_own_limits(name: str, normal_h: int, debug: tuple[int, str]) -> None:
    s = script(name)
    d = directives(s, "#SBATCH")
    for fact in ("--account=ABC123", "--ntasks-per-node=4", "--gpus-per-node=4", "--partition=normal"):
        assert fact in d, (fact, d)
    w = launch(s)
    assert option(w, "--gpus-per-task") == "1" and option(w, "--gpu-bind") == "map_gpu:0,1,2,3"
    p = load_profile(name)
    assert (p.cores_per_node, p.gpus_per_node) == (288, 4)
    assert p.queue("normal").walltime_limit(100) == normal_h * 3600
    nodes, wall = debug
    assert p.queue("debug").max_nodes == nodes and p.queue("debug").walltime_limit(1) == {"30m": 1800, "90m": 5400}[wall]
    assert "export MPICH_GPU_SUPPORT_ENABLED=0" in setup_lines(s)  # CSCS: MPICH GPU support deadlocks with NCCL


def test_lumi_selects_the_gcd_from_slurm_localid_like_select_gpu() -> None:
    s = script("lumi")
    d = directives(s, "#SBATCH")
    for fact in ("--account=ABC123", "--partition=standard-g", "--gpus-per-node=8", "--ntasks-per-node=8"):
        assert fact in d, (fact, d)
    w = launch(s)
    assert option(w, "--gpus-per-task") is None and option(w, "--gpu-bind") is None  # no per-task GPU cgroups
    variable, gcds, local = wrapper_devices(w, 8)
    assert (variable, local) == ("ROCR_VISIBLE_DEVICES", "SLURM_LOCALID") and gcds == [str(r) for r in range(8)]
    masks = option(w, "--cpu-bind")
    assert masks is not None and masks.startswith("mask_cpu:0x00fe000000000000,")  # LUMI AI guide's masks
    assert "export MASTER_PORT=1${SLURM_JOB_ID:0-4}" in setup_lines(s)


@pytest.mark.parametrize("name", ["elcapitan", "tuolumne"])
def test_el_capitan_flux_directives_and_flux_run(name: str) -> None:
    s = script(name)
    d = directives(s, "#flux:")
    for fact in ("-N 2", "--exclusive", "-t 60m", "-q pbatch", "--bank=ABC123", "--signal=USR2@300s"):
        assert fact in d, (fact, d)
    assert "--output=/scratch/r/logs/job-{{id}}.out" in d
    w = launch(s)
    assert w[:2] == ["flux", "run"]
    for flag, value in (("-N", "2"), ("-n", "8"), ("-c", "24"), ("-g", "1"), ("-o", "fastload=on")):
        assert option(w, flag) == value, (flag, w)
    assert "--exclusive" in w and "gpu-affinity=per-task" in w
    moved = w[w.index("bash") + 2]  # OLCF: Flux's CUDA_VISIBLE_DEVICES moved to ROCR_VISIBLE_DEVICES in each task
    assert 'export ROCR_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES"; unset CUDA_VISIBLE_DEVICES' in moved
    assert load_profile(name).cores_per_node == 96


@pytest.mark.parametrize("name", NEW)
def test_a_search_renders_with_the_same_directives(name: str) -> None:
    s = script(name, "optimize")
    assert "-m nnlo_sched run" in s and launch(s)
    prefix = {"slurm": "#SBATCH", "pbspro": "#PBS", "flux": "#flux:"}[load_profile(name).scheduler]
    assert directives(s, prefix) and "ranks (1 coordinator" in s


@pytest.mark.slow
def test_every_new_script_passes_bash_n(tmp_path: Path) -> None:
    for name in NEW:
        for kind in ("train", "optimize"):
            path = tmp_path / f"{name}-{kind}.sh"
            path.write_text(script(name, kind))
            proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
            assert proc.returncode == 0, (name, kind, proc.stderr)


# -- layout -------------------------------------------------------------------------------------------------------
def test_nnlo_layout_frontier_two_nodes_shows_16_ranks_one_gcd_each(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "layout", "--cluster", "frontier", "--nodes", "2", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["world_size"] == 16 and len(d["ranks"]) == 16
    workers = [r for r in d["ranks"] if r["gpus"]]
    assert all(len(r["gpus"]) == 1 for r in workers)
    assert len({(r["node"], r["device"]) for r in workers}) == len(workers)  # no GCD shared
    code, out, err = run(capsys, "layout", "--cluster", "frontier", "--nodes", "2", "--mode", "allreduce")
    assert code == 0, err
    assert "16 ranks: 16 worker" in out and "(ROCR_VISIBLE_DEVICES)" in out
    assert "nodes 0-1        8 ranks each, in rank order: GPUs 4 5 2 3 6 7 0 1" in out


# -- the device rule and the torch engine's choices ---------------------------------------------------------------
def test_the_device_variable_per_vendor() -> None:
    assert [device_variable(v) for v in ("nvidia", "amd", "intel")] == [
        "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"]
    assert {load_profile(n, quiet=True).gpu_vendor for n in NEW} == {"nvidia", "amd", "intel"}
    assert visible_view({"ZE_AFFINITY_MASK": "0.1"}) == (None, None, "0.1")
    assert visible_view({"ROCR_VISIBLE_DEVICES": "3"}) != visible_view({"ROCR_VISIBLE_DEVICES": "4"})
    assert set(VISIBLE_VARIABLES) == {"nvidia", "amd", "intel"}
    with pytest.raises(ValueError, match="unknown GPU vendor"):
        device_variable("matrox")


def test_intel_gpus_are_xpu_devices_named_by_their_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from nnlo.device import gpu_kind, physical_gpu

    no = SimpleNamespace(is_available=lambda: False, device_count=lambda: 0)
    yes = SimpleNamespace(is_available=lambda: True, device_count=lambda: 12)
    assert gpu_kind(SimpleNamespace(cuda=no, xpu=yes)) == ("xpu", 12)
    assert gpu_kind(SimpleNamespace(cuda=yes, xpu=no)) == ("cuda", 12)  # NVIDIA, or ROCm's torch
    assert gpu_kind(SimpleNamespace(cuda=no)) == (None, 0)  # a torch without xpu
    monkeypatch.setenv("ZE_AFFINITY_MASK", "3.1")
    assert physical_gpu("xpu:0").endswith(":3.1")  # two ranks on one tile would say the same
    assert physical_gpu("cpu") is None


def test_the_torch_backend_and_the_rendezvous_from_the_job() -> None:
    assert (backend_for("cuda:0"), backend_for("xpu:3"), backend_for("cpu")) == ("nccl", "xccl", "gloo")
    env = {"MASTER_ADDR": "x1000c0s0b0n0.hsn.cm.aurora.alcf.anl.gov", "MASTER_PORT": "2345"}
    assert leader_address(False, True, "host", env) == ("x1000c0s0b0n0.hsn.cm.aurora.alcf.anl.gov", 2345)
    assert leader_address(False, False, "host", env) == ("host", 0)  # another group: its own leader, a free port
    assert leader_address(True, True, "host", env) == ("127.0.0.1", 0)  # one node: loopback
    assert leader_address(False, True, "host", {"MASTER_ADDR": "a"}) == ("a", 0)
    assert leader_address(False, True, "host", {}) == ("host", 0)
    with pytest.raises(ConfigError, match="MASTER_PORT='http' is not a port number"):
        leader_address(False, True, "host", {"MASTER_ADDR": "a", "MASTER_PORT": "http"})


# -- PBS Pro ------------------------------------------------------------------------------------------------------
def test_pbspro_command_lines_and_job_ids() -> None:
    s = get_scheduler("pbspro")
    job = "1991684.aurora-pbs-0001.hostmgmt.cm.aurora.alcf.anl.gov"
    assert s.submit_argv(Path("/r/job.sh"), job) == ["qsub", "-W", f"depend=afterany:{job}", "/r/job.sh"]
    assert s.signal_argv([job], signal.SIGUSR1) == ["qsig", "-s", "USR1", job]
    assert s.parse_submit_output(f"{job}\n") == job
    assert s.is_job_id("123[].polaris-pbs-01") and s.is_job_id("123[4].polaris-pbs-01")
    for bad in ("123", "all", "-u", "123.srv x", "", "0 1"):
        assert not s.is_job_id(bad), bad
    assert s.walltime_directive(5400) == "01:30:00"
    assert not s.warns_before_walltime


@pytest.mark.parametrize("sched, bad", [("pbspro", "1234"), ("pbspro", "all"), ("flux", "all"), ("flux", "0"),
                                        ("flux", "fO0Il"), ("flux", "--all"), ("flux", "ƒ12 34")])
def test_a_job_id_in_the_wrong_syntax_is_refused_before_any_command_runs(sched: str, bad: str) -> None:
    s = get_scheduler(sched)
    for act in (lambda: s.cancel([bad]), lambda: s.signal([bad], signal.SIGUSR2),
                lambda: s.submit_argv(Path("/r/job.sh"), bad)):
        with pytest.raises(SchedulerError, match=f"is not a {sched} job id; no {sched} command was run"):
            act()  # a process started here would fail the test (the fast tier's audit hook)
    assert s.query([bad])[bad].state == UNKNOWN


def test_pbspro_reads_qstat_json_for_many_jobs() -> None:
    ids = ["1.s", "2.s", "3.s", "4.s", "5.s", "6.s"]
    out = json.dumps({"timestamp": 1, "pbs_version": "2022.1", "pbs_server": "s", "Jobs": {
        "1.s": {"job_state": "Q"}, "2.s": {"job_state": "R"}, "3.s": {"job_state": "F", "Exit_status": 0},
        "4.s": {"job_state": "F", "Exit_status": -29}, "5.s": {"job_state": "F", "Exit_status": 271}}})
    got = {j: i.state for j, i in parse_qstat_json(out, ids).items()}
    assert got == {"1.s": PENDING, "2.s": RUNNING, "3.s": COMPLETED, "4.s": TIMEOUT, "5.s": FAILED, "6.s": ENDED}
    assert {i.state for i in parse_qstat_json("<html>maintenance</html>", ids).values()} == {UNKNOWN}
    assert {i.state for i in parse_qstat_json("", ids).values()} == {ENDED}  # all unknown to qstat


# -- Flux ---------------------------------------------------------------------------------------------------------
def test_flux_command_lines_inside_and_outside_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    s = get_scheduler("flux")
    monkeypatch.delenv("FLUX_JOB_ID", raising=False)
    assert s.submit_argv(Path("/r/job.sh")) == ["flux", "batch", "/r/job.sh"]
    monkeypatch.setenv("FLUX_JOB_ID", "ƒ2Ykd4k8Xm")  # inside a batch job: its own instance; chain to the system's
    assert s.submit_argv(Path("/r/job.sh"), "ƒ2Ykd4k8Xm") == [
        "flux", "--parent", "batch", "--dependency=afterany:ƒ2Ykd4k8Xm", "/r/job.sh"]
    assert s.signal_argv(["123"], signal.SIGUSR2) == ["flux", "--parent", "job", "kill", "-s", "USR2", "123"]
    assert s.current_job_id() == "ƒ2Ykd4k8Xm"
    for good in ("ƒ2Ykd4k8Xm", "f2Ykd4k8Xm", "1234567890"):
        assert s.is_job_id(good) and s.parse_submit_output(good + "\n") == good
    assert (s.walltime_directive(3600), s.walltime_directive(3601), s.lead_directive(300)) == ("60m", "61m", "300s")
    assert not s.has_arrays


def test_flux_jobs_rows_answer_for_either_id_form() -> None:
    out = "1234|ƒAbc|RUN\n1235|ƒAbd|SCHED\n1236|ƒAbe|TIMEOUT\n1237|ƒAbf|CANCELED\n"
    got = parse_jobs(out, ["1234", "ƒAbd", "fAbe", "1237", "ƒZZZ"])
    assert {j: i.state for j, i in got.items()} == {"1234": RUNNING, "ƒAbd": PENDING, "fAbe": TIMEOUT,
                                                   "1237": "CANCELLED", "ƒZZZ": ENDED}
    assert parse_jobs("flux-jobs: ERROR: broker down\n", ["1234"])["1234"].state == UNKNOWN


# -- bad input: one line each, before queueing --------------------------------------------------------------------
@pytest.mark.parametrize("argv, needle", [
    (("-c", "frontier", "--gpus-per-worker", "16"), "more than a frontier node has (8)"),
    (("-c", "aurora", "-q", "nosuch"), "cluster 'aurora' has no queue 'nosuch'; use one of capacity, debug,"),
    (("-c", "polaris", "-q", "debug", "-t", "2h"), "exceeds the 1h limit of queue 'debug'"),
    (("-c", "clariden", "-t", "13h"), "exceeds the 12h limit of queue 'normal'"),
    (("-c", "elcapitan", "-q", "pdebug", "-t", "90m"), "exceeds the 1h limit of queue 'pdebug'"),
    (("-c", "aurora", "--nodes", "2"), "queue 'prod' needs at least 256 nodes; use --nodes 256, or --queue"),
    (("-c", "lumi", "-q", "small-g", "--nodes", "5"), "queue 'small-g' takes at most 4 nodes"),
])
def test_bad_input_is_one_line_before_queueing(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...],
                                               needle: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NNLO_HOME", str(tmp_path / "home"))
    code, out, err = run(capsys, "submit", *argv, "-A", "ABC123", "--no-check", "train", "--model", "m.py")
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("nnlo: note:")]
    assert code == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in err, err
    assert not (tmp_path / "home").exists()  # nothing written, nothing queued


def test_a_profile_whose_order_or_tiles_do_not_fit_its_gpus_is_one_line(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from nnlo_sched.profiles import ProfileError

    monkeypatch.setenv("NNLO_CLUSTERS", str(tmp_path))
    (tmp_path / "odd.toml").write_text('extends = "polaris"\ngpu_order = [0, 1, 2]\n')
    (tmp_path / "tiles.toml").write_text('extends = "aurora"\ngpus_per_node = 7\n')
    with pytest.raises(ProfileError, match=r"gpu_order \[0, 1, 2\] must list each of the node's 4 GPUs"):
        load_profile("odd")
    with pytest.raises(ProfileError, match="gpus_per_node 7 is not a multiple of gpu_tiles 2"):
        load_profile("tiles")


# -- retired machines ---------------------------------------------------------------------------------------------
def test_retired_machines_say_so_once_and_in_the_list(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nnlo_sched.profiles.loader._told_retired", set())
    load_profile("summit")
    load_profile("summit")
    err = capsys.readouterr().err
    assert err.count("cluster 'summit' was retired on 2024-11-15") == 1
    assert load_profile("titan", quiet=True).retired == "2019-08-01" and load_profile("cscs", quiet=True).retired
    assert not load_profile("frontier").retired and "retired" not in capsys.readouterr().err
    code, out, _ = run(capsys, "clusters")
    rows = {ln.split()[0]: ln for ln in out.splitlines() if ln and not ln.startswith("(")}
    assert code == 0 and rows["summit"].endswith("RETIRED 2024-11-15") and rows["titan"].endswith("RETIRED 2019-08-01")
    assert "RETIRED" in rows["cscs"] and "RETIRED" not in rows["daint"] and "RETIRED" not in rows["frontier"]
