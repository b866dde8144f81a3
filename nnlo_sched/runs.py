"""Run directories: where a submitted run keeps its spec, job script, state, logs and checkpoints.

A run directory is the single source of truth for a run across all the jobs of its checkpoint-restart
chain, so on a cluster it must sit on a filesystem that login and compute nodes share (``NNLO_HOME``;
default ``./nnlo-runs``)::

    <home>/<run-id>/
        spec.json        what to run and with which resources (nnlo_sched.spec.RunSpec)
        job.sh           the batch script every job of the chain runs (nnlo_sched.render)
        state.json       the chain's state (nnlo_sched.state), changed under .state.lock/
        logs/job-<id>.out    one log per job
        checkpoints/     the runtime's complete checkpoints; history.json
        local/           the local scheduler's queue (--cluster local only)

:func:`submit_run` creates one and submits its first job; :func:`find_run` resolves what a user types
(an id, a unique prefix of one, or a path).
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

from nnlo.api import DEFAULT_RUNS
from nnlo.contract import (
    CHAINS_DIR,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    ENV_CLUSTERS,
    ENV_HOME,
    HISTORY_FILE,
    LOG_DIR,
    OPTIMIZER_STATE_FILE,
    SCRIPT_FILE,
    SPEC_FILE,
    STATE_FILE,
    TRIALS_JSON,
)
from nnlo.errors import ConfigError, NnloError
from nnlo_sched.inner import SCRIPT, changed, parse_changes
from nnlo_sched.profiles import Profile, load_profile
from nnlo_sched.render import render_script
from nnlo_sched.schedulers import NAMES, get_scheduler
from nnlo_sched.spec import RunNotFound, RunSpec, load_spec
from nnlo_sched.state import (
    ACTIVE_STATES,
    CANCELLED,
    DONE,
    FAILED,
    QUEUED,
    JobRecord,
    RunState,
    StateError,
    read_state,
    update_state,
    write_json_atomic,
    write_state,
)

# environment the jobs need to find the same profiles as the submitting shell (PBS does not pass it on)
CARRIED_ENV = (ENV_CLUSTERS, "XDG_CONFIG_HOME", ENV_HOME)


def runs_home() -> Path:
    """Where runs live: ``$NNLO_HOME`` or ``./nnlo-runs`` (on clusters: a shared filesystem)."""
    raw = os.environ.get(ENV_HOME) or "nnlo-runs"
    try:
        home = Path(raw).expanduser().resolve()
        home.exists()  # a name the filesystem refuses (too long) is refused here, once, not by each reader
        return home
    except (RuntimeError, OSError) as e:  # ~user of no user, a symlink loop, a name too long
        raise ConfigError(f"{ENV_HOME}={raw!r} is not a usable directory ({e}); set it to a directory (on a "
                          f"cluster: one that login and compute nodes share)") from None


@dataclass(frozen=True)
class Run:
    """A run directory. ``state`` is read afresh on every access (jobs change it behind our back)."""

    id: str
    dir: Path

    @property
    def path(self) -> Path:
        return self.dir

    @property
    def spec(self) -> RunSpec:
        return load_spec(self.dir)

    @property
    def state(self) -> RunState:
        return read_state(self.dir)

    @property
    def script(self) -> Path:
        return self.dir / SCRIPT_FILE

    @property
    def job_id(self) -> str | None:
        """The newest job's id (the first one right after submission)."""
        jobs = self.state.jobs
        return jobs[-1].job_id if jobs else None

    @property
    def checkpoint_dir(self) -> Path:
        return self.dir / CHECKPOINT_DIR

    @property
    def log_dir(self) -> Path:
        return self.dir / LOG_DIR


def load_state(run_dir: Path) -> RunState:
    """The run's record, checked beyond its types: it names a scheduler nnlo knows. StateError otherwise."""
    st = read_state(run_dir)
    if st.scheduler not in NAMES:
        raise StateError(f"{Path(run_dir) / STATE_FILE} is corrupt: unknown scheduler {st.scheduler!r} "
                         f"(nnlo knows {', '.join(NAMES)}); restore it or remove the run directory")
    return st


