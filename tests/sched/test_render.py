"""Rendered batch scripts: golden files per cluster, ``bash -n`` on each, hostile values, real runs of the
local script (the schedulers' submit commands and job ids: tests/chain/test_schedulers.py).

Golden files live in ``tests/sched/golden/<case>.sh``; after an intentional template change regenerate them
with ``NNLO_REGEN_GOLDEN=1 pytest tests/sched/test_render.py`` and review the diff against
``shared/reference/clusters.md``.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from nnlo.errors import ConfigError
from nnlo_sched.profiles import Profile, load_profile
from nnlo_sched.render import job_name, render_script
from nnlo_sched.schedulers import get_scheduler
from nnlo_sched.spec import RunSpec

GOLDEN = Path(__file__).parent / "golden"
PY = "/sw/nnlo/bin/python"
BASH = shutil.which("bash") or "/bin/bash"


def profile(name: str) -> Profile:
    """A built-in profile with the interpreter pinned, so the golden files do not depend on this machine."""
    p = load_profile(name)
    return replace(p, python=PY, launcher_command="mpirun" if p.launcher == "mpirun" else p.launcher_command)


def spec(cluster: str, kind: str = "train", args: tuple[str, ...] = ("--model", "mnist.py"), **kw) -> RunSpec:
    s = RunSpec.from_argv(kind, list(args), cluster, **{"name": "mnist", "walltime_s": 7200, "workdir": "/home/u/proj", **kw})
    s.layout = s.layout_on(profile(cluster)).record()
    return s


CASES: dict[str, tuple[str, RunSpec]] = {
    "summit_train_2nodes": ("summit", spec("summit", account="ABC123", workers=11)),
    "summit_train_full": ("summit", spec("summit", account="ABC123", nodes=4608, walltime_s=24 * 3600)),
    "summit_optimize_shared_gpus": ("summit", spec(
        "summit", "optimize", ("--block-size", "3", "--model", "m.py"), account="ABC123", blocks=5,
        gpus_per_worker=0.5, walltime_s=45 * 60)),
    "titan_train": ("titan", spec("titan", account="CSC123", workers=8, walltime_s=2 * 3600)),
    "titan_optimize_debug": ("titan", spec(
        "titan", "optimize", ("--block-size", "3", "--model", "m.py"), account="CSC123", blocks=4, queue="debug",
        walltime_s=1800)),
    "cscs_train": ("cscs", spec("cscs", account="s1234", nodes=16, walltime_s=12 * 3600,
                                directives=["--mail-type=END", "#SBATCH --exclusive"])),
    "cscs_optimize_upstream_shape": ("cscs", spec(
        "cscs", "optimize", ("--block-size", "6", "--n-fold", "2", "--model", "m.py"), account="s1234", blocks=2)),
    "cscs_shared_gpu": ("cscs", spec("cscs", account="s1234", workers=3, gpus_per_worker=0.5)),
    "flatiron_train_a100": ("flatiron", spec("flatiron", nodes=2, constraint="a100", walltime_s=2 * 86400)),
    "flatiron_uber_master": ("flatiron", spec(
        "flatiron", args=("--n-masters", "3", "--n-processes", "2", "--model", "m.py"), workers=6)),
    "local_train": ("local", spec("local", workers=2, walltime_s=600)),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_script(case: str) -> None:
    cluster, s = CASES[case]
    text = render_script(s, profile(cluster), "/scratch/u/nnlo-runs/mnist-1")
    path = GOLDEN / f"{case}.sh"
    if os.environ.get("NNLO_REGEN_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"no golden file {path.name}; run with NNLO_REGEN_GOLDEN=1 and review it"
    assert text == path.read_text()
    subprocess.run([BASH, "-n"], input=text, text=True, check=True)


def _directives(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_directive_formats_per_scheduler() -> None:
    lsf = render_script(CASES["summit_train_2nodes"][1], profile("summit"), "/r")
    d = _directives(lsf, "#BSUB")
    assert "#BSUB -P ABC123" in d and "#BSUB -W 2:00" in d and "#BSUB -nnodes 2" in d
    assert "#BSUB -wa USR2" in d and "#BSUB -wt 10" in d and "#BSUB -o /r/logs/job-%J.out" in d
    assert not any(x.startswith(("#BSUB -n ", "#BSUB -R")) for x in d)  # rejected by Summit's bsub
    assert not any("alloc_flags" in x for x in d)  # only when GPUs are shared
    shared = render_script(CASES["summit_optimize_shared_gpus"][1], profile("summit"), "/r")
    assert '#BSUB -alloc_flags "gpumps smt1"' in shared and "#BSUB -W 45" in shared
    pbs = render_script(CASES["titan_train"][1], profile("titan"), "/r")
    d = _directives(pbs, "#PBS")
    assert "#PBS -A CSC123" in d and "#PBS -l walltime=02:00:00" in d and "#PBS -l nodes=9" in d
    assert "#PBS -l gres=atlas1%atlas2" in d and "aprun -n 9 -N 1 -d 16 " in pbs
    assert not any("USR" in x for x in d)  # no pre-walltime signal on Titan: the deadline clock only
    slurm = render_script(CASES["flatiron_train_a100"][1], profile("flatiron"), "/r")
    d = _directives(slurm, "#SBATCH")
    assert "#SBATCH --time=2-00:00:00" in d and "#SBATCH --constraint=a100" in d
    assert "#SBATCH --gpus-per-node=4" in d and "#SBATCH --signal=B:USR2@300" in d
    assert "#SBATCH --partition=gpu" in d and "#SBATCH --output=/r/logs/job-%j.out" in d
    daint = render_script(CASES["cscs_shared_gpu"][1], profile("cscs"), "/r")
    assert "#SBATCH --gres=gpu:1" in daint and "export CRAY_CUDA_MPS=1" in daint
    assert "--gpus-per-task" not in daint  # shared GPUs are not bound per task


def test_body_contract_lines() -> None:
    text = render_script(CASES["cscs_train"][1], profile("cscs"), "/runs/a")
    lines = text.splitlines()
    start = lines.index(f"{PY} -m nnlo_sched job start \"$NNLO_RUN_DIR\" || exit 0")
    assert lines[start + 2].startswith("srun -n 16 ") and lines[start + 2].endswith(
        f"{PY} -m nnlo_sched run \"$NNLO_RUN_DIR\" &")
    assert "export NNLO_RUN_DIR=/runs/a" in lines
    assert "export NNLO_DEADLINE=$(( $(date +%s) + 43200 ))" in lines
    assert f"{PY} -m nnlo_sched job end \"$NNLO_RUN_DIR\" \"$rc\"" in lines and lines[-1] == "exit $rc"
    assert "#SBATCH --mail-type=END" in lines and "#SBATCH --exclusive" in lines
    # directives precede every command (sbatch stops reading them at the first one)
    first_cmd = next(i for i, x in enumerate(lines) if x and not x.startswith("#"))
    assert max(i for i, x in enumerate(lines) if x.startswith("#SBATCH")) < first_cmd


def test_account_is_required_where_the_site_requires_it() -> None:
    s = spec("summit", workers=2)
    with pytest.raises(ConfigError, match=r"needs a project to charge \(bsub -P\); pass --account"):
        render_script(s, profile("summit"), "/r")
    with pytest.raises(ConfigError, match=r"needs a project to charge \(#PBS -A\)"):
        render_script(spec("titan", workers=1), profile("titan"), "/r")


@pytest.mark.parametrize(
    "field, value",
    [("account", "ABC 123"), ("account", "a\nrm -rf ~"), ("queue", "batch;id"), ("constraint", "gpu'x")],
)
def test_unsafe_directive_values_are_refused(field: str, value: str) -> None:
    s = spec("cscs", account="s1", workers=1)
    setattr(s, field, value)
    s.layout = replace(s.layout, queue=None) if field == "queue" else s.layout
    with pytest.raises(ConfigError, match="cannot go into a batch directive"):
        render_script(s, profile("cscs"), "/r")


@pytest.mark.slow
def test_user_template_extends_a_builtin_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNLO_CLUSTERS", str(tmp_path))
    (tmp_path / "mysite.sh").write_text(
        '{% extends "slurm.sh" %}\n{% block site_directives %}\n#SBATCH --qos={{ "high" }}\n{% endblock %}\n')
    (tmp_path / "mysite.toml").write_text('extends = "flatiron"\ntemplate = "mysite.sh"\n')
    p = replace(load_profile("mysite"), python=PY)
    s = RunSpec.from_argv("train", ["--model", "m.py"], "mysite", workers=1)
    text = render_script(s, p, "/r")
    assert "#SBATCH --qos=high" in text and "#SBATCH --partition=gpu" in text
    subprocess.run([BASH, "-n"], input=text, text=True, check=True)
    (tmp_path / "mysite.toml").write_text('extends = "flatiron"\ntemplate = "nosuch.sh"\n')
    with pytest.raises(ConfigError, match="template 'nosuch.sh' .* is in none of"):
        render_script(s, load_profile("mysite"), "/r")
    (tmp_path / "mysite.toml").write_text('extends = "flatiron"\ntemplate = "broken.sh"\n')
    (tmp_path / "broken.sh").write_text('{% extends "slurm.sh" %}{% block site_directives %}{{ undefined_thing }}{% endblock %}')
    with pytest.raises(ConfigError, match="undefined_thing"):
        render_script(s, load_profile("mysite"), "/r")


def test_foreign_directive_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a lsf directive; write it as '#BSUB ...'"):
        render_script(spec("summit", account="A", workers=1, directives=["#SBATCH --exclusive"]),
                      profile("summit"), "/r")


def test_local_directives_are_plain_comments() -> None:
    """The local scheduler reads no directives: any comment passes, a bare option becomes one."""
    text = render_script(spec("local", workers=1, directives=["#SBATCH --exclusive", "--mail-type=END"]),
                         profile("local"), "/r")
    lines = text.splitlines()
    assert "#SBATCH --exclusive" in lines and "# --mail-type=END" in lines


def test_constraint_only_on_slurm() -> None:
    with pytest.raises(ConfigError, match="--constraint is a Slurm option"):
        render_script(spec("titan", account="A", workers=1, constraint="gpu"), profile("titan"), "/r")


def test_run_dir_with_spaces_cannot_go_into_slurm_directives() -> None:
    with pytest.raises(ConfigError, match="path without spaces"):
        render_script(spec("cscs", account="s1", workers=1), profile("cscs"), "/scratch/my runs/a")


HOSTILE = st.lists(
    st.sampled_from(list("ab $`'\"\\;&|()<>{}*?!#~\n\t-") + ["$(touch PWNED)", "`touch PWNED`", "'; touch PWNED; '"]),
    min_size=1, max_size=12,
).map("".join)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(name=HOSTILE, run_dir=HOSTILE, workdir=HOSTILE)
def test_hostile_values_stay_inert_words(name: str, run_dir: str, workdir: str) -> None:
    s = spec("local", workers=1, name=name, workdir="/w/" + workdir)
    text = render_script(s, profile("local"), "/r/" + run_dir)
    subprocess.run([BASH, "-n"], input=text, text=True, check=True)
    # bash itself reads the quoted words back exactly: run the script's preamble with cd recorded, not done
    preamble = text.split(" job start ")[0].rsplit("\n", 1)[0]
    probe = "cd() { printf '%s\\0' \"$1\"; }\n" + preamble + '\nprintf "%s\\0" "$NNLO_RUN_DIR"'
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run([BASH, "-c", probe], capture_output=True, text=True, check=True, cwd=cwd).stdout
        assert not os.listdir(cwd)
    assert out.split("\0")[:2] == ["/w/" + workdir, "/r/" + run_dir]
    # in directives the name is sanitised; comments never break into a new line
    slurm = render_script(spec("cscs", account="s1", workers=1, name=name), profile("cscs"), "/r")
    subprocess.run([BASH, "-n"], input=slurm, text=True, check=True)
    assert f"#SBATCH --job-name={job_name(name, 'slurm')}" in slurm.splitlines()
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", job_name(name, "slurm"))
    assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,14}", job_name(name, "pbs"))


@pytest.mark.mpi
def test_rendered_local_script_runs_with_a_hostile_run_dir(tmp_path: Path, mpirun: str) -> None:
    """Execute a real rendered local script with real bash and mpirun; stand-in programs record what they got."""
    run_dir = tmp_path / "run $(touch PWNED) `touch PWNED2` 'x' \"y\""
    run_dir.mkdir()
    rec = tmp_path / "rec.sh"
    rec.write_text(
        '#!/bin/bash\n'
        # one write per call (ranks append side by side), and no rank exits before the other has written
        'line=$(printf "%s|" "$@"); printf "%s\\n" "$line" >> "$NNLO_RUN_DIR/calls.txt"\n'
        '[ "$3" = run ] && { sleep 1; exit 75; }\nexit 0\n'
    )
    rec.chmod(0o755)
    p = replace(load_profile("local"), python=str(rec), launcher_command=mpirun)
    s = RunSpec.from_argv("train", ["--model", "m.py"], "local", name="hostile $(touch PWNED3)", walltime_s=60,
                workdir=str(tmp_path), workers=2)
    s.layout = s.layout_on(p).record()
    script = tmp_path / "job.sh"
    script.write_text(render_script(s, p, run_dir))
    argv = get_scheduler("local", tmp_path).submit_argv(script)  # what the local supervisor runs
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 75, done.stderr  # the program's exit status comes back through the trap loop
    calls = (run_dir / "calls.txt").read_text().splitlines()
    assert calls[0] == "-m|nnlo_sched|job|start|" + str(run_dir) + "|"
    assert calls.count("-m|nnlo_sched|run|" + str(run_dir) + "|") == 3  # three ranks (1 master + 2 workers)
    assert calls[-1] == "-m|nnlo_sched|job|end|" + str(run_dir) + "|75|"
    assert not list(tmp_path.rglob("PWNED*"))


@pytest.mark.mpi
def test_batch_shell_forwards_the_warning_signal(tmp_path: Path, mpirun: str) -> None:
    """USR2 to the batch shell reaches every rank through real mpirun (relayed as USR1, which hydra
    forwards), and the program's own exit status is what the job reports."""
    rec = tmp_path / "prog.sh"
    rec.write_text(
        '#!/bin/bash\n'
        'if [ "$3" != run ]; then printf "%s\\n" "$*" >> "$NNLO_RUN_DIR/calls.txt"; exit 0; fi\n'
        'trap \'echo "got-usr1 $PMI_RANK" >> "$NNLO_RUN_DIR/calls.txt"; exit 75\' USR1\n'
        'touch "$NNLO_RUN_DIR/started.$PMI_RANK"; for i in $(seq 1200); do sleep 0.1; done; exit 3\n'
    )
    rec.chmod(0o755)
    p = replace(load_profile("local"), python=str(rec), launcher_command=mpirun)
    s = RunSpec.from_argv("train", ["--model", "m.py"], "local", name="sig", walltime_s=60, workdir=str(tmp_path), workers=2)
    s.layout = s.layout_on(p).record()
    script = tmp_path / "job.sh"
    script.write_text(render_script(s, p, tmp_path))
    assert "trap 'forward USR1' USR2" in script.read_text()
    proc = subprocess.Popen(get_scheduler("local", tmp_path).submit_argv(script), cwd=tmp_path)
    try:
        for _ in range(1200):
            if len(list(tmp_path.glob("started.*"))) == 3:
                break
            subprocess.run(["sleep", "0.1"])
        proc.send_signal(12)  # SIGUSR2, as Slurm --signal=B:USR2 or LSF -wa USR2 would
        assert proc.wait(timeout=120) == 75
    finally:
        if proc.poll() is None:
            proc.kill()
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert sorted(c for c in calls if c.startswith("got-usr1")) == ["got-usr1 0", "got-usr1 1", "got-usr1 2"]
    assert calls[-1].endswith("job end " + str(tmp_path) + " 75")


