"""``nnlo submit``: lay a ``train``/``optimize`` run out on a cluster and submit it (or ``--dry-run`` it).

The inner command and its options come last and are kept verbatim in the run spec; the job's runtime entry
(``python -m nnlo_sched run RUN_DIR``) re-parses them inside the allocation. Submission itself (run
directory, state, chaining) belongs to :mod:`nnlo_sched.runs`; this command builds the spec and the layout,
and with ``--dry-run`` prints the script and the submit command without touching the filesystem.
"""
from __future__ import annotations

import importlib
import inspect
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from nnlo_sched.commands.layout import parse_gpus, parse_walltime_option

SCRIPT_NAME = "job.sh"


def _default_name(kind: str, args: tuple[str, ...]) -> str:
    """The model file's stem (``--model examples/mnist.py`` -> ``mnist``), else ``nnlo-<kind>``."""
    for i, a in enumerate(args):
        if a == "--model" and i + 1 < len(args):
            return Path(args[i + 1]).stem or f"nnlo-{kind}"
        if a.startswith("--model="):
            return Path(a.split("=", 1)[1]).stem or f"nnlo-{kind}"
    return f"nnlo-{kind}"


def _check_inner(kind: str, args: tuple[str, ...]) -> None:
    """Parse the inner options with the inner command itself, so a typo fails now and not in the queue."""
    try:
        module = importlib.import_module(f"nnlo_sched.commands.{kind}")
    except ImportError:
        return
    command = getattr(module, f"{kind}_command", None)
    if command is None:
        return
    try:
        command.make_context(f"nnlo {kind}", list(args))
    except click.exceptions.Exit:
        return
    except click.ClickException as e:
        raise click.UsageError(f"{kind} options: {e.format_message()}") from None


def _warn_inner_np(args: tuple[str, ...]) -> None:
    for flag in ("--dry-run", "--cluster", "--walltime", "--account", "--run-dir"):
        if flag in args:
            raise click.UsageError(
                f"{flag} comes after the inner command, where it belongs to train/optimize; "
                f"put it before: nnlo submit ... {flag} ... train|optimize [options]"
            )
    if any(a in ("-n", "--np") or a.startswith(("--np=", "-n=")) for a in args):
        click.echo(
            "nnlo: note: the inner -n is ignored by submit; the job's size comes from --workers/--blocks/--nodes",
            err=True,
        )


@click.command(
    "submit",
    context_settings=dict(ignore_unknown_options=True, allow_interspersed_args=False),
)
@click.option("--cluster", "-c", required=True, help="Cluster profile (nnlo clusters lists them).")
@click.option("--name", default=None, help="Run and job name (default: the model file's name).")
@click.option("--walltime", "-t", default="1h", show_default=True, callback=parse_walltime_option,
              help="Per job: MM, HH:MM, HH:MM:SS, D-HH:MM:SS, 90m, 2h. Longer runs resubmit themselves.")
@click.option("--queue", "-q", default=None, help="Queue / partition (default: the profile's).")
@click.option("--account", "-A", default=None, help="Project to charge (bsub -P, #PBS -A, --account).")
@click.option("--nodes", type=int, default=None, help="Nodes; alone, fills them with as many workers/blocks as fit.")
@click.option("--workers", type=int, default=None, help="Logical workers (training).")
@click.option("--blocks", type=int, default=None, help="Optimization blocks.")
@click.option("--gpus-per-worker", default=None, callback=parse_gpus,
              help="GPUs per worker rank: 1, 2, ..., 0.5 (2 ranks share a GPU); 0 = CPU only.")
@click.option("--constraint", "-C", default=None, help="Node feature (Slurm --constraint), e.g. a100.")
@click.option("--max-resubmits", type=int, default=10, show_default=True,
              help="Jobs the checkpoint-restart chain may add after the first.")
@click.option("--max-retries", type=int, default=2, show_default=True,
              help="Jobs retried from the newest checkpoint after a rank was killed (signal, OOM, lost node); "
                   "a Python error or bad input is never retried.")
@click.option("--directive", "directives", multiple=True,
              help="Extra scheduler directive, e.g. --directive '--mail-type=END' (repeatable).")
