"""Which device a rank computes on: one GPU per worker rank of a node, else the CPU; and what the MPI library
can do with device memory.

**The rule** (:func:`gpu_index`, the one place it is written; ``nnlo layout`` prints its result for every
rank, :meth:`nnlo_sched.layout.model.Layout.gpus_of`). The worker ranks of a node compare what they see
(``CUDA_VISIBLE_DEVICES``):

* they see different GPUs: the launcher bound each its own (``jsrun -g 1`` resource sets,
  ``srun --gpu-bind=map_gpu:...``), and each computes on the first it sees, ``cuda:0``, whatever its
  node-local rank (ranks sharing one GPU see the same single one: the same answer);
* they all see the same ``visible`` GPUs (one node whose masters sit on spare cores, or a launcher that cannot
  bind: ``aprun``, ``mpirun``): the node's ``n`` workers spread over them, worker number ``ordinal``
  (counting the *device-needing* ranks before it on the node) taking GPU ``ordinal x max(1, visible // n)
  mod visible``: 0, 1, 2, ... in rank order (0, 2, 4, ... when each has two), round-robin when they share.

``ordinal`` comes from an MPI shared-memory split of the world (no hostname parsing, no launcher variables),
so it is right under any launcher. A search computes it once over its whole world
(:func:`world_node_place`), because several blocks' trainings may share a node. ``CUDA_VISIBLE_DEVICES`` is
honoured because torch only counts the visible devices (and indices are integers: upstream broke beyond 9
GPUs parsing them as characters). Masters stay on the CPU: they only add vectors. ``NNLO_DEVICE=cpu`` (or
``cuda:1`` ...) overrides the choice for every rank.

**Three vendors** (:data:`VISIBLE_VARIABLES`, :func:`device_variable`): which variable names the GPUs a rank
sees depends on the vendor a cluster profile names (``gpu_vendor``): NVIDIA ``CUDA_VISIBLE_DEVICES``, AMD
``ROCR_VISIBLE_DEVICES`` (a Frontier/LUMI GCD is one device; HIP renumbers from 0), Intel
``ZE_AFFINITY_MASK`` (an Aurora tile ``g.t`` under ``ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE``, a plain index under
``FLAT``). The launchers set it per rank by that rule; the runtime compares what every rank sees in all three
(:func:`visible_view`). ROCm builds of torch answer as ``cuda`` devices; Intel GPUs are ``xpu`` devices.

**CUDA-aware MPI** (:func:`cuda_aware_mpi`): asked of the library itself (``MPIX_Query_cuda_support``, which
MPICH and Open MPI export), never assumed from its name or a variable.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import socket
from collections.abc import Iterator, Mapping
from typing import Any

from nnlo.contract import ENV_DEVICE

log = logging.getLogger("nnlo.device")

#: the variable that names the GPUs a process sees, per vendor (a profile's ``gpu_vendor``)
VISIBLE_VARIABLES: dict[str, str] = {
    "nvidia": "CUDA_VISIBLE_DEVICES",
    "amd": "ROCR_VISIBLE_DEVICES",
    "intel": "ZE_AFFINITY_MASK",
}
VENDORS = tuple(VISIBLE_VARIABLES)
#: the torch device type of each vendor's GPUs (ROCm torch calls AMD GPUs ``cuda``)
DEVICE_TYPES: dict[str, str] = {"nvidia": "cuda", "amd": "cuda", "intel": "xpu"}


def device_variable(vendor: str) -> str:
    """The variable a launcher sets so that a rank sees only its own GPU(s) of ``vendor``'s. Pure."""
    try:
        return VISIBLE_VARIABLES[vendor]
    except KeyError:
        raise ValueError(f"unknown GPU vendor {vendor!r}; use one of {', '.join(VENDORS)}") from None


def visible_view(env: Mapping[str, str] | None = None) -> tuple[str | None, ...]:
    """What this process is told it sees, in all three vendors' variables (compared between a node's ranks:
    equal views mean the launcher bound nothing)."""
    env = os.environ if env is None else env
    return tuple(env.get(v) for v in VISIBLE_VARIABLES.values())

#: this process's :func:`node_place` counted over the whole world, while a caller that holds the world says so
#: (:func:`world_node_place`); None: count over the training's communicator
_claimed: tuple[int, int, bool] | None = None


