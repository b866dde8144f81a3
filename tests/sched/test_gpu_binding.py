"""GPU binding end to end, without a GPU: for every built-in profile (and launchers that cannot bind), the
launch line of the rendered batch script, read the way its launcher places ranks and GPUs, plus the runtime's
one rule (:func:`nnlo.device.gpu_index`), gives every worker rank its own GPU (or its share of one), puts no
master on a GPU, and lands each rank on the GPU ``nnlo layout`` prints for it.

The launchers' semantics modelled here (``shared/reference/clusters.md``): ranks are placed in blocks of
``ranks per node`` in rank order; ``srun --gpu-bind=map_gpu:a,b,...`` (``mask_gpu:``) gives local task ``i``
exactly the listed GPU(s), and without ``--gpu-bind`` every task sees every GPU of the job's node; ``jsrun``
deals consecutive ranks ``-a`` at a time into resource sets, ``-r`` per host, the ``j``-th set of a host
holding GPUs ``j*g .. j*g+g-1`` (``-g g``), and its ranks see only those; ``aprun`` and ``mpirun`` have no GPU
option, so every rank sees every GPU of its node. ``flux run -g g -o gpu-affinity=per-task`` gives the node's
``i``-th task GPUs ``i*g .. i*g+g-1``, without ``-g`` every task sees the node's GPUs; PALS ``mpiexec`` binds
none. A device wrapper in the launch line (``bash -c 'd=(...); export VAR="${d[LOCAL_RANK]}"; exec "$@"'``:
LUMI under srun, Aurora and Polaris under mpiexec) leaves a rank exactly its slot's entry. GPUs are compared
by the names the node gives them (Frontier's GCD 4 for slot 0, Polaris' GPU 3, Aurora's tile ``0.1``), which
is what ``nnlo layout`` prints (:meth:`Layout.device_of`).
"""
from __future__ import annotations

import re
import shlex
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

import nnlo_sched.profiles as profiles_pkg
from nnlo.device import gpu_index
from nnlo_sched.layout import LayoutError
from nnlo_sched.layout.model import Layout
from nnlo_sched.profiles import Profile, load_profile
from nnlo_sched.render import render_script
from nnlo_sched.spec import RunSpec

BUILT_IN = sorted(p.stem for p in Path(profiles_pkg.__file__).parent.glob("*.toml"))
PY = "/sw/nnlo/bin/python"
SHAPES = {  # (kind, inner options)
    "train": ("train", ()),
    "groups": ("train", ("--n-processes", "2")),
    "allreduce": ("train", ("--mode", "allreduce")),
    "uber-master": ("train", ("--n-masters", "3")),
    "search": ("optimize", ("--block-size", "3")),
    "search-folds": ("optimize", ("--block-size", "4", "--n-fold", "2")),
}
SIZES = [dict(nodes=1), dict(nodes=2), dict(nodes=3), dict(nodes=2, gpus_per_worker=0.5),
         dict(nodes=1, gpus_per_worker=0.5), dict(nodes=1, gpus_per_worker=2), dict(nodes=2, gpus_per_worker=2)]


def with_gpus(name: str) -> Profile:
    """The built-in profile, pinned like the golden files; the local one given 16 cores and 4 GPUs (a user's
    workstation: not this machine's cores)."""
    p = load_profile(name)
    p = replace(p, python=PY, launcher_command="mpirun" if p.launcher == "mpirun" else p.launcher_command)
    small = p.queue(None)
    if small is not None and small.min_nodes > 1:  # a routing queue for big jobs (ALCF's prod): a small one
        p = replace(p, default_queue=max((q for q, v in p.queues.items() if v.min_nodes == 1),
                                         key=lambda q: p.queues[q].max_nodes or 0))
    return replace(p, gpus_per_node=4, cores_per_node=16) if p.gpus_per_node == 0 else p