# -- which interpreter a job runs: the profile's python key, else the environment its set-up activates -----
@pytest.mark.parametrize("setup, python, runs", [
    ((), "", sys.executable),  # nothing said: the interpreter nnlo was submitted with
    (("module load gcc cuda",), "", sys.executable),  # modules do not name a Python environment
    (("source $HOME/venvs/nnlo/bin/activate",), "", "python3"),
    (("module load cuda/12", ". /sw/envs/nnlo/bin/activate",), "", "python3"),
    (("conda activate nnlo",), "", "python3"),
    (("eval \"$(micromamba shell hook -s bash)\"; micromamba activate ml",), "", "python3"),
    (("source $HOME/venvs/nnlo/bin/activate",), "/opt/py/bin/python3.11", "/opt/py/bin/python3.11"),  # the key wins
])
def test_the_job_runs_the_interpreter_the_profile_names(setup: tuple[str, ...], python: str, runs: str) -> None:
    p = replace(load_profile("flatiron"), setup=setup, python=python)
    text = render_script(spec("flatiron", workers=2), p, "/scratch/r1")
    assert f"{shlex.quote(runs)} -m nnlo_sched job start" in text
    assert f"{shlex.quote(runs)} -m nnlo_sched run \"$NNLO_RUN_DIR\" &" in text
    if setup:  # the set-up runs before the interpreter is looked up
        assert text.index(setup[-1]) < text.index("-m nnlo_sched job start")


