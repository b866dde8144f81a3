"""A run's payload: the typed run run in this MPI world, on every rank, however the run was started.

* A batch job's script runs ``python -m nnlo_sched run RUN_DIR`` on every rank: :func:`run_spec` reads the
  run's spec and runs it as one job of its chain (:func:`job_config`: it checkpoints into the run directory,
  restores the newest complete checkpoint, stops before the job's deadline ``$NNLO_DEADLINE``).
* ``nnlo train|optimize -n N`` outside an MPI launch (:func:`start_here`) runs the checks ``nnlo submit``
  runs before anything is queued, writes the very same spec into a private folder and starts
  ``python -m nnlo_sched run --as-given FOLDER`` on N ranks through the local profile's launcher
  (:func:`nnlo_sched.launchers.local_launch.relaunch`, which relays stop signals and names a dead rank): the
  same payload, with the run's options as given (its ``--checkpoint``, ``--restore``, deadline).
* ``nnlo train|optimize`` inside an MPI launch (``mpirun``, ``srun`` ...) runs in that world directly
  (:func:`run_training`, :func:`run_search`): every rank parses the command line it was started with.

Exit status: the run's (0 finished, 75 checkpointed before the deadline or on a signal, 1 failed, 2 bad
input). MPI and the runtime are imported only here, when a rank runs.
"""
from __future__ import annotations

import json
import logging
import os
import runpy
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import click

from nnlo.abort import abort_job
from nnlo.api import DEFAULT_RUNS, RankFailure, run_train, search_in_world
from nnlo.checkpoint import RESTORE_AUTO, find_latest
from nnlo.config import TrainConfig, deadline_from_env
from nnlo.contract import (
    ENV_RUN_DIR,
    EXIT_BAD_INPUT,
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_RESUMABLE,
    MANIFEST_FILE,
    SIGNAL_STATUS_BASE,
    SPEC_FILE,
)
from nnlo.errors import NnloError
from nnlo.models import run_name
from nnlo.observe.logs import console_logging
from nnlo.optimize.options import SearchConfig
from nnlo.roles import RoleError
from nnlo.script_stop import guard_script
from nnlo_sched.checks import check_run, skipped_checks
from nnlo_sched.inner import SCRIPT, InnerCommand
from nnlo_sched.launchers.local_launch import PROFILE, relaunch
from nnlo_sched.layout import oversubscribed
from nnlo_sched.profiles import load_profile
from nnlo_sched.spec import RunSpec, checkpoint_dir, load_spec
from nnlo_sched.state import write_json_atomic


# -- a job of a chain, or a run started here --------------------------------------------------------------
def job_config(run_dir: Path) -> TrainConfig:
    """The training options of this job of the run: checkpoint into the run, restore its newest checkpoint.

    A restore the user asked for (``--restore DIR``) is replaced: a chain resumes from its own checkpoints
    only, and only from a complete one. The deadline is the job's (``$NNLO_DEADLINE``) unless the run's
    options gave one explicitly.
    """
    spec = load_spec(run_dir)
    config = spec.train.replace(deadline=deadline_from_env(spec.train.deadline))
    if spec.kind == "train":
        ckpt = checkpoint_dir(run_dir, spec)
        restore = str(ckpt) if find_latest(ckpt) else None
        # --overwrite starts the chain's run afresh once: a job that finds the run's checkpoints continues them
        config = config.replace(checkpoint=str(ckpt), restore=restore, overwrite=config.overwrite and not restore)
    return config


def run_spec(run_dir: Path, *, as_given: bool = False) -> int:
    """Run the spec in ``run_dir`` in this MPI world (every rank calls it): as a job of its chain, or
    (``as_given``) with its options as they are (``nnlo train|optimize -n``, :func:`start_here`)."""
    spec = load_spec(run_dir)
    if as_given:
        config = spec.train
    else:
        os.environ[ENV_RUN_DIR] = str(run_dir)  # a search's output, the job's participant folder
        config = job_config(run_dir)
    if spec.workdir and Path(spec.workdir).is_dir():
        os.chdir(spec.workdir)  # relative paths in the options mean what they meant when they were given
    if spec.kind == SCRIPT:
        return run_script(spec.args)
    if spec.kind == "train":
        return run_training(config)
    search = spec.search
    assert search is not None  # an optimize spec always has its search options
    return run_search(lambda: (config, search), config.log_level)


