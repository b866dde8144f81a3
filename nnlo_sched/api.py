"""Submission from Python: lay a run out, render its script, submit it as a chain, query, wait for, cancel.

What the command line does, as typed functions over the same internals (``nnlo layout``, ``nnlo submit``,
``nnlo status``, ``nnlo wait``, ``nnlo cancel`` call these or the functions they wrap), so a script gets
the same checks, the same one-line errors (:class:`nnlo.errors.NnloError` subclasses) and the same records::

    from nnlo_sched import api

    spec = api.spec("train", ["--model", "examples/mnist_torch.py", "--epochs", "20"], cluster="local",
                    workers=2, walltime="10m")
    print(api.render(spec))                 # the batch script, nothing written (``--dry-run``)
    run = api.submit(spec)                  # a Run: run.id, run.dir, run.job_id
    status = api.wait(run, timeout=3600)    # a RunStatus once the chain has ended
    assert status.state == "done", status.error

A run is named by a :class:`~nnlo_sched.runs.Run`, its id (or a unique prefix of it) or its directory.
Nothing heavy is imported here: the runtime (torch, MPI) never is.
"""
from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nnlo.contract import CHAINS_DIR, SCRIPT_FILE
from nnlo.errors import ConfigError, NnloError
from nnlo.roles import Shape
from nnlo_sched.chain import ChainError, cancel_run, preempt_run, preemptable
from nnlo_sched.checks import check_run, check_run_home, check_script, check_site_run_home, skipped_checks
from nnlo_sched.inner import SCRIPT, InnerCommand, parse_inner
from nnlo_sched.layout import Layout, compute_layout, idle_gpu_notes, oversubscribed
from nnlo_sched.profiles import Profile, load_profile
from nnlo_sched.render import job_name, render_script, warning_signal
from nnlo_sched.runs import (
    Run,
    RunDirChoice,
    check_run_dir,
    find_run,
    load_state,
    remove_run_dir,
    runs_home,
    submit_run,
)
from nnlo_sched.schedulers import SchedulerError, get_scheduler, scheduler_class
from nnlo_sched.search import (
    ARRAY_SCRIPT,
    cancel_search,
    chain_names,
    chain_spec,
    check_cancel_search,
    check_joinable,
    check_search_options,
    joining_spec,
    render_array,
    submit_search,
    use_array,
)
from nnlo_sched.spec import DEFAULT_MAX_RESUBMITS, DEFAULT_MAX_RETRIES, RunSpec
from nnlo_sched.state import ACTIVE_STATES, StateError
from nnlo_sched.status import collect, views
from nnlo_sched.walltime import DEFAULT_WALLTIME, parse_walltime

RunRef = Run | str | Path


class WaitTimeout(NnloError):
    """:func:`wait` gave up before the run ended (the run goes on); ``status`` is its last status."""

    def __init__(self, message: str, status: RunStatus) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class JobStatus:
    """One job of a run's chain: nnlo's record and (while it is alive) the scheduler's word."""

    job_id: str
    status: str  # queued, running, finished, walltime, failed, cancelled, ... (nnlo_sched.state)
    scheduler_state: str | None  # PENDING, RUNNING, ... (nnlo_sched.schedulers.base), None once ended
    rc: int | None
    host: str | None
    submitted_at: float | None
    started_at: float | None
    ended_at: float | None


@dataclass(frozen=True)
class RunStatus:
    """A run as ``nnlo status RUN --json`` shows it, typed; ``view`` is that JSON object itself."""

    run_id: str
    dir: Path
    state: str  # queued, running, resubmitting, done, failed, cancelled
    error: str | None
    jobs: tuple[JobStatus, ...]
    progress: dict[str, Any]
    view: dict[str, Any]

    @property
    def ended(self) -> bool:
        return self.state not in ACTIVE_STATES

    @property
    def done(self) -> bool:
        return self.state == "done"

    @property
    def key(self) -> tuple[Any, ...]:
        """What a change of the run is (its state, error, jobs, progress), not the clock."""
        return (self.state, self.error, self.jobs, tuple(sorted(self.progress.items())))

    @classmethod
    def from_view(cls, view: dict[str, Any]) -> RunStatus:
        jobs = tuple(JobStatus(j["job_id"], j["status"], j.get("scheduler_state"), j.get("rc"), j.get("host"),
                               j.get("submitted_at"), j.get("started_at"), j.get("ended_at"))
                     for j in view.get("jobs", ()))
        return cls(view["run_id"], Path(view["dir"]), view["state"], view.get("error"), jobs,
                   dict(view.get("progress") or {}), view)


