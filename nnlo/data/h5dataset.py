"""Random access to samples spread over many HDF5 files, as if they were one array.

The upstream model contract names the datasets: ``get_features()`` / ``get_labels()`` return a dataset
name or a ``(name, adaptor_function)`` pair, where the adaptor turns the array read from the file into what
the model takes (it is called on every batch, rows = samples). A list of such entries gives a model with
several named inputs (or outputs); ``labels=None`` reads features only (autoencoders, inference). A name
that is an HDF5 *group* stands for the datasets directly in it, in name order (upstream's loader did the
same): the batch is then a list of arrays (a multi-input model; a torch model's ``forward(*inputs)``), and
an adaptor given with the group is applied to each of its arrays.

Reads are grouped by file and issued in increasing order (h5py's fancy indexing requires it): a contiguous
run is one slice read, a dense scatter is one slab read then indexed in memory, a sparse one a point
selection, so a shuffled batch costs a few reads per file rather than one per sample. Contiguous,
unfiltered datasets (h5py's default layout) skip HDF5's per-row selection cost altogether: their bytes are
read through a read-only memory map at the offset HDF5 reports, 10-100x faster for shuffled batches
(:data:`USE_MMAP`; chunked or compressed datasets always go through h5py). Open files are cached (at most
:data:`MAX_OPEN_FILES`) so that lists of thousands of files do not exhaust file descriptors.
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from nnlo.errors import DataError, ModelError

Adaptor = Callable[[np.ndarray], Any]
Entry = str | tuple[str, Adaptor]
Source = Entry | Sequence[Entry] | None

#: Open HDF5 files kept per dataset object; older ones are closed first.
MAX_OPEN_FILES = 64
#: A scattered read spanning at most this many bytes is done as one slab read (then indexed in memory).
SLAB_BYTES = 32 * 2**20
#: Read contiguous, unfiltered numeric datasets through a memory map (set False to always use h5py).
USE_MMAP = True


@dataclass(frozen=True)
class Field:
    """One dataset read from every file, and the adaptor applied to each batch of it."""

    name: str
    adaptor: Adaptor | None = None


def _entry(entry: Any, role: str) -> Field:
    if isinstance(entry, str):
        return Field(entry)
    if isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str) and callable(entry[1]):
        return Field(entry[0], entry[1])
    raise DataError(
        f"{role} must be a dataset name or a (name, adaptor_function) pair, got {entry!r}; "
        f"check get_{role}() of the model module"
    )


def parse_fields(source: Source, role: str) -> tuple[list[Field], bool]:
    """``source`` -> (fields, single): ``single`` means read() returns one array rather than a list."""
    if source is None:
        return [], True
    if isinstance(source, str) or (isinstance(source, (tuple, list)) and len(source) == 2
                                   and isinstance(source[0], str) and callable(source[1])):
        return [_entry(source, role)], True
    if isinstance(source, (tuple, list)) and source:
        return [_entry(e, role) for e in source], False
    raise DataError(f"{role} must be a dataset name, a (name, adaptor) pair or a list of them, got {source!r}")


def expand_groups(fields: list[Field], single: bool, f: h5py.File) -> tuple[list[Field], bool]:
    """``fields`` with every name that is an HDF5 group of ``f`` replaced by the datasets directly in it,
    sorted by name (each keeps the group's adaptor); ``single`` becomes False when a group was expanded."""
    out: list[Field] = []
    for field in fields:
        obj = f.get(field.name)
        if not isinstance(obj, h5py.Group):
            out.append(field)
            continue
        members = sorted(k for k, v in obj.items() if isinstance(v, h5py.Dataset))
        if not members:
            raise DataError(f"{f.filename}: group {field.name!r} holds no datasets; name a dataset or a group "
                            f"of datasets (one per model input)")
        out += [Field(f"{field.name.rstrip('/')}/{k}", field.adaptor) for k in members]
        single = False
    return out, single


def _adapt(field: Field, array: np.ndarray, role: str) -> Any:
    if field.adaptor is None:
        return array
    try:
        return field.adaptor(array)
    except Exception as exc:  # user code: name it in one line
        raise ModelError(
            f"the adaptor of {field.name!r} (from get_{role}()) raised {type(exc).__name__}: {exc}; "
            f"it receives a batch array of shape {array.shape} and dtype {array.dtype}"
        ) from exc


def _datasets_in(f: h5py.File) -> list[str]:
    names: list[str] = []
    f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    return names


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _available_memory() -> int | None:
    """Bytes of memory available to this process now, or None when it cannot be told."""
    try:
        import psutil  # lazy: optional

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - psutil missing or unsupported platform: skip the check
        return None


def _open(path: Path) -> h5py.File:
    try:
        return h5py.File(path, "r")
    except FileNotFoundError:
        raise DataError(f"{path} does not exist; fix the data list or regenerate the data") from None
    except OSError as exc:
        raise DataError(
            f"{path} is not a readable HDF5 file ({exc}); regenerate it or remove it from the data list"
        ) from None


class H5Dataset:
    """All samples of ``files`` addressed by one global index ``0 .. len-1`` (file order, then row order).

    ``features``/``labels``: a dataset name, a ``(name, adaptor)`` pair, a list of those (several inputs),
    or ``labels=None``. ``preload=True`` reads everything into memory once (fast epochs for data that fits).
    Construction opens every file once to check that the datasets exist, agree in length within a file and
    in row shape/dtype across files, and raises :class:`~nnlo.errors.DataError` naming the file otherwise.

    The object pickles without its open files (they reopen lazily), so at scale one rank can build it and
    ``comm.bcast`` it: the other ranks then never touch the file system's metadata servers until they read.
    Broadcast it *before* :meth:`preload`, then preload on every rank that needs the data in memory.
    """

    def __init__(self, files: Sequence[str | os.PathLike[str]], features: Source = "features",
                 labels: Source = "labels", preload: bool = False) -> None:
        self.files = [Path(f) for f in files]
        if not self.files:
            raise DataError("no data files given; the data list must name at least one HDF5 file")
        self.feature_fields, self._single_x = parse_fields(features, "features")
        self.label_fields, self._single_y = parse_fields(labels, "labels")
        if not self.feature_fields:
            raise DataError("features must name at least one dataset (default 'features')")
        with _open(self.files[0]) as first:  # names of HDF5 groups stand for their datasets
            self.feature_fields, self._single_x = expand_groups(self.feature_fields, self._single_x, first)
            self.label_fields, self._single_y = expand_groups(self.label_fields, self._single_y, first)
        self.fields = self.feature_fields + self.label_fields
        self._handles: OrderedDict[int, h5py.File] = OrderedDict()
        self._maps: OrderedDict[tuple[int, str], np.ndarray | None] = OrderedDict()
        self._lock = threading.RLock()  # the handle caches are shared with prefetch threads
        self._preloaded: list[np.ndarray] | None = None
        counts: list[int] = []
        self.row_shapes: list[tuple[int, ...]] = []
        self.dtypes: list[np.dtype] = []
        try:
            for i, path in enumerate(self.files):
                counts.append(self._inspect(i, path))
        except BaseException:
            self.close()
            raise
        self.counts = np.asarray(counts, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        if preload:
            self.preload()

    # -- construction --------------------------------------------------------------------------------
    def _inspect(self, i: int, path: Path) -> int:
        f = self._file(i)
        lengths: dict[str, int] = {}
        for k, field in enumerate(self.fields):
            obj = f.get(field.name)
            if not isinstance(obj, h5py.Dataset):
                present = _datasets_in(f)
                shown = ", ".join(present[:12]) + (" ..." if len(present) > 12 else "") or "none"
                role = "features" if k < len(self.feature_fields) else "labels"
                raise DataError(
                    f"{path} has no dataset {field.name!r} (datasets there: {shown}); "
                    f"pick one with --{role}-name or get_{role}() in the model module"
                )
            if obj.ndim < 1:
                raise DataError(f"{path}: dataset {field.name!r} is a scalar; it needs one row per sample")
            lengths[field.name] = obj.shape[0]
            row, dtype = tuple(obj.shape[1:]), obj.dtype
            if i == 0:
                self.row_shapes.append(row)
                self.dtypes.append(dtype)
            elif row != self.row_shapes[k] or dtype != self.dtypes[k]:
                raise DataError(
                    f"{path}: dataset {field.name!r} has rows of shape {row} and type {dtype} but "
                    f"{self.files[0]} has {self.row_shapes[k]} and {self.dtypes[k]}; all files must agree"
                )
        if len(set(lengths.values())) > 1:
            detail = ", ".join(f"{n} has {c}" for n, c in lengths.items())
            raise DataError(
                f"{path}: datasets disagree in length ({detail}); every dataset needs one row per sample"
            )
        return next(iter(lengths.values()))

    def _file(self, i: int) -> h5py.File:
        handle = self._handles.get(i)
        if handle is not None:
            self._handles.move_to_end(i)
            return handle
        handle = _open(self.files[i])
        self._handles[i] = handle
        while len(self._handles) > MAX_OPEN_FILES:
            _, old = self._handles.popitem(last=False)
            old.close()
        return handle

    def _mapping(self, i: int, field: Field) -> np.ndarray | None:
        """A read-only memory map of ``field`` in file ``i`` when its bytes lie contiguous in the file,
        else None (cached either way)."""
        key = (i, field.name)
        if key in self._maps:
            self._maps.move_to_end(key)
            return self._maps[key]
        dset = self._file(i)[field.name]
        mapped = None
        if (USE_MMAP and dset.chunks is None and dset.external is None and not dset.is_virtual
                and dset.dtype.kind in "biuf" and dset.size > 0):
            offset = dset.id.get_offset()
            if offset is not None:
                try:
                    mapped = np.memmap(self.files[i], dtype=dset.dtype, mode="r", offset=offset,
                                       shape=dset.shape).view(np.ndarray)  # plain indexing, no subclass cost
                except (OSError, ValueError):
                    mapped = None  # e.g. a file system without mmap: h5py reads it
        self._maps[key] = mapped
        while len(self._maps) > MAX_OPEN_FILES * len(self.fields):
            self._maps.popitem(last=False)
        return mapped

    def preload(self) -> None:
        """Read every sample into memory now (once); later reads are memory copies and files are closed."""
        if self._preloaded is not None:
            return
        row_bytes = sum(int(np.prod(r, dtype=np.int64)) * d.itemsize
                        for r, d in zip(self.row_shapes, self.dtypes, strict=True))
        need = row_bytes * len(self)
        available = _available_memory()
        if available is not None and need > 0.8 * available:
            raise DataError(
                f"preloading needs {_size(need)} per rank but only {_size(available)} of memory is available; "
                f"drop --preload-data (contiguous HDF5 files are memory-mapped and shared between the ranks "
                f"of a node anyway)"
            )
        try:
            arrays = [np.empty((len(self), *r), dtype=d) for r, d in zip(self.row_shapes, self.dtypes, strict=True)]
        except MemoryError:
            raise DataError(f"preloading {_size(need)} of data does not fit in memory; "
                            f"drop --preload-data") from None
        for i in range(len(self.files)):
            a, b = self.offsets[i], self.offsets[i + 1]
            if a == b:
                continue
            f = self._file(i)
            for arr, field in zip(arrays, self.fields, strict=True):
                with self._reading(i, field):
                    f[field.name].read_direct(arr, dest_sel=np.s_[a:b])
        self._preloaded = arrays
        self.close()

    # -- reading -------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def preloaded(self) -> bool:
        return self._preloaded is not None

    @contextlib.contextmanager
    def _reading(self, i: int, field: Field) -> Iterator[None]:
        """Turns a failed read of ``field`` from file ``i`` into a one-line :class:`DataError`."""
        try:
            yield
        except (OSError, ValueError, KeyError) as exc:
            raise DataError(
                f"reading {field.name!r} from {self.files[i]} failed ({exc}); the file may be truncated "
                f"or changed while training - regenerate it"
            ) from None

    def _read_rows(self, i: int, field: Field, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (strictly increasing local indices) of ``field`` in file ``i``."""
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        mapped = self._mapping(i, field)
        if mapped is not None:
            with self._reading(i, field):
                return mapped[lo:hi] if hi - lo == len(rows) else mapped[rows]
        dset = self._file(i)[field.name]
        if hi - lo == len(rows):
            with self._reading(i, field):
                return dset[lo:hi]
        row_bytes = max(1, int(np.prod(dset.shape[1:], dtype=np.int64)) * dset.dtype.itemsize)
        if (hi - lo) * row_bytes <= SLAB_BYTES and hi - lo <= 16 * len(rows):
            with self._reading(i, field):
                slab = dset[lo:hi]
            return slab[rows - lo]
        with self._reading(i, field):
            return dset[rows]

    def read_fields(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        """Raw arrays (one per field, features first, no adaptors) for the global ``indices``, in order."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = idx[(idx < 0) | (idx >= n)][0]
            raise IndexError(f"sample index {bad} is out of range for {n} samples")
        if self._preloaded is not None:
            return [arr[idx] for arr in self._preloaded]
        out = [np.empty((idx.size, *r), dtype=d) for r, d in zip(self.row_shapes, self.dtypes, strict=True)]
        if idx.size == 0:
            return out
        with self._lock:
            self._read_into(idx, out)
        return out

    def _read_into(self, idx: np.ndarray, out: list[np.ndarray]) -> None:
        order = np.argsort(idx, kind="stable")
        sorted_idx = idx[order]
        file_of = np.searchsorted(self.offsets, sorted_idx, side="right") - 1
        cuts = np.flatnonzero(np.diff(file_of)) + 1
        for a, b in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [idx.size]]), strict=True):
            i = int(file_of[a])
            local = sorted_idx[a:b] - self.offsets[i]
            rows, inverse = np.unique(local, return_inverse=True)
            dest = order[a:b]
            for arr, field in zip(out, self.fields, strict=True):
                data = self._read_rows(i, field, rows)
                arr[dest] = data if len(rows) == len(local) else data[inverse]

    def read(self, indices: Sequence[int] | np.ndarray) -> tuple[Any, Any]:
        """``(x, y)`` for the global sample ``indices`` (any order, repeats allowed), rows in that order.

        ``x``/``y`` are one array each, or lists when several datasets were named; ``y`` is None when
        ``labels=None``. Adaptors are applied to the arrays read.
        """
        arrays = self.read_fields(indices)
        nx = len(self.feature_fields)
        xs = [_adapt(f, a, "features") for f, a in zip(self.feature_fields, arrays[:nx], strict=True)]
        ys = [_adapt(f, a, "labels") for f, a in zip(self.label_fields, arrays[nx:], strict=True)]
        x = xs[0] if self._single_x else xs
        y = (ys[0] if ys else None) if self._single_y else ys
        return x, y

    def batch(self, indices: Sequence[int] | np.ndarray) -> tuple[Any, Any]:
        """The :class:`~nnlo.data.source.DataSource` protocol: the same as :meth:`read`."""
        return self.read(indices)

    # -- lifetime ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the open files (they reopen on the next read)."""
        with self._lock:
            self._close_all()

    def _close_all(self) -> None:
        self._maps.clear()
        while self._handles:
            _, handle = self._handles.popitem()
            with contextlib.suppress(Exception):  # closing must never mask the real error
                handle.close()

    def __enter__(self) -> H5Dataset:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_handles"] = OrderedDict()  # h5py handles do not pickle; they reopen lazily
        state["_maps"] = OrderedDict()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        names = ", ".join(f.name for f in self.fields)
        preloaded = ", preloaded" if self.preloaded else ""
        return f"H5Dataset({len(self.files)} files, {len(self)} samples, [{names}]{preloaded})"