def gpu_index(ordinal: int, workers: int, visible: int, same_view: bool = True) -> int:
    """The rule: the visible GPU that worker number ``ordinal`` of a node's ``workers`` computes on, when it sees
    ``visible`` GPUs and the node's workers all see the same ones (``same_view``) or each its own. Pure."""
    if visible < 1:
        raise ValueError(f"no visible GPU to pick from (visible={visible})")
    if not same_view:
        return 0
    return ordinal * max(1, visible // max(1, workers)) % visible


def node_place(comm: Any, needs_device: bool) -> tuple[int, int, bool]:
    """(this rank's number among the device-needing ranks of its node, how many there are, whether those all
    see the same GPUs). Collective over ``comm``."""
    from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        me = node.Get_rank()
        seen = node.allgather((bool(needs_device), visible_view()))
    finally:
        node.Free()
    workers = [view for needs, view in seen if needs]
    return sum(needs for needs, _ in seen[:me]), len(workers), len(set(workers)) <= 1


@contextlib.contextmanager
def world_node_place(world: Any, needs_device: bool) -> Iterator[tuple[int, int, bool]]:
    """Within the block, every training of this process counts its rank's place among the node's workers over
    ``world`` (collective), not over its own ranks: a search's blocks share nodes, and counting over one
    training's ranks would hand two blocks' workers the same GPU."""
    global _claimed
    previous, _claimed = _claimed, node_place(world, needs_device)
    try:
        yield _claimed
    finally:
        _claimed = previous


def select_device(comm: Any, needs_device: bool) -> str:
    """The torch device string for this rank (collective over ``comm``: every rank must call it)."""
    index, on_node, same_view = _claimed if _claimed is not None else node_place(comm, needs_device)
    forced = os.environ.get(ENV_DEVICE)
    if forced:
        return forced
    if not needs_device:
        return "cpu"
    try:
        import torch  # lazy: torch takes seconds to import
    except ImportError:
        return "cpu"
    kind, count = gpu_kind(torch)
    if kind is None:
        return "cpu"
    if same_view and on_node > count and index == 0 and count > 1:
        log.warning("%d worker ranks share %d GPU(s) on this node; ranks will share GPUs", on_node, count)
    return f"{kind}:{gpu_index(index, on_node, count, same_view)}"


def gpu_kind(torch: Any) -> tuple[str | None, int]:
    """(torch device type of this process's GPUs, how many it sees): ``cuda`` for NVIDIA and ROCm builds,
    ``xpu`` for Intel GPUs; (None, 0) without any."""
    if torch.cuda.is_available():
        return "cuda", int(torch.cuda.device_count())
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return "xpu", int(xpu.device_count())
    return None, 0


def physical_gpu(device: str) -> str | None:
    """Which physical GPU ``device`` ("cuda:1") is, as ``host:uuid`` (or ``host:index`` among all the node's
    GPUs when torch does not report the UUID), so ranks can tell whether two of them share one; an Intel
    ``xpu`` as ``host:<its ZE_AFFINITY_MASK entry>``; None for the CPU or without such a GPU."""

    kind = str(device).split(":", 1)[0]
    if kind == "xpu":
        index = int(str(device).partition(":")[2] or 0)
        mask = [v.strip() for v in os.environ.get(VISIBLE_VARIABLES["intel"], "").split(",") if v.strip()]
        return f"{socket.gethostname()}:{mask[index] if index < len(mask) else index}"
    if kind != "cuda":
        return None
    try:
        import torch  # lazy: torch takes seconds to import
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None

    index = torch.device(device).index or 0
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is None:
        view = os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get(VISIBLE_VARIABLES["amd"], "")
        visible = [v.strip() for v in view.split(",") if v.strip()]
        uuid = visible[index] if index < len(visible) else str(index)
    return f"{socket.gethostname()}:{uuid}"


@functools.cache
def cuda_aware_mpi() -> bool:
    """True when the MPI library says it moves CUDA device memory itself (``MPIX_Query_cuda_support()``
    returns 1 at run time: built with CUDA *and* enabled in this job, e.g. ``--smpiargs=-gpu`` on Summit,
    ``MPIR_CVAR_ENABLE_GPU`` with MPICH). False where the library has no such query or says no."""
    try:
        from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

        lib = ctypes.CDLL(MPI.__file__)  # its symbols include the MPI library it links
        query = lib.MPIX_Query_cuda_support
    except (ImportError, OSError, AttributeError):
        return False
    query.restype = ctypes.c_int
    query.argtypes = []
    try:
        return bool(query())
    except OSError:  # pragma: no cover - a library whose query needs MPI initialised differently
        return False