def change_inner_options(run_dir: Path, options: list[str]) -> RunSpec:
    """Change a stopped run's options: ``options`` (of its train/optimize command) parsed on their own and put
    into its typed record (later options win, as on a command line).

    The run's shape is its layout and its job script: options that would change it are refused. Returns the
    new spec, written atomically; ``args`` (for display) gets the options appended.
    """
    spec = load_spec(run_dir)
    if spec.kind == SCRIPT:
        raise ConfigError(f"a script run's arguments are the script's own ({shlex.join(spec.args)}); resume it "
                          "without options, or submit a new run")
    inner = changed(spec.inner, parse_changes(spec.kind, options))
    if inner.shape != spec.shape:
        raise ConfigError(f"{' '.join(options)} changes the run's shape ({spec.shape} -> {inner.shape}), which "
                          "its job script was laid out for; submit a new run instead")
    new = replace(spec, args=[*spec.args, *options], config=inner.train, search=inner.search)
    write_json_atomic(Path(run_dir) / SPEC_FILE, new.to_dict())
    return new


def new_run_id(name: str) -> str:
    """``<name>-<YYYYmmdd-HHMMSS>-<4 hex>``: sortable by time, readable, unique without coordination."""
    clean = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40] or "run"
    return f"{clean}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class RunDirChoice:
    """``--run-dir`` as the run will use it: ``path`` (absolute), and ``earlier``, the id of the stopped run it
    holds (None: it is new or empty), which ``--overwrite`` deletes first (:func:`remove_run_dir`)."""

    path: Path
    earlier: str | None = None


def check_run_dir(run_dir: Path, kind: str = "train", *, overwrite: bool = False) -> RunDirChoice:
    """``--run-dir`` checked: the one check that ``nnlo submit`` and its ``--dry-run`` share. A new or empty
    folder is taken; one holding a stopped run (done, failed, cancelled, damaged) is refused with the ways on
    (``nnlo resume``, another folder, ``--overwrite``, which ``kind`` is the run kind to put it before) unless
    ``overwrite``; a run still going and a folder holding files but no run are always refused: nothing but an
    earlier run that has stopped is ever deleted."""
    try:
        path = Path(run_dir).expanduser().resolve()
        taken = path.exists() and (not path.is_dir() or any(path.iterdir()))
    except (OSError, ValueError, RuntimeError) as e:  # a name too long, a NUL byte, a symlink loop, no access
        why = getattr(e, "strerror", None) or str(e)
        raise ConfigError(f"--run-dir {str(run_dir)[:200]!r} cannot be used ({why}); "
                          "choose another directory") from None
    if not taken:
        return RunDirChoice(path)
    if not _is_run_dir(path):
        raise ConfigError(f"--run-dir {path} holds files but no nnlo run; submit to a new or empty directory")
    try:
        st = read_state(path)
        states = [st.state] if not st.is_search else [_chain_state(c.dir) for c in chain_runs(path, st)]
        alive = [j.job_id for j in st.jobs if j.alive]
        going = next((s for s in states if s in ACTIVE_STATES), None)
        done = DONE in states and st.state != CANCELLED  # a search is done once a chain finished its budget
        shown = st.state if not st.is_search else ("search, " + (going or ("done" if done else "stopped")))
        # what `nnlo resume` takes: a stopped run; a done training with --force; a done search not at all
        resume = (None if st.is_search and done else
                  f"nnlo resume {path.name}" + (" --force" if done else ""))
    except NnloError:
        going, alive, shown, resume = None, [], "damaged", None
    if going is not None:
        jobs = f" (job {', '.join(alive)})" if alive else ""
        raise ConfigError(f"--run-dir {path} holds run {path.name}, which is {going}{jobs}; `nnlo cancel "
                          f"{path.name}` first, or submit to another --run-dir")
    if not overwrite:
        ways = ([f"continue it with `{resume}`"] if resume else []) + [
            "submit this one to another --run-dir",
            f"pass --overwrite (before the word {kind}) to start afresh (deleting its checkpoints, logs and records)"]
        raise ConfigError(f"--run-dir {path} already holds run {path.name} ({shown}); "
                          f"{', '.join(ways[:-1])}, or {ways[-1]}")
    return RunDirChoice(path, earlier=path.name)


def _chain_state(chain_dir: Path) -> str:
    try:
        return read_state(chain_dir).state
    except NnloError:
        return "damaged"


