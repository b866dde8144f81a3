"""``nnlo submit``: lay a ``train``/``optimize`` run out on a cluster and submit it (or ``--dry-run`` it).

The inner command and its options come last. They are parsed once, here, by the inner command's own parser
(:mod:`nnlo_sched.inner`) and stored typed in the run spec beside the verbatim argv; then everything a job
would find wrong in its first second is checked (:mod:`nnlo_sched.checks`) before anything is queued.
The checks and the submission are :func:`nnlo_sched.api.preflight` and :func:`nnlo_sched.api.submit`, the
same functions a Python script calls; with ``--dry-run`` this command prints the script and the submit command
without touching the filesystem.
"""
from __future__ import annotations

import difflib
import shlex
import sys
from pathlib import Path

import click

from nnlo.contract import CHAINS_DIR, ENV_HOME
from nnlo.errors import ConfigError
from nnlo_sched import api
from nnlo_sched.inner import SCRIPT, InnerCommand, InnerOptionError, parse_inner, parser
from nnlo_sched.options import KINDS, declared
from nnlo_sched.params import TypedCommand, typed_args
from nnlo_sched.runs import Run, chain_runs, find_run
from nnlo_sched.search import (
    check_joinable,
    join_search,
)
from nnlo_sched.spec import DEFAULT_MAX_RESUBMITS, DEFAULT_MAX_RETRIES


def _typed_before(kind_and_args: int) -> list[str]:
    """The submit options as typed: every raw argument before the last ``kind_and_args`` ones."""
    raw = typed_args(click.get_current_context())
    return raw[: max(0, len(raw) - kind_and_args)]


def _command_line(words: list[str]) -> str:
    return shlex.join(["nnlo", "submit", *words])


def _inner_option_names(kind: str) -> set[str]:
    params = parser(kind).params
    return {opt for p in params for opt in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}


def _guess_kind(args: tuple[str, ...]) -> str:
    """``optimize`` when some option of ``args`` exists only there, else ``train``."""
    names = {a.split("=", 1)[0] for a in args if a.startswith("-")}
    only_optimize = _inner_option_names("optimize") - _inner_option_names("train")
    return "optimize" if names & only_optimize else "train"


def _check_kind(word: str, args: tuple[str, ...]) -> None:
    """``word`` must be train or optimize; otherwise say exactly what to type.

    An option before the kind is one of three mistakes: a misspelt submit option (click's "no such option" with
    the options it resembles, as every command says it), an option of the run put before its kind (the command
    line with it moved after the kind), or a forgotten kind (the command line with the kind put in).
    """
    if word in (*KINDS, SCRIPT):
        return
    before = _typed_before(1 + len(args))
    if word.startswith("-"):
        name = word.split("=", 1)[0] if word.startswith("--") else word
        if name not in _inner_option_names("train") | _inner_option_names("optimize"):
            raise click.NoSuchOption(name, possibilities=difflib.get_close_matches(name, _submit_option_names()),
                                     ctx=click.get_current_context())
        later = next((i for i, a in enumerate(args) if a in KINDS), None)
        if later is not None:  # the kind comes after: the run's option goes after it
            kind = args[later]
            moved, kept, _ = _move_submit_options(kind, (word, *args[:later]))
            fixed = _command_line([*before, *moved, kind, *kept, *args[later + 1:]])
            raise ConfigError(f"{name} is an option of nnlo {kind}, not of nnlo submit; put it after the word "
                              f"{kind}: {fixed}")
    guess = _guess_kind((word, *args))
    if word.startswith("-"):
        moved, kept, _ = _move_submit_options(guess, (word, *args))
        fixed = _command_line([*before, *moved, guess, *kept])
        raise ConfigError(f"nnlo submit needs the word train or optimize before the run's options "
                          f"({word} is not an option of nnlo submit); type: {fixed}")
    moved, kept, _ = _move_submit_options(guess, args)
    fixed = _command_line([*before, *moved, guess, *kept])
    raise ConfigError(f"{word!r} is not a run kind (train or optimize); type: {fixed}")


def _submit_option_names() -> list[str]:
    """Every option name of nnlo submit (what a misspelt one is compared with)."""
    return [o for p in submit_command.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)]


def _submit_option_takes_value(option: str) -> bool | None:
    """Whether ``option`` of nnlo submit takes a value (None: not an option of nnlo submit)."""
    for p in submit_command.params:
        if isinstance(p, click.Option) and option in (*p.opts, *p.secondary_opts):
            return not (p.is_flag or p.count)
    return None


