"""``--cache-data DIR``: copy the listed data files once into a node-local folder and read them from there.

Upstream's meaning, kept: each file named in ``--train``/``--val`` is copied into ``DIR`` (typically a
node-local SSD or ``/tmp``) the first time a run needs it, and every read then hits the local copy. Copies
are atomic: a file is written under a temporary name unique to this process and renamed into place, so
ranks of one node that copy the same file at once each publish a complete copy (the last rename wins, and
they are identical), and a killed copy never leaves a truncated file under the cached name.

A cached copy is reused while it matches its source (same size and modification time; :func:`shutil.copy2`
keeps the time); a changed source is copied again. Cached names carry a short hash of the source's absolute
path, so two ``train_0.h5`` from different folders never collide.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from nnlo.errors import DataError


def cache_name(source: Path) -> str:
    """The name of ``source``'s copy in the cache: ``<hash of its absolute path>-<its name>``."""
    digest = hashlib.sha1(str(source.resolve()).encode()).hexdigest()[:12]
    return f"{digest}-{source.name}"


def _fresh(copy: Path, source: Path) -> bool:
    try:
        a, b = copy.stat(), source.stat()
    except FileNotFoundError:
        return False
    return a.st_size == b.st_size and int(a.st_mtime) == int(b.st_mtime)


def cache_file(source: Path, cache_dir: Path) -> Path:
    """``source``'s copy in ``cache_dir``, copied now unless a matching copy is already there."""
    target = cache_dir / cache_name(source)
    if _fresh(target, source):
        return target
    tmp = cache_dir / f".{target.name}.{os.uname().nodename}-{os.getpid()}.tmp"
    try:
        shutil.copy2(source, tmp)
        os.replace(tmp, target)
    except FileNotFoundError:
        tmp.unlink(missing_ok=True)
        raise DataError(f"{source} does not exist; fix the data list or regenerate the data") from None
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise DataError(f"--cache-data {cache_dir}: cannot copy {source} there ({exc.strerror or exc}); "
                        "free space there or choose another folder") from None
    return target


def cached(files: Iterable[Path | str], cache_dir: str | os.PathLike[str] | None) -> list[Path]:
    """``files`` as read by the run: their copies in ``cache_dir`` (made now where missing or stale), or the
    files themselves when there is no cache folder."""
    paths = [Path(f) for f in files]
    if cache_dir is None:
        return paths
    folder = Path(os.path.expandvars(str(cache_dir))).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"--cache-data {cache_dir} cannot be created ({exc.strerror or exc}); "
                        "choose a folder you can write (e.g. a node-local /tmp)") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise DataError(f"--cache-data {cache_dir} is not writable by you; choose a folder you can write")
    return [cache_file(p, folder) for p in paths]
