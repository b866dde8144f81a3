"""nnlo.checkpoint without processes: names, the manifest, which folders count as checkpoints, --restore, the
writer's publish / prune / abandon, and every error's words (the kill tests are tests/reliability)."""
from __future__ import annotations

import json
import os
import pickle
import socket
from pathlib import Path

import pytest

from nnlo import checkpoint as ckpt
from nnlo.errors import ConfigError


def _publish(writer: ckpt.CheckpointWriter, epoch: int, updates: int, parts: tuple[str, ...] = ("master.pkl",),
             **manifest: object) -> Path:
    tmp = writer.begin(epoch, updates)
    for name in parts:
        ckpt.write_part(tmp, name, {"epoch": epoch, "part": name})
    return writer.commit(tmp, {"epoch": epoch, "updates": updates, **manifest})


def test_names_sort_by_epoch_then_updates() -> None:
    assert ckpt.checkpoint_name(4, 360) == "ckpt-e0004-u00000360"
    assert ckpt.checkpoint_name(12345, 123456789) == "ckpt-e12345-u123456789"
    assert ckpt.part_name("master") == "master.pkl" and ckpt.part_name("worker", 0) == "worker-0.pkl"
    assert ckpt.part_name("worker", 12) == "worker-12.pkl"


def test_a_published_checkpoint_holds_its_manifest_and_parts(tmp_path: Path) -> None:
    writer = ckpt.CheckpointWriter(tmp_path / "checkpoints")
    assert writer.keep == 3 and writer.last_path is None and writer.last_duration is None
    path = _publish(writer, 2, 20, ("worker-1.pkl", "master.pkl"), mode="gem", workers=2)
    assert path == tmp_path / "checkpoints" / "ckpt-e0002-u00000020" and writer.last_path == path
    assert writer.last_duration is not None and writer.last_duration >= 0
    manifest = ckpt.read_manifest(path)
    assert manifest["parts"] == ["master.pkl", "worker-1.pkl"]  # sorted; the manifest itself not a part
    assert (manifest["format"], manifest["epoch"], manifest["updates"], manifest["mode"]) == (1, 2, 20, "gem")
    assert isinstance(manifest["written"], float)
    assert ckpt.read_part(path, "worker-1.pkl") == {"epoch": 2, "part": "worker-1.pkl"}
    with open(path / "master.pkl", "rb") as f:  # the newest pickle protocol, as documented
        assert f.read(2) == b"\x80" + bytes([pickle.HIGHEST_PROTOCOL])
    assert sorted(p.name for p in path.iterdir()) == ["manifest.json", "master.pkl", "worker-1.pkl"]
    assert ckpt.find_latest(tmp_path) == path and ckpt.find_latest(path) == path


def test_only_complete_checkpoint_folders_are_listed_in_order(tmp_path: Path) -> None:
    writer = ckpt.CheckpointWriter(tmp_path, keep=10)
    a = _publish(writer, 1, 900)
    b = _publish(writer, 2, 50)
    c = _publish(writer, 2, 60)
    (tmp_path / "ckpt-e0003-u00000001").mkdir()  # no manifest: a folder being written by an older nnlo
    torn = _publish(writer, 4, 1, ("master.pkl", "worker-0.pkl"))
    (torn / "worker-0.pkl").unlink()  # a manifest whose parts are missing: torn by a kill
    broken = _publish(writer, 5, 1)
    (broken / "manifest.json").write_text("{not json")  # unreadable: listed, so that restoring it fails loudly
    odd = _publish(writer, 6, 1)
    (odd / "manifest.json").write_text(json.dumps({"format": 1, "parts": "master.pkl"}))  # parts not a list
    (tmp_path / "ckpt-e0007-u00000001.zip").write_text("x")  # a file, not a folder
    (tmp_path / "ckpt-e7-u1").mkdir()
    (tmp_path / ".tmp-ckpt-e0008-u00000001-h-1").mkdir()
    assert ckpt.list_checkpoints(tmp_path) == [a, b, c, broken, odd]
    nested = tmp_path / "run"
    (nested / "checkpoints").mkdir(parents=True)
    os.rename(a, nested / "checkpoints" / a.name)
    os.rename(c, nested / c.name)
    assert ckpt.list_checkpoints(nested) == [nested / "checkpoints" / a.name, nested / c.name]
    assert ckpt.find_latest(nested) == nested / c.name
    assert ckpt.list_checkpoints(tmp_path / "nothing") == [] and ckpt.find_latest(tmp_path / "nothing") is None


