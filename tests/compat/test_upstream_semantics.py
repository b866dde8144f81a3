"""What upstream options mean in nnlo beyond their spelling: --cache-data DIR (node-local copies),
--restore DIR without a checkpoint, --gem-lr beside another worker optimizer, --scale-lr with nothing to
scale, and upstream command lines through ``nnlo submit --dry-run``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from nnlo.checkpoint import MANIFEST, restore_point
from nnlo.config import CACHE_IN_MEMORY, TrainConfig
from nnlo.data import H5Dataset
from nnlo.data.cache import cache_name, cached
from nnlo.errors import ConfigError, DataError
from nnlo_sched.inner import parse_inner

REPO = Path(__file__).resolve().parents[2]


def h5(path: Path, n: int, start: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f["features"] = np.arange(start, start + n, dtype=np.float32)[:, None]
        f["labels"] = np.arange(start, start + n, dtype=np.float32)
    return path


# -- --cache-data DIR --------------------------------------------------------------------------------------
def test_cache_data_copies_each_file_once_and_reads_the_copies(tmp_path: Path) -> None:
    a, b = h5(tmp_path / "src" / "a.h5", 3), h5(tmp_path / "src" / "b.h5", 2, start=3)
    cache = tmp_path / "node-local" / "cache"
    local = cached([a, b], cache)
    assert [p.parent for p in local] == [cache, cache] and all(p.is_file() for p in local)
    assert [p.name for p in local] == [cache_name(a), cache_name(b)]
    assert H5Dataset(local, features="features", labels="labels").read(np.arange(5))[1].tolist() == [0, 1, 2, 3, 4]
    inode = local[0].stat().st_ino
    assert cached([a], cache) == [local[0]] and local[0].stat().st_ino == inode  # reused, not copied again
    assert not [p for p in cache.iterdir() if p.name.startswith(".")], "a temporary copy was left behind"


def test_a_changed_source_is_copied_again(tmp_path: Path) -> None:
    a = h5(tmp_path / "a.h5", 3)
    cache = tmp_path / "cache"
    first = cached([a], cache)[0]
    h5(a, 5, start=10)
    os.utime(a, (1_000_000_000, 1_000_000_000))
    again = cached([a], cache)[0]
    assert again == first
    with h5py.File(again, "r") as f:
        assert f["labels"][:].tolist() == [10, 11, 12, 13, 14]


def test_files_of_the_same_name_in_different_folders_do_not_collide(tmp_path: Path) -> None:
    a, b = h5(tmp_path / "x" / "train.h5", 2), h5(tmp_path / "y" / "train.h5", 3)
    local = cached([a, b], tmp_path / "cache")
    assert local[0] != local[1] and [len(h5py.File(p, "r")["labels"]) for p in local] == [2, 3]


def test_no_cache_folder_reads_the_files_themselves_and_bad_folders_are_one_line(tmp_path: Path) -> None:
    a = h5(tmp_path / "a.h5", 2)
    assert cached([str(a)], None) == [a]
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(DataError, match=r"--cache-data .* cannot be created"):
        cached([a], blocker / "cache")
    with pytest.raises(DataError, match="does not exist"):
        cached([tmp_path / "missing.h5"], tmp_path / "cache")


def test_old_configs_with_boolean_data_options_still_load() -> None:
    old = TrainConfig.from_dict({"model": "m.py", "preload_data": True, "cache_data": True})
    assert old.preload_data == 1 and old.cache_data == CACHE_IN_MEMORY and old.in_memory
    off = TrainConfig.from_dict({"model": "m.py", "preload_data": False, "cache_data": False})
    assert off.preload_data == 0 and off.cache_data is None and not off.in_memory


# -- --restore ---------------------------------------------------------------------------------------------
def test_restore_from_a_folder_without_a_checkpoint_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "run"
    empty.mkdir()
    with pytest.raises(ConfigError, match="holds no complete checkpoint"):
        restore_point(str(empty), None)
    with pytest.raises(ConfigError, match="does not exist"):
        restore_point(str(tmp_path / "typo"), None)
    ckpt = empty / "checkpoints" / "ckpt-e0002-u00000010"
    ckpt.mkdir(parents=True)
    (ckpt / MANIFEST).write_text('{"parts": []}')
    assert restore_point(str(empty), None) == ckpt


def test_restore_auto_still_starts_fresh_when_there_is_no_checkpoint(tmp_path: Path) -> None:
    assert restore_point("auto", tmp_path) is None
    assert restore_point(None, tmp_path) is None
    with pytest.raises(ConfigError, match="--restore auto needs an output directory"):
        restore_point("auto", None)


# -- --gem-lr and --scale-lr -------------------------------------------------------------------------------
@pytest.mark.parametrize("worker", ["adam", "rmsprop:lr=0.05", "sgd:lr=0.1", "sgd"])
def test_gem_lr_beside_a_worker_optimizer_with_another_step_is_refused(worker: str) -> None:
    with pytest.raises(ConfigError, match=r"--gem-lr 0\.05 sets the step of GEM.s worker SGD"):
        TrainConfig(model="m.py", mode="gem", gem_lr=0.05, worker_optimizer=worker).validate()


def test_gem_lr_beside_another_worker_step_is_refused_before_any_launch(monkeypatch) -> None:
    """The launching side (`nnlo train -n 3`, `nnlo submit`) parses the inner command and refuses it before
    any rank or job starts: nothing is launched."""
    import nnlo_sched.launchers.local_launch as local_launch
    from nnlo_sched.cli import main

    monkeypatch.setattr(local_launch.subprocess, "Popen", lambda *a, **k: pytest.fail("a launch started"))
    with pytest.raises(ConfigError, match="--gem-lr 0.1 sets the step"):
        parse_inner("train", ["--model", "m.py", "--gem-lr", "0.1", "--worker-optimizer", "adam"])
    with pytest.raises(SystemExit) as exit_:
        main(["train", "-n", "3", "--model", "m.py", "--gem-lr", "0.1", "--worker-optimizer", "adam"])
    assert exit_.value.code == 2


@pytest.mark.parametrize("changes", [
    dict(gem_lr=0.05),  # the default worker optimizer is sgd:lr=<gem-lr>
    dict(gem_lr=0.05, worker_optimizer="sgd:lr=0.05,momentum=0.5"),
    dict(worker_optimizer="adam"),  # --gem-lr left at its default: nothing is ignored
    dict(mode="downpour", worker_optimizer="adam"),
])
def test_gem_lr_is_accepted_where_it_means_what_gem_means(changes: dict[str, object]) -> None:
    cfg = TrainConfig(model="m.py", mode="gem").replace(**changes).validate()
    if cfg.mode == "gem" and not cfg.worker_optimizer:
        assert cfg.worker_optimizer_spec == f"sgd:lr={cfg.gem_lr}"


def test_scale_lr_with_nothing_to_scale_is_refused_and_scales_worker_groups() -> None:
    with pytest.raises(ConfigError, match="--scale-lr multiplies the learning rate by the ranks"):
        TrainConfig(model="m.py", mode="downpour", scale_lr=True).validate()
    for ok in (dict(mode="allreduce"), dict(n_masters=0, mode="allreduce"), dict(n_processes=2)):
        TrainConfig(model="m.py", mode="downpour", scale_lr=True).replace(**ok).validate()
    from nnlo.algorithms.specs import parse_optimizer_spec
    from nnlo.training.allreduce import scaled_config

    group = TrainConfig(model="m.py", mode="downpour", scale_lr=True, n_processes=4, worker_optimizer="sgd:lr=0.1")
    assert parse_optimizer_spec(scaled_config(group, group.n_processes).worker_optimizer_spec)[1]["lr"] == \
        pytest.approx(0.4)


# -- through nnlo submit -----------------------------------------------------------------------------------
def submit(tmp_path: Path, nnlo_env: dict[str, str], *inner: str) -> subprocess.CompletedProcess[str]:
    model = tmp_path / "model.py"
    model.write_text("def get_model():\n    return None\n")
    for name in ("T.list", "V.list"):
        (tmp_path / name).write_text("data.h5\n")
    cmd = [sys.executable, "-m", "nnlo_sched", "submit", "--cluster", "local", "--workers", "2", "--dry-run",
           "--no-check", "train", *inner]
    return subprocess.run(cmd, cwd=tmp_path, env={**nnlo_env, "NNLO_HOME": str(tmp_path / "home")},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_upstream_command_lines_go_through_submit(tmp_path: Path, nnlo_env: dict[str, str]) -> None:
    ok = submit(tmp_path, nnlo_env, "model.py", "T.list", "V.list", "--verbose", "--early", "val_loss,~<,4",
                "--mode", "sgd", "--masters", "1", "--epochs", "2")
    assert ok.returncode == 0, ok.stderr
    warnings = [ln for ln in ok.stderr.splitlines() if ln.startswith("nnlo: warning:")]
    assert warnings == [ln for ln in warnings if "--verbose has no effect" in ln] and len(warnings) == 1
    bad = submit(tmp_path, nnlo_env, "--model", "model.py", "--log-file", "x.log")
    errors = [ln for ln in bad.stderr.splitlines() if ln.startswith("nnlo: error:")]
    assert bad.returncode == 2 and len(errors) == 1 and "--log-file" in errors[0], bad.stderr
    assert "Traceback" not in bad.stderr
    ambiguous = submit(tmp_path, nnlo_env, "--model", "model.py", "--gem", "1")
    assert ambiguous.returncode == 2 and "--gem is ambiguous" in ambiguous.stderr


def test_submit_stores_the_same_training_as_the_nnlo_spelling() -> None:
    upstream = parse_inner("train", ["m.py", "t.list", "v.list", "--easgd", "--processes", "2", "--trace",
                                     "--checkpoint-int", "2", "--early", "val_loss,<,3"])
    own = parse_inner("train", ["--model", "m.py", "--train", "t.list", "--val", "v.list", "--mode", "easgd",
                                "--n-processes", "2", "--timeline", "--checkpoint-interval", "2",
                                "--early-stopping", "val_loss,<,3"])
    assert upstream.train == own.train and upstream.train.to_dict() == own.train.to_dict()
    assert upstream.shape == own.shape


def test_submit_refuses_a_restore_folder_without_a_checkpoint_before_queueing(tmp_path: Path) -> None:
    from nnlo_sched.checks import check_run

    (tmp_path / "m.py").write_text("def get_model():\n    return None\n")
    (tmp_path / "old-run").mkdir()
    with pytest.raises(ConfigError, match="holds no complete checkpoint"):
        check_run(TrainConfig(model="m.py", restore="old-run"), None, cwd=tmp_path)