def test_clusters_show_says_which_interpreter_a_job_runs_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from tests.sched.cli_runner import run

    monkeypatch.setenv("NNLO_CLUSTERS", str(tmp_path))
    (tmp_path / "venvsite.toml").write_text('extends = "flatiron"\nsetup = ["module load cuda/12", '
                                            '"source $HOME/venvs/nnlo/bin/activate"]\n')
    (tmp_path / "pinned.toml").write_text('extends = "flatiron"\npython = "/opt/py/bin/python3"\n')
    shown = {}
    for name in ("venvsite", "pinned", "flatiron"):
        code, out, _ = run(capsys, "clusters", "show", name)
        assert code == 0
        shown[name] = next(line for line in out.splitlines() if line.startswith("  python "))
    assert shown["venvsite"] == ("  python         python3 (on the job's PATH after its set-up: set-up line "
                                 "'source $HOME/venvs/nnlo/bin/activate' activates an environment)")
    assert shown["pinned"] == "  python         /opt/py/bin/python3 (the profile's python key)"
    assert shown["flatiron"] == (f"  python         {sys.executable} (the interpreter nnlo runs with here; set "
                                 "python, or activate an environment in setup, for another)")


@pytest.mark.mpi
def test_an_environment_activated_in_setup_is_the_one_the_job_runs(tmp_path: Path, mpirun: str) -> None:
    """A real rendered job script: its set-up sources an activate script that puts a recording python3 first on
    PATH, and every program the job starts (job start, the ranks, job end) is that one."""
    env_bin = tmp_path / "env" / "bin"
    env_bin.mkdir(parents=True)
    (env_bin / "activate").write_text(f'export PATH="{env_bin}:$PATH"\n')
    # a rank's call also lives an MPI rank's life (init, finalize): a rank that exits without it races MPICH's
    # launcher, which then dies of SIGPIPE (status 141, seen under load in CI) - a real rank never does that
    (env_bin / "python3").write_text('#!/bin/bash\necho "$*" >> "$NNLO_RUN_DIR/calls.txt"\n'
                                     f'case "$*" in "-m nnlo_sched run "*) exec {shlex.quote(sys.executable)} '
                                     '-c "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()";; esac\nexit 0\n')
    (env_bin / "python3").chmod(0o755)
    p = replace(load_profile("local"), setup=(f"source {shlex.quote(str(env_bin / 'activate'))}",),
                launcher_command=mpirun)
    s = RunSpec.from_argv("train", ["--model", "m.py"], "local", name="venv", walltime_s=60, workdir=str(tmp_path),
                          workers=2)
    s.layout = s.layout_on(p).record()
    script = tmp_path / "job.sh"
    script.write_text(render_script(s, p, tmp_path))
    # stdin from /dev/null, as the local queue starts a job (an inherited pipe - pytest-xdist's - is forwarded by
    # mpirun to rank 0, which here exits at once: mpirun then died of SIGPIPE, status 141, once under load)
    done = subprocess.run(get_scheduler("local", tmp_path).submit_argv(script), cwd=tmp_path, capture_output=True,
                          text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert calls[0] == f"-m nnlo_sched job start {tmp_path}" and calls[-1] == f"-m nnlo_sched job end {tmp_path} 0"
    assert s.layout.world_size == 3 and calls.count(f"-m nnlo_sched run {tmp_path}") == 3  # every rank
