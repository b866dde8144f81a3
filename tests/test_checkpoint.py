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


def test_leftovers_remove_nothing_without_a_folder(tmp_path: Path) -> None:
    ckpt.CheckpointWriter(tmp_path / "absent").remove_leftovers()
    assert not (tmp_path / "absent").exists()
    assert ckpt._alive(os.getpid()) and not ckpt._alive(4_194_305)
    assert ckpt._mtime(tmp_path / "absent") is None and ckpt._mtime(tmp_path) == tmp_path.stat().st_mtime
