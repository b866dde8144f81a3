"""Walltime kills at random moments, many times over, against the real checkpoint writer.

Each trial forks a process that writes checkpoints in a loop exactly as a training run does (the master's
:class:`nnlo.checkpoint.CheckpointWriter` opens a temporary folder, each "rank" writes its part with
:func:`nnlo.checkpoint.write_part`, the manifest is committed last) and, like the runtime, answers SIGTERM
by finishing the checkpoint in hand and exiting 75. The test sends SIGTERM at a random moment and SIGKILL a
random moment later (a batch system's walltime: TERM, then KILL after its grace time), often mid-write.
After every kill the next trial resumes from :func:`nnlo.checkpoint.find_latest`; the test checks that what it
finds is complete and self-consistent (every part present, each holding the same step and an intact
payload), and that progress never goes backwards.

Fork, not a fresh interpreter, keeps a trial at a few milliseconds: ``NNLO_FAULT_TRIALS=2000`` runs the big
version reported in docs/reliability.md.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.helpers.faults import rng, trials
from nnlo.errors import ConfigError
from nnlo.checkpoint import MANIFEST, CheckpointWriter, find_latest, list_checkpoints, read_manifest, read_part, \
    write_part

PARTS = ("master.pkl", "worker-0.pkl", "worker-1.pkl")


def _writer_loop(directory: Path, first_step: int, seed: int) -> None:
    """The child: checkpoints forever (step = epoch = updates), exit 75 after the one in hand on SIGTERM."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    import random

    r = random.Random(seed)
    writer = CheckpointWriter(directory, keep=3)
    step = first_step
    while True:
        tmp = writer.begin(step, step)
        for name in PARTS:
            blob = os.urandom(r.randrange(1_000, 100_000))
            write_part(tmp, name, {"step": step, "blob": blob, "sha": hashlib.sha256(blob).hexdigest()})
        writer.commit(tmp, {"epoch": step, "updates": step})
        if stop:
            os._exit(75)
        step += 1


def _dot_entries(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if p.name.startswith(".")} if directory.is_dir() else set()


def _check_complete(ckpt: Path) -> int:
    """The step of a checkpoint, after checking that it is whole; fails the test if it is torn."""
    manifest = read_manifest(ckpt)
    assert sorted(manifest["parts"]) == sorted(PARTS), (ckpt, manifest)
    steps = set()
    for name in PARTS:
        part = read_part(ckpt, name)
        assert hashlib.sha256(part["blob"]).hexdigest() == part["sha"], f"torn payload in {ckpt / name}"
        steps.add(part["step"])
    assert steps == {manifest["epoch"]}, f"{ckpt} mixes parts of steps {sorted(steps)}"
    return int(manifest["epoch"])


@pytest.mark.slow
def test_random_term_then_kill_never_leaves_a_torn_checkpoint(tmp_path: Path) -> None:
    n = trials(40)
    r = rng("checkpoint-kills")
    directory = tmp_path / "checkpoints"
    newest = -1
    mid_write = graceful = torn_older = 0
    for trial in range(n):
        before = _dot_entries(directory)
        latest = find_latest(directory)
        start_step = (_check_complete(latest) + 1) if latest is not None else 0
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            try:
                _writer_loop(directory, start_step, r.randrange(2**31))
            finally:
                os._exit(1)
        time.sleep(r.uniform(0.0, 0.25))
        os.kill(pid, signal.SIGTERM)
        time.sleep(r.choice([0.0, r.uniform(0.0, 0.02), r.uniform(0.0, 0.3)]))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
        graceful += os.WIFEXITED(status) and os.WEXITSTATUS(status) == 75
        assert not (os.WIFEXITED(status) and os.WEXITSTATUS(status) != 75), f"writer failed: {status}"
        mid_write += bool(_dot_entries(directory) - before)  # a new temporary folder or file: killed mid-write
        latest = find_latest(directory)
        if latest is None:
            assert newest == -1, f"trial {trial}: every checkpoint vanished"
            continue
        step = _check_complete(latest)
        assert step >= newest, f"trial {trial}: resumed from step {step} after step {newest} was complete"
        newest = step
        torn_older += sum(not _is_complete(older) for older in list_checkpoints(directory)[:-1])
    print(f"{n} trials: {mid_write} killed mid-write, {graceful} ended by TERM with exit 75, newest step {newest}, "
          f"{torn_older} torn older checkpoint(s) seen (see the pruning test)")
    # the test only means something if the kills really landed inside writes, and some runs progressed
    assert mid_write > 0 and newest > 0


