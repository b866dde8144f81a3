"""What the LSF and PBS plugins share: the executor, the job, the info watcher and the job environment.

* :class:`NnloExecutor` renders each job's script as ``nnlo submit`` renders a run's: the spec of a function
  (:data:`~nnlo_sched.spec.FUNCTION`: its name, walltime, account, queue, nodes, directives and layout), the
  same templates, context and job body (:func:`nnlo_sched.render.render_script` with the function's
  :class:`~nnlo_sched.render.Program`), and submits it with nnlo's scheduler class
  (:mod:`nnlo_sched.schedulers`): the job runs ``python -m nnlo_sched.submitit.job FOLDER``, which is
  submitit's own ``process_job`` (pickled function in, pickled result or traceback out).
* :class:`NnloInfoWatcher` asks the batch system about every registered job in ONE call
  (:meth:`nnlo_sched.schedulers.base.Scheduler.query`: ``bjobs -a -w a b c`` / ``qstat a b c``).
* :class:`NnloJobEnvironment` is what runs inside the job: before the walltime (the profile's warning signal
  where the site sends one, and always a timer ``checkpoint_lead_s`` before ``NNLO_DEADLINE``) it calls the
  function's ``checkpoint()`` (submitit's protocol) and, instead of requeueing the job as Slurm can, submits a
  successor behind it (nnlo's after-any dependency) that resumes the returned ``DelayedSubmission``.
* :class:`NnloJob` follows that chain (``<id>_successor`` files in the folder) to the final result:
  ``job.result()``, ``job.state``, ``job.stdout()`` speak of the newest job; ``job.chain`` lists them all.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import signal
import time
import typing as tp
import uuid
from pathlib import Path

from submitit.core import core, job_environment, logger, utils

from nnlo.contract import ENV_DEADLINE, ENV_SUBMITIT_LEAD, ENV_SUBMITIT_SIGNAL, ENV_SUBMITIT_WALLTIME, LOG_DIR
from nnlo.errors import ConfigError
from nnlo.roles import Shape
from nnlo_sched.layout import LayoutRecord, compute_layout
from nnlo_sched.profiles import Profile, load_profile
from nnlo_sched.render import Program, directive_value, render_script, warning_signal
from nnlo_sched.schedulers import get_scheduler, scheduler_class
from nnlo_sched.schedulers.base import ALIVE_STATES, CANCELLED, COMPLETED, FAILED
from nnlo_sched.spec import FUNCTION, RunSpec

#: the file a job writes, before it ends, naming the successor that resumes its checkpoint
SUCCESSOR = "{job_id}_successor"
#: the file ``job.cancel()`` writes, so that a cancelled job's state reads CANCELLED on every batch system
CANCELLED_MARK = "{job_id}_cancelled"
#: environment of the job script (read by :class:`NnloJobEnvironment`)
ENV_LEAD = ENV_SUBMITIT_LEAD
ENV_SIGNAL = ENV_SUBMITIT_SIGNAL
ENV_WALLTIME = ENV_SUBMITIT_WALLTIME
#: a job's ``timeout_min`` where none is given (submitit's own default)
DEFAULT_TIMEOUT_MIN = 5

def marker(folder: Path | str, name: str, job_id: str) -> Path:
    """A per-job marker file of the folder (``SUCCESSOR`` or ``CANCELLED_MARK``)."""
    return utils.JobPaths(folder, job_id=job_id).folder / name.format(job_id=job_id)


def successor_of(folder: Path | str, job_id: str) -> str | None:
    path = marker(folder, SUCCESSOR, job_id)
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# -- states -------------------------------------------------------------------------------------------------
class NnloInfoWatcher(core.InfoWatcher):
    """Every registered job's state from ONE scheduler call (nnlo's :meth:`Scheduler.query`), paced as
    submitit's watchers are (0 s, 2 s, 4 s, 8 s ... after the newest job, then every ``delay_s``).

    States are submitit's words: ``PENDING``, ``RUNNING``, ``COMPLETED`` (LSF ``DONE``), ``FAILED`` (LSF
    ``EXIT``), ``ENDED`` (gone from the queue or PBS ``C``: how it ended is in its result file), ``UNKNOWN``.
    """

    def __init__(self, scheduler: str, delay_s: int = 60) -> None:
        super().__init__(delay_s)
        self.scheduler = scheduler

    def _make_command(self) -> list[str] | None:  # the query runs through nnlo's scheduler class instead
        return None

    def read_info(self, string: bytes | str) -> dict[str, dict[str, str]]:
        raise NotImplementedError("the nnlo watchers query through nnlo_sched.schedulers")

    def update(self) -> None:
        ids = sorted(self._registered - self._finished)
        if ids:
            self._num_calls += 1
            infos = get_scheduler(self.scheduler).query(ids)
            for jid, info in infos.items():
                self._info_dict[jid] = {"State": info.state, "native": info.native, "reason": info.reason}
        self._last_status_check = time.time()
        for jid in self._registered - self._finished:
            if self.is_done(jid, mode="cache"):
                self._finished.add(jid)

    def get_state(self, job_id: str, mode: str = "standard") -> str:
        return self.get_info(job_id, mode=mode).get("State") or "UNKNOWN"


# -- the job, as the submitting process sees it ---------------------------------------------------------------
class NnloJob(core.Job[core.R]):
    """A submitted function: its job and every successor that resumed it after a checkpoint.

    ``job_id`` is the newest job of the chain (``chain`` lists them all, the first one first); ``result()``,
    ``exception()``, ``state``, ``done()``, ``stdout()`` and ``cancel()`` act on it.
    """

    scheduler = ""
    watcher: NnloInfoWatcher = NnloInfoWatcher("")

    def __init__(self, folder: Path | str, job_id: str, tasks: tp.Sequence[int] = (0,)) -> None:
        self._chain_folder = Path(folder)
        self._chain = [job_id]
        super().__init__(folder, job_id, tasks)

    def _follow(self) -> str:
        """The newest job of the chain (reading successor files from the last known one)."""
        for _ in range(10_000):
            nxt = successor_of(self._chain_folder, self._chain[-1])
            if nxt is None or nxt in self._chain:
                break
            self._chain.append(nxt)
            self.watcher.register_job(nxt)
        return self._chain[-1]

    @property
    def job_id(self) -> str:
        return self._follow()

    @property
    def chain(self) -> list[str]:
        """Every job of the chain so far, the first one first."""
        self._follow()
        return list(self._chain)

    @property
    def paths(self) -> utils.JobPaths:
        return utils.JobPaths(self._chain_folder, job_id=self.job_id, task_id=self.task_id)

    def done(self, force_check: bool = False) -> bool:
        tip = self.job_id
        return super().done(force_check) and self.job_id == tip  # a successor appeared: not done

    @property
    def state(self) -> str:
        """The newest job's state: once its function has returned or raised, the result file decides
        (COMPLETED or FAILED, even while the batch system still shows the job ending); a job cancelled through
        :meth:`cancel` reads CANCELLED; otherwise the batch system's word (PENDING, RUNNING, ENDED ...)."""
        tip = self.job_id
        result = self.paths.result_pickle
        if result.exists():
            try:
                outcome = utils.pickle_load(result)[0]
            except Exception:  # noqa: BLE001 - a half-written file: ask the batch system
                outcome = None
            if outcome is not None:
                return COMPLETED if outcome == "success" else FAILED
        word = self.watcher.get_state(tip, mode="standard")
        if self.job_id != tip:  # a successor was named meanwhile
            return self.state
        if word not in ALIVE_STATES and marker(self._chain_folder, CANCELLED_MARK, tip).exists():
            return CANCELLED
        return word

    def cancel(self, check: bool = True) -> None:
        """Cancel the newest job of the chain (one ``bkill``/``qdel``); it ends without a result. A job that
        was checkpointing meanwhile queues no successor (it sees the mark), or its successor is cancelled too."""
        done: set[str] = set()
        try:
            while (tip := self.job_id) not in done:
                done.add(tip)
                marker(self._chain_folder, CANCELLED_MARK, tip).touch()
                get_scheduler(self.scheduler).cancel([tip])
        except Exception:
            if check:
                raise

    def _interrupt(self) -> None:
        """Send the newest job submitit's preemption signal (``SIGUSR2``) now (:meth:`Scheduler.signal`): a
        checkpointable function is checkpointed and resumed by a successor, as before the walltime (submitit's
        jobs have this too)."""
        sig = signal.Signals["SIG" + job_environment.JobEnvironment.USR_SIG.removeprefix("SIG")]
        get_scheduler(self.scheduler).signal([self.job_id], sig)


