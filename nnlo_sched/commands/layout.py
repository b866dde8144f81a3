"""``nnlo layout``: how a run would sit on a cluster (nodes, ranks, roles, devices, launch line)."""
from __future__ import annotations

import json

import click

from nnlo.errors import ConfigError
from nnlo_sched import api
from nnlo_sched.layout import summary
from nnlo_sched.options import declared


def pick_cluster(option: str | None, positional: str | None, command: str) -> str:
    """The cluster named by ``--cluster`` or as the first word (``nnlo layout summit``); both must agree."""
    if option and positional and option != positional:
        raise ConfigError(f"two clusters named ({option!r} and {positional!r}); "
                          f"name one: nnlo {command} --cluster {option} ...")
    name = option or positional
    if not name:
        raise ConfigError(f"name the cluster: nnlo {command} --cluster NAME ... (nnlo clusters lists them)")
    return name


@click.command("layout")
@click.argument("cluster_word", metavar="[CLUSTER]", required=False)
@declared("--cluster")
@declared("--constraint")
@declared("--workers")
@declared("--nodes")
@declared("--gpus-per-worker")
@declared("--n-masters")
@declared("--n-processes")
@declared("--mode", default=None)  # none named: the shape follows --n-masters (0: all-reduce)
@declared("--blocks")
@declared("--block-size")
@declared("--block-sizes")
@declared("--n-fold", default=None)  # given: a search's layout
@declared("--proposers", default=None)  # given: a search's layout
@declared("--walltime")
@declared("--queue")
@click.option("--json", "as_json", is_flag=True, help="Print the full structure, one entry per rank.")
def layout_command(
    cluster_word: str | None,
    cluster: str | None,
    constraint: str | None,
    workers: int | None,
    nodes: int | None,
    gpus_per_worker: float | None,
    n_masters: int,
    n_processes: int,
    mode: str | None,
    blocks: int | None,
    block_size: int | None,
    block_sizes: tuple[int, ...] | None,
    n_fold: int | None,
    proposers: int | None,
    walltime: int,
    queue: str | None,
    as_json: bool,
) -> None:
    """Show where every rank of a run would go on CLUSTER, and how it would be launched.

    \b
    Examples:
      nnlo layout --cluster summit --workers 11
      nnlo layout summit --workers 11                    # the same
      nnlo layout --cluster cscs -C mc --nodes 2        # the CPU-only XC40 nodes
      nnlo layout --cluster summit --nodes 4608          # fill the machine
      nnlo layout --cluster cscs -C mc --nodes 2 --blocks 3 --block-size 6 --n-fold 2   # a 2-fold search
      nnlo layout --cluster local --block-sizes 6,6,3,3 --proposers 2
    """
    layout = api.layout(pick_cluster(cluster, cluster_word, "layout"), workers=workers, blocks=blocks, nodes=nodes,
                        gpus_per_worker=gpus_per_worker, walltime=walltime, queue=queue, constraint=constraint,
                        mode=mode, n_masters=n_masters, n_processes=n_processes, block_size=block_size,
                        n_fold=n_fold, block_sizes=block_sizes, proposers=proposers)
    if as_json:
        click.echo(json.dumps(layout.to_dict(ranks=True), indent=1))
    else:
        click.echo(summary(layout))


command = layout_command
