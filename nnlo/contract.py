"""The contract between the runtime (``nnlo/``) and the chain (``nnlo_sched/``): one place for each fact.

A batch job's script runs the runtime, reads its exit status and files, and decides whether the chain goes
on. Both sides must agree on the exit codes, the environment variables that carry facts between them, the
names of the files in a run directory and the signals that mean "checkpoint now and stop". Those facts live
here, and only here; every other module imports them.

Pure: no MPI, no I/O, no other module of nnlo (every module may import it). The deadline's default from
``$NNLO_DEADLINE`` is read by :func:`nnlo.config.deadline_from_env`.
"""
from __future__ import annotations

import signal

# -- exit codes ---------------------------------------------------------------------------------------
#: The run finished (all epochs, early stopping, target reached, search budget spent).
EXIT_DONE = 0
#: A rank failed (a Python error, NaN loss, a rank died): the chain stops.
EXIT_FAILED = 1
#: Bad input (options, files, profiles): the chain stops.
EXIT_BAD_INPUT = 2
#: EX_UNAVAILABLE: a rank died (killed, out of memory, crashed, its node lost) and the ranks left ended the job
#: (:mod:`nnlo.liveness`); the chain retries it from the newest checkpoint (``--max-retries``).
EXIT_RANK_DIED = 69
#: EX_TEMPFAIL: stopped before the deadline or on a stop signal after writing a complete checkpoint; a
#: resubmitted job resumes from it.
EXIT_RESUMABLE = 75
#: A shell (and nnlo's own launch) reports a process ended by signal N as this + N (SIGTERM: 143).
SIGNAL_STATUS_BASE = 128

# -- environment variables ----------------------------------------------------------------------------
#: Unix seconds by which the runtime must have stopped with a checkpoint (set by the job script).
ENV_DEADLINE = "NNLO_DEADLINE"
#: Seconds of safety the runtime keeps before the deadline (default :data:`DEADLINE_SAFETY_S`), a training's and a
#: search's alike (:func:`nnlo.config.deadline_safety_from_env`).
ENV_DEADLINE_SAFETY = "NNLO_DEADLINE_SAFETY"
#: The run directory of a submitted run (set by the job script and by ``python -m nnlo_sched run``).
ENV_RUN_DIR = "NNLO_RUN_DIR"
#: Where ``nnlo submit`` creates run directories (default ``./nnlo-runs``).
ENV_HOME = "NNLO_HOME"
#: Extra cluster-profile directories (``:``-separated).
ENV_CLUSTERS = "NNLO_CLUSTERS"
#: Set in ranks started by nnlo's own launch so they never launch again.
ENV_LAUNCHED = "NNLO_LAUNCHED"
#: Folder where every rank records its pid, host and role (see :mod:`nnlo.rankfate`).
ENV_RANK_RECORDS = "NNLO_RANK_RECORDS"
#: "1": rank 0's stderr reaches a terminal, so it may redraw a live progress line.
ENV_LIVE = "NNLO_LIVE"
#: The scheduler's job id, for schedulers that set none themselves (the local scheduler).
ENV_JOB_ID = "NNLO_JOB_ID"
#: A shared search's participant name (``nnlo optimize --shared``); the job scripts set it to the chain's name.
ENV_PARTICIPANT = "NNLO_PARTICIPANT"
#: Overrides the device every rank computes on ("cpu", "cuda:1"; :mod:`nnlo.device`).
ENV_DEVICE = "NNLO_DEVICE"
#: The node type a search's blocks run on (e.g. "daint-gpu"), where a site sets it; else the CPU (and GPU) model.
ENV_NODE_TYPE = "NNLO_NODE_TYPE"
#: Testing hook: a training's master signals itself with SIGUSR1 after this many updates of its own job (a
#: resumed job counts from its checkpoint), so a test stops a run, or every job of a chain, at an exact point.
ENV_TEST_SIGNAL_AT_UPDATE = "NNLO_TEST_SIGNAL_AT_UPDATE"
#: Testing hook: a search's coordinator signals itself with SIGUSR1 after this many trial results of its own job.
ENV_TEST_SIGNAL_AT_TRIAL = "NNLO_TEST_SIGNAL_AT_TRIAL"
#: Seconds a node of a job may stay silent before its peers take it for lost (:mod:`nnlo.liveness`; 0: no watch).
ENV_PEER_TIMEOUT = "NNLO_PEER_TIMEOUT"
#: Seconds one blocking wait of a training may last before the watchdog ends the job (:mod:`nnlo.training.watchdog`).
ENV_COMM_TIMEOUT = "NNLO_COMM_TIMEOUT"
#: The watchdog's limit of one wait before every rank has set up (:mod:`nnlo.training.watchdog`).
ENV_START_TIMEOUT = "NNLO_START_TIMEOUT"
#: ``spin`` or ``sleep`` forces how a training's ranks wait for messages (:func:`nnlo.transport.sleeping_waits`).
ENV_WAIT = "NNLO_WAIT"
#: TensorFlow's thread pools' size on every rank (:mod:`nnlo.backends.keras_env`).
ENV_TF_THREADS = "NNLO_TF_THREADS"
#: How many times a failed batch-system query is tried again (:func:`nnlo_sched.schedulers.base.query_capture`).
ENV_SCHED_RETRIES = "NNLO_SCHED_RETRIES"
#: The first pause (seconds) before a failed batch-system query is tried again, doubled each time.
ENV_SCHED_RETRY_DELAY = "NNLO_SCHED_RETRY_DELAY"
#: The local scheduler's seconds between SIGTERM and SIGKILL (Slurm's ``KillWait``).
ENV_LOCAL_KILL_WAIT = "NNLO_LOCAL_KILL_WAIT"
#: A submitit job's seconds of warning before its deadline (set by its job script).
ENV_SUBMITIT_LEAD = "NNLO_SUBMITIT_LEAD_S"
#: The warning signal's name of a submitit job (set by its job script).
ENV_SUBMITIT_SIGNAL = "NNLO_SUBMITIT_SIGNAL"
#: A submitit job's walltime in seconds (set by its job script).
ENV_SUBMITIT_WALLTIME = "NNLO_SUBMITIT_WALLTIME_S"
#: Seconds the check before queueing gives a model module's import (:mod:`nnlo_sched.checks`).
ENV_CHECK_TIMEOUT = "NNLO_CHECK_TIMEOUT"

