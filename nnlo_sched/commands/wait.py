"""``nnlo wait RUN``: block until a run's chain has ended, printing each change of its state; the exit status
says how it ended (0 done, 1 failed or cancelled or still going at --timeout).

It reads the run the way `nnlo status` does (:func:`nnlo_sched.commands.status.collect`), so a run whose
jobs have all left the queue without recording an end is marked failed there and the wait ends: it never
hangs on a lost chain.
"""
from __future__ import annotations

import time
from typing import Any

import click

from nnlo.contract import EXIT_DONE, EXIT_FAILED
from nnlo_sched.state import ACTIVE_STATES


def _line(view: dict[str, Any]) -> str:
    from nnlo_sched.commands.status import _fmt_jobs, _fmt_progress

    text = f"{view['run_id']}: {view['state']}, jobs {_fmt_jobs(view) or '-'}"
    prog = _fmt_progress(view["progress"])
    return text + (f", {prog}" if prog and prog != "-" else "")


@click.command("wait")
@click.argument("run")
@click.option("--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Give up after this long (exit 1; the run goes on).")
@click.option("--every", type=click.FloatRange(min=0.2), default=2.0, show_default=True, metavar="SECONDS",
              help="Seconds between looks at the run.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but the final line.")
def wait_command(run: str, timeout: float | None, every: float, quiet: bool) -> None:
    """Wait until RUN's chain has ended (done, failed or cancelled), printing each change of state.

    \b
    Exit status: 0 when the run is done; 1 when it failed or was cancelled, or is still going after
    --timeout (the run itself is left alone).
    """
    from nnlo_sched.commands.status import collect

    start = time.monotonic()
    last = ""
    while True:
        view = collect(run)[0]
        line = _line(view)
        ended = view["state"] not in ACTIVE_STATES
        if line != last and (not quiet or ended):
            click.echo(line)
            last = line
        if ended:
            if view["state"] != "done":
                if view.get("error"):
                    click.echo(f"nnlo: error: run {view['run_id']} {view['state']}: {view['error']}", err=True)
                raise SystemExit(EXIT_FAILED)
            raise SystemExit(EXIT_DONE)
        if timeout is not None and time.monotonic() - start >= timeout:
            click.echo(f"nnlo: error: run {view['run_id']} is still {view['state']} after {timeout:g} s; "
                       f"wait again with `nnlo wait {run}` or follow it with `nnlo status {run} --watch`", err=True)
            raise SystemExit(EXIT_FAILED)
        time.sleep(every)


command = wait_command
