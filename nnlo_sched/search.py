"""One search across many jobs: a *search run* whose chains all run the same ``nnlo optimize --shared``.

``nnlo submit --jobs K ... optimize ...`` makes one run directory for the search and K *chains* inside it,
each an ordinary run directory (spec, job script, state, logs) that resubmits itself after its walltime
exactly like any run (:mod:`nnlo_sched.chain`)::

    <home>/<search-id>/
        spec.json, state.json   the search as submitted; its state lists the chains (``chains``)
        chains/c0/ ...          chain c0: an ordinary run (spec.json, job.sh, state.json, logs/)
        chains/c1/ ...
        array.sh                the job array that started the first chains (where one was used)
        logs/                   the array's own scheduler logs (each task logs into its chain's logs/)
        search-journal.jsonl, trials.csv, best.json, ...   the shared search (every chain's --output)

Every chain's inner command is the search's, with ``--output <search dir> --shared``; its jobs export
``NNLO_PARTICIPANT=<chain name>``. The runtime coordinates the participants through the journal; this module
only creates, submits, joins, reads and cancels the chains. A search's state is derived from its chains':
active while any chain is, then done if a chain finished the search, cancelled if the user cancelled it,
else failed.
"""
from __future__ import annotations

import csv
import json
import re
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from nnlo.contract import (
    BEST_FILE,
    CHAINS_DIR,
    LOG_DIR,
    SCRIPT_FILE,
    SEARCH_JOURNAL,
    SPEC_FILE,
    TRIALS_CSV,
)
from nnlo.errors import ConfigError, NnloError
from nnlo.optimize.options import SearchConfig
from nnlo_sched.chain import resume_run
from nnlo_sched.profiles import Profile
from nnlo_sched.render import ArrayPlan, render_script
from nnlo_sched.runs import Run, chain_runs, create_run, load_state, make_run_dir, submit_job
from nnlo_sched.schedulers import SchedulerError, get_scheduler, scheduler_class
from nnlo_sched.spec import RunSpec, load_spec
from nnlo_sched.state import (
    ACTIVE_STATES,
    CANCELLED,
    DONE,
    FAILED,
    JOB_CANCELLED,
    QUEUED,
    RESUBMITTING,
    RUNNING,
    JobRecord,
    RunState,
    read_state,
    update_state,
    write_json_atomic,
    write_state,
)

ARRAY_SCRIPT = "array.sh"
CHAIN_PREFIX = "c"
_CHAIN_INDEX = re.compile(rf"{CHAIN_PREFIX}(\d+)")
#: inner options a chain may set differently from its search (per-job resources and bookkeeping); every
#: other option of the trials (model, data, space, objective, budget, engine, folds ...) must be equal
_MAY_DIFFER = frozenset({"block_size", "output", "opt_restore", "shared", "participant", "lease_timeout",
                         "deadline", "log_level", "monitor", "timeline", "cache_data", "preload_data",
                         "checkpoint", "checkpoint_keep", "restore", "allreduce_engine"})


class SearchError(NnloError):
    """A search-run operation that cannot be done (the message says why and what to do)."""


# -- the options of a chain ------------------------------------------------------------------------------
#: the search options the search run sets for every chain (its folder, --shared, each chain's name)
CHAIN_SET_OPTIONS = (("--output", "output"), ("--shared", "shared"), ("--participant", "participant"))


def check_search_options(search: SearchConfig | None) -> None:
    """Refuse search options that the search run sets itself for every chain (one line naming the first)."""
    for flag, name in CHAIN_SET_OPTIONS:
        if search is not None and getattr(search, name):
            raise ConfigError(f"{flag} is set by nnlo submit --jobs/--join for every chain (the search run's folder "
                              f"and each chain's name); leave it out")


def chain_spec(spec: RunSpec, search_dir: Path) -> RunSpec:
    """``spec`` (the search's, or a joining chain's) as one chain runs it: its search's ``output`` is the
    search run's folder and ``shared`` is on (``args``, for display, say so)."""
    check_search_options(spec.search)
    if spec.search is None:
        raise ConfigError("--jobs/--join run a search: they need nnlo submit ... optimize, not train")
    search = replace(spec.search, output=str(search_dir), shared=True)
    return replace(spec, args=[*spec.args, "--output", str(search_dir), "--shared"], search=search)


