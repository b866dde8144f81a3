"""The readable ``nnlo layout`` summary: sizes, roles, a compact node map and the launch line.

It stays a screenful on the full Summit: nodes with the same role counts collapse into one line and the
per-rank map is the run-length form of :meth:`nnlo.roles.Hierarchy.rank_map`.
"""
from __future__ import annotations

import shlex
from collections.abc import Sequence

from nnlo_sched.layout.model import Layout

_MAX_RANK_MAP = 400  # characters of the rank map before it is shortened
_MAX_SLOTS = 24  # ranks of a node listed in the GPU map before it is shortened
_BINDING = {
    "launcher": "bound by the launcher: each rank sees only its own GPU(s) and computes on the first",
    "layout": "each rank sees its node's GPUs and computes on the one listed (nnlo.device.gpu_index)",
}


def _duration(seconds: int | None, missing: str = "none known") -> str:
    if seconds is None:
        return missing
    d, rest = divmod(seconds, 86400) if seconds >= 2 * 86400 else (0, seconds)
    h, rest = divmod(rest, 3600)
    m = rest // 60
    return (f"{d}d" if d else "") + (f"{h}h{m:02d}" if h else (f"{m}m" if m or not d else ""))


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {role}" + ("s" if n > 1 else "") for role, n in counts.items())


def gpu_map(layout: Layout) -> list[str]:
    """Each rank's GPU, node by node: consecutive nodes whose ranks get the same GPUs in the same order share
    one line (``-``: a rank without a GPU; ``0+1``: a rank with two)."""
    if not layout.gpus_per_worker:
        return []
    t = layout.ranks_per_node
    runs: list[tuple[int, int, list[str]]] = []
    for node in range(layout.nodes):
        pattern = [layout.device_of(r).replace(",", "+") or "-"
                   for r in range(node * t, min((node + 1) * t, layout.world_size))]
        if runs and runs[-1][2] == pattern and runs[-1][1] == node - 1:
            runs[-1] = (runs[-1][0], node, pattern)
        else:
            runs.append((node, node, pattern))
    lines = [f"gpu map   {_BINDING[layout.gpu_binding]} ({layout.device_variable})"]
    shown: Sequence[tuple[int, int, list[str]] | None] = runs if len(runs) <= 8 else [*runs[:5], None, *runs[-2:]]
    for run in shown:
        if run is None:
            lines.append(f"  ... {len(runs) - 7} more node groups ...")
            continue
        a, b, pattern = run
        first = a * t
        where = f"node {a}" if a == b else f"nodes {a}-{b}"
        n = len(pattern)
        if a != b:
            who = f"{n} rank{'s' if n > 1 else ''} each, in rank order"
        else:
            who = f"rank {first}" if n == 1 else f"ranks {first}-{first + n - 1}"
        gpus = " ".join(pattern[:_MAX_SLOTS]) + (" ..." if len(pattern) > _MAX_SLOTS else "")
        lines.append(f"  {where:<16} {who}: GPUs {gpus}")
    return lines


def summary(layout: Layout) -> str:
    h = layout.hierarchy
    lines = [f"cluster   {layout.cluster}" + (f" (queue {layout.queue})" if layout.queue else "")]
    lines.append(f"run       {layout.kind}: {h.summary()}")
    gpu = ""
    if layout.gpus_per_worker:
        share = f", {layout.ranks_per_gpu} ranks per GPU" if layout.shares_gpus else ""
        gpu = (
            f", {float(layout.gpus_per_worker):g} GPU per worker rank{share}; "
            f"GPUs used {layout.gpus_used} of {layout.gpus_allocated}"
        )
    lines.append(
        f"nodes     {layout.nodes} x {layout.ranks_per_node} ranks/node, "
        f"{layout.cores_per_rank} cores/rank{gpu}"
    )
    if layout.walltime_s is not None or layout.walltime_limit_s is not None:
        lines.append(
            f"walltime  {_duration(layout.walltime_s, 'not given')} (queue limit for {layout.nodes} node(s): "
            f"{_duration(layout.walltime_limit_s)})"
        )
    runs = layout.node_runs()
    lines.append("node map")
    shown: Sequence[tuple[int, int, dict[str, int]] | None] = (
        runs if len(runs) <= 8 else [*runs[:5], None, *runs[-2:]])
    for run in shown:
        if run is None:
            lines.append(f"  ... {len(runs) - 7} more node groups ...")
            continue
        a, b, counts = run
        where = f"node {a}" if a == b else f"nodes {a}-{b}"
        lines.append(f"  {where:<16} {_counts(counts)}" + (" each" if a != b else ""))
    rank_map = h.rank_map()
    if len(rank_map) > _MAX_RANK_MAP:
        rank_map = rank_map[: _MAX_RANK_MAP // 2] + " ... " + rank_map[-_MAX_RANK_MAP // 2:]
    lines.append(f"rank map  {rank_map}")
    lines += gpu_map(layout)
    for note in layout.notes:
        lines.append(f"note      {note}")
    lines.append(f"launch    {shlex.join(layout.launcher)} <python> -m nnlo_sched run <run dir>")
    return "\n".join(lines)