# -- before submission -------------------------------------------------------------------------------
def spec(kind: str, args: Sequence[str], cluster: str, *, name: str | None = None,
         walltime: str | int = DEFAULT_WALLTIME, queue: str | None = None, account: str | None = None,
         nodes: int | None = None, workers: int | None = None, blocks: int | None = None,
         gpus_per_worker: float | None = None,
         constraint: str | None = None, max_resubmits: int | None = None, max_retries: int | None = None,
         directives: Sequence[str] = (), workdir: str | Path | None = None,
         inner: InnerCommand | None = None) -> RunSpec:
    """A run spec as ``nnlo submit`` builds it: the inner ``train``/``optimize`` options parsed by that
    command's own parser, the walltime parsed (``"2h"``, ``"01:30:00"`` or seconds as an int), the layout
    computed on ``cluster``'s profile (a :class:`~nnlo_sched.layout.LayoutError` if it cannot be placed).

    ``inner``: ``args`` already parsed by :func:`nnlo_sched.inner.parse_inner` (``nnlo submit`` parses them
    itself, to word a misplaced option's error as a corrected command line)."""
    if inner is None:
        inner = parse_inner(kind, list(args))
    elif inner.kind != kind:
        raise ConfigError(f"the parsed options are of a {inner.kind} run, not of {kind}")
    profile = load_profile(cluster)
    workdir = str(workdir if workdir is not None else os.getcwd())
    named = Path(args[0]).stem if kind == SCRIPT else inner.run_name(workdir)  # the script's file, or the rule's
    s = RunSpec.of(inner, list(args), profile.name, name=name or named,
                   walltime_s=parse_walltime(walltime),
                   queue=queue, account=account, nodes=nodes, workers=workers, blocks=blocks,
                   gpus_per_worker=gpus_per_worker, constraint=constraint,
                   max_resubmits=DEFAULT_MAX_RESUBMITS if max_resubmits is None else max_resubmits,
                   max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
                   directives=list(directives), workdir=workdir)
    return replace(s, layout=s.layout_on(profile).record())


def layout(target: RunSpec | str, *, kind: str | None = None, workers: int | None = None,
           blocks: int | None = None, nodes: int | None = None, gpus_per_worker: float | None = None,
           walltime: str | int | None = None, queue: str | None = None, constraint: str | None = None,
           mode: str | None = "gem", n_masters: int = 1, n_processes: int = 1, block_size: int | None = None,
           n_fold: int | None = None, block_sizes: tuple[int, ...] | None = None,
           proposers: int | None = None) -> Layout:
    """Where a run's ranks go (what ``nnlo layout`` prints), per-rank list included.

    ``target`` is a :class:`RunSpec` (its own resources and shape; the other arguments must be left out) or a
    cluster name, laid out as ``nnlo layout --cluster NAME`` with these options (an optimization when
    ``kind="optimize"`` or any of ``blocks``/``block_size``/``block_sizes``/``n_fold``/``proposers`` is given).
    ``nnlo layout`` calls this.
    """
    if isinstance(target, RunSpec):
        return target.layout_on(load_profile(target.cluster))
    profile = load_profile(target)
    if constraint and not scheduler_class(profile.scheduler).takes_constraint:
        raise ConfigError(f"--constraint is a Slurm option and {profile.name!r} uses {profile.scheduler}; "
                          "leave it out")
    profile = profile.for_constraint(constraint)
    if kind is None:
        search = any(v is not None for v in (block_size, block_sizes, blocks, n_fold, proposers))
        kind = "optimize" if search else "train"
    shape = Shape.for_run(mode=mode, n_masters=n_masters, n_processes=n_processes, block_size=block_size,
                          n_fold=1 if n_fold is None else n_fold, search=kind == "optimize",
                          block_sizes=block_sizes, proposers=1 if proposers is None else proposers)
    return compute_layout(profile, shape, kind, workers=workers, blocks=blocks, nodes=nodes,
                          gpus_per_worker=gpus_per_worker,
                          walltime_s=None if walltime is None else parse_walltime(walltime), queue=queue)