def differences(search: RunSpec, joining: RunSpec) -> list[str]:
    """What differs between the trials of ``search`` and those ``joining`` would run ("" if nothing)."""
    out = []
    pairs = [(search.train, joining.train), (search.search, joining.search)]
    for a, b in pairs:
        if a is None or b is None:
            continue
        for f in fields(a):
            if f.name in _MAY_DIFFER:
                continue
            x, y = getattr(a, f.name), getattr(b, f.name)
            if f.name in ("space", "model", "train", "val") and x and y and _same_file(search, x, joining, y):
                continue
            if x != y:
                out.append(f"{f.name.replace('_', '-')} {_show(y)} (the search has {_show(x)})")
    return out


def _same_file(sa: RunSpec, a: Any, sb: RunSpec, b: Any) -> bool:
    """Two paths, each relative to its run's working directory, that name the same file or equal files."""
    try:
        pa = Path(sa.workdir or ".", str(a)).resolve()
        pb = Path(sb.workdir or ".", str(b)).resolve()
        return pa == pb or (pa.is_file() and pb.is_file() and pa.read_bytes() == pb.read_bytes())
    except (OSError, ValueError):
        return False


def _show(v: Any) -> str:
    return json.dumps(v, default=str)[:60]


# -- creating and submitting -----------------------------------------------------------------------------
def chain_names(sched: str, jobs: int, start: int | None = None) -> list[str]:
    """``jobs`` chain names numbered like the scheduler's array tasks (Slurm c0.., LSF/PBS c1..)."""
    first = scheduler_class(sched).array_first_index if start is None else start
    return [f"{CHAIN_PREFIX}{first + i}" for i in range(jobs)]


def use_array(profile: Profile, jobs: int, array: bool | None) -> bool:
    """Whether K chains start as one job array: asked for (``--array``), refused (``--no-array``), or by
    default wherever the scheduler has arrays of that many tasks."""
    sched = scheduler_class(profile.scheduler)
    if array is None:
        return sched.has_arrays and jobs >= max(2, sched.array_min_tasks)
    if array and not sched.has_arrays:
        raise ConfigError(f"{profile.name} uses {profile.scheduler}, which has no job arrays; leave out --array "
                          f"(its {jobs} chains are submitted one by one)")
    if array and jobs < sched.array_min_tasks:
        raise ConfigError(f"a {profile.scheduler} job array needs at least {sched.array_min_tasks} tasks; "
                          f"use --jobs {sched.array_min_tasks} or more, or --no-array")
    return array


def render_array(spec: RunSpec, profile: Profile, search_dir: Path, names: list[str]) -> str:
    """The job array script whose task I starts chain ``cI`` (its first job)."""
    first = int(names[0][len(CHAIN_PREFIX):])
    plan = ArrayPlan(first, first + len(names) - 1, search_dir / CHAINS_DIR, CHAIN_PREFIX)
    return render_script(spec, profile, search_dir, array=plan)


def submit_search(spec: RunSpec, profile: Profile, jobs: int, *, array: bool | None = None,
                  home: Path | None = None, run_dir: Path | None = None) -> Run:
    """Create a search run of ``jobs`` chains on ``profile`` and submit their first jobs (as one job array
    where :func:`use_array` says so). A failed submission marks every chain failed and raises its message."""
    if spec.kind != "optimize":
        raise ConfigError("--jobs runs one search across many jobs: it needs nnlo submit ... optimize, not train")
    if jobs < 1:
        raise ConfigError(f"--jobs must be 1 or more, got {jobs}")
    arrayed = use_array(profile, jobs, array)
    search_dir, search_id = make_run_dir(spec.name, home, run_dir)
    names = chain_names(profile.scheduler, jobs, None if arrayed else 0)
    (search_dir / LOG_DIR).mkdir()
    (search_dir / CHAINS_DIR).mkdir()
    write_json_atomic(search_dir / SPEC_FILE, spec.to_dict())
    write_state(search_dir, RunState(run_id=search_id, name=spec.name, cluster=profile.name,
                                     scheduler=profile.scheduler, state=QUEUED, chains=names))
    one = chain_spec(spec, search_dir)
    for name in names:
        create_run(one, profile, run_dir=search_dir / CHAINS_DIR / name, participant=name, search_dir=search_dir)
    try:
        if arrayed:
            script = search_dir / ARRAY_SCRIPT
            script.write_text(render_array(spec, profile, search_dir, names))
            script.chmod(0o755)
            sched = get_scheduler(profile.scheduler, search_dir)
            array_id = sched.submit(script, depends_on=None, walltime_s=spec.walltime_s,
                                    cwd=Path(spec.workdir or search_dir))
            now = time.time()
            for name in names:
                task = sched.array_task_id(array_id, int(name[len(CHAIN_PREFIX):]))
                with update_state(search_dir / CHAINS_DIR / name) as st:
                    if st.job(task) is None:  # the task may have started (and recorded itself) already
                        st.jobs.append(JobRecord(job_id=task, submitted_at=now))
        else:
            for name in names:
                chain = search_dir / CHAINS_DIR / name
                submit_job(chain, load_spec(chain), profile, depends_on=None)
    except NnloError as e:
        for name in names:
            with update_state(search_dir / CHAINS_DIR / name) as st:
                if not st.jobs:
                    st.state, st.error = FAILED, str(e)
        raise
    return Run(search_id, search_dir)


