"""Hostile input (hypothesis): CLI values, profile files, run names and paths.

Whatever a user (or a script generating arguments) passes, ``nnlo`` must answer with exit status 0 or with
one error line and exit status 2 - never a traceback, never a hang - and no value may ever run as code in a
rendered batch script: the scripts ``--dry-run`` prints must pass ``bash -n``, and a real local run whose
name and run directory hold ``$()``, backticks, quotes and non-ASCII must finish without touching the canary.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from tests.helpers.faults import RUNTIME_MODELS, nnlo, wait_until

CANARY = "/tmp/nnlo-reliability-canary"
PAYLOADS = [f"$(touch {CANARY})", f"`touch {CANARY}`", f"'; touch {CANARY}; '", f'"; touch {CANARY}; "',
            f"x\ntouch {CANARY}", "${HOME}", "a b", "--help", "-x", "é漢🙂", "..", "/", "\\", "%j", "#", "\t"]
TEXT = st.one_of(st.sampled_from(PAYLOADS),
                 st.text(alphabet=st.sampled_from(list(" '\"$()`;|&<>\\\n*?~#!{}[]é漢🙂-_=.,/%:0123456789ab")),
                         max_size=16))
COUNT = st.one_of(st.integers(-3, 8), st.sampled_from([2**31, 2**63, 10**30, -(10**30)])).map(str) | TEXT
WALLTIME = st.one_of(st.sampled_from(["0", "-1h", "1:99:99", "2 hours", "", "1e9", "nan", "99999999h",
                                      "1-00:00:00", "00:00:01", "10m", "12:00", "4-00:00:00"]), TEXT)
CLUSTERS = ["summit", "titan", "cscs", "flatiron", "local"]


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``nnlo ARGV`` in this process: (exit status, stdout, stderr); any other exception fails the test."""
    from nnlo_sched.cli import main

    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as e:
            code = e.code
    return (0 if code is None else code), out.getvalue(), err.getvalue()  # type: ignore[return-value]


def _check_answer(code: object, out: str, err: str, argv: list[str]) -> None:
    assert "Traceback" not in err + out, (argv, err)
    assert code in (0, 2), (argv, code, err)
    with contextlib.suppress(Exception):  # outside a hypothesis test there is nothing to record into
        event(f"{argv[0]} exit {code}")  # --hypothesis-show-statistics: both outcomes must occur
    if code == 2:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert 1 <= len(lines) <= 3, (argv, err)  # click's usage errors add a usage and a hint line
        assert any(ln.startswith(("nnlo: error:", "Error:")) for ln in lines), (argv, err)


