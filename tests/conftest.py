"""The suite's root conftest: the shared fixtures (tests/helpers/fixtures.py) and the marker rule
(tests/helpers/markers.py: a test that starts a process carries mpi, slurm, slow or gpu). See docs/testing.md."""
from __future__ import annotations

import os

from tests.helpers.env import REPO
from tests.helpers.fixtures import (  # noqa: F401 - fixtures
    blobs,
    keras_world,
    mpi_world,
    mpirun,
    nnlo_env,
    nnlo_keras,
    nnlo_mpi,
    probe_in_process,
    run_train,
    slurm_cluster,
)
from tests.helpers.markers import (  # noqa: F401 - pytest hooks
    pytest_collection_finish,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_call,
    pytest_runtest_setup,
)

# Scheduler queries retry with backoff (0.5, 1, 2 s); tests that break a scheduler on purpose need not wait.
os.environ.setdefault("NNLO_SCHED_RETRY_DELAY", "0.05")
# Every program a test starts sees this checkout first: the batch-system stand-ins (linked as bsub, qstat, ...)
# import tests.helpers, and a fresh clone has no PYTHONPATH of its own (an editable install covers nnlo only).
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