@pytest.mark.parametrize("manifest, message", [
    (None, r"^{dir} is not a complete checkpoint \(no manifest\.json\)$"),
    ("{", r"^{dir}/manifest\.json is corrupt \(.+\); restore an older checkpoint$"),
    ('{"format": 2}', r"^{dir} has checkpoint format 2, this nnlo reads 1$"),
    ("{}", r"^{dir} has checkpoint format None, this nnlo reads 1$"),
])
def test_manifest_errors_name_the_folder_and_the_fix(tmp_path: Path, manifest: str | None, message: str) -> None:
    if manifest is not None:
        (tmp_path / "manifest.json").write_text(manifest)
    with pytest.raises(ConfigError, match=message.format(dir=str(tmp_path).replace(".", r"\."))):
        ckpt.read_manifest(tmp_path)


def test_part_errors_name_the_part_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"^checkpoint {tmp_path} has no worker-3\.pkl; it is incomplete or from "
                                          r"another run$"):
        ckpt.read_part(tmp_path, "worker-3.pkl")
    (tmp_path / "bad.pkl").write_bytes(b"\x80\x05garbage")
    with pytest.raises(ConfigError, match=rf"^checkpoint part {tmp_path}/bad\.pkl cannot be read \(.*\); restore an "
                                          r"older checkpoint$"):
        ckpt.read_part(tmp_path, "bad.pkl")
    (tmp_path / "empty.pkl").write_bytes(b"")
    with pytest.raises(ConfigError, match="empty.pkl cannot be read"):
        ckpt.read_part(tmp_path, "empty.pkl")