def render(run_spec: RunSpec, run_dir: str | Path | None = None) -> str:
    """The batch script ``submit`` would queue (``nnlo submit --dry-run``); nothing is written.

    Refuses what the profile cannot take (a missing account, a directive of another scheduler) with one line.
    """
    shown = Path(run_dir) if run_dir is not None else runs_home() / job_name(run_spec.name, "local")
    return render_script(run_spec, load_profile(run_spec.cluster), shown)


def submit_argv(run_spec: RunSpec, run_dir: str | Path) -> list[str]:
    """The command line that would queue the first job of ``run_spec`` in ``run_dir``."""
    profile = load_profile(run_spec.cluster)
    return get_scheduler(profile.scheduler, run_dir).submit_argv(Path(run_dir) / SCRIPT_FILE)


# -- submission and after ------------------------------------------------------------------------------
def check_chaining(profile: Profile, queue: str | None, max_resubmits: int) -> None:
    """Refuse resubmissions on a queue that forbids job chaining (the profile says so)."""
    q = profile.queue(queue)
    if q is not None and not q.chaining and max_resubmits > 0:
        raise ConfigError(f"queue {q.name!r} of {profile.name} forbids job chaining; submit without "
                          "resubmissions (--max-resubmits 0, max_resubmits=0) or use another queue")


@dataclass(frozen=True)
class PlannedScript:
    """One batch script a submission would write: where, its text, and what the dry run says before it."""

    path: Path
    text: str
    caption: str | None = None  # a comment line printed before it (None: none)


@dataclass(frozen=True)
class Plan:
    """The whole of a submission, as ``nnlo submit --dry-run`` prints it: every script it would write (the one
    of a run; a search's array and its first chain's script, or the first chain's; a joining chain's), the
    command line that queues the first job, and what the dry run says after them."""

    scripts: tuple[PlannedScript, ...]
    argv: tuple[str, ...]  # the command that queues the first job (or the job array)
    lines: tuple[str, ...]  # the dry run's closing comment lines (where the run goes, which chains)

    def text(self) -> str:
        """The dry run as ``nnlo submit --dry-run`` prints it."""
        parts = [(f"{s.caption}\n" if s.caption else "") + s.text for s in self.scripts]
        tail = (*self.lines, f"# submit command: {shlex.join(self.argv)}")
        return "".join(parts) + "".join(f"{line}\n" for line in tail)


@dataclass(frozen=True)
class Preflight:
    """What :func:`preflight` found: where the run goes, its scripts, and the notes for the user."""

    profile: Profile  # the cluster profile the run was checked against
    run_dir: Path | None  # the run directory asked for, as the run will use it; None: a new one under the home
    shown_dir: Path  # the folder the script names: run_dir, or an example folder under the run home
    script: str  # the batch script rendered for shown_dir (for jobs=K, the first chain's standalone script)
    notes: tuple[str, ...]  # to print before anything else (a sampled data list, a run dir off the site's area)
    plan: Plan  # every script and the submit command (what --dry-run prints)
    earlier: str | None = None  # the stopped run in run_dir that --overwrite deletes at submission (its id)


