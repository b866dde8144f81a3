"""nnlo orchestration: the ``nnlo`` command line, cluster profiles, layouts, batch scripts and run chains.

Every Python process nnlo starts itself runs ``python -m nnlo_sched...`` (a job's bookkeeping and payload on
every rank, the pre-queue check, the local scheduler, a submitit job), and the ``nnlo`` command imports this
package first too. Run from a folder that holds a package named ``nnlo`` (an NNLO checkout, where NNLO's README
has users work), ``import nnlo`` could find that package instead of nnlo's runtime: ``python -m`` puts the
working folder first on ``sys.path``, and an editable install's import finder (``pip install -e``, the venv
scripts/setup.sh makes) runs only after Python's whole path search, so no order of ``sys.path`` keeps the
folder's package out. So this package, before anything else, imports its runtime from the folder it lives in
itself (:func:`_runtime_beside_us`): ``nnlo`` and ``nnlo_sched`` are one distribution, installed side by side
(site-packages, a clone on ``PYTHONPATH``, an editable install's source tree), and once ``nnlo`` is in
``sys.modules`` its submodules are found through its own ``__path__``, never ``sys.path``.

When this process was started as ``python -m nnlo_sched...``, the working folder's entry also moves to the end
of ``sys.path``, so nothing else of the folder's shadows an installed module; the folder stays importable for
the user's model module and its own imports (``from models.Models import ...``), which
:func:`nnlo.models.importable` puts first while the model loads. (``python -P``/``PYTHONSAFEPATH`` leave the
entry out altogether; then nothing moves.)
"""
import importlib.machinery
import importlib.util
import os
import sys


def _runtime_beside_us() -> None:
    """Import ``nnlo`` from the folder that holds this package, ahead of every ``sys.path`` entry and finder."""
    if "nnlo" in sys.modules:
        return
    home = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.machinery.PathFinder.find_spec("nnlo", [home])
    if spec is None or spec.loader is None or spec.origin is None:
        return  # (not installed side by side: the usual import decides)
    module = importlib.util.module_from_spec(spec)
    sys.modules["nnlo"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop("nnlo", None)
        raise


def _working_folder_last() -> None:
    argv = list(getattr(sys, "orig_argv", ()))
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
    if module.split(".")[0] != __name__ or sys.flags.safe_path or not sys.path:
        return
    try:
        cwd = os.path.realpath(os.getcwd())
        first = os.path.realpath(sys.path[0] or os.curdir)
        source = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    except OSError:  # the working folder is gone
        return
    if first == cwd and cwd != source:  # (run from nnlo's own source tree, the folder is nnlo's)
        sys.path.append(sys.path.pop(0))


_runtime_beside_us()
_working_folder_last()