def _move_submit_options(kind: str, args: tuple[str, ...]) -> tuple[list[str], list[str], list[str]]:
    """Split ``args`` into (submit options found among them, with their values; what stays; their names)."""
    inner = _inner_option_names(kind)
    moved: list[str] = []
    kept: list[str] = []
    names: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name = a.split("=", 1)[0] if a.startswith("--") else a
        takes = None if name in inner else _submit_option_takes_value(name)
        if a == "--":
            kept.extend(args[i:])
            break
        if takes is None:
            kept.append(a)
            i += 1
            continue
        names.append(name)
        width = 2 if takes and "=" not in a and i + 1 < len(args) else 1
        moved.extend(args[i:i + width])
        i += width
    return moved, kept, names


def _parse_inner(kind: str, args: tuple[str, ...]) -> InnerCommand:
    """The inner command, typed; a submit option placed after ``train``/``optimize`` is named as such."""
    if kind == SCRIPT:  # the file, then the script's own words, kept verbatim
        return parse_inner(kind, args)
    try:
        inner = parse_inner(kind, args)
    except InnerOptionError as e:
        moved, kept, names = _move_submit_options(kind, args)
        if e.option in names:
            fixed = _command_line([*_typed_before(1 + len(args)), *moved, kind, *kept])
            which = ", ".join(names)
            raise ConfigError(
                f"{which} {'is an option' if len(names) == 1 else 'are options'} of nnlo submit, not of {kind}; "
                f"put {'it' if len(names) == 1 else 'them'} before the word {kind}: {fixed}"
            ) from None
        other = "optimize" if kind == "train" else "train"
        if e.option in _inner_option_names(other) - _inner_option_names(kind):
            fixed = _command_line([*_typed_before(1 + len(args)), other, *args])
            raise ConfigError(f"{e.option} is an option of nnlo {other}, not of {kind}; type: {fixed}") from None
        raise
    if inner.ranks is not None:
        click.echo("nnlo: note: the inner -n is ignored by submit; the job's size comes from "
                   "--workers/--blocks/--nodes", err=True)
    return inner


@click.command(
    "submit",
    cls=TypedCommand,  # a usage error prints the corrected command line
    context_settings=dict(ignore_unknown_options=True, allow_interspersed_args=False),
)
@declared("--cluster")
@click.option("--name", default=None, help="Run and job name (default: --trial-name, else the model module's "
                                           "get_name(), else the model file's name, as train/optimize name runs).")
@declared("--walltime")
@declared("--queue")
@click.option("--account", "-A", default=None, help="Project to charge (bsub -P, #PBS -A, --account).")
@declared("--nodes")
@declared("--workers")
@declared("--blocks")
@declared("--gpus-per-worker")
@declared("--constraint")
@click.option("--max-resubmits", type=int, default=DEFAULT_MAX_RESUBMITS, show_default=True,
              help="Jobs the checkpoint-restart chain may add after the first.")
@click.option("--max-retries", type=int, default=DEFAULT_MAX_RETRIES, show_default=True,
              help="Jobs retried from the newest checkpoint after a rank was killed (signal, OOM, lost node); "
                   "a Python error or bad input is never retried.")
@click.option("--directive", "directives", multiple=True,
              help="Extra scheduler directive, e.g. --directive '--mail-type=END' (repeatable).")
@click.option("--run-dir", type=str, default=None, metavar="DIR",
              callback=lambda c, p, v: None if v is None else Path(v),
              help=f"Run directory (default: chosen under ${ENV_HOME} or ./nnlo-runs).")
@click.option("--jobs", "-j", "jobs", type=click.IntRange(min=1, max=1000), default=None, metavar="K",
              help="One search across K concurrent chains of jobs sharing its state (optimize only); each chain "
                   "resubmits itself after its walltime.")
@click.option("--array/--no-array", "array", default=None,
              help="Start the --jobs chains as one job array (default: where the scheduler has arrays; PBS "
                   "needs K >= 2) or as K separate jobs.")
@click.option("--join", "join", default=None, metavar="RUN",
              help="Add one chain on --cluster (another partition or cluster seeing the same file system) to "
                   "the search run RUN; the optimize options, if given, must match the search's.")
@click.option("--overwrite", is_flag=True,
              help="With --run-dir: a folder holding an earlier run that has stopped is deleted first (its "
                   "checkpoints, logs and records); without it such a folder is refused.")
@click.option("--dry-run", is_flag=True, help="Print the batch script and the submit command; change nothing.")
@click.option("--no-check", is_flag=True,
              help="Skip the checks of the model, data, --space and --restore paths before queueing (for "
                   "paths that only the compute nodes see).")