def start_here(inner: InnerCommand, args: list[str]) -> int:
    """``nnlo <kind> -n N`` outside an MPI launch: the pre-queue checks (unless ``--no-check``), then the run's
    spec on ``inner.ranks`` ranks of this machine through the local profile's launcher; the exit status.

    ``args``: the command line as typed (the spec keeps it for display). Bad options and paths are one line
    (ConfigError) before any rank starts; the model's import and its data are checked by the ranks themselves,
    which start at once (no queue to save them from): one line and exit 2 too, without a probe's interpreter.
    """
    assert inner.ranks is not None
    notes = (check_run(inner.train, inner.search, import_model=False) if inner.check
             else [f"--no-check: skipped the checks of {skipped_checks(import_model=False)}"])
    over = oversubscribed(inner.ranks, load_profile(PROFILE).cores_per_node)
    if over:
        notes.append(f"{over} of this machine (the ranks share them: slower, not wrong)")
    for note in notes:
        click.echo(f"nnlo: note: {note}", err=True)
    spec = RunSpec.of(inner, args, PROFILE, name=inner.run_name(os.getcwd()), workdir=os.getcwd())
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="nnlo-run-") as folder:
        write_json_atomic(Path(folder) / SPEC_FILE, spec.to_dict())
        code = relaunch(inner.ranks, ["run", "--as-given", folder])
    if code > SIGNAL_STATUS_BASE and inner.kind == "train" and stopped_with_checkpoint(inner.train, started):
        code = EXIT_RESUMABLE  # a second Ctrl-C after the stop's checkpoint made the launcher abort: it is complete
    if code == EXIT_RESUMABLE:
        click.echo(f"nnlo: {continue_line(inner, args)}", err=True)
    return code


def stopped_with_checkpoint(config: TrainConfig, since: float) -> bool:
    """The training's folder holds a complete checkpoint, written since ``since``, of a stop (a signal or the
    deadline): the run stopped as asked, whatever the launcher said after (the folder as the ranks name it:
    ``--checkpoint``, else ``nnlo-runs/NAME`` with the name read from the model's source, not imported)."""
    out = Path(config.checkpoint or Path(DEFAULT_RUNS) / run_name(config.model, config.trial_name,
                                                                    import_module=False))
    latest = find_latest(out)
    try:
        manifest = json.loads((latest / MANIFEST_FILE).read_text()) if latest is not None else {}
        fresh = latest is not None and latest.stat().st_mtime >= since - 1
    except (OSError, ValueError):
        return False
    return fresh and isinstance(manifest, dict) and manifest.get("stopped_reason") in ("signal", "deadline")


def continue_line(inner: InnerCommand, args: list[str]) -> str:
    """What a ``-n`` run stopped with a checkpoint (exit 75) says last: the command that continues it."""
    if inner.kind == "train":
        given, flag = inner.train.restore == RESTORE_AUTO, ["--restore", "auto"]
    else:
        given, flag = bool(inner.search and inner.search.opt_restore), ["--opt-restore"]
    again = shlex.join(["nnlo", inner.kind, *args, *([] if given else flag)])
    return f"stopped with a checkpoint; continue with: {again}"


