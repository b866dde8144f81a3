"""Real ``nnlo optimize --schedule ...`` runs (the warm MPI world; the kill test launches for real): ASHA through the real training runtime (a promoted
trial resumes its own checkpoint), Hyperband with k-fold (the fold mean at each rung), PBT on heterogeneous
blocks (children start from their donor's state), and a shared ASHA search whose job is SIGKILLed mid-stage
(the other job takes the stage over from the trial's last checkpoint). One run per schedule, small."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from nnlo.optimize.journal import read_journal, rebuild
from nnlo.optimize.shared import rebuilt_engine_state
from tests.helpers.env import REPO, example
from tests.helpers.participants import kill_first_when

pytestmark = pytest.mark.mpi
CURVES = str(REPO / "examples" / "curves.py")
DIGITS = str(REPO / "examples" / "digits_torch.py")


def optimize(nnlo_mpi, env, np_, *args, extra_env=None):
    """``mpirun -np NP nnlo optimize ARGS`` in the warm MPI world (returncode, stdout, stderr)."""
    return nnlo_mpi(np_, "optimize", *args, env=dict(env, **(extra_env or {})), cwd=REPO)


def trials(out: Path) -> dict[int, dict]:
    return {t["id"]: t for t in json.loads((out / "trials.json").read_text())}


def epochs_logged(log: Path) -> dict[tuple, list[int]]:
    """Epochs the curves hook trained, per (parameters, fold), in the order they were trained."""
    out: dict[tuple, list[int]] = {}
    for line in log.read_text().splitlines():
        e = json.loads(line)
        out.setdefault((json.dumps(e["params"], sort_keys=True), e["fold"]), []).append(e["epoch"])
    return out


def key(trial: dict, fold: int = 0) -> tuple:
    return json.dumps(trial["params"], sort_keys=True), fold


def test_asha_trains_a_promoted_trial_on_from_its_own_checkpoint(nnlo_mpi, nnlo_env, tmp_path):
    data = tmp_path / "digits"
    example("make_digits").make_digits(data)
    out = tmp_path / "run"
    r = optimize(nnlo_mpi, nnlo_env, 3, "--model", DIGITS, "--train", str(data / "train.list"), "--val",
                 str(data / "val.list"), "--block-size", "2", "--schedule", "asha", "--epochs", "3",
                 "--min-epochs", "1", "--num-iterations", "3", "--hyper-opt", "random", "--fom", "val_accuracy",
                 "--batch", "64", "--log-level", "debug", "--output", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    table = trials(out)
    assert sorted(table) == [0, 1, 2]
    [top] = [t for t in table.values() if t["epochs"] == 3]  # floor(3 / 3) = 1 trial goes on
    assert [x["epochs"] for x in top["rungs"]] == [1, 3] and top["rung"] == 1
    assert all(t["epochs"] == 1 and t["rung"] == 0 for t in table.values() if t is not top)
    assert top["rungs"][0]["fom"] == max(t["rungs"][0]["fom"] for t in table.values())  # the best went on
    fold = out / "trials" / f"{top['id']:04d}" / "fold-0"
    history = json.loads((fold / "history.json").read_text())
    assert [e["epoch"] for e in history["history"]] == [1, 2, 3]  # no epoch trained twice
    logged = (fold / "logs" / "all-ranks.log").read_text()
    assert f"restoring from {fold}/checkpoints/ckpt-e0001-u" in logged  # the second stage resumed the first's
    assert top["rungs"][1]["checkpoints"][0].endswith("ckpt-e0003-u" + top["rungs"][1]["checkpoints"][0][-8:])
    best = json.loads((out / "best.json").read_text())
    assert best["best_trial"] == top["id"] and best["rungs"] == {"1": 2, "3": 1}
    header = (out / "trials.csv").read_text().splitlines()[0].split(",")
    assert {"epochs", "rung"} <= set(header)


def test_hyperband_with_kfold_reports_the_fold_mean_at_every_rung(nnlo_mpi, nnlo_env, tmp_path):
    out, log = tmp_path / "run", tmp_path / "epochs.jsonl"
    r = optimize(nnlo_mpi, nnlo_env, 5, "--model", CURVES, "--block-size", "2", "--n-fold", "2", "--mode",
                 "allreduce", "--schedule", "hyperband", "--epochs", "9", "--num-iterations", "14",
                 "--hyper-opt", "random", "--seed", "4", "--output", str(out),
                 extra_env={"CURVES_FOLD_SHIFT": "0.5", "CURVES_LOG": str(log)})
    assert r.returncode == 0, r.stderr[-3000:]
    table = trials(out)
    assert len(table) == 14 and {t["bracket"] for t in table.values()} == {0, 1, 2}
    for t in table.values():
        first = t["rungs"][0]["rung"]
        assert first == t["bracket"]  # a bracket starts its trials at its own rung
        for x in t["rungs"]:
            f0, f1 = x["fold_foms"]
            assert f1 - f0 == pytest.approx(0.5, abs=0.05) and x["fom"] == pytest.approx((f0 + f1) / 2)
    trained = epochs_logged(log)
    for t in table.values():
        for fold in (0, 1):  # each fold trained every epoch up to the trial's last rung exactly once
            assert trained[key(t, fold)] == list(range(1, t["epochs"] + 1))


def test_pbt_children_start_from_their_donors_state_on_heterogeneous_blocks(nnlo_mpi, nnlo_env, tmp_path):
    out, log = tmp_path / "run", tmp_path / "epochs.jsonl"
    r = optimize(nnlo_mpi, nnlo_env, 4, "--model", CURVES, "--block-sizes", "1,2", "--mode", "allreduce",
                 "--schedule", "pbt", "--epochs", "8", "--pbt-interval", "2", "--population", "4",
                 "--num-iterations", "10", "--hyper-opt", "random", "--seed", "2", "--output", str(out),
                 extra_env={"CURVES_LOG": str(log)})
    assert r.returncode == 0, r.stderr[-3000:]
    table = trials(out)
    children = [t for t in table.values() if t["parent"] is not None]
    assert children and len(table) <= 10 and {t["block"] for t in table.values()} == {0, 1}
    replaced = {t["replaces"] for t in children}
    living = [t for t in table.values() if t["id"] not in replaced]
    assert len(living) == 4 and all(t["epochs"] == 8 for t in living)
    # every epoch trained is one some trial accounts for, once: members from 1, children after their donor's
    # checkpoint (a child never retrains the epochs it inherited)
    expected = Counter((key(t), e) for t in table.values()
                       for e in range((t["start_epochs"] or 0) + 1, t["epochs"] + 1))
    assert Counter((k, e) for k, epochs in epochs_logged(log).items() for e in epochs) == expected
    assert all(c["start_epochs"] and c["start_epochs"] % 2 == 0 for c in children)
    assert "starts from trial" in r.stderr


def test_a_shared_asha_stage_of_a_killed_job_is_taken_over_from_its_checkpoint(mpirun, nnlo_env, tmp_path):
    out, log = tmp_path / "run", tmp_path / "epochs.jsonl"

    def start(name):
        cmd = [mpirun, "-np", "2", sys.executable, "-m", "nnlo_sched", "optimize", "--model", CURVES,
               "--block-size", "1", "--mode", "allreduce", "--schedule", "asha", "--epochs", "9",
               "--num-iterations", "9", "--hyper-opt", "random", "--output", str(out), "--shared",
               "--lease-timeout", "3"]
        env = dict(nnlo_env, NNLO_PARTICIPANT=name, CURVES_EPOCH_S="0.3", CURVES_LOG=str(log))
        return subprocess.Popen(cmd, env=env, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)

    a, b = start("A"), start("B")

    def resumed_by_a(state):  # A trains a paused trial on (a promotion): kill it during that stage
        return [x.id for x in state.open.values() if x.holder == "A" and x.id in state.finished][:1]

    [victim], _, err = kill_first_when(a, b, out, resumed_by_a)
    assert b.returncode == 0, err[-3000:]
    records, skipped = read_journal(out)
    assert skipped == []
    state = rebuild(records)
    assert sorted(state.finished) == list(range(9)) and not state.open  # no trial lost
    per_rung = Counter((r["id"], r["rung"]) for r in records if r["kind"] == "result")
    assert set(per_rung.values()) == {1}  # no rung recorded twice
    for t in state.finished.values():  # every rung history intact: contiguous from rung 0
        assert [x["rung"] for x in t.rungs] == list(range(t.rung + 1))
    took = [r for r in records if r["kind"] == "lease" and r["id"] == victim]
    assert took and took[0]["p"] == "B" and took[0]["from"] == "A"
    victim_t = state.finished[victim]
    epochs = epochs_logged(log)[(json.dumps(victim_t.params, sort_keys=True), 0)]
    paused_at = victim_t.rungs[0]["epochs"]
    assert epochs[:paused_at] == list(range(1, paused_at + 1))
    assert sorted(set(epochs)) == list(range(1, victim_t.epochs + 1))
    assert Counter(epochs)[paused_at] == 1  # the kill lost only epochs after the last checkpoint (rung 0's)
    for t in state.finished.values():
        if t.id != victim:
            assert epochs_logged(log)[(json.dumps(t.params, sort_keys=True), 0)] == list(range(1, t.epochs + 1))
    assert json.loads((out / "optimizer-state.json").read_text())["engine_state"] == rebuilt_engine_state(out)