def _plan(run_spec: RunSpec, profile: Profile, shown: Path, script: str, *, given_dir: bool, jobs: int | None,
          array: bool | None, join: Run | None, inner_given: bool) -> Plan:
    """What the submission would write and run (:class:`Plan`): a run's one script; ``jobs`` chains of a
    search (a job array's script and its first chain's, or the first chain's); a chain joining ``join``."""
    def argv(where: Path, script_path: Path) -> tuple[str, ...]:
        return tuple(get_scheduler(profile.scheduler, where).submit_argv(script_path))

    if join is not None:
        chain_dir = join.dir / CHAINS_DIR / "cN"
        one = joining_spec(join, run_spec, profile, inner_given=inner_given)
        return Plan((PlannedScript(chain_dir / SCRIPT_FILE, render_script(one, profile, chain_dir, participant="cN")),),
                    argv(chain_dir, chain_dir / SCRIPT_FILE),
                    (f"# --- dry run: nothing was written or submitted; the chain would join search {join.id} as "
                     "its next free cN ---",))
    if jobs is not None:
        arrayed = use_array(profile, jobs, array)
        names = chain_names(profile.scheduler, jobs, None if arrayed else 0)
        first_dir = shown / CHAINS_DIR / names[0]
        first = PlannedScript(first_dir / SCRIPT_FILE, render_script(chain_spec(run_spec, shown), profile, first_dir,
                                                                     participant=names[0]))
        scripts: tuple[PlannedScript, ...] = (first,)
        target = first.path
        if arrayed:  # the array's task I only starts chain I's own script: show both
            target = shown / ARRAY_SCRIPT
            scripts = (PlannedScript(target, render_array(run_spec, profile, shown, names)),
                       replace(first, caption=f"# --- the job script of chain {names[0]} ({CHAINS_DIR}/{names[0]}/"
                                              f"{SCRIPT_FILE}), which the array's first task starts and every later "
                                              "job of the chain runs; the other chains' differ only in their name ---"))
        how = ", started as one job array" if arrayed else f", each submitted like {names[0]}'s script above"
        return Plan(scripts, argv(shown, target),
                    ("# --- dry run: nothing was written or submitted ---",
                     f"# search run directory: {shlex.quote(str(shown))}; {jobs} chain(s) {', '.join(names)}{how}"))
    return Plan((PlannedScript(shown / SCRIPT_FILE, script),), argv(shown, shown / SCRIPT_FILE),
                ("# --- dry run: nothing was written or submitted ---",
                 f"# run directory: {shlex.quote(str(shown))}"
                 + ("" if given_dir else " (the real one gets a unique name at submission)")))


def preflight(run_spec: RunSpec, *, run_dir: str | Path | None = None, home: str | Path | None = None,
              check: bool = True, jobs: int | None = None, array: bool | None = None,
              overwrite: bool = False, join: RunRef | None = None, inner_given: bool = True) -> Preflight:
    """Everything ``nnlo submit`` checks before anything is queued, with and without ``--dry-run``, and its
    whole plan (:class:`Plan`: every script and the submit command, what ``--dry-run`` prints); nothing is
    written. Raises the first problem as one line (:class:`~nnlo.errors.ConfigError`).

    ``join``: a chain joining that search run (``nnlo submit --join``) on ``run_spec``'s cluster and resources;
    ``inner_given=False`` when ``run_spec`` is the search's own (no inner options given to compare).

    The queue's chaining rule; for ``jobs`` (one search over K chains) the search's own options and whether a
    job array can be used; the run directory (``run_dir`` new or empty, or holding a stopped run that
    ``overwrite`` deletes at submission; the home writable; neither on a file system the site's compute
    nodes cannot write); the script renders (an account where the site needs one, no
    directive of another scheduler); and with ``check`` the model imports and its data and paths exist
    (:func:`nnlo_sched.checks.check_run`; ``check=False`` is ``--no-check``, said in a note).
    """
    profile = load_profile(run_spec.cluster)
    check_chaining(profile, run_spec.queue, run_spec.max_resubmits)
    joined = None
    if join is not None:
        if jobs is not None or array is not None or run_dir is not None:
            raise ConfigError("--join adds one chain inside a search's run directory; leave out --jobs, --array "
                              "and --run-dir (join again for more)")
        joined = find(join, changes=True)
        check_joinable(joined)
        if inner_given:
            check_search_options(run_spec.search)
    if jobs is not None:
        if run_spec.kind != "optimize":
            raise ConfigError("--jobs runs one search across many jobs and needs optimize, not train (a "
                              "training is one chain; give it more --nodes)")
        check_search_options(run_spec.search)
        use_array(profile, jobs, array)
    choice = check_run_dir(Path(run_dir), run_spec.kind, overwrite=overwrite) if run_dir is not None else None
    target = choice.path if choice is not None else None
    home_dir = Path(home) if home is not None else runs_home()
    shown = target or home_dir / job_name(run_spec.name, "local")
    script = render_script(run_spec, profile, shown)  # refuses what the profile cannot take (account, ...)
    if run_spec.kind == SCRIPT:  # the file exists and compiles, whatever --no-check says
        check_script(run_spec.args[0], Path(run_spec.workdir or os.getcwd()))
        notes = []
    elif check:
        notes = check_run(run_spec.train, run_spec.search)
    else:
        notes = [f"--no-check: skipped the checks of {skipped_checks()}"]
    check_run_home(target, home_dir)
    notes += check_site_run_home(profile, run_spec.account, target or home_dir)
    notes.append(warning_signal(run_spec, profile)[2] or "")
    if run_spec.layout is not None:  # as nnlo layout and nnlo train -n say it (the local profile: this machine)
        cores = profile.for_constraint(run_spec.constraint).cores_per_node
        over = oversubscribed(run_spec.layout.ranks_per_node, cores)
        notes.append(f"{over} of a {profile.label} node (the ranks share them: slower, not wrong)" if over else "")
        notes += idle_gpu_notes(run_spec.layout)  # the GPUs a coordinator or master leaves idle, as layout says
    plan = _plan(run_spec, profile, shown, script, given_dir=target is not None, jobs=jobs, array=array,
                 join=joined, inner_given=inner_given)
    return Preflight(profile, target, shown, script, tuple(filter(None, notes)), plan,
                     earlier=choice.earlier if choice is not None else None)


