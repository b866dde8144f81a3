"""Real ``nnlo optimize`` runs on the Branin objective (hook path: no training, fast), in the warm MPI world; a
real mpirun where the launch matters (a kill, a stop signal, more ranks than the world has)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.env import REPO

pytestmark = pytest.mark.mpi
BRANIN = str(REPO / "examples" / "branin.py")


@pytest.fixture
def optimize(nnlo_mpi, nnlo_env):
    """``optimize(np, *args, extra_env=None)``: ``mpirun -np NP nnlo optimize --model branin.py ARGS`` (the warm
    world; a real mpirun beyond its size)."""
    def run(np_, *args, extra_env=None, timeout=240):
        return nnlo_mpi(np_, "optimize", "--model", BRANIN, *args, env=dict(nnlo_env, **(extra_env or {})),
                        cwd=REPO, timeout=timeout)
    return run


def trials(out: Path) -> list[dict]:
    return json.loads((out / "trials.json").read_text())


def test_kfold_blocks_failures_and_results(optimize, tmp_path):
    """-np 5, blocks of 2 ranks, 2 folds of 1 rank each: fold foms differ by the shift, fom is their mean,
    x1 > 6 raises in the model (failed trials recorded, search goes on), both blocks take trials."""
    out = tmp_path / "run"
    log = tmp_path / "evals.jsonl"
    r = optimize(5, "--block-size", "2", "--n-fold", "2", "--mode", "allreduce",
                 "--hyper-opt", "random", "--num-iterations", "8", "--seed", "3", "--output", str(out),
                 extra_env={"BRANIN_FOLD_SHIFT": "1.5", "BRANIN_FAIL_ABOVE": "6", "BRANIN_LOG": str(log)})
    assert r.returncode == 0, r.stderr[-3000:]
    table = trials(out)
    assert [t["id"] for t in table] == list(range(8))
    ok = [t for t in table if t["status"] == "ok"]
    failed = [t for t in table if t["status"] == "failed"]
    assert ok and failed, "seed 3 gives both kinds; the test must see both"
    for t in ok:
        f0, f1 = t["fold_foms"]
        assert f1 - f0 == pytest.approx(1.5)
        assert t["fom"] == pytest.approx((f0 + f1) / 2) and t["fom_std"] == pytest.approx(0.75)
    for t in failed:
        assert t["params"]["x1"] > 6 and "simulated model failure" in t["error"] and t["fom"] is None
    assert {t["block"] for t in table} == {0, 1}
    evals = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(evals) == 2 * len(ok) and sum(e["fold"] for e in evals) == len(ok)  # each ok trial: folds 0 and 1
    best = json.loads((out / "best.json").read_text())
    assert best["best_fom"] == min(t["fom"] for t in ok) and best["trials_failed"] == len(failed)
    assert (out / "trials.csv").read_text().count("\n") == 9
    assert (out / "optimizer-state.json").exists()


def test_kill_coordinator_then_restore_loses_and_repeats_nothing(mpirun, nnlo_env, optimize, tmp_path):
    out = tmp_path / "run"
    log = tmp_path / "evals.jsonl"
    # evaluations wait once 4 are logged: the search is killed mid-run on any machine
    env = dict(nnlo_env, BRANIN_SLEEP="0.1", BRANIN_LOG=str(log), BRANIN_CHOICE="1", BRANIN_HOLD_AFTER="4")
    args = [sys.executable, "-m", "nnlo_sched", "optimize", "--model", BRANIN, "--block-size", "2",
            "--hyper-opt", "genetic", "--ga-populations", "3", "--num-iterations", "10", "--output", str(out)]
    proc = subprocess.Popen([mpirun, "-np", "5", *args], env=env, cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):  # wait (up to 240 s) until three trials are finished, then kill everything
            if (out / "trials.json").exists() and len(trials(out)) >= 3:
                break
            if proc.poll() is not None:
                pytest.fail(f"search ended before it could be killed: {proc.stderr.read()[-2000:]}")
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    before = {t["id"]: t for t in trials(out)}
    assert 3 <= len(before) < 10
    kept = {int(p.parent.name): json.loads(p.read_text())["params"]  # finished by a block, never recorded
            for p in (out / "trials").glob("*/block-result.json") if int(p.parent.name) not in before}
    evaluated_before = len(log.read_text().splitlines())

    # resuming with the deadline already passed hands nothing out, keeps everything, says "resubmit me"
    r = optimize(5, "--block-size", "2", "--hyper-opt", "genetic", "--ga-populations", "3",
                 "--num-iterations", "10", "--output", str(out), "--opt-restore",
                 extra_env={"BRANIN_CHOICE": "1", "BRANIN_LOG": str(log), "NNLO_DEADLINE": str(time.time() - 1)})
    assert r.returncode == 75, r.stderr[-3000:]
    assert {t["id"]: t for t in trials(out)} == before

    # without --opt-restore the saved search is protected
    r = optimize(5, "--block-size", "2", "--hyper-opt", "genetic", "--ga-populations", "3",
                 "--num-iterations", "10", "--output", str(out), extra_env={"BRANIN_CHOICE": "1"})
    assert r.returncode == 2 and "--opt-restore" in r.stderr

    r = optimize(5, "--block-size", "2", "--hyper-opt", "genetic", "--ga-populations", "3",
                 "--num-iterations", "10", "--output", str(out), "--opt-restore",
                 extra_env={"BRANIN_CHOICE": "1", "BRANIN_LOG": str(log)})
    assert r.returncode == 0, r.stderr[-3000:]
    after = {t["id"]: t for t in trials(out)}
    assert sorted(after) == list(range(10))
    for i, t in before.items():
        assert after[i] == t  # no finished trial lost or changed
    new_evals = [json.loads(line)["params"] for line in log.read_text().splitlines()[evaluated_before:]]
    # in-flight ones re-run, finished ones never again; one a block finished but the killed coordinator never
    # recorded is taken from the block's kept result (trial_files.BLOCK_RESULT), not evaluated again
    assert len(new_evals) <= 10 - len(before)
    for t in before.values():
        assert t["params"] not in new_evals
    for tid, params in kept.items():
        if after[tid]["params"] == params:
            assert params not in new_evals, tid
    cats = {t["params"]["shift"] for t in after.values()}
    assert cats <= {"none", "up"} and all(isinstance(t["params"]["k"], int) for t in after.values())


def test_a_second_search_into_a_search_folder_is_refused_until_overwrite(optimize, tmp_path):
    out = tmp_path / "run"
    first = optimize(3, "--block-size", "2", "--hyper-opt", "random", "--num-iterations", "3", "--output", str(out))
    assert first.returncode == 0, first.stderr[-2000:]
    (out / "trials" / "0000" / "fold-0").mkdir(parents=True)  # an earlier trial's folder (a trained model's)
    again = optimize(3, "--block-size", "2", "--hyper-opt", "random", "--num-iterations", "2", "--output", str(out))
    errors = [line for line in again.stderr.splitlines() if line.startswith("nnlo: error:")]
    assert again.returncode == 2 and len(errors) == 1, again.stderr[-2000:]
    assert all(w in errors[0] for w in ("already holds a search", "--opt-restore", "--output", "--overwrite"))
    assert len(trials(out)) == 3
    fresh = optimize(3, "--block-size", "2", "--hyper-opt", "random", "--num-iterations", "2", "--output", str(out),
                     "--overwrite", "--seed", "5")
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert [t["id"] for t in trials(out)] == [0, 1] and not (out / "trials" / "0000" / "fold-0").exists()


def test_results_blocks_kept_are_taken_not_evaluated_again(optimize, tmp_path):
    """The results a job's blocks computed (trials/<id>/block-result.json) are what the next job's coordinator
    records for the same trials, without a second evaluation: here every one, as if the first coordinator had
    died after its blocks finished (its search state gone, its trials' folders left)."""
    import shutil

    args = ["--block-size", "2", "--hyper-opt", "random", "--num-iterations", "4", "--seed", "11"]
    first, second = tmp_path / "first", tmp_path / "second"
    r = optimize(3, *args, "--output", str(first))
    assert r.returncode == 0, r.stderr[-3000:]
    shutil.copytree(first / "trials", second / "trials")
    for kept in (second / "trials").glob("*/block-result.json"):  # as if each block had trained for 100 s
        json_text = json.loads(kept.read_text())
        kept.write_text(json.dumps({**json_text, "result": {**json_text["result"], "elapsed": 100.0}}))
    log = tmp_path / "evals.jsonl"
    r = optimize(3, *args, "--output", str(second), extra_env={"BRANIN_LOG": str(log)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert not log.exists(), log.read_text()  # nothing evaluated again
    assert r.stderr.count("taking the result its block kept") == 4
    key = lambda t: (t["id"], t["params"], t["fom"])  # noqa: E731
    assert [key(t) for t in trials(second)] == [key(t) for t in trials(first)]
    assert all(100.0 <= t["duration_s"] < 200.0 for t in trials(second))  # what they took, not ~0 s


@pytest.mark.parametrize("np_, args, message", [
    (4, ["--block-size", "2"], "4 ranks do not make 1 coordinator + blocks of 2; use -n 3"),
    (5, ["--block-size", "2", "--n-fold", "3"], "does not divide into --n-fold 3"),
    (3, ["--block-size", "2", "--fom", "val_loss:up"], "--fom"),
    (5, ["--block-size", "2", "--n-fold", "2", "--n-processes", "2"],
     "fold groups of 1 rank(s) (2 / --n-fold 2), but a training group needs at least 3 ranks (1 master plus a "
     "worker); use --block-size 6"),
])
def test_bad_input_gives_one_clear_line(optimize, tmp_path, np_, args, message):
    r = optimize(np_, *args, "--output", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr[-2000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("nnlo: error:")]
    assert len(errors) == 1 and message in errors[0], r.stderr[-2000:]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("extra, env, code, message", [
    (["--fom", "val_accuracy"], {}, 2, "no metric 'val_accuracy' (reported: fold, val_loss)"),
    ([], {"BRANIN_FAIL_ABOVE": "-10"}, 1, "simulated model failure"),
])
def test_a_model_failing_everywhere_stops_the_search(optimize, tmp_path, extra, env, code, message):
    """More than half of the first 8 trials failed: stop with the rule and the first error instead of burning
    the allocation (a bad start of fewer than 8 does not stop it: tests/optimize/test_search.py)."""
    out = tmp_path / "run"
    r = optimize(2, "--block-size", "1", "--num-iterations", "20", "--output", str(out),
                 *extra, extra_env=env)
    assert r.returncode == code, r.stderr[-2000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("nnlo: error:")]
    assert len(errors) == 1, r.stderr[-2000:]
    assert errors[0].startswith("nnlo: error: the search stopped: 8 of 8 finished trial(s) failed (it stops when "
                                "more than half of at least 8 finished trials failed: --max-failures 0.5:8")
    assert message in errors[0] and len(trials(out)) == 8
    assert sum("FAILED" in line for line in r.stderr.splitlines()) == 8  # each failed trial printed once


def test_no_block_waits_for_another(optimize, tmp_path):
    """The first trial is held until 4 other trials have finished: only an asynchronous coordinator that
    serves whichever block frees up first lets the other block run them (a synchronous one would hang)."""
    out, log = tmp_path / "run", tmp_path / "evals.jsonl"
    r = optimize(5, "--block-size", "2", "--num-iterations", "6", "--hyper-opt", "random",
                 "--output", str(out),
                 extra_env={"BRANIN_LOG": str(log), "BRANIN_HOLD_FIRST": "4"})
    assert r.returncode == 0, r.stderr[-2000:]
    table = {t["id"]: t for t in trials(out)}
    assert all(t["status"] == "ok" for t in table.values()) and len(table) == 6
    held = json.loads((tmp_path / "evals.jsonl.first").read_text())
    slow = next(t for t in table.values() if t["params"] == held)
    others = [t for t in table.values() if t["id"] != slow["id"]]
    assert sum(t["block"] != slow["block"] for t in others) >= 4
    assert len({json.dumps(t["params"], sort_keys=True) for t in table.values()}) == 6  # pending points avoided


def test_bayesian_asks_ahead_with_short_trials_and_loses_nothing(optimize, tmp_path):
    """Branin trials take ~0.1 s, a GP ask longer: with 2 blocks the coordinator proposes each next point
    in the background. Every trial of the budget runs once, at a distinct point, and the state is complete."""
    out = tmp_path / "run"
    r = optimize(3, "--block-size", "1", "--mode", "allreduce", "--hyper-opt", "bayesian",
                 "--n-initial-points", "4", "--num-iterations", "10", "--seed", "1", "--output", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "proposing each next point while the blocks train" in r.stderr
    table = trials(out)
    assert [t["id"] for t in table] == list(range(10)) and all(t["status"] == "ok" for t in table)
    assert len({json.dumps(t["params"], sort_keys=True) for t in table}) == 10
    assert {t["block"] for t in table} == {0, 1}
    state = json.loads((out / "optimizer-state.json").read_text())
    assert state["engine_state"]["n_asked"] == 10 and len(state["engine_state"]["observations"]) == 10


def test_target_objective_ends_the_search(optimize, tmp_path):
    out = tmp_path / "run"
    # one block, random search, seed 0: the values are 15.3, 49.6, 63.9, 129.0, 9.46, ... (first <= 10: trial 4)
    r = optimize(3, "--block-size", "2", "--num-iterations", "50", "--hyper-opt", "random",
                 "--target-objective", "10", "--output", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    table = trials(out)
    assert len(table) == 5 and table[-1]["fom"] <= 10 and all(t["fom"] > 10 for t in table[:-1])


def test_upstream_shape_13_ranks(optimize, tmp_path):
    """mpirun -np 13 --block-size 6 --n-fold 2 = 1 coordinator + 2 blocks x 2 folds x (1 master + 2 workers)."""
    from nnlo.roles import Role, Shape, describe

    h = describe(13, Shape(block_size=6, n_fold=2))
    assert h.count(Role.COORDINATOR) == 1 and len(h.blocks) == 2 and len(h.groups) == 4
    assert h.count(Role.MASTER) == 4 and h.count(Role.WORKER) == 8
    out = tmp_path / "run"
    r = optimize(13, "--block-size", "6", "--n-fold", "2", "--hyper-opt", "random",
                 "--num-iterations", "4", "--output", str(out), extra_env={"BRANIN_FOLD_SHIFT": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    table = trials(out)
    assert len(table) == 4 and all(len(t["fold_foms"]) == 2 for t in table)
    assert all(t["fom"] == pytest.approx(sum(t["fold_foms"]) / 2) for t in table)


def test_stop_signal_saves_state_and_exits_75(mpirun, nnlo_env, tmp_path):
    """SIGUSR2 to every rank (what Slurm's ``scancel --signal=USR2`` does): running trials finish, exit 75."""
    import psutil

    out = tmp_path / "run"
    env = dict(nnlo_env, BRANIN_SLEEP="0.5")
    cmd = [mpirun, "-np", "5", sys.executable, "-m", "nnlo_sched", "optimize", "--model", BRANIN,
           "--block-size", "2", "--hyper-opt", "random", "--num-iterations", "400", "--output", str(out)]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):
            if (out / "trials.json").exists() and len(trials(out)) >= 2:
                break
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            time.sleep(0.2)
        for child in psutil.Process(proc.pid).children(recursive=True):
            if "python" in child.name():
                os.kill(child.pid, signal.SIGUSR2)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert rc == 75, err[-2000:]
    assert "resubmit to resume" in err
    done = trials(out)
    assert 2 <= len(done) < 400  # a budget no machine finishes before the signal
    state = json.loads((out / "optimizer-state.json").read_text())
    assert [t["id"] for t in state["finished"]] == [t["id"] for t in done]
