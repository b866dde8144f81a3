"""Importing Keras 3 on TensorFlow the way an MPI job needs it, or failing with one clear line.

Why a module of its own: TensorFlow is an optional extra (``pip install 'nnlo-hpc[tf]'``) and costs seconds and
hundreds of MB per process, so nothing in nnlo imports it at module level. Every Keras code path goes through
:func:`require_keras`, which

- pins Keras 3 to the TensorFlow backend (``KERAS_BACKEND=tensorflow``) before Keras is first imported, and
  refuses a Keras that was already imported with another backend;
- quiets TensorFlow's C++ start-up chatter (``TF_CPP_MIN_LOG_LEVEL=2``) and turns off its oneDNN custom CPU
  kernels (``TF_ENABLE_ONEDNN_OPTS=0``), whose notice every rank would print twice and whose round-off
  differs from the reference kernels (TensorFlow's own warning); ``TF_ENABLE_ONEDNN_OPTS=1`` brings oneDNN's
  faster CPU convolutions back;
- limits TensorFlow to **one inter-op and one intra-op thread under MPI**, because several ranks usually share
  a node and each TensorFlow would otherwise start thread pools as large as the node, oversubscribing it
  many times over. ``NNLO_TF_THREADS=N`` sets both pools to N (``0`` = TensorFlow's own default, one thread
  per core) -- e.g. one rank per Summit resource set of 7 cores wants ``NNLO_TF_THREADS=7``;
- lets TensorFlow grow its GPU memory as needed (``TF_FORCE_GPU_ALLOW_GROWTH=true``) instead of reserving
  every visible GPU whole, so ranks sharing a node's GPUs can coexist; give each rank its own GPU with the
  launcher (``jsrun -g 1``, ``srun --gpus-per-task=1``), which sets ``CUDA_VISIBLE_DEVICES`` per rank;
- turns a missing TensorFlow into :class:`~nnlo.errors.ModelError` ("install nnlo-hpc[tf]");
- leaves Python's global random stream where it was (importing TensorFlow draws from it), so the fresh weights
  of a seeded run do not depend on when TensorFlow was first imported.

The environment part is :func:`prepare_environment`: it only sets variables (TensorFlow reads
``TF_NUM_INTRAOP_THREADS``/``TF_NUM_INTEROP_THREADS`` when it starts), so a rank can call it before running a
user's model module that imports Keras itself. Variables the user set are never overwritten.
"""
from __future__ import annotations

import contextlib
import logging
import os
import random
import sys
from collections.abc import Iterator
from types import ModuleType

from nnlo.contract import DISTRIBUTION, ENV_TF_THREADS
from nnlo.errors import ModelError

log = logging.getLogger(__name__)

#: Environment variables that MPI launchers set in every rank (MPICH/Hydra, Open MPI, PMIx, Slurm, jsrun, aprun).
_MPI_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS",
                  "JSM_NAMESPACE_SIZE", "MV2_COMM_WORLD_SIZE")

INSTALL_HINT = f"install it with: pip install '{DISTRIBUTION}[tf]' (or pip install tensorflow-cpu)"

_threads_done = False


def keras_imported() -> bool:
    """True when Keras or TensorFlow is already in this process (then checking types is free)."""
    return "keras" in sys.modules or "tensorflow" in sys.modules


def under_mpi() -> bool:
    """Whether this process is one of several MPI ranks, judged without initialising MPI."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        try:
            if mpi.Is_initialized() and not mpi.Is_finalized():
                return mpi.COMM_WORLD.Get_size() > 1
        except Exception:  # noqa: BLE001  # pragma: no cover - a broken MPI must not break importing Keras
            pass
    for var in _MPI_SIZE_VARS:
        try:
            if int(os.environ.get(var, "1")) > 1:
                return True
        except ValueError:
            continue
    return False


def thread_count() -> int | None:
    """TensorFlow pool size to set, or None for TensorFlow's default (see the module docstring)."""
    raw = os.environ.get(ENV_TF_THREADS, "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            raise ModelError(f"{ENV_TF_THREADS}={raw!r} is not a whole number; set e.g. {ENV_TF_THREADS}=4 "
                             f"(0 = TensorFlow's default)") from None
        if n < 0:
            raise ModelError(f"{ENV_TF_THREADS}={n} is negative; set 0 (TensorFlow's default) or more")
        return n or None
    return 1 if under_mpi() else None


