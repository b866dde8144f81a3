"""List files: the upstream ``--train``/``--val`` format, one HDF5 path per line."""
from __future__ import annotations

import os
from pathlib import Path

from nnlo.errors import DataError

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def read_list_file(path: str | os.PathLike[str], check_exists: bool = True) -> list[Path]:
    """The HDF5 files named in a list file, in order.

    One path per line; relative paths are resolved against the list file's folder (so a data folder can be
    moved or shared as a whole), ``~`` and ``$VARS`` are expanded, blank lines and ``#`` comments are
    ignored. A missing list, an empty list or missing data files raise :class:`~nnlo.errors.DataError`
    (naming the first missing file and how many are missing).
    """
    list_path = Path(path).expanduser()
    if list_path.is_dir():
        raise DataError(f"{list_path} is a folder, not a list file; pass a text file with one HDF5 path per line")
    try:
        with list_path.open("rb") as probe:
            if probe.read(8) == _HDF5_SIGNATURE:
                raise DataError(
                    f"{list_path} is an HDF5 file, not a list; write its path into a text file "
                    f"(echo {list_path} > train.list) and pass that"
                )
        text = list_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"list file {list_path} does not exist; create it with one HDF5 path per line") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(
            f"cannot read list file {list_path} ({exc.__class__.__name__}: {exc}); "
            f"it must be a text file with one HDF5 path per line"
        ) from None
    base = list_path.resolve().parent
    files: list[Path] = []
    for line in text.splitlines():
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        p = Path(os.path.expandvars(entry)).expanduser()
        files.append(p if p.is_absolute() else base / p)
    if not files:
        raise DataError(f"list file {list_path} names no files; add one HDF5 path per line")
    if check_exists:
        missing = [f for f in files if not f.is_file()]
        if missing:
            more = f" (and {len(missing) - 1} more of {len(files)} listed)" if len(missing) > 1 else ""
            what = "is a folder, not a file" if missing[0].is_dir() else "does not exist"
            raise DataError(
                f"{missing[0]} listed in {list_path} {what}{more}; fix the list or regenerate the data"
            )
    return files