def check_joinable(search: Run) -> None:
    """SearchError unless ``search`` is a search run that is still going (or stopped, not done or cancelled)."""
    st = read_state(search.dir)
    if not st.is_search:
        raise SearchError(f"run {search.id} is not a search of many jobs (only a run submitted with --jobs can be "
                          f"joined); submit a new run with nnlo submit --jobs K ... optimize")
    state = search_state(search.dir)[0]
    if state in (DONE, CANCELLED):
        raise SearchError(f"search {search.id} is {state}; nothing to join (submit a new search)")


def joining_spec(search: Run, spec: RunSpec, profile: Profile, *, inner_given: bool) -> RunSpec:
    """The spec of a chain joining ``search`` on ``profile`` (resources from ``spec``), laid out; SearchError
    (one line) for a search that cannot be joined or inner options (``inner_given``) whose trials differ."""
    check_joinable(search)
    base = load_spec(search.dir)
    if inner_given:
        check_search_options(spec.search)
        diff = differences(base, spec)
        if diff:
            raise SearchError(f"the joining chain's options differ from search {search.id}'s: {'; '.join(diff)}; "
                              "give the search's options (or none: --join takes them)")
    else:
        spec = replace(spec, args=list(base.args), config=base.config, search=base.search)
    one = chain_spec(spec, search.dir)
    return replace(one, layout=one.layout_on(profile).record())


def join_search(search: Run, spec: RunSpec, profile: Profile, *, inner_given: bool) -> tuple[str, str]:
    """Add a chain to the search run ``search`` on ``profile`` (its resources in ``spec``) and submit its first
    job; returns (chain name, job id). Refused for a run that is not a search, for a finished or cancelled
    one, and when the inner options given (``inner_given``) differ from the search's in what the trials run."""
    one = joining_spec(search, spec, profile, inner_given=inner_given)
    with update_state(search.dir) as st:
        used = [int(m.group(1)) for c in st.chains if (m := _CHAIN_INDEX.fullmatch(c))]
        name = f"{CHAIN_PREFIX}{max(used, default=-1) + 1}"
        while (search.dir / CHAINS_DIR / name).exists():
            name = f"{CHAIN_PREFIX}{int(name[len(CHAIN_PREFIX):]) + 1}"
        st.chains.append(name)
        (search.dir / CHAINS_DIR / name).mkdir(parents=True)
    chain = create_run(one, profile, run_dir=search.dir / CHAINS_DIR / name, participant=name,
                       search_dir=search.dir)
    try:
        job = submit_job(chain.dir, one, profile, depends_on=None)
    except NnloError as e:
        with update_state(chain.dir) as cst:
            cst.state, cst.error = FAILED, str(e)
        raise
    return name, job


# -- reading ---------------------------------------------------------------------------------------------
def search_state(search_dir: Path) -> tuple[str, str | None]:
    """The search's state and error, from its chains' (see the module's docstring)."""
    st = read_state(search_dir)
    states: list[RunState] = []
    for chain in chain_runs(search_dir, st):
        try:
            states.append(read_state(chain.dir))
        except NnloError as e:
            return FAILED, f"chain {chain.id}: {e}"
    active = [c for c in states if c.state in ACTIVE_STATES]
    if st.state == CANCELLED:
        return CANCELLED, st.error
    if active:
        for s in (RUNNING, RESUBMITTING):
            if any(c.state == s for c in active):
                return s, None
        return QUEUED, None
    if any(c.state == DONE for c in states):
        return DONE, None
    if states and all(c.state == CANCELLED for c in states):
        return CANCELLED, "cancelled"
    errors = [f"{c.run_id}: {c.error}" for c in states if c.state == FAILED and c.error]
    return FAILED, "; ".join(errors)[:600] or "every chain ended without finishing the search"


