"""What every launcher needs to start the ranks of a layout, and the interface each launcher implements.

A launcher turns a uniform placement (the same number of ranks on every node but perhaps the last, each rank
with the same cores and GPUs) into an argument vector. Keeping placements uniform is what lets one launch line
serve jsrun resource sets, aprun's ``-N``, srun's ``--ntasks-per-node`` and mpirun alike; the layout decides
where non-GPU ranks (masters, coordinator) sit within that uniform grid.
"""
from __future__ import annotations

import shutil
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from nnlo.contract import STOP_SIGNALS
from nnlo.device import device_variable
from nnlo.errors import ConfigError
from nnlo_sched.profiles.schema import Profile


class LaunchError(ConfigError):
    """A placement this launcher cannot express (the layout may try a smaller one)."""


@dataclass(frozen=True)
class LaunchPlan:
    """Rank counts for one launch.

    ranks_per_node: ranks on each node (the last node may hold fewer).
    gpus_per_rank: GPUs each GPU-using rank gets (a Fraction below 1 when ranks share a GPU; 0: CPU only).
    unbound: the launcher binds no GPUs and every rank sees all of its node's GPUs; each rank then picks
        the device the layout names (used when masters sit on a node's spare cores beside its workers).
    """

    ranks: int
    nodes: int
    ranks_per_node: int
    cores_per_rank: int
    gpus_per_rank: Fraction
    unbound: bool = False

    @property
    def ranks_per_gpu(self) -> int:
        return int(1 / self.gpus_per_rank) if 0 < self.gpus_per_rank < 1 else 1

    @property
    def bound(self) -> bool:
        """The launcher gives each rank slot its own GPU(s) (:func:`slot_gpus`): GPUs are used, and the ranks
        are not placed beside spare-core masters on one node (``unbound``)."""
        return self.gpus_per_rank > 0 and not self.unbound


def slot_gpus(slot: int, gpus_per_rank: Fraction) -> tuple[int, ...]:
    """The GPUs (node-local indices) a launcher that binds gives rank slot ``slot`` of a node: ``g`` whole GPUs
    each in slot order, or one GPU per ``k`` consecutive slots when ``k`` ranks share one (``1/k``). Pure: the
    launchers bind by it and the layout reports it."""
    if gpus_per_rank <= 0:
        return ()
    if gpus_per_rank < 1:
        return (slot // int(1 / gpus_per_rank),)
    g = int(gpus_per_rank)
    return tuple(range(slot * g, (slot + 1) * g))


def device_names(gpus: tuple[int, ...], order: tuple[int, ...] = (), tiles: int = 1) -> tuple[str, ...]:
    """What the vendor's variable says for a rank slot's ``gpus`` (node-local device numbers, as
    :func:`slot_gpus` gives them): device ``g`` is the node's ``order[g]`` when the profile orders them
    (Polaris ``3, 2, 1, 0``: ALCF's set_affinity_gpu_polaris.sh gives local rank 0 GPU 3); with ``tiles``
    devices per GPU it is ``gpu.tile`` (Aurora: ALCF's gpu_tile_compact.sh gives local rank 0 ``0.0``, 1
    ``0.1``, 2 ``1.0``). Pure."""
    if order:
        gpus = tuple(order[g] for g in gpus)
    if tiles > 1:
        return tuple(f"{g // tiles}.{g % tiles}" for g in gpus)
    return tuple(str(g) for g in gpus)


#: the wrapper's name in the ranks' process list ($0 of its ``bash -c``)
WRAPPER_NAME = "nnlo-device"


def device_wrapper(variable: str, local_rank: str, per_slot: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    """The words that start each rank through ``bash -c`` setting ``variable`` to its slot's entry of
    ``per_slot`` (indexed by the launcher's node-local rank, the shell expression ``local_rank``), after
    ``exports`` (``NAME=value`` words), then ``exec``-ing the program: the sites' affinity scripts (LUMI's
    select_gpu, ALCF's set_affinity_gpu_polaris.sh and gpu_tile_compact.sh) as one launch-line word, so that
    no helper file has to exist on the compute nodes. The program replaces the shell: signals reach it."""
    head = "".join(f"export {e}; " for e in exports)
    script = f'{head}d=({" ".join(per_slot)}); export {variable}="${{d[{local_rank}]}}"; exec "$@"'
    return ["bash", "-c", script, WRAPPER_NAME]


class Launcher(ABC):
    """Builds the argv that starts ``plan.ranks`` ranks of a program."""

    name: str = ""
    #: whether this launcher can give each rank its own GPU(s); one that cannot (aprun, mpirun) starts ranks that
    #: see every GPU of their node, and each rank picks its own by :func:`nnlo.device.gpu_index`
    binds_gpus: bool = False

    def __init__(self, profile: Profile) -> None:
        self.profile = profile

    def program(self) -> str:
        cmd = self.profile.launcher_command or self.name
        if cmd == "auto":
            local = Path(sys.executable).parent / self.name
            return str(local) if local.exists() else (shutil.which(self.name) or self.name)
        return cmd

    @abstractmethod
    def argv(self, plan: LaunchPlan) -> list[str]:
        """The launcher command up to (not including) the program it runs."""

    def relay(self, signal: str) -> str:
        """The signal to send this launcher so that its ranks get ``signal`` (or an equivalent stop signal); ""
        where the batch system delivers it to the ranks itself (Flux) and the shell only catches it."""
        return signal

    def relays(self, warning: str | None = None) -> dict[str, str]:
        """The one relay rule of every launch: each signal the process in front of this launcher catches (a
        batch shell's traps, ``nnlo ... -n``'s relay) -> the signal it sends the launcher. The stop signals
        (:data:`nnlo.contract.STOP_SIGNALS`) and a site's pre-walltime ``warning`` (first), names without
        ``SIG``."""
        caught = [warning, "TERM", *(s.name.removeprefix("SIG") for s in STOP_SIGNALS)]
        return {sig: self.relay(sig) for sig in dict.fromkeys(s for s in caught if s)}

    def check(self, plan: LaunchPlan) -> None:
        """Raise :class:`LaunchError` for a plan this launcher cannot express."""

    # -- per-rank devices by a wrapper (profiles with gpu_bind = "wrapper", and launchers that never bind) --
    #: the shell expression of a rank's node-local number under this launcher ("" where it has none)
    local_rank_expr: str = ""

    def slot_device_names(self, plan: LaunchPlan) -> list[str]:
        """For every rank slot of a node: what the vendor's variable says (``3``, ``0.1``, ``0,1``)."""
        p = self.profile
        return [",".join(device_names(slot_gpus(slot, plan.gpus_per_rank), p.gpu_order, p.gpu_tiles))
                for slot in range(plan.ranks_per_node)]

    def wrapper(self, plan: LaunchPlan) -> list[str]:
        """The device wrapper of a bound plan (:func:`device_wrapper`), with the vendor's variable
        (:func:`nnlo.device.device_variable`); [] when the plan is unbound or uses no GPU."""
        if not plan.bound or not self.local_rank_expr:
            return []
        p = self.profile
        exports = ("ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE", "ZE_ENABLE_PCI_ID_DEVICE_ORDER=1") if p.gpu_tiles > 1 else ()
        return device_wrapper(device_variable(p.gpu_vendor), self.local_rank_expr, self.slot_device_names(plan),
                              exports)
