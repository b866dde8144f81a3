"""``nnlo plot RUN``: PNG plots of a run's learning curves, optimization trials and per-rank utilisation."""
from __future__ import annotations

from pathlib import Path

import click

from nnlo.contract import HISTORY_FILE, TRIALS_JSON
from nnlo.errors import ConfigError
from nnlo_sched.runs import find_run


@click.command("plot")
@click.argument("run", metavar="RUN_OR_DIR")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the PNG files [default: RUN/plots].")
def plot_command(run: str, out: Path | None) -> None:
    """Write loss/metric curves (history.json), best fom vs trials and each parameter vs fom (trials.json),
    and per-rank utilisation (the --timeline trace) of RUN as PNG files."""
    from nnlo.observe.plots import plot_run  # lazy: matplotlib, numpy
    from nnlo.optimize.surrogate_plot import plot_surrogate  # lazy: matplotlib, scikit-optimize

    run_dir = resolve_run_dir(run)
    problems: list[str] = []
    written = plot_run(run_dir, out, problems, extra=[("the partial dependence (objective.png)", plot_surrogate)])
    for path in written:
        click.echo(str(path))
    for problem in problems:
        click.echo(f"nnlo plot: {problem}", err=True)
    if problems and not written:
        raise click.ClickException(f"no plot of {run_dir} could be drawn ({problems[0]})")
    if not written:
        raise ConfigError(
            f"nothing to plot in {run_dir}: no {HISTORY_FILE}, {TRIALS_JSON} or --timeline trace found there"
        )


def resolve_run_dir(value: str) -> Path:
    """A directory as given (a run directory, or any output directory of nnlo train/optimize), else a run
    id or unique id prefix known to ``nnlo status`` (looked up by :func:`nnlo_sched.runs.find_run`)."""
    path = Path(value).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise click.BadParameter(f"{value} is a file; pass the run's directory", param_hint="RUN_OR_DIR")

    try:
        return Path(find_run(value).dir)
    except Exception as e:  # noqa: BLE001 - RunNotFound and friends carry a one-line message
        raise click.BadParameter(str(e), param_hint="RUN_OR_DIR") from None


command = plot_command
