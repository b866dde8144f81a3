"""``nnlo clusters``: list the cluster profiles (built-in and the user's), or ``show`` one in full."""
from __future__ import annotations

import json
from dataclasses import asdict

import click

from nnlo.contract import ENV_DEADLINE
from nnlo.device import device_variable
from nnlo_sched.profiles import ProfileError, list_profiles, load_profile, user_dirs


def _hours(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    d, rest = divmod(seconds, 86400) if seconds >= 2 * 86400 else (0, seconds)
    h, rest = divmod(rest, 3600)
    m = rest // 60
    out = (f"{d}d" if d else "") + (f"{h}h" if h else "") + (f"{m}m" if m else "")
    return out or "0m"


@click.group("clusters", invoke_without_command=True)
@click.pass_context
def clusters_command(ctx: click.Context) -> None:
    """List cluster profiles: built-in ones, then ~/.config/nnlo/clusters/*.toml and $NNLO_CLUSTERS/*.toml.

    A user profile may start from another with `extends = "NAME"`; see docs/clusters.md.
    """
    if ctx.invoked_subcommand is not None:
        return

    rows = []
    for pf, prof in list_profiles():
        origin = "built-in" if pf.builtin else str(pf.path)
        if isinstance(prof, ProfileError):
            rows.append((pf.name, "BROKEN", str(prof), origin))
            continue
        hw = f"{prof.cores_per_node} cores" + (
            f", {prof.gpus_per_node} GPU{'s' if prof.gpus_per_node > 1 else ''}" if prof.gpus_per_node else "")
        nodes = f"{prof.nodes} x " if prof.nodes else ""
        alias = f" (alias {', '.join(prof.aliases)})" if prof.aliases else ""
        retired = "" if not prof.retired else (
            "  RETIRED" + (f" {prof.retired}" if prof.retired != "yes" else " (date unverified)"))
        rows.append((pf.name + alias, f"{prof.scheduler}+{prof.launcher}", f"{nodes}{hw}", origin + retired))
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        click.echo(f"{r[0]:<{width[0]}}  {r[1]:<{width[1]}}  {r[2]:<{width[2]}}  {r[3]}")
    click.echo(f"(user profiles: {', '.join(str(d) for d in user_dirs())})")


@clusters_command.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON.")
def show_command(name: str, as_json: bool) -> None:
    """Print one profile with every value resolved (inheritance applied, cores detected)."""
    p = load_profile(name)
    if as_json:
        click.echo(json.dumps(asdict(p), indent=2, default=str))
        return
    lines = [
        f"{p.name}: {p.description}",
        f"  source         {p.source}",
        f"  scheduler      {p.scheduler} (template {p.template_name})",
        f"  launcher       {p.launcher} {' '.join(p.launcher_flags)}".rstrip(),
        f"  nodes          {p.nodes or 'unknown'} x {p.cores_per_node} cores, {p.gpus_per_node} GPUs"
        + (f", {p.memory_gb:g} GB" if p.memory_gb else ""),
        f"  account        {'required' if p.account_required else 'optional'}",
        "  signal         "
        + (f"SIG{p.signal} {p.signal_lead_s} s before the walltime" if p.signal else f"none ({ENV_DEADLINE} clock)"),
    ]
    python = p.job_python()
    lines.append(f"  python         {python.command} ({python.why})")
    if p.gpus_per_node:
        lines.append(f"  GPUs           {p.gpu_vendor}: {device_variable(p.gpu_vendor)} per rank, bound by the "
                     f"{p.gpu_bind}" + (f", slots take GPUs {list(p.gpu_order)}" if p.gpu_order else "")
                     + (f", {p.gpu_tiles} tiles per GPU (g.t)" if p.gpu_tiles > 1 else ""))
    if p.retired:
        lines.append(f"  retired        {p.retired_note}")
    if p.aliases:
        lines.append(f"  aliases        {', '.join(p.aliases)}")
    if p.constraint or p.constraints:
        lines.append(f"  constraint     {p.constraint or '-'} (known: {', '.join(p.constraints) or '-'})")
    for c in p.node_types:
        v = p.for_constraint(c)
        lines.append(f"  -C {c:<11} {v.nodes or 'unknown'} x {v.cores_per_node} cores, {v.gpus_per_node} GPUs")
    if p.runs_home:
        lines.append(f"  runs home      {p.runs_home}")
    if p.compute_read_only:
        lines.append(f"  read-only      {', '.join(p.compute_read_only)} (on compute nodes)")
    for qname, q in p.queues.items():
        default = " (default)" if qname == p.default_queue else ""
        if len(q.bins) > 1:
            limits = ", ".join(f"<= {b.max_nodes} nodes: {_hours(b.walltime_s)}" for b in q.bins)
        elif q.bins:
            limits = f"{_hours(q.bins[0].walltime_s)}" + (
                f", <= {q.bins[0].max_nodes} nodes" if q.bins[0].max_nodes < 10**9 else "")
        else:
            limits = "no limits known"
        extra = ("" if q.chaining else "; no job chaining") + ("; a QOS (--qos)" if q.qos else "")
        lines.append(f"  queue {qname}{default}: {limits}{extra}" + (f"  # {q.notes}" if q.notes else ""))
    for s in p.setup:
        lines.append(f"  setup          {s}")
    for s in p.share_setup:
        lines.append(f"  shared GPUs    {s}")
    for s in p.directives:
        lines.append(f"  directive      {s}")
    if p.notes:
        lines.append(f"  notes          {p.notes}")
    click.echo("\n".join(lines))


command = clusters_command