@pytest.mark.slow  # a rendered script is checked by a real `bash -n` (a process), whenever an example renders one
@settings(max_examples=int(os.environ.get("NNLO_FAULT_EXAMPLES", "120")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cluster=st.sampled_from(CLUSTERS), name=TEXT, walltime=WALLTIME, account=TEXT, queue=TEXT,
       run_dir=TEXT, counts=st.lists(st.tuples(st.sampled_from(["--workers", "--nodes", "--blocks",
                                                                 "--max-resubmits", "--gpus-per-worker"]), COUNT),
                                     max_size=2),
       directive=st.none() | TEXT, kind=st.sampled_from(["layout", "submit"]))
def test_cli_values_never_traceback_and_scripts_stay_valid(tmp_path_factory, cluster, name, walltime, account,
                                                           queue, run_dir, counts, directive, kind) -> None:
    if kind == "layout":
        argv = ["layout", "-c", cluster, "-t", walltime]
        for flag, value in counts:
            if flag not in ("--max-resubmits",):
                argv += [flag, value]
    else:
        argv = ["submit", "-c", cluster, "--dry-run", "--name", name, "-t", walltime, "-A", account, "-q", queue,
                "--run-dir", run_dir]
        for flag, value in counts:
            argv += [flag, value]
        if directive is not None:
            argv += ["--directive", directive]
        argv += ["--no-check", "train", "--model", str(RUNTIME_MODELS / "tiny.py"), "--epochs", "1"]
    code, out, err = run_cli(*argv)
    _check_answer(code, out, err, argv)
    if code == 0 and kind == "submit":
        check = subprocess.run(["bash", "-n"], input=out, capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, (argv, check.stderr, out)
    assert not os.path.exists(CANARY)


@pytest.mark.parametrize("cluster", ["local", "summit"])
@pytest.mark.parametrize("flag", ["--workers", "--blocks"])
@pytest.mark.parametrize("count", [str(10**30), str(2**63), "99999999"])
def test_absurd_counts_are_refused_quickly(cluster: str, flag: str, count: str) -> None:
    """Found by the test above: on an oversubscribed profile (local) a huge count used to reach the role
    hierarchy, which then built (hang) or overflowed (traceback); it must be one line."""
    argv = ["layout", "-c", cluster, flag, count]
    if flag == "--blocks":
        argv += ["--block-size", "2"]
    code, out, err = run_cli(*argv)
    _check_answer(code, out, err, argv)
    assert code == 2, (argv, out[-500:])


PROFILE_KEYS = ["scheduler", "launcher", "cores_per_node", "gpus_per_node", "nodes", "template", "extends",
                "signal", "signal_lead_s", "launcher_flags", "oversubscribe", "python", "directives", "setup",
                "max_processes", "memory_gb", "default_queue", "queues", "account_required", "bogus"]
TOML_VALUE = st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.booleans(),
                       TEXT.map(json.dumps), st.lists(TEXT.map(json.dumps), max_size=2).map(lambda v: f"[{', '.join(v)}]"),
                       st.sampled_from(['"slurm"', '"lsf"', '"pbs"', '"local"', '"srun"', '"jsrun"', '"aprun"',
                                        '"mpirun"', '"summit"', '"local"', '"fuzz"', "{}", '{ x = 1 }']))


@settings(max_examples=int(os.environ.get("NNLO_FAULT_EXAMPLES", "120")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(entries=st.lists(st.tuples(st.sampled_from(PROFILE_KEYS), TOML_VALUE), max_size=8),
       raw=st.none() | TEXT)
def test_hostile_profile_files_give_one_line(tmp_path_factory, monkeypatch: pytest.MonkeyPatch, entries, raw) -> None:
    folder = tmp_path_factory.mktemp("clusters")
    text = raw if raw is not None else "".join(f"{k} = {v}\n" for k, v in dict(entries).items())
    (folder / "fuzz.toml").write_text(text, encoding="utf-8")
    monkeypatch.setenv("NNLO_CLUSTERS", str(folder))
    for argv in (["clusters", "show", "fuzz"], ["layout", "-c", "fuzz", "--workers", "2"], ["clusters"],
                 ["submit", "-c", "fuzz", "--dry-run", "--workers", "1", "--no-check", "train", "--model",
                  str(RUNTIME_MODELS / "tiny.py")]):
        code, out, err = run_cli(*argv)
        _check_answer(code, out, err, [*argv, text])


# -- a real local run with a hostile name and run directory --------------------------------------------------
HOSTILE_NAME = f"n $(touch {CANARY}) `touch {CANARY}` '\"; é🙂"


@pytest.mark.slow
def test_a_local_run_with_hostile_name_and_dir_runs_no_code(local_chain: dict[str, str], tmp_path: Path) -> None:
    """The whole local chain (render, submit, job start, payload, job end) with a hostile name and folder."""
    if os.path.exists(CANARY):
        os.unlink(CANARY)
    env = local_chain
    run_dir = tmp_path / f"runs $(touch {CANARY}) `touch {CANARY}` ' \" é🙂" / "r"
    proc = subprocess.run([sys.executable, "-m", "nnlo_sched", "submit", "-c", "chainlocal", "--name", HOSTILE_NAME,
                           "--run-dir", str(run_dir), "-t", "5m", "--workers", "1", "--no-check", "train", "--model", "model.py",
                           "--epochs", "2"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr

    def state() -> str:
        try:
            return json.loads((run_dir / "state.json").read_text())["state"]
        except (OSError, ValueError):
            return ""

    final = wait_until("the hostile run to finish", lambda: state() in ("done", "failed", "cancelled") and state(),
                       limit=180)
    logs = "".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob("*") if p.is_file())
    assert final == "done", (final, logs[-3000:])
    time.sleep(0.2)
    assert not os.path.exists(CANARY), "a value from the run name or folder was executed"
    status = nnlo("status", env=env)
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