def prepare_environment() -> None:
    """Set the environment TensorFlow reads at start-up (see the module docstring); imports nothing.

    Call it in every rank before a model module may import Keras; :func:`require_keras` calls it too.
    """
    if "keras" not in sys.modules:
        os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    # Ranks that share a GPU must not each reserve all of its memory up front (TensorFlow's default).
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    try:
        n = thread_count()
    except ModelError:
        return  # a bad NNLO_TF_THREADS is reported by require_keras, only to Keras users
    if n is not None:
        os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(n))
        os.environ.setdefault("TF_NUM_INTEROP_THREADS", str(n))


def _configure_threads(tf: ModuleType) -> None:
    """Also set the pools through the API (effective if TensorFlow was imported before the variables)."""
    global _threads_done
    if _threads_done:
        return
    _threads_done = True
    n = thread_count()
    if n is None:
        return
    try:
        tf.config.threading.set_intra_op_parallelism_threads(int(os.environ.get("TF_NUM_INTRAOP_THREADS", n)))
        tf.config.threading.set_inter_op_parallelism_threads(int(os.environ.get("TF_NUM_INTEROP_THREADS", n)))
    except (RuntimeError, ValueError):
        # TensorFlow already ran an op (a model module built its model first): the pools are fixed now,
        # sized by TF_NUM_*_THREADS if prepare_environment() ran before TensorFlow was imported.
        log.debug("TensorFlow thread pools were already initialised; keeping them")


@contextlib.contextmanager
def _python_random_kept() -> Iterator[None]:
    """Importing TensorFlow draws from Python's global generator, and Keras seeds fresh weights from it: without
    this, a seeded run's weights would depend on whether TensorFlow was imported before the seed was set."""
    state = random.getstate()
    try:
        yield
    finally:
        random.setstate(state)


def require_keras() -> tuple[ModuleType, ModuleType]:
    """``(tensorflow, keras)``, imported and configured; ModelError with the fix if unavailable."""
    if "keras" not in sys.modules:
        chosen = os.environ.get("KERAS_BACKEND", "tensorflow").strip().lower() or "tensorflow"
        if chosen != "tensorflow":
            raise ModelError(f"KERAS_BACKEND={chosen} is set but nnlo runs Keras models on TensorFlow; "
                             f"unset KERAS_BACKEND or set KERAS_BACKEND=tensorflow")
    prepare_environment()
    with _python_random_kept():
        try:
            import tensorflow as tf  # lazy: only Keras users load TensorFlow
        except ImportError as e:
            raise ModelError(f"this is a Keras model but TensorFlow is not installed ({e}); {INSTALL_HINT}") from None
        _configure_threads(tf)
        try:
            import keras  # lazy: Keras loads TensorFlow
        except ImportError as e:
            raise ModelError(f"this is a Keras model but Keras 3 is not installed ({e}); {INSTALL_HINT}") from None
    version = getattr(keras, "__version__", "0")
    if not version.split(".")[0].isdigit() or int(version.split(".")[0]) < 3:
        raise ModelError(f"nnlo needs Keras 3 but found Keras {version}; upgrade: pip install -U 'keras>=3' "
                         f"'tensorflow-cpu>=2.16'")
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise ModelError(f"Keras was imported with the {backend} backend but nnlo runs Keras models on "
                         f"TensorFlow; set KERAS_BACKEND=tensorflow before importing keras")
    return tf, keras
