"""The program an nnlo-submitted submitit job runs: ``python -m nnlo_sched.submitit.job FOLDER``.

It makes nnlo's job environments known to submitit (whether or not the entry points are installed on the
compute nodes), sends the job's output to submitit's per-job log files (``<id>_0_log.out``/``.err``: batch
systems name their own output files differently, and Slurm's Torque wrappers ignore ``#PBS -o``), then runs
submitit's own ``process_job`` (the pickled function in, the pickled result or traceback out).
"""
from __future__ import annotations

import os
import sys

from submitit.core import job_environment, utils
from submitit.core.submission import process_job

from nnlo_sched.submitit import register


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: python -m nnlo_sched.submitit.job FOLDER")
    folder = argv[0]
    register()
    os.environ["SUBMITIT_FOLDER"] = folder
    paths = utils.JobPaths(folder, job_id=job_environment.JobEnvironment().job_id, task_id=0)
    paths.folder.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    err = paths.stdout if os.environ.get("SUBMITIT_STDERR_TO_STDOUT") else paths.stderr
    for fd, path in ((1, paths.stdout), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(target, fd)
        os.close(target)
    process_job(folder)


if __name__ == "__main__":
    main(sys.argv[1:])