def _is_complete(ckpt: Path) -> bool:
    try:
        _check_complete(ckpt)
    except (AssertionError, ConfigError):
        return False
    return True


@pytest.mark.slow
def test_a_kill_while_pruning_leaves_no_torn_checkpoint(tmp_path: Path) -> None:
    """Kill the writer inside its pruning, after one part of an old checkpoint is gone (keep=1).

    ``shutil.rmtree`` is replaced in the child by one that removes a single non-manifest file of the folder
    it was given and then SIGKILLs the process: the worst moment, whatever order the file system lists
    files in. A prune that first hides the folder (rename to a dot-name, or removes the manifest first)
    passes; one that deletes a listed checkpoint in place leaves it torn.
    """
    import shutil

    directory = tmp_path / "checkpoints"
    writer = CheckpointWriter(directory, keep=5)
    for step in (1, 2):
        tmp = writer.begin(step, step)
        for name in PARTS:
            write_part(tmp, name, {"step": step, "blob": b"x", "sha": hashlib.sha256(b"x").hexdigest()})
        writer.commit(tmp, {"epoch": step, "updates": step})
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child prunes down to one checkpoint and dies mid-way
        def rmtree(path, *args, **kwargs):
            for p in sorted(Path(path).iterdir()):
                if p.name != MANIFEST:
                    p.unlink()
                    break
            os.kill(os.getpid(), signal.SIGKILL)

        shutil.rmtree = rmtree  # type: ignore[assignment]
        CheckpointWriter(directory, keep=1)._prune()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status), "pruning removed nothing: the kill was not injected"
    for ckpt in list_checkpoints(directory):
        _check_complete(ckpt)


def test_a_truncated_or_garbled_part_is_a_one_line_error(tmp_path: Path) -> None:
    """Damage done outside the writer (a full disk, a bad copy) is reported, naming the file and the fix."""
    writer = CheckpointWriter(tmp_path)
    tmp = writer.begin(1, 10)
    for name in PARTS:
        write_part(tmp, name, {"step": 1, "blob": b"x" * 10_000})
    ckpt = writer.commit(tmp, {"epoch": 1, "updates": 10})
    part = ckpt / "worker-1.pkl"
    part.write_bytes(part.read_bytes()[:5000])
    with pytest.raises(ConfigError, match=r"worker-1\.pkl cannot be read .*restore an older checkpoint"):
        read_part(ckpt, "worker-1.pkl")
    (ckpt / MANIFEST).write_text('{"format": 1, "epo')
    with pytest.raises(ConfigError, match=r"manifest\.json is corrupt .*restore an older checkpoint"):
        read_manifest(ckpt)
    (ckpt / MANIFEST).write_text(json.dumps({"format": 99}))
    with pytest.raises(ConfigError, match="format 99"):
        read_manifest(ckpt)


