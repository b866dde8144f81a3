"""What every role of one training needs to know: the communicator, the configuration, its place in the
hierarchy, where to write, and the stop signals (:class:`nnlo.stop.Stop`). Built once by the driver and
handed to the role objects.

:class:`RunInputs` is what a Python caller (:mod:`nnlo.api`) hands the driver besides the options: a model
object, data sources and epoch-end callbacks. Empty, the options name everything (``nnlo train``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnlo.config import TrainConfig
from nnlo.contract import CHECKPOINT_DIR as CHECKPOINT_SUBDIR
from nnlo.observe.tracking.base import Trackers
from nnlo.roles import Hierarchy, RankInfo, Role, TrainingGroup
from nnlo.stop import Stop


@dataclass(frozen=True)
class RunInputs:
    """What the options cannot name: each field None (or empty) means "as the options say".

    model: a loaded model source (:class:`nnlo.models.ModelSource` or :class:`nnlo.models.ObjectModelSource`)
        instead of loading ``config.model``;
    train / val: a :class:`~nnlo.data.source.DataSource` (or a list of HDF5 file paths) instead of
        ``--train``/``--val``;
    callbacks: ``callback(epoch, logs)`` functions run at every epoch end on the deciding rank
        (:mod:`nnlo.training.callbacks`);
    python_api: the caller is the Python API (``nnlo.train``): messages say options as its keyword arguments.
    """

    model: Any = None
    train: Any = None
    val: Any = None
    callbacks: tuple[Any, ...] = ()
    python_api: bool = False


@dataclass
class RunContext:
    comm: Any  # the training group's communicator (a private duplicate)
    config: TrainConfig
    hierarchy: Hierarchy
    out_dir: Path | None
    stop: Stop
    session: Any = None  # nnlo.observe.session.Session
    watchdog: Any = None  # nnlo.training.watchdog.Watchdog, armed around every blocking wait
    sleep_waits: bool = False  # waits sleep instead of spinning (nnlo.transport.sleeping_waits: oversubscribed)
    worker_comm: Any = None  # this rank's all-reduce worker group (--n-processes > 1); None elsewhere
    inputs: RunInputs = field(default_factory=RunInputs)  # a Python caller's model, data and callbacks
    #: the experiment trackers (--tensorboard, --mlflow) of the rank that writes the history; no-op elsewhere
    tracker: Trackers = field(default_factory=lambda: Trackers(()))

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def info(self) -> RankInfo:
        return self.hierarchy[self.rank]

    @property
    def group(self) -> TrainingGroup:
        return self.hierarchy.groups[0]

    @property
    def role_label(self) -> str:
        return self.info.label()

    @property
    def master_rank(self) -> int:
        """The rank this rank exchanges with: a worker's own master, a sub-master's uber-master."""
        info = self.info
        if info.role is Role.MASTER and self.group.uber_master is not None:
            return self.group.uber_master
        if info.role is Role.WORKER and info.master is not None:
            return self.group.masters[info.master]
        return self.group.masters[0]

    @property
    def worker_ranks(self) -> tuple[int, ...]:
        """Who this rank serves (the uber-master: the masters) or, for a worker, its master's workers."""
        info = self.info
        if info.role is Role.UBER_MASTER:
            return self.group.masters
        return self.group.worker_leaders(info.master if info.master is not None else 0)

    @property
    def n_workers(self) -> int:
        return len(self.worker_ranks)

    @property
    def worker_index(self) -> int | None:
        return self.info.worker

    @property
    def data_split(self) -> tuple[int, int, int, int]:
        """``(n_shards, shard_index, group_size, member)`` of this worker rank's training data.

        Shards are per logical worker over *all* logical workers of the training group (under every master),
        so shards are disjoint and complete; the ranks of one all-reduce group share a shard and split each
        batch. In pure all-reduce mode the whole group is one logical worker of ``size`` ranks.
        """
        info = self.info
        assert info.worker is not None and info.member is not None
        members = len(self.group.workers[info.worker])
        return len(self.group.workers), info.worker, members, info.member

    @property
    def checkpoint_dir(self) -> Path | None:
        return self.out_dir / CHECKPOINT_SUBDIR if self.out_dir is not None else None
