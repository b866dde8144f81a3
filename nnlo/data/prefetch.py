"""Read the next batches in a background thread while the model trains on the current one.

Frameworks release the GIL during forward/backward passes, so a reader thread overlaps HDF5 I/O with compute
at no cost in determinism: batches come out in plan order, exceptions from the reader are raised in the
consumer at the batch where they happened, and closing the generator early (``break``, an error in the
training loop) stops the thread. The thread makes no MPI calls.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

_DONE = object()
_POLL_S = 0.05


def prefetched(read: Callable[[Any], T], plan: Sequence[Any], depth: int = 1) -> Iterator[T]:
    """``read(item) for item in plan``, computed up to ``depth`` items ahead in a daemon thread."""
    if depth <= 0:
        for item in plan:
            yield read(item)
        return
    slots: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                slots.put(entry, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in plan:
                if stop.is_set() or not put((True, read(item))):
                    return
            put((True, _DONE))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            put((False, exc))

    thread = threading.Thread(target=work, name="nnlo-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            ok, value = slots.get()
            if not ok:
                raise value
            if value is _DONE:
                return
            yield value
    finally:
        stop.set()
        thread.join()