# -- defaults that both sides read ----------------------------------------------------------------------
#: Seconds of safety the runtime keeps before its deadline where ENV_DEADLINE_SAFETY is unset.
DEADLINE_SAFETY_S = 10.0

# -- run-directory files ------------------------------------------------------------------------------
SPEC_FILE = "spec.json"  # the submitted run (nnlo_sched.spec.RunSpec)
STATE_FILE = "state.json"  # the chain's state (nnlo_sched.state)
SCRIPT_FILE = "job.sh"  # the batch script every job of the chain runs
LOG_DIR = "logs"  # logs/job-<id>.out, logs/rank-<r>.log
#: one batch job's output in LOG_DIR (``{job_id}``: the id, or the scheduler's placeholder in a directive)
JOB_LOG = "job-{job_id}.out"
#: a job array's own output in LOG_DIR (each task logs into its chain's JOB_LOG)
ARRAY_LOG = "array-{job_id}.out"
CHECKPOINT_DIR = "checkpoints"  # complete checkpoints of a training
CHAINS_DIR = "chains"  # a search run's chains, each an ordinary run directory (nnlo submit --jobs K)
MANIFEST_FILE = "manifest.json"  # written last into a checkpoint folder: the checkpoint is complete
HISTORY_FILE = "history.json"  # a training's per-epoch history
CONFIG_FILE = "config.json"  # a training's TrainConfig
RANKS_DIR = "ranks"  # rank records (nnlo.rankfate)
RANK_FATE_FILE = "fate.json"  # in RANKS_DIR: the rank whose death by a signal ended the last job (nnlo.rankfate)
TIMELINE_FILE = "timeline.json"  # the merged Chrome trace
STARTUP_FILE = "startup.json"  # the top rank's start-up stamps, up to its first update (nnlo.training.startup)
OPTIMIZER_STATE_FILE = "optimizer-state.json"  # a search's checkpoint
TRIALS_JSON = "trials.json"
TRIALS_CSV = "trials.csv"
BEST_FILE = "best.json"
SEARCH_JOURNAL = "search-journal.jsonl"  # a shared search's journal (nnlo.optimize.journal), the search's state
SEARCH_LOCK = "search-journal.lock"  # the lock file beside it (flock), held for every append
#: A job's record of its progress (:mod:`nnlo.job`): the newest state saved (a checkpoint, a search's state, a
#: script's own file) and the folder of the training or search the job's script runs. A submitted script's
#: chain goes on after a stop only when this changed during the job.
PROGRESS_FILE = "progress.json"
#: The key of PROGRESS_FILE under which a search notes, with every save of its state, how many trial results
#: and schedule stages it has recorded: a search saves its state at every job's start, so the chain judges a
#: search job's progress by this count growing, never by a file's time (a job that finished no trial and no
#: stage stops the chain: its walltime is too short for one trial).
PROGRESS_RESULTS = "results"
#: The MLflow run of a training or search (``--mlflow``), kept in its folder so that a resumed job logs on
#: into the same run (a search: its trials' nested runs too).
MLFLOW_RUN_FILE = "mlflow-run.json"
#: Default seconds after which a shared-search trial whose participant stopped renewing its lease is re-run
LEASE_TIMEOUT_S = 120.0
#: Default failure rule of a search (``--max-failures FRACTION[:MIN]``, :mod:`nnlo.optimize.failures`): it stops
#: once more than half of at least 8 finished trials failed
MAX_FAILURES = "0.5:8"

# -- stop signals -------------------------------------------------------------------------------------
#: Signals that mean "write a complete checkpoint now and exit 75": LSF's and Slurm's pre-walltime warnings
#: (SIGUSR1/SIGUSR2), the batch system's or ``scancel``'s SIGTERM, and Ctrl-C at a terminal (SIGINT). A
#: second SIGTERM or SIGINT ends the process at once.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)
#: Stop signals whose repetition means "now, without a checkpoint".
INSISTING_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)
#: Logged by every rank that takes a stop signal (:mod:`nnlo.stop`): a job log's reader
#: (:func:`nnlo.rankfate.first_event`) knows from them that what ends the ranks afterwards is the stop, not a death.
STOP_WORDS = "writing a checkpoint and stopping"


def signal_status(sig: int) -> int:
    """The exit status a shell reports for a process ended by signal ``sig`` (SIGTERM: 143)."""
    return SIGNAL_STATUS_BASE + int(sig)


def status_signal(status: int) -> int | None:
    """The number of the signal a shell's exit ``status`` says ended the process (143: 15), or None."""
    number = status - SIGNAL_STATUS_BASE
    return number if 0 < number < signal.NSIG else None


def job_log(job_id: str) -> str:
    """The file name (in LOG_DIR) of batch job ``job_id``'s output."""
    return JOB_LOG.format(job_id=job_id)

#: The distribution's name on the package index (setup.cfg's ``name``), which every install hint names: PyPI's
#: "nnlo" is another project (a 2020 fork of NNLO).
DISTRIBUTION = "nnlo-hpc"