def submit(run_spec: RunSpec, *, run_dir: str | Path | None = None, home: str | Path | None = None,
           check: bool = True, jobs: int | None = None, array: bool | None = None, overwrite: bool = False,
           on_note: Callable[[str], None] | None = None) -> Run:
    """Check the run (:func:`preflight`, whose notes go to ``on_note``), create its directory and queue the first
    job of the chain; the :class:`Run` names it (``run.job_id``). ``nnlo submit`` calls this.

    ``jobs=K`` (``nnlo submit --jobs K``): one search run of K chains sharing its state, started as one job
    array where the scheduler has them (``array`` forces it either way). A failed submission leaves the run
    directory marked failed and raises the reason. ``overwrite``: a ``run_dir`` holding a stopped run is
    deleted first (``nnlo submit --overwrite``); without it such a folder is refused.
    """
    found = preflight(run_spec, run_dir=run_dir, home=home, check=check, jobs=jobs, array=array,
                      overwrite=overwrite)
    notes = list(found.notes)
    if found.run_dir is not None and found.earlier is not None:
        remove_run_dir(RunDirChoice(found.run_dir, found.earlier))
        notes.append(f"--overwrite: deleted the earlier run {found.earlier} in {found.run_dir}")
    if on_note is not None:
        for note in notes:
            on_note(note)
    home_dir = Path(home) if home is not None else None
    if jobs is not None:
        return submit_search(run_spec, found.profile, jobs, array=array, home=home_dir, run_dir=found.run_dir)
    return submit_run(run_spec, found.profile, home=home_dir, run_dir=found.run_dir)


def find(ref: RunRef, *, changes: bool = False) -> Run:
    """The run ``ref`` names (a Run is taken as is); ``changes``: the stricter rule of cancel and resume."""
    return ref if isinstance(ref, Run) else find_run(str(ref), changes=changes)


def query(runs: Sequence[RunRef] | None = None) -> list[RunStatus]:
    """The status of every run in ``runs`` (default: every run under ``$NNLO_HOME``), asking each batch
    system ONCE for all their jobs, as ``nnlo status`` does (a chain whose jobs all left the queue without a
    recorded end is marked failed). A damaged run raises its one-line reason when named, and is listed as
    ``damaged`` when not."""
    if runs is None:
        return [RunStatus.from_view(v) for v in collect(None)]
    return [RunStatus.from_view(v) for v in views([find(r) for r in runs], named=True)]


