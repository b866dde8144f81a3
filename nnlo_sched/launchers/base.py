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
        """The signal to send this launcher so that its ranks get ``signal`` (or an equivalent stop signal)."""
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
