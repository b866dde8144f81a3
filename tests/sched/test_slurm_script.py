"""A rendered Slurm script, submitted with the Slurm scheduler's sbatch command to a real (private) Slurm.

Checks what only Slurm itself can: that sbatch accepts every directive, that the log lands where the
directives say, that srun starts the layout's tasks with the layout's cores, and that the pre-walltime
``--signal=B:USR2`` (sent here at once with ``scancel --batch --signal=USR2``) reaches the program
through the batch shell's trap and srun.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from nnlo_sched.profiles import load_profile
from nnlo_sched.render import render_script
from nnlo_sched.schedulers.slurm import SlurmScheduler
from nnlo_sched.spec import RunSpec

from bench.private_slurm import SlurmCluster

STANDIN = """#!/bin/bash
# stands in for python: records how it was called, and as the program ("-m nnlo_sched run") waits for USR2
echo "$* procid=${SLURM_PROCID:-} ntasks=${SLURM_NTASKS:-} cpus=${SLURM_CPUS_PER_TASK:-}" >> "$NNLO_RUN_DIR/calls.txt"
if [ "$3" = run ]; then
    trap 'echo "usr2 ${SLURM_PROCID}" >> "$NNLO_RUN_DIR/calls.txt"; exit 75' USR2
    for i in $(seq 900); do sleep 0.2; done
    exit 3
fi
exit 0
"""


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> SlurmCluster:
    """The session's private Slurm (tests/helpers/fixtures.py)."""
    return slurm_cluster


@pytest.fixture
def run_dir():
    """Not pytest's tmp_path: pytest may prune it while slurmd still writes the job's files."""
    d = Path(tempfile.mkdtemp(prefix="nnlo-sched-slurm-"))
    (d / "logs").mkdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slurm
def test_rendered_script_runs_and_gets_the_warning_signal(slurm: SlurmCluster, run_dir: Path) -> None:
    standin = run_dir / "python"
    standin.write_text(STANDIN)
    standin.chmod(0o755)
    profile = replace(
        load_profile("flatiron"), name="testslurm", cores_per_node=8, gpus_per_node=0, constraint=None,
        queues={}, default_queue=None, setup=(), launcher_flags=("--mpi=pmi2",), python=str(standin),
        signal="USR2", signal_lead_s=50,
    )
    spec = RunSpec.from_argv("train", ["--model", "m.py"], "testslurm", name="sched-test", walltime_s=300, workers=3,
                   workdir=str(run_dir))
    spec.layout = spec.layout_on(profile).record()
    assert (spec.layout.nodes, spec.layout.ranks_per_node, spec.layout.cores_per_rank) == (1, 4, 2)
    script = run_dir / "job.sh"
    script.write_text(render_script(spec, profile, run_dir))
    sbatch = SlurmScheduler()
    out = slurm.run(*sbatch.submit_argv(script))
    job = sbatch.parse_submit_output(out.stdout)
    calls = run_dir / "calls.txt"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and (calls.read_text() if calls.exists() else "").count(" run ") < 4:
        time.sleep(0.2)
    # what --signal=B:USR2@50 does 50 s before the limit, now: USR2 to the batch shell only
    slurm.run("scancel", "--batch", "--signal=USR2", job)
    while time.monotonic() < deadline and "job end" not in (calls.read_text() if calls.exists() else ""):
        time.sleep(0.5)
    text = calls.read_text()
    assert "job end" in text, f"job {job} did not finish; log: {list((run_dir / 'logs').iterdir())}"
    lines = text.splitlines()
    runs = [line for line in lines if line.startswith("-m nnlo_sched run ")]
    assert sorted(line.split("procid=")[1].split()[0] for line in runs) == ["0", "1", "2", "3"]
    assert all("ntasks=4" in line and "cpus=2" in line for line in runs)
    assert sorted(line for line in lines if line.startswith("usr2")) == ["usr2 0", "usr2 1", "usr2 2", "usr2 3"]
    assert lines[-1].startswith(f"-m nnlo_sched job end {run_dir} 75")
    assert (run_dir / "logs" / f"job-{job}.out").exists()
