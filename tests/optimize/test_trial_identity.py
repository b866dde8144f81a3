"""A trial's folder belongs to one (id, parameters) pair: an id handed out again (a job that died after a
hand-out and before the next save restores an older ``next_id``) never resumes another parameter set's
checkpoint, hook state or kept result. Process-free: the block leader's claim and the hook runner."""
from __future__ import annotations

import logging

from nnlo.checkpoint import CheckpointWriter, list_checkpoints
from nnlo.optimize import block
from nnlo.optimize import trial_files as tf
from nnlo.optimize.runners import HookRunner
from nnlo.optimize.trial_files import (
    inherit,
    read_block_result,
    read_hook_state,
    trial_dir,
    write_block_result,
    write_hook_state,
)
from tests.helpers.env import example

curves = example("curves")
A = {"lr": 0.3, "width": 32, "momentum": 0.5}
B = {"lr": 0.002, "width": 400, "momentum": 0.9}


class Solo:
    """A fold group of one rank, as a runner sees it (it asks only for its rank)."""

    def Get_rank(self) -> int:
        return 0


def hook_job(out, trial_id, params, epochs):
    return HookRunner(curves, "val_loss").run(Solo(), trial_id, params, 0, 1, out, epochs=epochs)


def test_a_reused_id_with_other_parameters_trains_afresh_and_keeps_the_old_folder(tmp_path, caplog):
    # job 1 handed trial 5 out with A and it trained to the top rung; the job died before saving the hand-out
    hook_job(tmp_path, 5, A, 9)
    old = read_hook_state(trial_dir(tmp_path, 5, 0))
    # job 2, restored from the state before it, proposes id 5 again with other parameters, to the same epochs
    with caplog.at_level(logging.WARNING, logger="nnlo.optimize.trial_files"):
        got = hook_job(tmp_path, 5, B, 9)
    fresh = curves.evaluate(dict(B), epochs=9, state=None)
    assert got.metrics == {"val_loss": fresh["val_loss"]}  # B's own curve, not A's state reported as B's
    assert read_hook_state(trial_dir(tmp_path, 5, 0)) == (fresh["state"], 9)
    assert tf.owner(tmp_path, 5) == {"trial": 5, "params": B}
    stale = tmp_path / "trials" / "0005.stale-1"
    assert read_hook_state(stale / "fold-0") == old  # moved aside, never deleted
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "trial 5" in warning and "0005.stale-1" in warning


def test_the_same_trial_resumes_its_own_state(tmp_path):
    hook_job(tmp_path, 2, A, 3)
    assert tf.claim(tmp_path, 2, dict(A)) is None  # a re-run, a promotion: its own folder, untouched
    got = hook_job(tmp_path, 2, A, 9)  # trains on from epoch 3 (the curve is the same as straight)
    assert got.metrics == {"val_loss": curves.evaluate(dict(A), epochs=9)["val_loss"]}
    assert not list((tmp_path / "trials").glob("*.stale-*"))


def test_the_block_leader_claims_the_folder_before_a_training_restores_from_it(tmp_path):
    # trial 7 trained with A to a checkpoint (restore="auto" would resume it) and kept its block result
    w = CheckpointWriter(trial_dir(tmp_path, 7, 0) / "checkpoints", keep=1)
    tmp = w.begin(4, 40)
    (tmp / "master.pkl").write_bytes(b"A's weights")
    w.commit(tmp, {"epoch": 4, "updates": 40})
    tf.claim(tmp_path, 7, A)
    write_block_result(tmp_path, 7, A, None, {"trial": 7, "folds": [{"metrics": {"val_loss": 0.1}}]})
    task = block.claim_task(tmp_path, {"trial": 7, "params": B})
    assert "unclaimed" not in task
    assert list_checkpoints(trial_dir(tmp_path, 7, 0) / "checkpoints") == []  # nothing of A's to resume
    assert read_block_result(tmp_path, 7, B, None) is None and read_block_result(tmp_path, 7, A, None) is None
    moved = tmp_path / "trials" / "0007.stale-1"
    assert len(list_checkpoints(moved / "fold-0" / "checkpoints")) == 1
    # a second stale copy of the id gets its own name
    tf.claim(tmp_path, 7, A)
    assert (tmp_path / "trials" / "0007.stale-2" / tf.IDENTITY).is_file()


