"""The marker rule: a test that starts a process carries one of :data:`PROCESS_MARKERS`, checked, not trusted.

``scripts/test.sh --fast`` runs ``-m "not (mpi or slurm or slow or gpu)"``: the inner loop of development, with no
process started. For that to hold, every test that starts one must say so:

- at collection, a test that uses a process-starting fixture (:data:`FIXTURE_MARKERS`) without its marker fails;
- while a test sets up and runs, an audit hook (:func:`sys.addaudithook`) sees every process it starts
  (``subprocess.Popen``, ``os.system``, ``os.posix_spawn``, ``os.fork``, ``os.exec*``): one started by a test
  that carries none of the markers fails it, naming the command.

The markers: ``mpi`` (MPI jobs: mpirun, ``-n``, the warm world, a job whose launcher is mpirun), ``slurm`` (the
private Slurm), ``gpu`` (needs a GPU), ``slow`` (any other process: a CLI subprocess, a local-scheduler chain,
stand-in batch systems; or more than a few seconds in-process).
"""
from __future__ import annotations

import sys
from typing import Any

import pytest

PROCESS_MARKERS = ("mpi", "slurm", "slow", "gpu")
#: fixture -> the marker a test using it must carry
FIXTURE_MARKERS = {
    "mpirun": "mpi",
    "mpi_world": "mpi",
    "nnlo_mpi": "mpi",
    "keras_world": "mpi",
    "nnlo_keras": "mpi",
    "run_train": "mpi",
    "slurm_cluster": "slurm",
    "slurm": "slurm",
    "torque": "slurm",
    "editable_install": "slow",
}
#: fixture -> the pytest-xdist group a test using it joins: the fixture is a session's process (a warm world) that,
#: under ``pytest -n N --dist loadgroup``, one worker starts rather than every worker.
FIXTURE_GROUPS = {"keras_world": "keras", "editable_install": "editable"}
_SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                           "os.exec"})
_NOT_ALLOWED: dict[str, Any] = {"item": None, "started": []}  # the running test when it may not start processes
_STASH = pytest.StashKey[str]()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in _SPAWN_EVENTS and _NOT_ALLOWED["item"] is not None:
        what = args[1] if event == "subprocess.Popen" and len(args) > 1 else args[0] if args else ""
        _NOT_ALLOWED["started"].append(f"{event}: {what!r}"[:200])


def _marks(item: pytest.Item) -> set[str]:
    return {m.name for m in item.iter_markers()}


def pytest_configure(config: pytest.Config) -> None:
    if not getattr(sys, "_nnlo_marker_audit", False):  # an audit hook cannot be removed: install it once
        sys.addaudithook(_audit)
        sys._nnlo_marker_audit = True  # type: ignore[attr-defined]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the xdist_group marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marks = _marks(item)
        if "slurm" in marks:  # one private Slurm per session: with pytest-xdist, one worker runs them all
            item.add_marker(pytest.mark.xdist_group("slurm"))
        for fixture, group in FIXTURE_GROUPS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(group))
        missing = sorted({f"{fixture} needs @pytest.mark.{marker}" for fixture, marker in FIXTURE_MARKERS.items()
                          if fixture in getattr(item, "fixturenames", ()) and marker not in marks})
        if missing:
            item.stash[_STASH] = "; ".join(missing)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller hands the tests out in this order
        items.sort(key=_heaviest_first)


def _heaviest_first(item: pytest.Item) -> int:
    """The order of the tests under pytest-xdist: the Slurm group (one worker runs it all, the longest chain of
    tests), then the other process-starting tests, then the fast ones, which fill the workers' last minutes
    instead of a long test starting last and running alone. (Stable: within each rank, collection order.)"""
    marks = _marks(item)
    return 0 if "slurm" in marks else 1 if marks & set(PROCESS_MARKERS) else 2


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which sends the collected ids to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    """Make ``--dist loadgroup`` see the groups: pytest-xdist 3.8 groups a test by rewriting ``item._nodeid`` to
    ``ID@GROUP``, which pytest 9 no longer reads (a node's id is ``item._id``), so every group was silently
    ignored (each worker started its own Slurm and TensorFlow world). The rewritten id is put where pytest reads it;
    with a pytest that reads ``_nodeid`` itself this changes nothing."""
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest < 9: xdist's rewrite works as it is
        return
    for item in session.items:
        grouped = getattr(item, "_nodeid", None)
        if isinstance(grouped, str) and "@" in grouped and grouped != item.nodeid and hasattr(item, "_id"):
            item._id = NodeId.parse(grouped)

def pytest_runtest_setup(item: pytest.Item) -> None:
    _NOT_ALLOWED["item"], _NOT_ALLOWED["started"] = None, []
    problem = item.stash.get(_STASH, None)
    if problem:
        pytest.fail(f"marker rule (tests/helpers/markers.py): {problem}", pytrace=False)
    if not _marks(item) & set(PROCESS_MARKERS):
        _NOT_ALLOWED["item"] = item


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    try:
        return (yield)
    finally:
        started, item_now = list(_NOT_ALLOWED["started"]), _NOT_ALLOWED["item"]
        _NOT_ALLOWED["item"], _NOT_ALLOWED["started"] = None, []
        if started and item_now is item:
            pytest.fail(f"marker rule (tests/helpers/markers.py): this test starts processes but carries none of "
                        f"{', '.join(PROCESS_MARKERS)} (add one, e.g. @pytest.mark.slow): {started[0]}"
                        + (f" and {len(started) - 1} more" if len(started) > 1 else ""), pytrace=False)