def remove_run_dir(choice: RunDirChoice) -> None:
    """Delete the stopped run ``choice`` holds (``--overwrite``), checked again just before: a run that started
    going meanwhile is refused, never deleted."""
    if choice.earlier is None:
        return
    again = check_run_dir(choice.path, overwrite=True)
    if again.earlier is not None:
        try:
            shutil.rmtree(again.path)
        except OSError as e:
            raise ConfigError(f"--overwrite: cannot delete the earlier run in {again.path} ({e.strerror}); "
                              "remove it by hand or choose another --run-dir") from None


def make_run_dir(name: str, home: Path | None = None, run_dir: Path | None = None) -> tuple[Path, str]:
    """A new, empty run directory (``run_dir``, or a fresh ``<name>-<time>-<hex>`` under ``home``) and its id."""
    if run_dir is not None:
        run_dir = check_run_dir(run_dir).path
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cannot create run directory {run_dir} ({e.strerror})") from None
        run_id = run_dir.name
    else:
        home = Path(home) if home is not None else runs_home()
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cannot create the runs directory {home} ({e.strerror}); set {ENV_HOME}") from None
        for _ in range(10):
            run_id = new_run_id(name)
            run_dir = home / run_id
            try:
                run_dir.mkdir()
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - 10 collisions of 16 random bits in one second
            raise ConfigError(f"cannot find a free run id under {home}")
    return run_dir, run_id


def create_run(spec: RunSpec, profile: Profile, home: Path | None = None, run_dir: Path | None = None, *,
               participant: str | None = None, search_dir: Path | None = None) -> Run:
    """Make the run directory (``run_dir``, or a new one under ``home``): spec, rendered script, logs folder
    and a fresh state record. ``participant`` and ``search_dir``: the run is a chain of that search run
    (:mod:`nnlo_sched.search`), its jobs taking part as ``participant``."""
    run_dir, run_id = make_run_dir(spec.name, home, run_dir)
    (run_dir / LOG_DIR).mkdir()
    script = render_script(spec, profile, run_dir, participant=participant)
    write_json_atomic(run_dir / SPEC_FILE, spec.to_dict())
    (run_dir / SCRIPT_FILE).write_text(script)
    (run_dir / SCRIPT_FILE).chmod(0o755)
    env = {k: os.environ[k] for k in CARRIED_ENV if os.environ.get(k)}
    write_state(run_dir, RunState(run_id=run_id, name=spec.name, cluster=profile.name,
                                  scheduler=profile.scheduler, state=QUEUED, env=env, participant=participant,
                                  search_dir=str(search_dir) if search_dir is not None else None))
    return Run(run_id, run_dir)


def submit_run(spec: RunSpec, profile: Profile, home: Path | None = None, run_dir: Path | None = None) -> Run:
    """Create a run directory for ``spec`` on ``profile`` and submit its first job; ``run.job_id`` is it.

    A failed submission leaves the run directory with state ``failed`` and the scheduler's message, and
    raises that message as one line.
    """
    run = create_run(spec, profile, home, run_dir)
    try:
        submit_job(run.dir, spec, profile, depends_on=None)
    except NnloError as e:
        with update_state(run.dir) as st:
            st.state, st.error = FAILED, str(e)
        raise
    return run


def submit_job(run_dir: Path, spec: RunSpec, profile: Profile, depends_on: str | None) -> str:
    """Submit one job of the run's chain (after ``depends_on`` ends, in any state) and record it as queued.

    The caller must not hold the run's lock: the record is added under it here.
    """
    sched = get_scheduler(profile.scheduler, run_dir)
    job_id = sched.submit(Path(run_dir) / SCRIPT_FILE, depends_on=depends_on, walltime_s=spec.walltime_s,
                          cwd=Path(spec.workdir or run_dir))
    with update_state(run_dir) as st:
        rec = st.job(job_id)
        if rec is None:
            st.jobs.append(JobRecord(job_id=job_id, submitted_at=time.time(), depends_on=depends_on))
        else:  # the job started (and recorded itself) before this process got here
            rec.depends_on = depends_on
    return job_id


def load_profile_for(run_dir: Path, cluster: str, env: dict[str, str] | None = None) -> Profile:
    """The profile a run was submitted with, found with the submitting shell's profile search path."""
    for k, v in (env or {}).items():
        os.environ.setdefault(k, v)
    return load_profile(cluster)


