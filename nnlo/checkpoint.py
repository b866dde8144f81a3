"""Complete, atomic checkpoints: one directory per checkpoint, written in parallel, published by a rename.

Layout (``<dir>`` is the run's ``checkpoints/`` folder)::

    <dir>/ckpt-e0004-u00000360/      a complete checkpoint: after 4 epochs' worth and 360 master updates
        manifest.json                what it is (epoch, updates, mode, workers, config); written last
        master.pkl                   central weights, master optimizer, history, early-stopping state, RNG
        worker-0.pkl ...             each worker's optimizer, data position (epoch, batch), RNG, and the
                                     worker's own weights where the algorithm keeps them (EASGD) or GEM's
                                     proxy velocity; an all-reduce group leader's part keeps every
                                     member's RNG (nnlo.training.streams)
        replica.pkl                  an all-reduce run's one part (rank 0's): the replicas' shared state
                                     and every replica's own RNG

Why a directory written by every rank: tensors never travel over MPI just to be saved (each worker writes its
own optimizer state to the shared file system, as HPC checkpointing does), and the checkpoint appears only
when complete: parts go into ``.tmp-ckpt-...``, the master writes ``manifest.json`` after every worker has
acknowledged its part, fsyncs, and renames the folder into place. A crash at any moment leaves either the
previous checkpoint or the new one, never half of one. The last ``keep`` checkpoints are kept; an older one is
first renamed to a hidden ``.old-...`` name (atomic) and only then deleted, so a kill while pruning leaves a
hidden leftover, never a listed checkpoint with parts missing.

Temporary and hidden folders carry the writer's host and pid (``.tmp-ckpt-e0004-u00000360-<host>-<pid>``):
the master removes those of dead writers when it opens a checkpoint and after it publishes one, so a job
killed mid-write (a walltime, a node failure) does not leak a full copy of the model state per kill.
"""
from __future__ import annotations

import json
import logging
import os
import pickle
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from nnlo.atomic import atomic_open, fsync_folder
from nnlo.atomic import write_json as write_json_atomic  # also used by history and the driver
from nnlo.contract import CHECKPOINT_DIR as SUBDIR
from nnlo.contract import MANIFEST_FILE as MANIFEST
from nnlo.errors import ConfigError
from nnlo.job import checkpointed

log = logging.getLogger("nnlo.checkpoint")

FORMAT = 1
_NAME = re.compile(r"^ckpt-e(\d+)-u(\d+)$")
#: a writer's temporary or trash folder; ``host`` is absent in names written by nnlo before it was recorded
_LEFTOVER = re.compile(r"^\.(?:tmp|old)-ckpt-e\d+-u\d+-(?:(?P<host>.+)-)?(?P<pid>\d+)$")


def checkpoint_name(epoch: int, updates: int) -> str:
    return f"ckpt-e{epoch:04d}-u{updates:08d}"


def part_name(role: str, index: int | None = None) -> str:
    return f"{role}.pkl" if index is None else f"{role}-{index}.pkl"


