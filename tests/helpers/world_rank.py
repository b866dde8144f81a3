"""One rank of the warm MPI world (tests/helpers/world.py): ``mpirun -np N python -m tests.helpers.world_rank PORT
[WARM]``.

Started once per test session with torch and nnlo imported (``WARM`` = ``keras``: TensorFlow and Keras too,
configured as nnlo configures them in a rank of an ``N``-rank launch), each rank connects to the test process on
127.0.0.1:PORT and then serves run descriptions, one JSON line each: every rank splits ``COMM_WORLD`` (the first
``np`` ranks take part, the others wait on their socket without spinning), and the taking part run ``nnlo ARGV``
in-process on the sub-communicator, exactly as a rank of ``mpirun -np NP python -m nnlo_sched ARGV`` would: the
real command line (:func:`nnlo_sched.cli.main`), or a test's MPI program when ARGV starts with a ``.py`` file
(run as ``python PROGRAM ARGS`` would run it), with ``MPI.COMM_WORLD`` being the sub-communicator for the
run, the run's environment (``PMI_RANK``/``PMI_SIZE`` those of the sub-communicator), working directory, and
stdout/stderr going to the run's capture files. What a run changes in the process is put back before the next
one: environment, working directory, ``sys.path``, modules imported from outside the installed packages
(user model modules), the ``nnlo`` logger's handlers and level, signal handlers; the ``atexit`` functions a run
registers (rank records marked as exited) run at its end, as at the exit of a real rank. Each run starts with the
random state of a fresh process (Python's and NumPy's global generators seeded from the OS) and, once Keras is
imported, a fresh Keras (:class:`_FreshKeras`); in a TensorFlow world, a run whose TensorFlow thread pools would
differ from the ones this process started with ends with exit 2 and one line (it needs a real launch).

A run that fails (exit status other than 0, 2 or 75), aborts the MPI job or hangs is the caller's to notice: the
client restarts the whole world before its next run, so nothing of a bad run reaches the next test.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import runpy
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

from tests.helpers.world import WARMS

#: Modules imported before the first run stay (they are the warm part); a run's own imports from files outside
#: these folders (model modules, a user's helper modules) are forgotten after it.
_KEEP_PREFIXES = tuple({q for p in (sys.prefix, sys.base_prefix, sys.exec_prefix) for q in (p, os.path.realpath(p))})
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM)


def _warm(kind: str) -> None:
    """Import what every run needs, so that no run pays for it: torch and nnlo always, TensorFlow and Keras for
    ``kind`` ``keras`` (through nnlo's own :func:`~nnlo.backends.keras_env.require_keras`, so the thread pools
    are those an nnlo rank of this launch's size sets: one per pool under MPI, or ``NNLO_TF_THREADS``)."""
    if kind not in WARMS:
        raise SystemExit(f"world_rank: warm-up {kind!r} is not one of {', '.join(WARMS)}")
    import numpy  # noqa: F401
    import torch  # noqa: F401

    import nnlo.api
    import nnlo.optimize.run
    import nnlo.training.driver  # noqa: F401
    import nnlo_sched.cli
    import nnlo_sched.commands.optimize
    import nnlo_sched.commands.train  # noqa: F401

    if kind == "keras":
        from nnlo.backends.keras_env import require_keras

        tf, keras = require_keras()
        keras.layers.Dense(1)(tf.ones((1, 1)))  # start TensorFlow's runtime: its thread pools are fixed now


class _FreshKeras:
    """Keras as a fresh process has it, for every run once Keras is imported (by the warm-up or by a run).

    Kept across runs by Keras and TensorFlow, and put back here: Keras's global state (layer-name counters, the
    global seed generator, the dtype policy: ``keras.backend.clear_session``), its settings (float type, epsilon,
    image data format), the registry of custom objects a model module registers, TensorFlow's global seed
    (``keras.utils.set_random_seed`` in one run must not seed the next). TensorFlow's thread pools cannot change
    once it has run an op: :meth:`check_threads` refuses a run that would have other pools in a fresh launch."""

    def __init__(self) -> None:
        import keras
        from keras.src.saving import object_registration

        self.keras, self.registry = keras, object_registration
        self.settings = (keras.config.floatx(), keras.config.epsilon(), keras.config.image_data_format())
        self.custom = (dict(object_registration.GLOBAL_CUSTOM_OBJECTS), dict(object_registration.GLOBAL_CUSTOM_NAMES))

    def reset(self) -> None:
        import tensorflow as tf

        keras = self.keras
        keras.backend.clear_session(free_memory=False)
        keras.config.set_floatx(self.settings[0])
        keras.config.set_epsilon(self.settings[1])
        keras.config.set_image_data_format(self.settings[2])
        for live, saved in zip((self.registry.GLOBAL_CUSTOM_OBJECTS, self.registry.GLOBAL_CUSTOM_NAMES), self.custom,
                               strict=True):
            live.clear()
            live.update(saved)
        tf.random.set_seed(None)

    @staticmethod
    def check_threads() -> str | None:
        """Why this run's TensorFlow would differ from a fresh launch's (its environment is in place), or None."""
        import tensorflow as tf

        from nnlo.backends.keras_env import thread_count

        try:
            n = thread_count() or 0
        except Exception:  # noqa: BLE001 - a bad NNLO_TF_THREADS: nnlo reports it in the run itself
            return None
        want = [int(os.environ.get(var, n) or 0) for var in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")]
        have = [tf.config.threading.get_intra_op_parallelism_threads(),
                tf.config.threading.get_inter_op_parallelism_threads()]
        if want == have:
            return None
        return (f"the warm world's TensorFlow has thread pools {have} (intra, inter; 0 = TensorFlow's default) but "
                f"this run would start with {want}: run it as a real launch (real=True / launcher='mpirun')")


#: The world's warm-up and the process's :class:`_FreshKeras`, made once Keras is imported (by the warm-up, or else
#: by a run).
_STATE: dict[str, Any] = {"warm": "torch", "keras": None}


def _fresh_process_state(fresh_keras: _FreshKeras | None) -> _FreshKeras | None:
    """Random state as a fresh process starts with it, and a fresh Keras once Keras is imported."""
    import random

    import numpy

    random.seed()
    numpy.random.seed()
    if fresh_keras is None and "keras" in sys.modules and "tensorflow" in sys.modules:
        fresh_keras = _FreshKeras()
    if fresh_keras is not None:
        fresh_keras.reset()
    return fresh_keras


def _forget_run_modules(before: set[str]) -> None:
    repo = str(Path(__file__).resolve().parents[2])
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        path = str(getattr(module, "__file__", "") or "")
        keep = not path or path.startswith(_KEEP_PREFIXES) or path.startswith(os.path.join(repo, "nnlo"))
        if not keep or name.startswith("nnlo_user_model_"):
            del sys.modules[name]


class _Capture:
    """File descriptors 1 and 2 of this rank redirected into the run's files for as long as the run lasts."""

    def __init__(self, out: Path, err: Path) -> None:
        self.paths = (out, err)

    def __enter__(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = (os.dup(1), os.dup(2))
        for fd, path in zip((1, 2), self.paths, strict=True):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(target, fd)
            os.close(target)

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self.saved, strict=True):
            os.dup2(saved, fd)
            os.close(saved)


def run_one(world: Any, sub: Any, req: dict[str, Any]) -> int:
    """``nnlo ARGV`` on ``sub`` as a rank of a launch of its size would run it; the exit status."""
    from mpi4py import MPI

    from nnlo_sched.cli import main

    rank, size = sub.Get_rank(), sub.Get_size()
    env_before, cwd_before, path_before, argv_before = dict(os.environ), os.getcwd(), list(sys.path), sys.argv
    modules_before = set(sys.modules)
    nnlo_logger = logging.getLogger("nnlo")
    logger_before = (list(nnlo_logger.handlers), nnlo_logger.level, nnlo_logger.propagate)
    root_before = (list(logging.getLogger().handlers), logging.getLogger().level)
    handlers_before = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    at_exit: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    register = atexit.register

    def run_at_end(fn: Any, *args: Any, **kwargs: Any) -> Any:
        at_exit.append((fn, args, kwargs))
        return fn

    os.environ.clear()
    os.environ.update(req["env"])
    os.environ.update(PMI_RANK=str(rank), PMI_SIZE=str(size))
    out_dir = Path(req["capture"])
    rc = 0
    try:
        with _Capture(out_dir / f"rank-{rank}.out", out_dir / f"rank-{rank}.err"):
            try:
                os.chdir(req["cwd"])
                atexit.register = run_at_end  # type: ignore[assignment]
                MPI.COMM_WORLD = sub  # type: ignore[misc]  # the run's world is its sub-communicator
                _STATE["keras"] = _fresh_process_state(_STATE["keras"])
                unlike_a_launch = (_STATE["keras"].check_threads()  # a TensorFlow world's runs are Keras runs
                                   if _STATE["keras"] is not None and _STATE["warm"] == "keras" else None)
                argv = list(req["argv"])
                if unlike_a_launch:  # on every rank, before any communication: the world stays, as after bad input
                    print(f"world_rank: {unlike_a_launch}", file=sys.stderr)
                    rc = 2
                elif argv[0].endswith(".py"):  # a test's MPI program, run as `python PROGRAM ARGS` would run it
                    sys.argv = argv
                    sys.path.insert(0, str(Path(argv[0]).resolve().parent))  # as `python PROGRAM` puts it first
                    runpy.run_path(argv[0], run_name="__main__")
                else:
                    main(argv)
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if e.code is not None and not isinstance(e.code, int):
                    print(e.code, file=sys.stderr)
            except BaseException:  # noqa: BLE001 - a rank's uncaught error: its traceback, as Python prints it
                traceback.print_exc()
                rc = 1
            finally:
                MPI.COMM_WORLD = world  # type: ignore[misc]
                atexit.register = register  # type: ignore[assignment]
                for fn, args, kwargs in at_exit:  # as at the exit of a real rank
                    try:
                        fn(*args, **kwargs)
                    except Exception:  # noqa: BLE001
                        traceback.print_exc()
    finally:
        os.chdir(cwd_before)
        sys.argv = argv_before
        os.environ.clear()
        os.environ.update(env_before)
        sys.path[:] = path_before
        _forget_run_modules(modules_before)
        for handler in nnlo_logger.handlers[:]:
            if handler not in logger_before[0]:
                nnlo_logger.removeHandler(handler)
                handler.close()
        nnlo_logger.handlers[:] = logger_before[0]
        nnlo_logger.setLevel(logger_before[1])
        nnlo_logger.propagate = logger_before[2]
        logging.getLogger().handlers[:] = root_before[0]
        logging.getLogger().setLevel(root_before[1])
        for sig, handler in handlers_before.items():
            if handler is not None:
                signal.signal(sig, handler)
    return rc


def _save_coverage() -> None:
    """Under coverage (scripts/test.sh), write this rank's data after every run: a world ended by a later failed
    run is killed, and a killed process writes nothing at exit."""
    try:
        import coverage
    except ImportError:
        return
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.save()


def serve(port: int, warm: str) -> None:
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    _warm(warm)
    _STATE["warm"], _STATE["keras"] = warm, _fresh_process_state(None)
    conn = socket.create_connection(("127.0.0.1", port))
    stream = conn.makefile("rwb", buffering=0)
    stream.write(json.dumps({"rank": rank, "pid": os.getpid()}).encode() + b"\n")
    for line in stream:
        req = json.loads(line)
        if req.get("op") == "exit":
            break
        sub = world.Split(0 if rank < int(req["np"]) else MPI.UNDEFINED, rank)
        if sub == MPI.COMM_NULL:
            continue
        try:
            rc = run_one(world, sub, req)
        finally:
            sub.Free()
        _save_coverage()
        stream.write(json.dumps({"id": req["id"], "rank": rank, "rc": rc}).encode() + b"\n")
    conn.close()


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "torch")
