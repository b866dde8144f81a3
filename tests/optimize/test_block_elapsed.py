"""A block's trial time is an interval: measured on the monotonic clock, so that a step of the wall clock (NTP, a
suspended virtual machine) during a trial never enters the cost model, the walltime fit or trials.csv.

Process-free: ``run_block`` of a one-rank block serves one trial and a stop through stand-in communicators; the
trial's runner steps the wall clock an hour forward while 2 s pass on the monotonic one.
"""
from __future__ import annotations

from typing import Any

from nnlo.optimize import block as block_module
from nnlo.optimize.block import run_block
from nnlo.optimize.protocol import TAG_RESULT
from nnlo.optimize.runners import FoldOutcome
from nnlo.roles import Shape, describe


class _Clock:
    def __init__(self) -> None:
        self.wall, self.mono = 1_800_000_000.0, 1000.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono


class _Done:
    def Test(self) -> bool:  # mpi4py's names
        return True


class _Comm:
    """A communicator of the block's one rank (its block and fold group) and its view of the world."""

    def __init__(self, rank: int, tasks: list[dict[str, Any]] | None = None) -> None:
        self.rank, self.tasks, self.sent = rank, list(tasks or []), []

    def Get_rank(self) -> int:
        return self.rank

    def Iprobe(self, source: int, tag: int) -> bool:
        return True

    def recv(self, source: int, tag: int) -> dict[str, Any]:
        return self.tasks.pop(0)

    def send(self, msg: Any, dest: int, tag: int) -> None:
        self.sent.append((msg, dest, tag))

    def Ibarrier(self) -> _Done:
        return _Done()

    def bcast(self, msg: Any, root: int) -> Any:
        return msg

    def gather(self, item: Any, root: int) -> list[Any]:
        return [item]


class _Runner:
    def __init__(self, clock: _Clock) -> None:
        self.clock = clock

    def run(self, comm: Any, trial_id: int, params: dict[str, Any], fold: int, n_fold: int, out_dir: Any,
            epochs: int | None = None) -> FoldOutcome:
        self.clock.wall += 3600.0  # the wall clock is set an hour forward meanwhile
        self.clock.mono += 2.0
        return FoldOutcome(metrics={"val_loss": 0.5}, epochs=1)


def test_a_trials_elapsed_time_ignores_a_step_of_the_wall_clock(tmp_path, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(block_module, "time", clock)
    hierarchy = describe(2, Shape.for_run(block_size=1, search=True))
    world = _Comm(1, [{"trial": 0, "params": {"a": 1}}, {"stop": True, "code": 0}])
    me = _Comm(0)
    assert run_block(world, hierarchy, me, me, _Runner(clock), tmp_path) == 0
    [(result, dest, tag)] = world.sent
    assert (dest, tag, result["trial"]) == (hierarchy.coordinator, TAG_RESULT, 0)
    assert result["elapsed"] == 2.0