@click.option("--run-dir", type=click.Path(path_type=Path), default=None,
              help="Run directory (default: chosen under $NNLO_HOME or ./nnlo-runs).")
@click.option("--dry-run", is_flag=True, help="Print the batch script and the submit command; change nothing.")
@click.argument("kind", type=click.Choice(["train", "optimize"]))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def submit_command(
    cluster: str,
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
    dry_run: bool,
    kind: str,
    args: tuple[str, ...],
) -> None:
    """Submit `nnlo train ...` or `nnlo optimize ...` as a batch job on a cluster.

    \b
    Examples:
      nnlo submit --cluster summit -A ABC123 --nodes 10 -t 2h train --model m.py --train t.list --val v.list
      nnlo submit --cluster daint -A s123 --blocks 4 --dry-run optimize --block-size 3 --model m.py
      nnlo submit --cluster local --workers 2 --dry-run train --model m.py --train t.list --val v.list
    """
    from nnlo_sched.layout import layout_for_spec, shape_from_args
    from nnlo_sched.profiles import load_profile
    from nnlo_sched.render import job_name, render_script
    from nnlo_sched.schedulers import get_scheduler
    from nnlo_sched.spec import RunSpec

    profile = load_profile(cluster)
    _warn_inner_np(args)
    _check_inner(kind, args)
    spec = RunSpec(
        kind=kind,
        args=list(args),
        cluster=profile.name,
        name=name or _default_name(kind, args),
        walltime_s=walltime,
        queue=queue,
        account=account,
        nodes=nodes,
        workers=workers,
        blocks=blocks,
        gpus_per_worker=gpus_per_worker,
        constraint=constraint,
        max_resubmits=max_resubmits,
        max_retries=max_retries,
        directives=list(directives),
        workdir=os.getcwd(),
    )
    queue_obj = profile.queue(queue)
    if queue_obj is not None and not queue_obj.chaining and max_resubmits > 0:
        raise click.UsageError(
            f"queue {queue_obj.name!r} of {profile.name} forbids job chaining; "
            "pass --max-resubmits 0 or use another --queue"
        )
    layout = layout_for_spec(spec, profile, shape_from_args(kind, args))
    spec.layout = layout.to_dict(ranks=False)

    if dry_run:
        shown_dir = run_dir or Path(os.environ.get("NNLO_HOME") or "nnlo-runs") / job_name(spec.name, "local")
        shown_dir = shown_dir if shown_dir.is_absolute() else Path.cwd() / shown_dir
        script = render_script(spec, profile, shown_dir)
        argv = get_scheduler(profile.scheduler, shown_dir).submit_argv(shown_dir / SCRIPT_NAME)
        click.echo(script, nl=False)
        click.echo("# --- dry run: nothing was written or submitted ---")
        click.echo(f"# run directory: {shlex.quote(str(shown_dir))}"
                   + ("" if run_dir else " (the real one gets a unique name at submission)"))
        click.echo(f"# submit command: {shlex.join(argv)}")
        return
    _submit(spec, profile, run_dir)


def _submit(spec: Any, profile: Any, run_dir: Path | None) -> None:
    try:
        runs = importlib.import_module("nnlo_sched.runs")
    except ModuleNotFoundError as e:
        if e.name != "nnlo_sched.runs":
            raise
        raise click.UsageError(
            "submission is not available in this installation (nnlo_sched.runs is missing); "
            "use --dry-run to print the script"
        ) from None
    submit_run = getattr(runs, "submit_run")
    kwargs: dict[str, Any] = {}
    if run_dir is not None:
        if "run_dir" not in inspect.signature(submit_run).parameters:
            raise click.UsageError("--run-dir is not supported by this installation's submit; leave it out")
        kwargs["run_dir"] = run_dir
    run = submit_run(spec, profile, **kwargs)
    run_id = getattr(run, "id", None) or getattr(run, "run_id", None) or run
    job = getattr(run, "job_id", None)
    where = getattr(run, "path", None) or getattr(run, "run_dir", None)
    click.echo(f"submitted run {run_id}" + (f" as job {job}" if job else "") + (f" ({where})" if where else ""))
    sys.stdout.flush()


command = submit_command