# -- inside the job ---------------------------------------------------------------------------------------------
class NnloJobEnvironment(job_environment.JobEnvironment):
    """A running nnlo-submitted job: one task; the job id from the batch system's variable (PBS under Slurm's
    Torque wrappers leaves ``PBS_JOBID`` empty: then ``SLURM_JOB_ID``)."""

    scheduler = ""
    _env: tp.ClassVar[dict[str, str]] = {}

    @property
    def raw_job_id(self) -> str:
        jid = get_scheduler(self.scheduler).current_job_id()
        if not jid:
            raise RuntimeError(f"no {self.scheduler} job id in the environment "
                               f"({', '.join(get_scheduler(self.scheduler).job_id_vars)} unset)")
        return jid

    @property
    def num_tasks(self) -> int:
        return 1

    @property
    def num_nodes(self) -> int:
        return 1

    @property
    def node(self) -> int:
        return 0

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    def _handle_signals(self, paths: utils.JobPaths, submission: utils.DelayedSubmission) -> None:
        """Checkpoint (and queue the successor) once: on the site's warning signal, on submitit's preemption
        signal, or ``NNLO_SUBMITIT_LEAD_S`` seconds before the deadline, whichever comes first."""
        handler = job_environment.SignalHandler(self, paths, submission)
        fired: list[int] = []

        def once(signum: int, frame: tp.Any = None) -> None:
            if fired:
                return
            fired.append(signum)
            signal.setitimer(signal.ITIMER_REAL, 0)
            handler.checkpoint_and_try_requeue(signum, frame)

        names = {self.USR_SIG, os.environ.get(ENV_SIGNAL, "")}
        for name in filter(None, names):
            sig = getattr(signal, "SIG" + name.removeprefix("SIG"), None)
            if sig is not None:
                signal.signal(sig, once)
        deadline, lead = os.environ.get(ENV_DEADLINE), os.environ.get(ENV_LEAD)
        if deadline and lead:
            delay = float(deadline) - float(lead) - time.time()
            signal.signal(signal.SIGALRM, once)
            signal.setitimer(signal.ITIMER_REAL, max(delay, 0.01))

    def _requeue(self, countdown: int) -> None:
        """Queue a successor behind this job (after-any dependency) that resumes the checkpointed submission
        (``checkpoint()`` dumped it over this job's pickle), and name it in ``<id>_successor``."""
        current = self.job_id
        folder = os.environ["SUBMITIT_FOLDER"]
        if marker(folder, CANCELLED_MARK, current).exists():
            raise utils.UncompletedJobError(f"job {current} was cancelled: no successor is queued")
        here = utils.JobPaths(folder, job_id=current)
        sched = get_scheduler(self.scheduler)
        walltime = int(os.environ.get(ENV_WALLTIME, "0") or 0) or DEFAULT_TIMEOUT_MIN * 60
        new = sched.submit(here.submission_file, depends_on=current, walltime_s=walltime, cwd=Path.cwd())
        there = utils.JobPaths(folder, job_id=new)
        there.folder.mkdir(parents=True, exist_ok=True)
        _write_atomic(there.submitted_pickle, here.submitted_pickle.read_bytes())
        _write_atomic(there.submission_file, here.submission_file.read_bytes())
        _write_atomic(marker(folder, SUCCESSOR, current), new.encode())
        logger.get_logger().info(f"Checkpointed job {current}: job {new} resumes it ({countdown} remaining timeouts)")