def list_runs(home: Path | None = None) -> list[Run]:
    """Every run under ``home``, oldest first (by creation time in the state record, then id); a damaged
    record sorts first and is still listed (``nnlo status`` shows it as damaged)."""
    home = Path(home) if home is not None else runs_home()
    try:
        entries = list(home.iterdir()) if home.is_dir() else []
    except OSError as e:
        raise ConfigError(f"cannot list the runs directory {home} ({e.strerror}); check it or set {ENV_HOME}") from None
    runs = [Run(p.name, p) for p in entries if _is_run_dir(p)]
    return sorted(runs, key=lambda r: (_created(r), r.id))


def local_trainings(folder: Path) -> list[Path]:
    """The trainings and searches run in ``folder`` without a batch system (``nnlo train|optimize -n``, ``mpirun
    nnlo ...``: ``nnlo-runs/NAME`` holding a history or a config, ``optimize-NAME`` holding trials or a search's
    state), relative to ``folder``; ``nnlo status`` lists only submitted runs, and says where these are."""
    found: list[Path] = []
    with contextlib.suppress(OSError):
        runs = folder / DEFAULT_RUNS
        for p in sorted(runs.iterdir()) if runs.is_dir() else ():
            if not _is_run_dir(p) and ((p / HISTORY_FILE).is_file() or (p / CONFIG_FILE).is_file()):
                found.append(p.relative_to(folder))
        for p in sorted(folder.glob("optimize-*")):
            if (p / TRIALS_JSON).is_file() or (p / OPTIMIZER_STATE_FILE).is_file():
                found.append(p.relative_to(folder))
    return found


def _is_run_dir(path: Path) -> bool:
    try:
        return (path / STATE_FILE).is_file()
    except (OSError, ValueError):
        return False


def _created(run: Run) -> float:
    try:
        return float(read_state(run.dir).created_at)
    except NnloError:
        return 0.0


#: the shortest run-id prefix a command that changes a run (cancel, resume) accepts: ``nnlo cancel ""`` (an
#: unset shell variable) or ``nnlo cancel a`` must never pick a run by chance
MIN_PREFIX = 4


def find_run(ref: str, home: Path | None = None, *, changes: bool = False) -> Run:
    """The run named by ``ref``: a run directory path, a run id, or a unique prefix of one.

    ``changes``: the caller changes the run (cancel, resume), so a prefix must have at least
    :data:`MIN_PREFIX` characters. An empty or blank ``ref`` is refused either way.
    """
    home = Path(home) if home is not None else runs_home()
    if not ref.strip():
        raise RunNotFound(f"no run given (the run reference is {'empty' if not ref else 'blank'}: an unset shell "
                          "variable?); pass a run id from `nnlo status` or a run directory")
    try:
        p = Path(ref).expanduser()
    except RuntimeError:  # ~user of an unknown user
        p = Path(ref)
    if _is_run_dir(p):
        p = p.resolve()
        return Run(p.name, p)
    if "/" not in ref and ref not in (".", "..") and _is_run_dir(home / ref):
        return Run(ref, home / ref)
    matches = [r for r in list_runs(home) if r.id.startswith(ref)]
    if matches and changes and len(ref) < MIN_PREFIX:
        shown = ", ".join(r.id for r in matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise RunNotFound(f"{ref!r} is too short to name a run that this command changes (it matches {shown}); "
                          f"give the whole run id or at least {MIN_PREFIX} characters of it")
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        shown = ", ".join(r.id for r in matches[:5])
        raise RunNotFound(f"{ref!r} matches {len(matches)} runs ({shown}); give more of the run id")
    raise RunNotFound(f"no run {ref!r} under {home}; see `nnlo status` for run ids (or set {ENV_HOME})")


# -- a search run's chains (nnlo submit --jobs K: each an ordinary run directory under chains/) -------------
def chain_runs(search_dir: Path, st: RunState | None = None) -> list[Run]:
    """The chains of the search run in ``search_dir``, in the order they were added."""
    st = st or read_state(search_dir)
    return [Run(f"{Path(search_dir).name}/{name}", Path(search_dir) / CHAINS_DIR / name) for name in st.chains]


def search_done(search_dir: Path) -> bool:
    """Whether a chain of the search finished it (its runtime saw the whole budget spent)."""
    try:
        st = read_state(search_dir)
        return any(read_state(c.dir).state == DONE for c in chain_runs(search_dir, st))
    except NnloError:
        return False