def test_files_without_an_identity_are_moved_aside_and_a_json_round_trip_matches(tmp_path):
    write_hook_state(trial_dir(tmp_path, 3, 0), {"epoch": 1, "loss": 2.0}, 1)  # whose? no record says
    assert tf.claim(tmp_path, 3, {"width": 16, "pair": (1, 2)}) == tmp_path / "trials" / "0003.stale-1"
    assert tf.claim(tmp_path, 3, {"pair": [1, 2], "width": 16}) is None  # as the state's JSON gives them back
    assert tf.claim(tmp_path, 4, A) is None and tf.trial_root(tmp_path, 4).is_dir()  # a new id: nothing to move


def test_a_pbt_child_reusing_an_id_keeps_the_other_trials_files(tmp_path):
    write_hook_state(trial_dir(tmp_path, 1, 0), {"epoch": 2, "loss": 1.0}, 2)
    tf.claim(tmp_path, 9, B)
    write_hook_state(trial_dir(tmp_path, 9, 0), {"epoch": 6, "loss": 0.5}, 6)  # another trial 9's
    assert inherit(tmp_path, 1, 9, 1, params=A) == 2
    assert read_hook_state(trial_dir(tmp_path, 9, 0)) == ({"epoch": 2, "loss": 1.0}, 2)
    assert tf.owner(tmp_path, 9) == {"trial": 9, "params": A}
    assert read_hook_state(tmp_path / "trials" / "0009.stale-1" / "fold-0") == ({"epoch": 6, "loss": 0.5}, 6)


def test_a_folder_ahead_of_the_job_is_an_earlier_hand_outs_even_for_the_same_point(tmp_path, caplog):
    # job 1 recorded trial 4's first rung, promoted it and trained it to 3 epochs, then died before saving;
    # the restored search hands id 4 out again with the same point (a seeded engine) at the first rung
    hook_job(tmp_path, 4, A, 1)
    hook_job(tmp_path, 4, A, 3)
    with caplog.at_level(logging.WARNING, logger="nnlo.optimize.trial_files"):
        got = hook_job(tmp_path, 4, A, 1)
    assert got.metrics == {"val_loss": curves.evaluate(dict(A), epochs=1)["val_loss"]}  # a 1-epoch figure
    assert read_hook_state(tmp_path / "trials" / "0004.stale-1" / "fold-0")[1] == 3
    assert any("beyond this job's 1" in r.getMessage() for r in caplog.records)
    assert tf.claim(tmp_path, 4, A, epochs=1) is None and tf.claim(tmp_path, 4, A, epochs=3) is None  # trains on


def test_a_training_checkpoint_ahead_of_the_stage_is_moved_aside_too(tmp_path):
    tf.claim(tmp_path, 6, A)
    w = CheckpointWriter(trial_dir(tmp_path, 6, 0) / "checkpoints", keep=1)
    tmp = w.begin(9, 90)
    (tmp / "master.pkl").write_bytes(b"x")
    w.commit(tmp, {"epoch": 9, "updates": 90})
    assert block.claim_task(tmp_path, {"trial": 6, "params": A, "epochs": 9}) == {"trial": 6, "params": A, "epochs": 9}
    assert list_checkpoints(trial_dir(tmp_path, 6, 0) / "checkpoints")  # its own stage: resumed
    block.claim_task(tmp_path, {"trial": 6, "params": A, "epochs": 3})
    assert list_checkpoints(trial_dir(tmp_path, 6, 0) / "checkpoints") == []
    assert (tmp_path / "trials" / "0006.stale-1" / tf.IDENTITY).is_file()