@dataclass
class TrialCounts:
    """The search's trials: finished (``done``, failed ones included, as ``best.json`` counts them), of which
    ``failed``; ``leased`` to a participant, of which ``running`` (alive); and the budget."""

    done: int | None = None
    failed: int | None = None
    leased: int | None = None
    running: int | None = None
    total: int | None = None
    source: str = ""


_KIND_KEYS = ("kind", "type", "event", "op")
_TRIAL_KEYS = ("id", "trial_id", "tid", "trial")
_HOLDER_KEYS = ("p", "participant")


def journal_counts(folder: Path, running_participants: set[str]) -> TrialCounts | None:
    """Count the trials of the journal in ``folder`` (None when there is none): with the runtime's own reader
    (:mod:`nnlo.optimize.journal`: done = finished, failed included; running = leased and alive; leased =
    running + leases past their expiry), else with :func:`_generic_counts`."""
    if not (Path(folder) / SEARCH_JOURNAL).is_file():
        return None
    try:
        from nnlo.optimize.journal import read_journal, rebuild  # lazy: imports numpy; nnlo status stays light

        records, _ = read_journal(folder, final=False)
        c = rebuild(records).counts(time.time())
        return TrialCounts(done=int(c["done"]), failed=int(c["failed"]), leased=int(c["running"] + c["expired"]),
                           running=int(c["running"]), source=SEARCH_JOURNAL)
    except (ImportError, AttributeError, KeyError, TypeError, ValueError, OSError):
        return _generic_counts(Path(folder) / SEARCH_JOURNAL, running_participants)


def _generic_counts(path: Path, running_participants: set[str]) -> TrialCounts | None:
    """Count trials from a journal of JSON lines without the runtime's reader (a torn or unknown line is
    skipped). A line may wrap its record (``{"crc": ..., "rec": {...}}``); a record's kind is its ``kind``/
    ``type`` word and a trial's last record decides: a result (failed when it says so), a lease
    (``propose``/``lease``/``renew``...), which ``release``/``expire`` undo. Running: leased by a participant
    whose chain has a running job now."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    last: dict[str, tuple[str, dict[str, Any]]] = {}
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("rec"), dict):
            rec = rec["rec"]
        if not isinstance(rec, dict):
            continue
        kind = next((str(rec[k]).lower() for k in _KIND_KEYS if isinstance(rec.get(k), str)), "")
        trial = next((str(rec[k]) for k in _TRIAL_KEYS if isinstance(rec.get(k), (int, str))), None)
        if trial is None or not kind:
            continue
        state = last.get(trial, ("",))[0]
        if any(w in kind for w in ("result", "done", "complete", "finish", "fail")):
            if state not in ("done", "failed"):  # the first result of a trial counts
                last[trial] = ("failed" if _failed(rec, kind) else "done", rec)
        elif any(w in kind for w in ("release", "expire", "requeue", "abandon")):
            if state == "leased":
                last[trial] = ("pool", rec)
        elif (any(w in kind for w in ("propos", "lease", "claim", "start", "assign", "take", "renew"))
              and state not in ("done", "failed")):
            last[trial] = ("leased", rec)
    leased = [r for s, r in last.values() if s == "leased"]
    failed = sum(1 for s, _ in last.values() if s == "failed")
    return TrialCounts(done=failed + sum(1 for s, _ in last.values() if s == "done"), failed=failed,
                       leased=len(leased),
                       running=sum(1 for r in leased
                                   if str(next((r[k] for k in _HOLDER_KEYS if k in r), "")) in running_participants),
                       source=SEARCH_JOURNAL)


def _failed(rec: dict[str, Any], kind: str) -> bool:
    nested = rec.get("trial")
    inner: dict[str, Any] = nested if isinstance(nested, dict) else rec
    status = str(inner.get("status", "")).lower()
    return "fail" in kind or status in ("failed", "error") or inner.get("ok") is False


def csv_counts(path: Path) -> TrialCounts | None:
    """Trials finished and failed from ``trials.csv`` (None when there is none)."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, csv.Error, UnicodeDecodeError):
        return None
    failed = sum(1 for r in rows if str(r.get("status", "")).lower() in ("failed", "error"))
    return TrialCounts(done=len(rows), failed=failed, source=TRIALS_CSV)