@pytest.mark.slow
def test_a_killed_writers_temporary_folder_is_cleaned_up(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoints"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: opens a checkpoint, writes one part, dies
        writer = CheckpointWriter(directory)
        tmp = writer.begin(1, 1)
        write_part(tmp, "master.pkl", {"blob": b"x" * 100_000})
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    assert [p.name for p in directory.iterdir() if p.name.startswith(".tmp-")], "the child left no temporary folder"
    writer = CheckpointWriter(directory)
    tmp = writer.begin(2, 2)
    write_part(tmp, "master.pkl", {"blob": b"y"})
    writer.commit(tmp, {"epoch": 2, "updates": 2})
    assert [p.name for p in directory.iterdir()] == ["ckpt-e0002-u00000002"]


#: a pid no process of this host can have (past Linux's PID_MAX_LIMIT): kill(pid, 0) says ESRCH for it
DEAD_PID = 4_194_304 + 1


def _leftover(directory: Path, name: str, age_s: float = 3600.0) -> Path:
    """A writer's hidden folder with one part in it, last modified ``age_s`` seconds ago."""
    path = directory / name
    path.mkdir(parents=True)
    (path / "master.pkl").write_bytes(b"x" * 1000)
    os.utime(path, (time.time() - age_s, time.time() - age_s))
    return path


def test_leftovers_of_other_hosts_go_once_a_newer_checkpoint_is_published(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain's next job may run on another node: its predecessor's pid cannot be checked there, so another
    host's leftover goes only once a newer checkpoint is published, even if its pid is free on this host;
    this host's leftover goes as soon as its writer is gone; a live writer's newer folder is kept."""
    import socket

    real_kill = os.kill

    def probe_only(pid: int, sig: int) -> None:  # the live writer below is our parent: it must only be probed
        assert sig == 0, f"signal {sig} sent to pid {pid}: a leftover's writer may only be probed (signal 0)"
        real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", probe_only)
    host = socket.gethostname()
    directory = tmp_path / "checkpoints"
    # another host's writer, whose pid is not alive here (and would wrongly look dead if checked here)
    other = _leftover(directory, f".tmp-ckpt-e0001-u00000001-other-node-{DEAD_PID}")
    other_old = _leftover(directory, f".old-ckpt-e0001-u00000001-other-node-{DEAD_PID}")
    legacy = _leftover(directory, f".tmp-ckpt-e0001-u00000001-{DEAD_PID}")  # written before hosts were recorded
    dead_here = _leftover(directory, f".tmp-ckpt-e0001-u00000001-{host}-{DEAD_PID}", age_s=0)
    not_ours = _leftover(directory, "tmp-ckpt-e0001-u00000001-other-node-1")  # not a writer's hidden name
    twin = _leftover(directory, f".old-ckpt-e0001-u00000001-other-node-{os.getpid()}")  # our pid, not our host
    writer = CheckpointWriter(directory)
    tmp = writer.begin(2, 2)
    assert other.exists() and other_old.exists() and legacy.exists(), \
        "removed before any checkpoint proved it stale"
    assert not dead_here.exists(), "this host's leftover outlived its writer"
    assert tmp.exists() and tmp.name == f".tmp-ckpt-e0002-u00000002-{host}-{os.getpid()}"
    write_part(tmp, "master.pkl", {"blob": b"y"})
    writer.commit(tmp, {"epoch": 2, "updates": 2})
    assert not other.exists() and not other_old.exists() and not legacy.exists() and not twin.exists()
    assert not_ours.exists()
    live = _leftover(directory, f".tmp-ckpt-e0003-u00000003-{host}-{os.getppid()}", age_s=-60)
    newer_other = _leftover(directory, f".tmp-ckpt-e0003-u00000003-other-node-{DEAD_PID}", age_s=-60)
    writer.commit(writer.begin(4, 4), {"epoch": 4, "updates": 4})
    assert live.exists(), "a live writer's folder was removed"
    assert newer_other.exists(), "another host's writer newer than every checkpoint was removed"
    assert sorted(p.name for p in directory.iterdir() if not p.name.startswith(".")) == [
        "ckpt-e0002-u00000002", "ckpt-e0004-u00000004", "tmp-ckpt-e0001-u00000001-other-node-1"]