PROFILES = {name: with_gpus(name) for name in BUILT_IN}
# launchers that cannot bind, on multi-GPU nodes: a Cray XK-like aprun site and mpirun under Slurm
PROFILES["aprun-2gpus"] = replace(PROFILES["titan"], gpus_per_node=2, name="aprun-2gpus")
PROFILES["mpirun-slurm"] = replace(PROFILES["flatiron"], launcher="mpirun", launcher_command="mpirun",
                                   launcher_flags=(), name="mpirun-slurm")


def launch_line(script: str) -> list[str]:
    """The rendered script's launch command, up to the program it starts."""
    for line in script.splitlines():
        if f"{PY} -m nnlo_sched run" in line:
            words = shlex.split(line.strip())
            return words[:words.index(PY)]
    raise AssertionError(f"no launch line in:\n{script}")


def _option(argv: list[str], *names: str) -> str | None:
    for i, word in enumerate(argv):
        for name in names:
            if word == name:
                return argv[i + 1]
            if name.startswith("--") and word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def wrapped(argv: list[str], slot: int) -> list[str] | None:
    """The device a rank in node slot ``slot`` is left by a device wrapper in ``argv`` (None: no wrapper)."""
    if "bash" not in argv:
        return None
    script = argv[argv.index("bash") + 2]
    m = re.search(r"d=\(([^)]*)\); export \w+=", script)
    if m is None:  # flux's vendor move: the task keeps what gpu-affinity gave it
        return None
    return m.group(1).split()[slot].split(",")


def visible_gpus(argv: list[str], rank: int, ranks_per_node: int, gpus_per_node: int) -> list[str]:
    """The node's names of the GPUs rank ``rank`` sees when started by ``argv`` (the launchers' semantics
    above): a wrapper's entry (an Aurora tile ``g.t``), else indices among the node's devices (a rank that sees
    every tile of an Aurora node sees 12 devices, FLAT)."""
    names = [str(g) for g in range(gpus_per_node)]
    slot = rank % ranks_per_node
    own = wrapped(argv, slot)
    if own is not None:
        return own
    program = Path(argv[0]).name
    if program == "flux":
        g = _option(argv, "-g")
        return names if g is None else names[slot * int(g):(slot + 1) * int(g)]
    return [names[i] for i in _visible(argv, slot, gpus_per_node, program)]


def _visible(argv: list[str], slot: int, gpus_per_node: int, program: str) -> list[int]:
    everything = list(range(gpus_per_node))
    if program == "srun":
        bind = _option(argv, "--gpu-bind")
        if bind is None:
            return everything
        kind, _, values = bind.partition(":")
        entries = values.split(",")
        entry = entries[slot % len(entries)]
        if kind == "map_gpu":
            return [int(entry)]
        assert kind == "mask_gpu", bind
        mask = int(entry, 16)
        return [g for g in range(gpus_per_node) if mask >> g & 1]
    if program == "jsrun":
        per_set, gpus = int(_option(argv, "-a") or 1), int(_option(argv, "-g") or 0)
        j = slot // per_set  # the resource set of this host the rank is in
        return list(range(j * gpus, (j + 1) * gpus))
    assert program in ("aprun", "mpirun", "mpiexec"), argv
    return everything