def status(run: RunRef) -> RunStatus:
    """One run's status (:func:`query` of one)."""
    return query([run])[0]


def wait(run: RunRef, timeout: float | None = None, *, every: float = 2.0,
         on_change: Callable[[RunStatus], None] | None = None) -> RunStatus:
    """Block until ``run``'s chain has ended (done, failed or cancelled) and return its final status.

    Looks every ``every`` seconds; ``on_change`` is called with each status that differs from the last
    (``nnlo wait`` prints them). After ``timeout`` seconds :class:`WaitTimeout` (the run is left alone).
    """
    r = find(run)
    start = time.monotonic()
    last: tuple[Any, ...] | None = None
    while True:
        st = status(r)
        if on_change is not None and st.key != last:
            on_change(st)
        last = st.key
        if st.ended:
            return st
        if timeout is not None and time.monotonic() - start >= timeout:
            raise WaitTimeout(f"run {st.run_id} is still {st.state} after {timeout:g} s", st)
        time.sleep(every)


def check_cancel(run: RunRef) -> Run:
    """Refuse, before anything changes, a cancel the scheduler could not do: an unreadable record, an unknown
    scheduler, a job id that is not the scheduler's (``0``, ``all``, an option), a damaged queue."""
    r = find(run, changes=True)
    st = load_state(r.dir)
    if st.is_search:
        check_cancel_search(r.dir)
        return r
    try:
        get_scheduler(st.scheduler, r.dir).check_cancel([j.job_id for j in st.jobs if j.alive])
    except SchedulerError as e:
        raise StateError(f"run {st.run_id}: {e}; nothing was cancelled and nothing changed (cancel its jobs "
                         f"by hand, then remove or repair {r.dir})") from None
    return r


def cancel(run: RunRef) -> list[str]:
    """Cancel ``run``'s chain (running job and queued successor, one scheduler call); the job ids cancelled.
    A prefix must have :data:`~nnlo_sched.runs.MIN_PREFIX` characters, as for ``nnlo cancel``."""
    r = check_cancel(run)
    if is_search(r):
        return cancel_search(r.dir)
    return cancel_run(r.dir)


def preempt(run: RunRef, *, wait: float | None = 0.0, every: float = 0.25) -> str:
    """Stop ``run``'s running job as its walltime would, now: it checkpoints, exits 75 and the queued successor
    resumes (to move a run, free its nodes, or try the chain). Returns the job id signalled.

    wait: how long to wait for a job that can be preempted (running, with a checkpoint of its own, its
    successor queued) before giving up with :class:`WaitTimeout`; None waits as long as the run goes on, 0 not
    at all (ChainError, one line, saying why not). A run that ends first is a ChainError.
    """
    r = find(run, changes=True)
    if is_search(r):
        raise ChainError(f"run {r.id} is a search of many chains; preempt one chain's run directory "
                         f"(`nnlo status {r.id}` lists them)")
    start = time.monotonic()
    looks = 0
    while True:
        found = preemptable(r.dir, load_state(r.dir))
        if not found.later:
            return preempt_run(r.dir)  # a job to preempt, or a reason no wait can help (raised there)
        if wait is not None and time.monotonic() - start >= wait:
            if wait == 0:
                raise ChainError(f"{found.why}; nothing to preempt yet (--wait waits for it)")
            raise WaitTimeout(f"{found.why} after {wait:g} s; nothing was preempted", status(r))
        looks += 1
        if looks % 40 == 0 and status(r).ended:  # a chain lost without a record ends the wait, never hangs
            return preempt_run(r.dir)
        time.sleep(every)


def is_search(run: RunRef) -> bool:
    """Whether ``run`` is a search over many chains (``nnlo submit --jobs K``), not one chain."""
    return load_state(find(run).dir).is_search


__all__ = ["JobStatus", "Preflight", "RunRef", "RunStatus", "WaitTimeout", "cancel", "check_cancel",
           "check_chaining", "find", "is_search", "layout", "preempt", "preflight", "query", "render", "spec", "status",
           "submit", "submit_argv", "wait"]
