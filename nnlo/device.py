"""Which device a rank computes on: one GPU per worker rank of a node, else the CPU.

Why from the node-local rank: a job places several ranks per node, and each must take a different GPU.
The ranks of ``comm`` that share a node (an MPI shared-memory split, so no hostname parsing) count how many
*device-needing* ranks (workers) sit before them on that node; that count picks the GPU, modulo the number
of GPUs torch sees. ``CUDA_VISIBLE_DEVICES`` is honoured because torch only counts the visible ones (and
indices are plain integers: upstream broke beyond 9 GPUs parsing them as characters). Masters stay on the
CPU: they only add vectors. ``NNLO_DEVICE=cpu`` (or ``cuda:1`` ...) overrides the choice for every rank.
"""
from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger("nnlo.device")


def node_local_index(comm: Any, needs_device: bool) -> tuple[int, int]:
    """(index of this rank among the device-needing ranks of its node, how many there are). Collective."""
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        flags = node.allgather(bool(needs_device))
        return sum(flags[: node.Get_rank()]), sum(flags)
    finally:
        node.Free()


def select_device(comm: Any, needs_device: bool) -> str:
    """The torch device string for this rank (collective over ``comm``: every rank must call it)."""
    index, on_node = node_local_index(comm, needs_device)
    forced = os.environ.get("NNLO_DEVICE")
    if forced:
        return forced
    if not needs_device:
        return "cpu"
    try:
        import torch
    except ImportError:
        return "cpu"
    if not torch.cuda.is_available():
        return "cpu"
    count = torch.cuda.device_count()
    if on_node > count and index == 0:
        log.warning("%d worker ranks share %d GPU(s) on this node; ranks will share GPUs", on_node, count)
    return f"cuda:{index % count}"
