"""The ``nnlo`` command line.

Each sub-command lives in its own module under ``nnlo_sched/commands/`` and is imported only when it is
run (``nnlo --help`` lists them from :data:`COMMANDS` without importing any), so ``nnlo --help`` and
``nnlo status`` never import torch or MPI. Errors a user can act on
(:class:`nnlo.errors.NnloError`, :class:`nnlo.roles.RoleError`) and click's usage errors print as one line
``nnlo: error: <problem>; <fix>``, never a traceback. An unexpected exception (a bug) is the last resort:
one line, exit 1, and its traceback written to a file the line names.
"""
from __future__ import annotations

import importlib
import signal
import sys
import tempfile
import time
import traceback

import click

from nnlo.contract import EXIT_BAD_INPUT, EXIT_DONE, EXIT_FAILED, signal_status
from nnlo.errors import NnloError
from nnlo.roles import RoleError

# name -> (module defining a click command called ``command``, one-line help; None: internal, not listed)
COMMANDS: dict[str, tuple[str, str | None]] = {
    "train": ("nnlo_sched.commands.train", "Train one model with a master and workers (or all-reduce)."),
    "optimize": ("nnlo_sched.commands.optimize", "Search hyperparameters with a coordinator and blocks."),
    "layout": ("nnlo_sched.commands.layout", "Show the resource layout of a run on a cluster."),
    "clusters": ("nnlo_sched.commands.clusters", "List cluster profiles, or show one."),
    "submit": ("nnlo_sched.commands.submit", "Submit a run as a batch job (or --dry-run to print it)."),
    "status": ("nnlo_sched.commands.status", "Show runs, their jobs and progress."),
    "wait": ("nnlo_sched.commands.wait", "Wait until a run's chain has ended (exit 0: done)."),
    "cancel": ("nnlo_sched.commands.control", "Cancel a run and its queued successors."),
    "preempt": ("nnlo_sched.commands.control", "Stop a run's job now with a checkpoint; its successor resumes."),
    "logs": ("nnlo_sched.commands.control", "Show or follow a run's logs."),
    "resume": ("nnlo_sched.commands.control", "Resubmit a stopped run from its newest checkpoint."),
    "job": ("nnlo_sched.commands.job", None),  # chain bookkeeping inside a batch job
    "run": ("nnlo_sched.commands.run", None),  # a run's payload on every rank (batch scripts, -n)
    "timeline": ("nnlo_sched.commands.timeline", "Merge a run's per-rank trace into one Chrome trace."),
    "plot": ("nnlo_sched.commands.plot", "Write PNG plots of a run's history, trials and timeline."),
}


class LazyGroup(click.Group):
    """Lists :data:`COMMANDS` and imports a command's module only when that command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``nnlo --help``, from :data:`COMMANDS` alone (no command module is imported)."""
        rows = [(name, short) for name, (_, short) in COMMANDS.items() if short is not None]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module_name, short = COMMANDS[name]
        module = importlib.import_module(module_name)
        cmd: click.Command = getattr(module, name.replace("-", "_") + "_command", None) or module.command
        if cmd.short_help is None:
            cmd.short_help = short
        cmd.hidden = short is None
        return cmd


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="nnlo", prog_name="nnlo")
def cli() -> None:
    """nnlo: distributed training and hyperparameter search across an HPC allocation.

    \b
    Typical use:
      nnlo train -n 3 --model examples/digits_torch.py --train examples/data/digits/train.list \\
          --val examples/data/digits/val.list                                             # here
      nnlo submit --cluster summit ... train ...                                          # on a cluster
      nnlo status                                                                         # follow runs
    """


def main(argv: list[str] | None = None) -> None:
    try:
        rv = cli.main(args=argv, prog_name="nnlo", standalone_mode=False)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(signal_status(signal.SIGINT))
    except click.ClickException as e:
        click.echo(f"nnlo: error: {click_message(e, sys.argv[1:] if argv is None else argv)}", err=True)
        sys.exit(EXIT_BAD_INPUT if isinstance(e, click.UsageError) else e.exit_code)
    except (NnloError, RoleError) as e:
        click.echo(f"nnlo: error: {one_line(str(e))}", err=True)
        sys.exit(getattr(e, "exit_code", EXIT_BAD_INPUT))
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(signal_status(signal.SIGINT))
    except SystemExit:
        raise
    except BrokenPipeError:
        sys.exit(EXIT_DONE)
    except Exception as e:  # noqa: BLE001 - the last resort: a bug still gets one line and a report, not a traceback
        click.echo(f"nnlo: error: internal error ({type(e).__name__}: {one_line(str(e), 200)}); "
                   f"{_write_report(argv)}", err=True)
        sys.exit(EXIT_FAILED)


def one_line(text: str, limit: int = 1000) -> str:
    """``text`` on one line (an error message must never span several)."""
    return " ".join(text.split())[:limit]


def click_message(e: click.ClickException, argv: list[str]) -> str:
    """A click error as one line that names the problem and where help is: ``<problem>; see `nnlo X --help```."""
    msg = one_line(e.format_message()).rstrip(".")
    if isinstance(e, click.UsageError):
        ctx = getattr(e, "ctx", None)
        words = [a for a in argv if not a.startswith("-")][:1]
        path = ctx.command_path if ctx is not None else "nnlo" + (f" {words[0]}" if words and words[0] in COMMANDS
                                                                  else "")
        msg += f"; see `{path} --help`"
    return msg


def _write_report(argv: list[str] | None) -> str:
    """Write the traceback of the exception being handled to a file; say where (or that it could not be)."""
    text = f"nnlo {' '.join(sys.argv[1:] if argv is None else argv)}\n{time.ctime()}\n{traceback.format_exc()}"
    try:
        fd, path = tempfile.mkstemp(prefix="nnlo-error-", suffix=".txt")
        with open(fd, "w") as f:
            f.write(text)
    except OSError:
        return "this is a bug in nnlo: please report it with the command line that gave it"
    return f"this is a bug in nnlo: please report it with the details written to {path}"


if __name__ == "__main__":
    main()