@click.argument("kind", metavar="{train|optimize|script FILE.py}", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def submit_command(
    cluster: str | None,
    name: str | None,
    walltime: int,
    queue: str | None,
    account: str | None,
    nodes: int | None,
    workers: int | None,
    blocks: int | None,
    gpus_per_worker: float | None,
    constraint: str | None,
    max_resubmits: int,
    max_retries: int,
    directives: tuple[str, ...],
    run_dir: Path | None,
    jobs: int | None,
    array: bool | None,
    join: str | None,
    overwrite: bool,
    dry_run: bool,
    no_check: bool,
    kind: str | None,
    args: tuple[str, ...],
) -> None:
    """Submit `nnlo train ...`, `nnlo optimize ...` or your own script as a batch job on a cluster.

    `script FILE.py [ARGS...]` runs FILE.py on every rank of each job of the chain: nnlo.train and
    nnlo.optimize inside it checkpoint into the run, resume in the next job and stop before the deadline
    (exit 75: the chain resubmits); the job's size comes from --workers/--nodes as for train.

    \b
    Examples:
      nnlo submit --cluster summit -A ABC123 --nodes 10 -t 2h train --model examples/digits_torch.py \\
          --train examples/data/digits/train.list --val examples/data/digits/val.list
      nnlo submit --cluster daint -A s123 --blocks 4 --dry-run optimize --block-size 3 --model examples/branin.py
      nnlo submit --cluster local --workers 2 --dry-run train --model examples/digits_torch.py \\
          --train examples/data/digits/train.list --val examples/data/digits/val.list
      nnlo submit --cluster daint -A s123 --jobs 4 -t 2h optimize --model examples/branin.py --num-iterations 200
      nnlo submit --join SEARCH --cluster daint-mc -A s123 -t 4h
      nnlo submit --cluster daint -A s123 --workers 8 -t 2h script examples/train_script.py --lr 0.01
    """
    inner_given = kind is not None
    if join is not None:
        _check_join_options(jobs, array, run_dir, kind)
        search_run = _find_search(join)
    elif kind is None:
        raise ConfigError(f"nnlo submit needs the word train or optimize and the run's options; type: "
                          f"{_command_line([*_typed_before(0), 'optimize', '--model', 'MODEL.py'])}")
    if array is not None and jobs is None:
        raise ConfigError(f"--{'' if array else 'no-'}array goes with --jobs K (the chains of one search)")
    if kind is None:  # --join without options: the search's own typed run
        base = search_run.spec
        kind, args, inner = base.kind, tuple(base.args), base.inner
    else:
        _check_kind(kind, args)
        inner = _parse_inner(kind, args)
    no_check = no_check or not inner.check  # --no-check after the run kind means the same
    if not cluster:
        fixed = _command_line([*_typed_before(1 + len(args)), "--cluster", "NAME", kind, *args])
        raise ConfigError(f"nnlo submit needs a cluster (nnlo clusters lists them); type: {fixed}")
    spec = api.spec(kind, args, cluster, name=name, walltime=walltime, queue=queue, account=account, nodes=nodes,
                    workers=workers, blocks=blocks, gpus_per_worker=gpus_per_worker, constraint=constraint,
                    max_resubmits=max_resubmits, max_retries=max_retries, directives=directives, inner=inner)

    def note(text: str) -> None:
        click.echo(f"nnlo: note: {text}", err=True)

    if not dry_run and join is None:  # the one path a Python script takes too: checks, then the chain(s)
        run = api.submit(spec, run_dir=run_dir, check=not no_check, jobs=jobs, array=array, overwrite=overwrite,
                         on_note=note)
        if jobs is None:
            click.echo(f"submitted run {run.id} as job {run.job_id} ({run.dir})")
        else:
            shown = ", ".join(f"{c.dir.name}={c.job_id}" for c in chain_runs(run.dir))
            click.echo(f"submitted search {run.id} as {jobs} chain(s): {shown} ({run.dir})")
        sys.stdout.flush()
        return

    found = api.preflight(spec, run_dir=run_dir, check=not no_check, jobs=jobs, array=array, overwrite=overwrite,
                          join=search_run if join is not None else None, inner_given=inner_given)
    for text in found.notes:
        note(text)
    if found.earlier is not None and dry_run:
        note(f"--overwrite: the earlier run {found.earlier} in {found.run_dir} would be deleted")
    if not dry_run:  # --join: add the chain
        chain, job = join_search(search_run, spec, found.profile, inner_given=inner_given)
        click.echo(f"joined search {search_run.id}: chain {chain} on {found.profile.name} as job {job} "
                   f"({search_run.dir / CHAINS_DIR / chain})")
        sys.stdout.flush()
        return
    click.echo(found.plan.text(), nl=False)


def _check_join_options(jobs: int | None, array: bool | None, run_dir: Path | None, kind: str | None) -> None:
    if jobs is not None or array is not None:
        raise ConfigError("--join adds one chain to a search; leave out --jobs/--array (join again for more)")
    if run_dir is not None:
        raise ConfigError("--join adds a chain inside the search's run directory; leave out --run-dir")
    if kind in ("train", SCRIPT):
        raise ConfigError("--join adds a chain to a search (optimize); a training cannot be joined")


def _find_search(ref: str) -> Run:
    run = find_run(ref, changes=True)
    check_joinable(run)
    return run


command = submit_command