def test_restore_points(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert ckpt.restore_point(None, run) is None and ckpt.restore_point("", run) is None
    assert ckpt.restore_point("auto", run) is None  # the first job of a chain starts fresh
    with pytest.raises(ConfigError, match=r"^--restore auto needs an output directory \(--checkpoint DIR\)$"):
        ckpt.restore_point("auto", None)
    with pytest.raises(ConfigError, match=rf"^--restore {tmp_path}/x does not exist; give a run or checkpoint "
                                          r"folder, or --restore auto \(a fresh start when the run has no checkpoint "
                                          r"yet\)$"):
        ckpt.restore_point(str(tmp_path / "x"), run)
    run.mkdir()
    with pytest.raises(ConfigError, match=r"^--restore run holds no complete checkpoint \(no checkpoints/ckpt-e\*-u\* "
                                          r"folder with a manifest\.json\); give the run or checkpoint folder of an "
                                          r"earlier run, or --restore auto$"):
        ckpt.restore_point("run", None, folder=run)  # messages name SPEC as typed
    first = _publish(ckpt.CheckpointWriter(run / "checkpoints"), 1, 1)
    latest = _publish(ckpt.CheckpointWriter(run / "checkpoints"), 2, 2)
    assert ckpt.restore_point("auto", run) == latest
    assert ckpt.restore_point(str(run), None) == latest
    assert ckpt.restore_point("whatever", None, folder=first) == first  # a checkpoint folder itself
    assert ckpt.RESTORE_AUTO == "auto"


def test_the_writer_keeps_the_newest_and_at_least_one(tmp_path: Path) -> None:
    writer = ckpt.CheckpointWriter(tmp_path, keep=2)
    published = [_publish(writer, e, e) for e in (1, 2, 3, 4)]
    assert ckpt.list_checkpoints(tmp_path) == published[2:]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # pruned, nothing hidden left
    assert ckpt.CheckpointWriter(tmp_path, keep=0).keep == 1 and ckpt.CheckpointWriter(tmp_path, keep=-5).keep == 1
    one = ckpt.CheckpointWriter(tmp_path / "one", keep=0)
    assert [_publish(one, e, e) for e in (1, 2)][-1:] == ckpt.list_checkpoints(tmp_path / "one")


def test_begin_abandon_and_a_same_named_checkpoint(tmp_path: Path) -> None:
    writer = ckpt.CheckpointWriter(tmp_path / "new" / "checkpoints")
    tmp = writer.begin(3, 30)
    assert tmp.name == f".tmp-ckpt-e0003-u00000030-{socket.gethostname()}-{os.getpid()}" and tmp.is_dir()
    (tmp / "stale.pkl").write_bytes(b"x")
    again = writer.begin(3, 30)  # the same step begun again: a fresh, empty folder
    assert again == tmp and list(again.iterdir()) == []
    writer.abandon(again)
    assert not again.exists() and list(writer.directory.iterdir()) == []
    writer.abandon(again)  # twice: no error
    first = _publish(writer, 3, 30, ("a.pkl",))
    second = _publish(writer, 3, 30, ("b.pkl",))  # replaces the checkpoint of the same name
    assert first == second and ckpt.read_manifest(second)["parts"] == ["b.pkl"]
    assert sorted(p.name for p in writer.directory.iterdir()) == ["ckpt-e0003-u00000030"]


def test_leftovers_remove_nothing_without_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_kill = os.kill

    def probe_only(pid: int, sig: int) -> None:
        assert sig == 0, f"signal {sig} sent to pid {pid}: a writer may only be probed (signal 0)"
        real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", probe_only)
    ckpt.CheckpointWriter(tmp_path / "absent").remove_leftovers()
    assert not (tmp_path / "absent").exists()
    assert ckpt._alive(os.getpid()) and not ckpt._alive(4_194_305)
    assert ckpt._mtime(tmp_path / "absent") is None and ckpt._mtime(tmp_path) == tmp_path.stat().st_mtime


def test_checkpoints_sort_by_their_step_not_their_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    old = _publish(ckpt.CheckpointWriter(run), 9999, 1)
    new = _publish(ckpt.CheckpointWriter(run / "checkpoints"), 10000, 2)  # e10000 sorts before e9999 as text
    assert ckpt.list_checkpoints(run) == [old, new] and ckpt.find_latest(run) == new


def test_what_the_writer_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    import logging
    import time

    caplog.set_level(logging.INFO, logger="nnlo.checkpoint")
    writer = ckpt.CheckpointWriter(tmp_path, keep=1)
    before = time.monotonic()
    first = _publish(writer, 1, 1)
    after = time.monotonic()
    assert writer.last_duration is not None and 0 <= writer.last_duration <= after - before
    assert caplog.messages == [f"checkpoint {first} written in {writer.last_duration:.2f} s"]
    stale = tmp_path / f".tmp-ckpt-e0001-u00000001-{socket.gethostname()}-4194305"
    stale.mkdir()
    caplog.clear()
    writer.remove_leftovers()
    assert caplog.messages == [f"removing {stale}, left by a writer that is gone"] and not stale.exists()
    # a checkpoint that cannot be hidden (renamed) is kept, said so, and the others are still pruned
    second, third = _publish(ckpt.CheckpointWriter(tmp_path, keep=9), 2, 2), _publish(
        ckpt.CheckpointWriter(tmp_path, keep=9), 3, 3)
    rename = os.rename

    def refuse_first(src: object, dst: object) -> None:
        if Path(str(src)) == first:
            raise OSError(39, "Directory not empty")
        rename(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rename", refuse_first)
    caplog.clear()
    writer._prune()
    assert ckpt.list_checkpoints(tmp_path) == [first, third] and not second.exists()
    assert caplog.messages == [f"cannot prune checkpoint {first} ([Errno 39] Directory not empty); it is kept"]


def test_a_commit_without_begin_and_hidden_files_in_a_checkpoint(tmp_path: Path) -> None:
    writer = ckpt.CheckpointWriter(tmp_path)
    tmp = tmp_path / ".tmp-by-hand"
    tmp.mkdir()
    ckpt.write_part(tmp, "master.pkl", {"x": 1})
    (tmp / ".lock").write_text("")  # hidden files are no parts
    path = writer.commit(tmp, {"epoch": 1, "updates": 2})
    assert writer.last_duration is None and ckpt.read_manifest(path)["parts"] == ["master.pkl"]


def test_a_leftover_as_old_as_the_newest_checkpoint_is_kept(tmp_path: Path) -> None:
    writer = ckpt.CheckpointWriter(tmp_path)
    newest = _publish(writer, 1, 1)
    same = tmp_path / ".old-ckpt-e0001-u00000001-other-host-4194305"
    same.mkdir()
    stamp = newest.stat().st_mtime
    os.utime(same, (stamp, stamp))
    writer.remove_leftovers()
    assert same.exists()  # only a folder older than the newest checkpoint is proven stale
    os.utime(same, (stamp - 1, stamp - 1))
    writer.remove_leftovers()
    assert not same.exists()


def test_a_process_of_another_user_counts_as_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    def kill(pid: int, sig: int) -> None:
        assert sig == 0  # a probe, never a signal
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", kill)
    assert ckpt._alive(12345)
