"""The data-source protocol: what the runtime needs from training or validation data, and two in-memory
implementations.

The runtime never iterates over data. Every rank computes each epoch's global sample order from the seed,
takes its shard and cuts it into batches (:mod:`nnlo.data.sampling`), then asks the data for the samples of
one batch *by index*. So anything with a length and random access by sample index can feed a training, and
sharding, per-epoch shuffling and exact mid-epoch checkpoint positions (``(epoch, batch)``) work unchanged::

    class DataSource(Protocol):
        def __len__(self) -> int: ...                                  # samples, the same on every rank
        def batch(self, indices: np.ndarray) -> tuple[inputs, targets]: ...

``batch`` gets int64 sample indices in ``[0, len)`` in any order (repeats allowed) and returns the inputs
and targets of those samples *in that order*: an array each, or a list of arrays for several inputs
(``forward(x1, x2, ...)``), targets None for a model without targets. A source may run its ``batch`` in a
read-ahead thread (one at a time, in order); set ``in_memory = True`` on a source whose reads are memory
copies and reading ahead is skipped.

Implementations: :class:`nnlo.data.h5dataset.H5Dataset` (the HDF5 lists of ``--train``/``--val``; the
runtime calls its ``read``, which ``batch`` is), :class:`ArraySource` (arrays in memory) and
:class:`GeneratorSource` (mpi_learn's ``generate_data()``: batches from a generator, materialised once).
:func:`as_dataset` adapts any source to what the runtime's loaders call.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from nnlo.data.h5dataset import H5Dataset
from nnlo.errors import DataError


@runtime_checkable
class DataSource(Protocol):
    """Samples addressed by index: ``len(source)`` and ``source.batch(indices) -> (inputs, targets)``."""

    def __len__(self) -> int: ...

    def batch(self, indices: np.ndarray) -> tuple[Any, Any]: ...


def _columns(value: Any, what: str) -> tuple[list[np.ndarray], bool]:
    """``value`` -> (arrays, single): a list or tuple is several inputs (or targets), anything else one array."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise DataError(f"{what} is an empty list; give an array (or a list of arrays, one per input)")
        return [np.asarray(v) for v in value], False
    return [np.asarray(value)], True


class ArraySource:
    """Samples held in memory: ``x`` (an array, or a list of arrays for several inputs) and ``y`` (an array,
    a list of arrays, or None), one row per sample. Torch tensors and anything ``numpy.asarray`` takes work.

    Every rank must hold the same arrays (build them the same way, or load the same file): the runtime picks
    samples by index and never sends data between ranks.
    """

    in_memory = True

    def __init__(self, x: Any, y: Any = None) -> None:
        self._x, self._single_x = _columns(x, "x")
        self._y, self._single_y = _columns(y, "y") if y is not None else ([], True)
        lengths = {a.shape[0] if a.ndim else -1 for a in self._x + self._y}
        if -1 in lengths:
            raise DataError("ArraySource needs arrays with one row per sample, got a scalar")
        if len(lengths) != 1:
            shapes = ", ".join(str(a.shape) for a in self._x + self._y)
            raise DataError(f"ArraySource arrays disagree in their number of samples ({shapes}); "
                            f"give x and y one row per sample each")
        self._n = lengths.pop()

    def __len__(self) -> int:
        return self._n

    def batch(self, indices: np.ndarray) -> tuple[Any, Any]:
        idx = np.asarray(indices, dtype=np.int64)
        xs = [a[idx] for a in self._x]
        ys = [a[idx] for a in self._y]
        x = xs[0] if self._single_x else xs
        y = (ys[0] if ys else None) if self._single_y else ys
        return x, y

    def __repr__(self) -> str:
        shapes = ", ".join(str(a.shape) for a in self._x + self._y)
        return f"ArraySource({self._n} samples: {shapes})"


def _concat(parts: list[Any], what: str) -> Any:
    if isinstance(parts[0], (list, tuple)):
        width = len(parts[0])
        if any(not isinstance(p, (list, tuple)) or len(p) != width for p in parts):
            raise DataError(f"the generator's batches disagree in their number of {what} arrays")
        return [np.concatenate([np.asarray(p[k]) for p in parts]) for k in range(width)]
    try:
        return np.concatenate([np.asarray(p) for p in parts])
    except ValueError as e:
        raise DataError(f"the generator's {what} batches cannot be joined ({e}); every batch needs the same "
                        f"row shape") from None