def write_part(directory: str | Path, name: str, obj: Any) -> Path:
    """Pickle ``obj`` into ``directory/name`` (write to a temporary name, fsync, rename)."""
    path = Path(directory) / name
    with atomic_open(path, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def read_part(checkpoint: str | Path, name: str) -> Any:
    path = Path(checkpoint) / name
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        raise ConfigError(f"checkpoint {checkpoint} has no {name}; it is incomplete or from another run") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as e:
        raise ConfigError(f"checkpoint part {path} cannot be read ({e}); restore an older checkpoint") from None


def read_manifest(checkpoint: str | Path) -> dict[str, Any]:
    path = Path(checkpoint) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{checkpoint} is not a complete checkpoint (no {MANIFEST})") from None
    except ValueError as e:
        raise ConfigError(f"{path} is corrupt ({e}); restore an older checkpoint") from None
    if data.get("format") != FORMAT:
        raise ConfigError(f"{checkpoint} has checkpoint format {data.get('format')}, this nnlo reads {FORMAT}")
    return data


def _key(path: Path) -> tuple[int, int]:
    m = _NAME.match(path.name)
    assert m is not None
    return int(m.group(1)), int(m.group(2))


def _is_complete(path: Path) -> bool:
    """A published checkpoint: a manifest, and every part the manifest names.

    A manifest that cannot be read at all still counts: that is damage from outside the writer (a bad copy,
    a full disk), and restoring it must fail loudly naming the file rather than silently fall back to an
    older checkpoint. A readable manifest whose parts are missing is a checkpoint torn by a kill (an older
    nnlo deleted in place while pruning): it is skipped.
    """
    manifest = path / MANIFEST
    if not manifest.is_file():
        return False
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return True
    parts = data.get("parts") if isinstance(data, dict) else None
    if not isinstance(parts, list):
        return True
    return all(isinstance(name, str) and (path / name).is_file() for name in parts)


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Complete checkpoints in ``directory`` (or its ``checkpoints/`` folder), oldest first.

    Only ``ckpt-e*-u*`` names: hidden temporary (``.tmp-``) and trash (``.old-``) folders are never offered.
    """
    found: list[Path] = []
    for base in (Path(directory), Path(directory) / SUBDIR):
        if base.is_dir():
            found.extend(p for p in base.iterdir() if p.is_dir() and _NAME.match(p.name) and _is_complete(p))
    return sorted(set(found), key=_key)


def find_latest(path: str | Path) -> Path | None:
    """The newest complete checkpoint for ``--restore PATH``: PATH itself if it is one, else the newest in
    PATH or PATH/checkpoints; None if there is none yet (the run then starts fresh)."""
    p = Path(path)
    if (p / MANIFEST).is_file():
        return p
    found = list_checkpoints(p)
    return found[-1] if found else None


#: ``--restore auto``: the run's own directory; a fresh start while it holds no checkpoint yet
RESTORE_AUTO = "auto"


def restore_point(spec: str | None, out_dir: str | Path | None, folder: Path | None = None) -> Path | None:
    """The checkpoint ``--restore SPEC`` resumes from, or None for a fresh start (``folder``: the path SPEC
    names as the caller resolved it, else SPEC itself; messages name SPEC as typed).

    ``auto`` looks in the run directory ``out_dir`` and starts fresh when it holds no checkpoint yet (the
    first job of a chain). An explicit folder must hold one: restoring from a folder that has none is a
    :class:`ConfigError`, never a silent fresh start (a typo would otherwise throw the training away).
    """
    if not spec:
        return None
    if spec == RESTORE_AUTO:
        if out_dir is None:
            raise ConfigError("--restore auto needs an output directory (--checkpoint DIR)")
        return find_latest(out_dir)
    where = folder if folder is not None else Path(spec)
    if not where.exists():
        raise ConfigError(f"--restore {spec} does not exist; give a run or checkpoint folder, or --restore auto "
                          "(a fresh start when the run has no checkpoint yet)")
    found = find_latest(where)
    if found is None:
        raise ConfigError(f"--restore {spec} holds no complete checkpoint (no {SUBDIR}/ckpt-e*-u* folder with a "
                          f"{MANIFEST}); give the run or checkpoint folder of an earlier run, or --restore auto")
    return found


class CheckpointWriter:
    """The master's side: opens a temporary folder, then publishes it once every part is in."""

    def __init__(self, directory: str | Path, keep: int = 3) -> None:
        self.directory = Path(directory)
        self.keep = max(1, keep)
        self.last_duration: float | None = None
        self.last_path: Path | None = None
        self._started: float | None = None

    def begin(self, epoch: int, updates: int) -> Path:
        """Create and return the temporary folder the ranks write their parts into."""
        self._started = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.remove_leftovers()
        tmp = self.directory / f".tmp-{checkpoint_name(epoch, updates)}-{_owner()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        return tmp

    def commit(self, tmp: Path, manifest: dict[str, Any]) -> Path:
        """Write the manifest and rename ``tmp`` to its final name (replacing a same-named older one)."""
        manifest = dict(manifest, format=FORMAT, written=time.time(),
                        parts=sorted(p.name for p in tmp.iterdir() if not p.name.startswith(".")))
        write_json_atomic(tmp / MANIFEST, manifest)
        fsync_folder(tmp)
        final = self.directory / checkpoint_name(int(manifest["epoch"]), int(manifest["updates"]))
        if final.exists():
            trash = final.with_name(f".old-{final.name}-{_owner()}")
            os.rename(final, trash)
            os.rename(tmp, final)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.rename(tmp, final)
        fsync_folder(self.directory)
        if self._started is not None:
            self.last_duration = time.monotonic() - self._started
        self.last_path = final
        checkpointed(final)  # a submitted run's chain goes on after this job only if it saved something
        self._prune()
        self.remove_leftovers()
        log.info("checkpoint %s written in %.2f s", final, self.last_duration or 0.0)
        return final

    def abandon(self, tmp: Path) -> None:
        shutil.rmtree(tmp, ignore_errors=True)

    def _prune(self) -> None:
        """Delete all but the newest ``keep`` checkpoints: hide each one first (one atomic rename), then delete.

        Deleting in place would leave, after a kill mid-way, a listed folder with its manifest but not all
        its parts; the hidden name is never listed and is removed later by :meth:`remove_leftovers`.
        """
        for old in list_checkpoints(self.directory)[:-self.keep]:
            trash = old.with_name(f".old-{old.name}-{_owner()}")
            try:
                os.rename(old, trash)
            except FileNotFoundError:
                continue
            except OSError as e:  # e.g. a leftover of the same name: keep the checkpoint rather than tear it
                log.warning("cannot prune checkpoint %s (%s); it is kept", old, e)
                continue
            fsync_folder(self.directory)
            shutil.rmtree(trash, ignore_errors=True)

    def remove_leftovers(self) -> None:
        """Remove temporary and trash folders that no live writer owns (only the master calls this).

        A folder is stale if its writer ran on this host and its pid is gone, or if it is older than the
        newest published checkpoint (one master writes a run's checkpoints, so such a folder belongs to an
        earlier job, perhaps on another host where its pid cannot be checked). Our own process's folders are
        left alone: this writer may have one open.
        """
        if not self.directory.is_dir():
            return
        host, me = socket.gethostname(), os.getpid()
        published = list_checkpoints(self.directory)
        newest = _mtime(published[-1]) if published else None
        for path in self.directory.iterdir():
            m = _LEFTOVER.match(path.name)
            if m is None or not path.is_dir():
                continue
            pid, owner = int(m.group("pid")), m.group("host")
            if owner == host and pid == me:
                continue
            when = _mtime(path)
            stale = ((owner == host and not _alive(pid))
                     or (newest is not None and when is not None and when < newest))
            if stale:
                log.info("removing %s, left by a writer that is gone", path)
                shutil.rmtree(path, ignore_errors=True)


def _owner() -> str:
    """This writer in a folder name: host and pid (several nodes may share one file system)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _alive(pid: int) -> bool:
    """Whether a process of this host exists (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None