# -- in this MPI world ---------------------------------------------------------------------------------------
def run_script(argv: list[str]) -> int:
    """A script run's job on this rank: ``argv[0]`` run as ``__main__`` with ``argv`` as its ``sys.argv``, under
    the chain's contract (:mod:`nnlo.job`: ``$NNLO_RUN_DIR``, ``$NNLO_DEADLINE``); its exit status.

    The script's ``sys.exit(n)`` is the job's status (75: resubmit me). An exception in the script is printed
    with its traceback trimmed to the script's frames, and the whole job is ended (a rank that dies must not
    leave the others waiting in a collective). The walltime warning is held for the script until it asks
    ``nnlo.stop_requested()`` (or any of its job's facts); one that never asks is ended at its deadline as at
    the walltime (:mod:`nnlo.script_stop`).
    """
    path = str(Path(argv[0]).expanduser().absolute())
    sys.argv = [path, *argv[1:]]
    sys.path.insert(0, str(Path(path).parent))  # as `python FILE.py` does: its folder's modules import
    try:
        with guard_script():  # the walltime warning never kills it; its first question installs the stop handler
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = e.code
        if code is None or isinstance(code, int):
            return int(code or 0)
        click.echo(str(code), err=True)  # sys.exit("message"): Python prints it and exits 1
        return EXIT_FAILED
    except RankFailure as e:  # nnlo's training failed on every rank; the failing rank has said why
        if e.report:
            click.echo(f"nnlo: error: {e}", err=True)
        return e.exit_code
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - the user's error: their traceback, then the job ends together
        tb = traceback.extract_tb(e.__traceback__)
        own = [f for f in tb if "runpy" not in f.filename and f.filename != __file__] or tb
        home = Path(path).parent  # the deepest frame in the script's folder: the user's code, not a library's
        where = next((f for f in reversed(own) if Path(f.filename).is_relative_to(home)), own[-1] if own else None)
        rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "?"
        text = "".join(traceback.format_list(own)) + "".join(traceback.format_exception_only(type(e), e))
        click.echo(f"[rank {rank}] Traceback (most recent call last):\n{text.rstrip()}", err=True)
        line = f"{where.filename}:{where.lineno}" if where is not None else path
        click.echo(f"nnlo: error: {type(e).__name__} in {line}: {' '.join(str(e).split())[:300]}", err=True)
        code = EXIT_BAD_INPUT if isinstance(e, NnloError) else EXIT_FAILED  # nnlo refused the script's options
        _end_world(code)
        return code
    return EXIT_DONE


def _end_world(code: int) -> None:
    """End every rank of this job (where MPI has started; a script that never used MPI has no others)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        sys.stderr.flush()
        abort_job(mpi.COMM_WORLD, code)


def run_training(config: TrainConfig, expected_ranks: int | None = None) -> int:
    """Train in the current MPI world through the Python API's in-rank entry (:func:`nnlo.api.run_train`,
    which ``nnlo.train()`` calls too); returns the process exit status (prints errors once)."""
    from mpi4py import MPI  # lazy: MPI starts only in a rank

    comm = MPI.COMM_WORLD
    if expected_ranks is not None and expected_ranks != comm.Get_size() and comm.Get_rank() == 0:
        click.echo(f"nnlo: note: running on the launcher's {comm.Get_size()} ranks, not -n {expected_ranks}",
                   err=True)
    try:
        result = run_train(config, comm=comm)
    except RankFailure as e:
        if e.report:
            click.echo(f"nnlo: error: {e}", err=True)
        return e.exit_code
    return EXIT_RESUMABLE if result.resumable else EXIT_DONE


def run_search(parse: Callable[[], tuple[TrainConfig, SearchConfig]], log_level: str = "info") -> int:
    """Run the search in this MPI world (every rank), printing errors once.

    ``parse`` returns the run's (TrainConfig, SearchConfig); it is called on every rank inside the error
    handling, so bad options are one line from rank 0 and every rank exits with the same status.
    """
    from mpi4py import MPI  # lazy: MPI starts only in a rank

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    console_logging(log_level, rank)
    try:
        config, search = parse()
        return search_in_world(world, search.options(config), config)
    except (NnloError, click.ClickException) as e:
        if rank == 0:
            msg = e.format_message() if isinstance(e, click.ClickException) else str(e)
            click.echo(f"nnlo: error: {msg}", err=True)
        code = getattr(e, "exit_code", EXIT_BAD_INPUT)
        sys.stderr.flush()
        raise SystemExit(code) from None
    except RoleError as e:
        if rank == 0:
            click.echo(f"nnlo: error: {e}", err=True)
        raise SystemExit(EXIT_BAD_INPUT) from None
    except Exception:  # never leave other ranks hanging on an unexpected error
        logging.getLogger("nnlo.optimize").exception("rank %d failed", rank)
        abort_job(world, EXIT_FAILED)


__all__ = ["job_config", "run_script", "run_search", "run_spec", "run_training", "start_here"]