class GeneratorSource:
    """Samples from batches a generator yields, as mpi_learn's ``generate_data()`` did: ``generate`` is a
    callable returning an iterable of ``(x, y)`` batches (or the iterable itself); ``n_batches`` takes only
    that many (required for an endless generator).

    The batches are read once, on first use, and kept in memory as one :class:`ArraySource` on every rank
    that needs them. That is what makes exact positions possible: a sample has an index, so shards, the
    per-epoch shuffle and a mid-epoch checkpoint's ``(epoch, batch)`` mean the same samples after a restore.
    The generator must therefore yield the same samples on every rank and on every run (seed it); a stream
    that cannot be replayed or does not fit in memory needs a source with real random access (write it to
    HDF5 files, or implement ``__len__``/``batch`` over your storage).
    """

    in_memory = True

    def __init__(self, generate: Callable[[], Iterable[Any]] | Iterable[Any], n_batches: int | None = None) -> None:
        if n_batches is not None and (not isinstance(n_batches, int) or isinstance(n_batches, bool) or n_batches < 1):
            raise DataError(f"n_batches must be an integer >= 1 (or None: until the generator ends), got {n_batches!r}")
        self._generate = generate
        self._n_batches = n_batches
        self._arrays: ArraySource | None = None

    def materialise(self) -> ArraySource:
        """Read the generator's batches (once) and return them as one :class:`ArraySource`."""
        if self._arrays is None:
            stream = self._generate() if callable(self._generate) else self._generate
            xs: list[Any] = []
            ys: list[Any] = []
            for k, item in enumerate(stream):
                if self._n_batches is not None and k >= self._n_batches:
                    break
                if not isinstance(item, (tuple, list)) or len(item) != 2:
                    raise DataError(f"the generator yielded {type(item).__name__} as batch {k}; yield (x, y) "
                                    f"pairs (y may be None)")
                xs.append(item[0])
                ys.append(item[1])
            if not xs:
                raise DataError("the generator yielded no batches; it must yield (x, y) pairs")
            has_y = [y is not None for y in ys]
            if any(has_y) and not all(has_y):
                raise DataError("the generator yielded targets for some batches and None for others")
            self._arrays = ArraySource(_concat(xs, "input"), _concat(ys, "target") if all(has_y) else None)
        return self._arrays

    def __len__(self) -> int:
        return len(self.materialise())

    def batch(self, indices: np.ndarray) -> tuple[Any, Any]:
        return self.materialise().batch(indices)


class SourceDataset:
    """Any :class:`DataSource` as the runtime's loaders read it (``read``, ``preloaded``, ``len``), with the
    indices checked and the source's failures named in one line."""

    def __init__(self, source: Any, role: str = "training") -> None:
        check_source(source, role)
        self.source, self.role = source, role
        self.preloaded = bool(getattr(source, "in_memory", False))
        n = len(source)
        if not isinstance(n, (int, np.integer)) or n < 0:
            raise DataError(f"len() of the {role} data source returned {n!r}; it must be the number of samples")
        self._n = int(n)

    def __len__(self) -> int:
        return self._n

    def read(self, indices: Sequence[int] | np.ndarray) -> tuple[Any, Any]:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self._n):
            bad = idx[(idx < 0) | (idx >= self._n)][0]
            raise IndexError(f"sample index {bad} is out of range for {self._n} samples")
        try:
            out = self.source.batch(idx)
        except DataError:
            raise
        except Exception as e:  # user code: name it in one line
            raise DataError(f"the {self.role} data source's batch() raised {type(e).__name__}: {e}") from e
        if not isinstance(out, tuple) or len(out) != 2:
            raise DataError(f"the {self.role} data source's batch() returned {type(out).__name__}; "
                            f"return an (inputs, targets) pair")
        return out

    batch = read

    def __repr__(self) -> str:
        return f"SourceDataset({self.source!r})"


def check_source(source: Any, role: str = "training") -> None:
    """Refuse, in one line, an object that does not follow the :class:`DataSource` protocol."""
    missing = [name for name in ("__len__", "batch") if not callable(getattr(source, name, None))]
    if missing:
        raise DataError(f"the {role} data ({type(source).__name__}) has no {' or '.join(missing)}(); pass HDF5 "
                        f"files, an nnlo.ArraySource(x, y), or an object with __len__() and batch(indices)")


def as_dataset(source: Any, role: str = "training") -> Any:
    """What the runtime's loaders read: an :class:`~nnlo.data.h5dataset.H5Dataset` as it is (its ``read`` is
    the fast path), any other :class:`DataSource` wrapped in :class:`SourceDataset`."""
    if isinstance(source, H5Dataset):
        return source
    if isinstance(source, GeneratorSource):
        source = source.materialise()
    return SourceDataset(source, role)