# -- the executor -------------------------------------------------------------------------------------------
class NnloExecutor(core.PicklingExecutor):
    """Submit Python functions to a batch system with nnlo's templates and a cluster profile.

    Parameters (``update_parameters``; through ``submitit.AutoExecutor`` prefix them with the cluster name,
    e.g. ``lsf_profile="summit"``, ``pbs_account="ABC123"``):

    * ``profile``: nnlo cluster profile (``nnlo clusters``; a user profile works) whose scheduler is this one;
    * ``account``, ``queue``: the project to charge and the queue (the profile's default queue otherwise);
    * ``directives``: extra scheduler lines (``"-alloc_flags smt4"`` or ``"#BSUB -alloc_flags smt4"``);
    * ``setup``: shell lines run before Python, after the profile's own (module loads, an environment);
    * ``checkpoint_lead_s``: seconds before the walltime at which a checkpointable function is checkpointed
      and its successor queued (default: the profile's warning lead, at most half the walltime);
    * ``launch``: run the function through the profile's launcher as one rank holding the first node's cores
      and GPUs (``jsrun -n 1 ...``, ``aprun -n 1 ...``); default: where the batch script does not run on a
      compute node (the ``jsrun`` and ``aprun`` sites: Summit's launch nodes, Titan's service nodes);
    * generic: ``timeout_min`` (walltime, default 5), ``nodes`` (whole nodes), ``name``, ``stderr_to_stdout``;
      ``tasks_per_node``
      must be 1; ``cpus_per_task``, ``gpus_per_node``, ``mem_gb`` are checked against the profile's nodes,
      which the job gets whole.
    """

    job_class: type[core.Job[tp.Any]] = NnloJob
    scheduler = ""
    default_profile = ""
    _specific = ("profile", "account", "queue", "directives", "setup", "checkpoint_lead_s", "launch")
    _generic = ("name", "timeout_min", "nodes", "tasks_per_node", "cpus_per_task", "gpus_per_node", "mem_gb",
                "stderr_to_stdout")

    def __init__(self, folder: str | Path, max_num_timeout: int = 3, max_pickle_size_gb: float = 1.0,
                 python: str | None = None) -> None:
        super().__init__(folder, max_num_timeout=max_num_timeout, max_pickle_size_gb=max_pickle_size_gb)
        # the folder goes onto the -o/-e directive lines: one that cannot is refused before anything is written
        directive_value(str(utils.JobPaths.get_first_id_independent_folder(self.folder)))
        self._python = python  # the job's interpreter: this, else the profile's, else this one
        self.parameters.setdefault("profile", self.default_profile)
        self._throttling = 0.0

    @classmethod
    def affinity(cls) -> int:
        return 2 if shutil.which(scheduler_class(cls.scheduler).submit_program) else -1

    @classmethod
    def _equivalence_dict(cls) -> core.EquivalenceDict:
        return {"name": "name", "timeout_min": "timeout_min", "mem_gb": "mem_gb", "nodes": "nodes",
                "cpus_per_task": "cpus_per_task", "gpus_per_node": "gpus_per_node",
                "tasks_per_node": "tasks_per_node"}

    @classmethod
    def _valid_parameters(cls) -> set[str]:
        return set(cls._specific) | set(cls._generic)

    def _internal_update_parameters(self, **kwargs: tp.Any) -> None:
        bad = sorted(set(kwargs) - self._valid_parameters())
        if bad:
            raise ValueError(f"Unavailable parameter(s): {bad}; valid parameters are: "
                             f"{', '.join(sorted(self._valid_parameters()))}")
        if kwargs.get("tasks_per_node", 1) != 1:
            raise ValueError(f"the {self.name()} plugin runs one task per job; tasks_per_node must be 1")
        for key in ("directives", "setup"):
            if isinstance(kwargs.get(key), str):
                kwargs[key] = [kwargs[key]]
            if key in kwargs and not (isinstance(kwargs[key], (list, tuple))
                                      and all(isinstance(x, str) for x in kwargs[key])):
                raise ConfigError(f"{key} must be a list of strings, got {kwargs[key]!r:.80}")
        for key in ("timeout_min", "checkpoint_lead_s", "mem_gb"):
            v = kwargs.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf")):
                raise ConfigError(f"{key} must be a positive number, got {v!r:.80}")
        for key, least in (("nodes", 1), ("cpus_per_task", 1), ("gpus_per_node", 0)):
            v = kwargs.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < least):
                raise ConfigError(f"{key} must be a whole number of at least {least}, got {v!r:.80}")
        if "launch" in kwargs and not isinstance(kwargs["launch"], bool):
            raise ConfigError(f"launch must be True or False, got {kwargs['launch']!r:.80}")
        for key in ("profile", "account", "queue", "name"):
            v = kwargs.get(key)
            if v is not None and not isinstance(v, str):
                raise ConfigError(f"{key} must be a string, got {v!r:.80}")
            if v is not None and key in ("account", "queue"):
                directive_value(v)  # it goes onto a #BSUB/#PBS line: refused now, not at submission
        merged = {**self.parameters, **kwargs}
        self._profile(merged)  # a wrong profile or a node request it cannot meet is refused here
        super()._internal_update_parameters(**kwargs)

    def _profile(self, params: dict[str, tp.Any]) -> Profile:
        profile = load_profile(str(params.get("profile") or self.default_profile))
        if profile.scheduler != self.scheduler:
            raise ConfigError(f"profile {profile.name!r} uses {profile.scheduler}, not {self.scheduler}; pick a "
                              f"{self.scheduler} profile (nnlo clusters) or use the {profile.scheduler} executor")
        nodes = params.get("nodes") or 1
        if profile.nodes is not None and nodes > profile.nodes:
            raise ConfigError(f"{profile.label} has {profile.nodes} nodes; ask for at most nodes={profile.nodes}")
        for key, have, what in (("cpus_per_task", profile.cores_per_node, "cores"),
                                ("gpus_per_node", profile.gpus_per_node, "GPUs"),
                                ("mem_gb", profile.memory_gb, "GB of memory")):
            want = params.get(key)
            if want is not None and have is not None and want > have:
                raise ConfigError(f"{key}={want} is more than the {have} {what} of a {profile.name} node")
        return profile

    def _walltime_s(self) -> int:
        return max(1, round(float(self.parameters.get("timeout_min", DEFAULT_TIMEOUT_MIN)) * 60))

    def _lead_s(self, profile: Profile, walltime_s: int) -> int:
        lead = self.parameters.get("checkpoint_lead_s")
        if lead is None:
            return max(1, min(profile.signal_lead_s, walltime_s // 2))
        if not 0 < lead < walltime_s:
            raise ConfigError(f"checkpoint_lead_s={lead} must be between 0 and the walltime ({walltime_s} s)")
        return int(lead)

    # -- the script ---------------------------------------------------------------------------------------
    def script(self, command: str | None = None) -> str:
        """The job script a submission would queue now (nothing is written or submitted): the dry run.

        It is rendered as ``nnlo submit`` renders a run's script (:func:`nnlo_sched.render.render_script`),
        from the function's spec and its program (``command``, default submitit's ``process_job`` of the
        folder) with the environment :class:`NnloJobEnvironment` reads.
        """
        profile = self._profile(self.parameters)
        sched = scheduler_class(self.scheduler)
        walltime_s = self._walltime_s()
        account = self.parameters.get("account")
        if profile.account_required and not account:
            raise ConfigError(f"cluster {profile.name!r} needs a project to charge ({sched.account_flag}); "
                              f"set the executor's account parameter ({self.name()}_account=PROJECT)")
        nodes = int(self.parameters.get("nodes") or 1)
        q = profile.queue(self.parameters.get("queue"))
        queue = q.name if q is not None else None
        limit = q.walltime_limit(nodes) if q is not None else None
        if limit is not None and walltime_s > limit:
            raise ConfigError(f"timeout_min={walltime_s / 60:g} is longer than queue {queue!r} of {profile.name} "
                              f"allows for {nodes} node(s) ({limit // 60} min); ask for less: a checkpointable "
                              f"function goes on in successor jobs")
        if q is not None and q.max_nodes is not None and nodes > q.max_nodes:
            raise ConfigError(f"queue {queue!r} of {profile.name} takes at most {q.max_nodes} nodes; "
                              f"ask for nodes={q.max_nodes} or fewer")
        name = str(self.parameters.get("name") or "submitit")
        spec = RunSpec(kind=FUNCTION, args=[], cluster=profile.name, name=name, walltime_s=walltime_s, queue=queue,
                       account=account, nodes=nodes, directives=list(self.parameters.get("directives") or ()),
                       workdir=os.getcwd(), layout=self._layout(profile, nodes, queue, walltime_s))
        python = self._python or shlex.quote(profile.job_python().command)
        lead_s = self._lead_s(profile, walltime_s)
        signal_name = warning_signal(spec, profile)[0]  # as the directives ask for it
        env = [("SUBMITIT_EXECUTOR", self.name()), (ENV_WALLTIME, str(walltime_s)), (ENV_LEAD, str(lead_s)),
               (ENV_SIGNAL, signal_name or "")]
        if self.parameters.get("stderr_to_stdout"):
            env.append(("SUBMITIT_STDERR_TO_STDOUT", "1"))
        program = Program(command=command or self._command(python), env=tuple(env),
                          setup=tuple(self.parameters.get("setup") or ()))
        folder = utils.JobPaths.get_first_id_independent_folder(self.folder)
        return render_script(spec, profile, folder, program=program)

    def _layout(self, profile: Profile, nodes: int, queue: str | None, walltime_s: int) -> LayoutRecord:
        """The function's placement: ``nodes`` whole nodes, its one process with ``cpus_per_task`` cores, put on
        the first compute node through the profile's launcher (``launch``: by default where the batch script
        does not run on a compute node, the ``jsrun`` and ``aprun`` sites) or run by the batch shell itself."""
        launch = self.parameters.get("launch")
        if launch is None:
            launch = profile.launcher in ("jsrun", "aprun")
        gpus = self.parameters.get("gpus_per_node")
        one = compute_layout(profile, Shape.for_run(mode="allreduce", n_masters=0), "train", workers=1,
                             gpus_per_worker=float(profile.gpus_per_node if gpus is None else gpus) if launch else 0)
        cores = int(self.parameters.get("cpus_per_task") or profile.cores_per_node)
        return dataclasses.replace(one.record(), kind=FUNCTION, nodes=nodes, ranks_per_node=1, cores_per_rank=cores,
                                   gpus_per_worker=0.0, gpu_binding="none", roles={"submitit function": 1},
                                   queue=queue, walltime_s=walltime_s,
                                   launcher=list(one.launcher) if launch else [])

    @property
    def _submitit_command_str(self) -> str:
        return ""  # the script renders the command with the profile's interpreter (_command)

    def _command(self, python: str) -> str:
        return f"{python} -u -m nnlo_sched.submitit.job {shlex.quote(str(self.folder))}"

    def submit_argv(self, script_path: Path) -> list[str]:
        """The command line that queues ``script_path`` (what the dry run shows beside :meth:`script`)."""
        return get_scheduler(self.scheduler).submit_argv(script_path)

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        return self.script(command or None)

    def _make_submission_command(self, submission_file_path: Path) -> list[str]:
        return self.submit_argv(submission_file_path)

    @staticmethod
    def _get_job_id_from_submission_command(string: bytes | str) -> str:
        raise NotImplementedError("nnlo's scheduler class reads the job id (Scheduler.submit)")

    def _num_tasks(self) -> int:
        return 1

    def _submit_command(self, command: str) -> core.Job[tp.Any]:
        """Render, submit with nnlo's scheduler class (its program, job-id syntax and one-line errors)."""
        tmp_uuid = uuid.uuid4().hex
        folder = utils.JobPaths.get_first_id_independent_folder(self.folder)
        (folder / LOG_DIR).mkdir(parents=True, exist_ok=True)  # the batch system's own output (-o) goes there
        path = folder / f".submission_file_{tmp_uuid}.sh"
        path.write_text(self._make_submission_file_text(command, tmp_uuid))
        try:
            job_id = get_scheduler(self.scheduler).submit(path, depends_on=None, walltime_s=self._walltime_s(),
                                                          cwd=Path.cwd())
        except Exception as e:
            path.unlink(missing_ok=True)
            raise utils.FailedSubmissionError(str(e)) from e
        job: core.Job[tp.Any] = self.job_class(folder=self.folder, job_id=job_id, tasks=[0])
        # a copy, not a link: a successor resubmits it, and the temporary name must not be needed then
        job.paths.folder.mkdir(parents=True, exist_ok=True)
        os.replace(path, job.paths.submission_file)
        return job
