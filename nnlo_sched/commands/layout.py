"""``nnlo layout``: how a run would sit on a cluster (nodes, ranks, roles, devices, launch line)."""
from __future__ import annotations

import json

import click

from nnlo.config import MODES
from nnlo.errors import ConfigError
from nnlo_sched import api
from nnlo_sched.layout import summary
from nnlo_sched.params import parse_block_sizes_option, parse_gpus, parse_walltime_option


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
@click.option("--cluster", "-c", default=None,
              help="Cluster profile (nnlo clusters lists them); may also be given as the first word.")
@click.option("--constraint", "-C", default=None,
              help="Node type (Slurm --constraint), e.g. mc on cscs: its nodes' cores and GPUs.")
@click.option("--workers", type=int, default=None, help="Logical workers (training).")
@click.option("--nodes", type=int, default=None,
              help="Nodes to fill with as many workers/blocks as fit (or to spread the workers over).")
@click.option("--gpus-per-worker", default=None, callback=parse_gpus,
              help="GPUs per worker rank: 1, 2, ... or 0.5 for 2 ranks sharing a GPU; 0 = CPU only.")
@click.option("--n-masters", type=int, default=1, show_default=True,
              help="0 = all-reduce, 1 = one master, M > 1 = an uber-master over M-1 masters.")
@click.option("--n-processes", type=int, default=1, show_default=True, help="Ranks per worker (all-reduce group).")
@click.option("--mode", type=click.Choice(MODES), default=None,
              help="Training mode; 'allreduce' means --n-masters 0.")
@click.option("--blocks", type=int, default=None, help="Optimization blocks.")
@click.option("--block-size", type=int, default=None, help="Ranks per optimization block.")
@click.option("--block-sizes", default=None, callback=parse_block_sizes_option,
              help="Heterogeneous blocks: the ranks of each block, e.g. 6,6,3,3 (instead of --block-size).")
@click.option("--n-fold", type=int, default=None, help="Fold groups per block.")
@click.option("--proposers", type=int, default=None,
              help="Proposer ranks of an optimization (P > 1 adds P ranks after the coordinator).")
@click.option("--walltime", "-t", default=None, callback=parse_walltime_option,
              help="Checked against the queue's limit: MM, HH:MM:SS, D-HH:MM:SS, 90m, 2h, 1.5h.")
@click.option("--queue", "-q", default=None, help="Queue / partition (default: the profile's).")
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
    walltime: int | None,
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