def runtime_gpus(layout: Layout, argv: list[str]) -> dict[int, str]:
    """The GPU (the node's name for it) each worker rank computes on: what it sees, and the runtime's rule."""
    t = layout.ranks_per_node
    on_node: dict[int, list[int]] = {}
    for info in layout.hierarchy:
        if info.needs_device:
            on_node.setdefault(info.rank // t, []).append(info.rank)
    chosen = {}
    for ranks in on_node.values():
        views = [visible_gpus(argv, rank, t, layout.gpus_per_node) for rank in ranks]
        same_view = all(v == views[0] for v in views)  # what the ranks compare (CUDA_VISIBLE_DEVICES)
        for ordinal, (rank, seen) in enumerate(zip(ranks, views, strict=True)):
            assert seen, f"rank {rank} sees no GPU under {shlex.join(argv)}"
            chosen[rank] = seen[gpu_index(ordinal, len(ranks), len(seen), same_view)]
    return chosen


def check_binding(profile: Profile, kind: str, args: tuple[str, ...], size: dict) -> bool:
    """Render, launch in thought, pick by the rule, compare with the layout; False if the layout is refused."""
    spec = RunSpec.from_argv(kind, ["--model", "m.py", *args], profile.name, name="binding", walltime_s=1800,
                   workdir="/home/u/proj", account="ABC123", **size)
    try:
        layout = spec.layout_on(profile)
    except LayoutError as e:  # e.g. 2 GPUs per worker on a one-GPU node: refused with a reason
        assert "gpus-per-worker" in str(e) or "--nodes" in str(e) or "rank count" in str(e), str(e)
        return False
    spec.layout = layout.record()
    argv = launch_line(render_script(spec, profile, "/scratch/u/nnlo-runs/binding"))
    where = f"{profile.name} {kind} {' '.join(args)} {size}: {shlex.join(argv)}"
    assert argv == layout.launcher, where  # the script launches what the layout computed
    chosen = runtime_gpus(layout, argv)
    per_node_gpu = Counter((layout.node_of(r), g) for r, g in chosen.items())
    assert max(per_node_gpu.values()) <= layout.ranks_per_gpu, (where, per_node_gpu)  # own GPU, or a 1/k share
    for info in layout.hierarchy:
        gpus = layout.gpus_of(info.rank)
        if not info.needs_device:
            assert gpus == () and info.rank not in chosen, where
            continue
        assert chosen[info.rank] == layout.device_of(info.rank).split(",")[0], (where, info.rank, chosen[info.rank],
                                                                               layout.device_of(info.rank))
        assert len(gpus) == max(1, int(layout.gpus_per_worker)), where
    if layout.gpus_per_worker >= 1:  # whole GPUs: no two workers of a node overlap
        owned = Counter((layout.node_of(r), g) for r in chosen for g in layout.gpus_of(r))
        assert max(owned.values()) == 1, (where, owned)
    return True


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_worker_gets_its_own_gpu_as_the_layout_says(name: str) -> None:
    placed = [(shape, size) for shape, (kind, args) in SHAPES.items() for size in SIZES
              if check_binding(PROFILES[name], kind, args, size)]
    assert len(placed) >= len(SHAPES) * 2, placed  # every shape on at least two sizes
    assert {shape for shape, _ in placed} == set(SHAPES)


def test_nnlo_layout_prints_each_ranks_gpu_for_every_profile() -> None:
    """``nnlo layout``'s GPU map lists, node group by node group, the GPUs of every rank in rank order."""
    from nnlo_sched.layout.text import summary

    for name in BUILT_IN:
        for nodes in (1, 2):
            spec = RunSpec.from_argv("train", ["--model", "m.py"], name, name="binding", walltime_s=1800, workdir="/w",
                           account="ABC123", nodes=nodes)
            try:
                layout = spec.layout_on(PROFILES[name])
            except LayoutError:  # the local profile has one node
                continue
            lines = summary(layout).splitlines()
            start = next(i for i, ln in enumerate(lines) if ln.startswith("gpu map"))
            shown = []
            for ln in lines[start + 1:]:
                if not ln.startswith("  node"):
                    break
                where, _, gpus = ln.partition(": GPUs ")
                first_node = int(where.split()[1].split("-")[0])
                shown.append((first_node, gpus.split()))
            assert shown, lines
            t = layout.ranks_per_node
            for node, gpus in shown:  # the group's first node, rank by rank
                ranks = range(node * t, min(node * t + t, layout.world_size))
                assert gpus == [layout.device_of(r).replace(",", "+") or "-" for r in ranks], (name, node, gpus)
            assert shown[0][1][0] == "-"  # rank 0, the master, computes on no GPU
