"""nnlo orchestration: the ``nnlo`` command line, cluster profiles, layouts, batch scripts and run chains.

Every Python process nnlo starts itself runs ``python -m nnlo_sched...`` (a job's bookkeeping and payload on
every rank, the pre-queue check, the local scheduler, a submitit job). ``python -m`` puts the working folder
first on ``sys.path``, ahead of site-packages and ``PYTHONPATH``: run from a folder that holds a package named
``nnlo`` (an NNLO checkout, where NNLO's README has users work), every such process would import that package
instead of nnlo's runtime. So when this process was started as ``python -m nnlo_sched...``, the working
folder's entry moves to the end of ``sys.path`` here, before anything imports ``nnlo``: nnlo's own packages
come first, ``PYTHONPATH`` is honoured as always, and the working folder stays importable for the user's model
module and its own imports (``from models.Models import ...``), which :func:`nnlo.models.importable` puts first
while the model loads. (``python -P``/``PYTHONSAFEPATH`` leave the entry out altogether; then nothing moves.)
"""
import os
import sys


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


_working_folder_last()