def trial_counts(search_dir: Path, spec: RunSpec, running_participants: set[str]) -> TrialCounts:
    """The search's trial counts: from its journal, else from trials.csv, else best.json's count."""
    counts = (journal_counts(Path(search_dir), running_participants)
              or csv_counts(Path(search_dir) / TRIALS_CSV) or TrialCounts())
    if counts.done is None:
        best = _read_json(Path(search_dir) / BEST_FILE)
        if isinstance(best, dict) and isinstance(best.get("trials_done"), int):
            counts.done, counts.source = best["trials_done"], BEST_FILE
    counts.total = spec.search.num_iterations if spec.search is not None else None
    return counts


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# -- cancelling ------------------------------------------------------------------------------------------
def check_cancel_search(search_dir: Path) -> None:
    """Refuse, before anything changes, a cancel some chain's scheduler could not do (see control.py)."""
    for chain in chain_runs(search_dir):
        st = load_state(chain.dir)
        try:
            get_scheduler(st.scheduler, chain.dir).check_cancel([j.job_id for j in st.jobs if j.alive])
        except SchedulerError as e:
            raise SearchError(f"chain {chain.id}: {e}; nothing was cancelled and nothing changed") from None


def cancel_search(search_dir: Path) -> list[str]:
    """End every chain of the search: mark them cancelled, then cancel their queued and running jobs with one
    call per batch system (the local scheduler: one per chain, its queue being the chain's own). Returns
    the job ids cancelled."""
    search_dir = Path(search_dir)
    if search_state(search_dir)[0] == DONE:
        raise SearchError(f"search {search_dir.name} is already done; nothing to cancel")
    with update_state(search_dir) as st:
        st.state, st.error = CANCELLED, "cancelled by the user"
    by_sched: dict[str, list[str]] = {}
    local: list[tuple[Path, list[str]]] = []
    now = time.time()
    for chain in chain_runs(search_dir):
        with update_state(chain.dir) as cst:
            alive = [j for j in cst.jobs if j.alive]
            for j in alive:
                if j.started_at is None:
                    j.status, j.ended_at = JOB_CANCELLED, now
            if cst.state != DONE:
                cst.state, cst.error = CANCELLED, "cancelled by the user"
            sched = cst.scheduler
        ids = [j.job_id for j in alive]
        if not ids:
            continue
        if sched == "local":
            local.append((chain.dir, ids))
        else:
            by_sched.setdefault(sched, []).extend(ids)
    problems = []
    for name, ids in by_sched.items():
        try:
            get_scheduler(name).cancel(ids)
        except NnloError as e:
            problems.append(f"{name}: {e} (cancel job(s) {', '.join(ids)} by hand)")
    for chain_dir, ids in local:
        try:
            get_scheduler("local", chain_dir).cancel(ids)
        except NnloError as e:
            problems.append(f"{chain_dir.name}: {e}")
    if problems:
        raise SearchError(f"search {search_dir.name} is marked cancelled (its queued jobs exit as soon as they "
                          f"start), but {'; '.join(problems)}")
    return [i for ids in by_sched.values() for i in ids] + [i for _, ids in local for i in ids]


def resume_search(search_dir: Path, *, options: list[str] | None = None) -> list[tuple[str, str]]:
    """Start a new chain for every stopped (failed or cancelled) chain of the search; returns (chain, job)."""
    search_dir = Path(search_dir)
    if search_state(search_dir)[0] == DONE:
        raise SearchError(f"search {search_dir.name} is done; submit a new search to search more")
    if options:
        raise SearchError("a search's options cannot change on resume (every chain must run the same trials); "
                          "resume it without options")
    with update_state(search_dir) as st:
        st.state, st.error = QUEUED, None
    out = []
    for chain in chain_runs(search_dir):
        cst = read_state(chain.dir)
        if cst.state in (FAILED, CANCELLED):
            out.append((chain.id, resume_run(chain.dir)))
    return out


def participants_running(search_dir: Path) -> set[str]:
    """The participant names of the chains that have a running job now."""
    out = set()
    for chain in chain_runs(search_dir):
        try:
            st = read_state(chain.dir)
        except NnloError:
            continue
        if any(j.status == "running" for j in st.jobs):
            out.add(st.participant or chain.dir.name)
    return out


__all__ = ["submit_search", "join_search", "search_state", "cancel_search", "resume_search", "trial_counts",
           "TrialCounts", "SearchError", "ARRAY_SCRIPT", "SCRIPT_FILE"]
