#!/usr/bin/env python
"""Print Markdown tables from bench/results/*.json (the tables of docs/performance.md come from here).

    python bench/report.py                 # every result present
    python bench/report.py ps_exchange     # one
    python bench/report.py --results DIR   # results written elsewhere (e.g. another machine's)
    python bench/report.py --update docs/performance.md   # refresh the tables between the markers

``--update`` replaces the text between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` in the file with
the table of NAME's result, so the prose around the tables stays hand-written and the numbers stay exact.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import _common as C


def md(rows: list[list[Any]], header: list[str]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def t(s: dict | None) -> str:
    return "n/a" if not s else C.fmt_time(s["median"])


def signed(x: float) -> str:
    return "-" + C.fmt_time(-x) if x < 0 else C.fmt_time(x)


def spread(s: dict) -> str:
    return f"{C.fmt_time(s['p25'])}-{C.fmt_time(s['p75'])}"


def machine_line(d: dict) -> str:
    m = d["machine"]
    load = d.get("loadavg_start") or m["loadavg"]
    parts = [f"{m['cores']} cores {m['cpu_model']}", f"Python {m['python']}"]
    if m.get("mpi_library"):
        parts.append(f"{m['mpi_library']} (mpi4py {m.get('mpi4py')})")
    if m.get("torch"):
        parts.append(f"torch {m['torch']}")
    if m.get("gpu"):
        parts.append(f"GPU {m['gpu']}")
    parts.append(f"load average {load[0]:.1f} at start, {d['loadavg_end'][0]:.1f} at end")
    return f"_Machine: {', '.join(parts)}; {d['when_utc']}, nnlo {m.get('nnlo_commit')}. Rerun: `{d['command']}`_"


def ps_exchange(d: dict) -> str:
    rows = [[f"{s['params']:,}", f"{s['bytes'] / 1e6:.2f} MB", t(s["raw_round_trip_s"]),
             t(s.get("raw_two_messages_round_trip_s")), t(s["nnlo_round_trip_s"]),
             spread(s["nnlo_round_trip_s"]), t(s.get("nnlo_unframed_round_trip_s")),
             t(s.get("nnlo_one_message_round_trip_s")),
             t(s.get("nnlo_two_messages_round_trip_s")), f"{s['raw_bandwidth_GBps']:.2f}",
             f"{s['nnlo_bandwidth_GBps']:.2f}",
             f"**{s['ratio_of_raw_bandwidth']:.2f}**", f"{s['ratio_paired_median']:.2f}"] for s in d["sizes"]]
    lat = d["latency"]
    gpu = [[f"{g['params']:,}"] + [t(g["round_trip_s"].get(m)) for m in ("raw_host", "nnlo_gpu", "naive_gpu",
                                                                           "raw_cuda_aware")]
           + [f"{g['staged_over_naive']:.2f}"] for g in d.get("gpu_staging", [])]
    gpu_table = [md(gpu, ["params", "raw host round trip", "nnlo, GPU worker (pinned, framed)",
                          "pageable copies", "raw CUDA-aware MPI", "pinned speed-up"])] if gpu else []
    return "\n\n".join([md(rows, ["params", "bytes each way", "raw round trip", "raw, 2 messages each way",
                                  "nnlo round trip (framed)", "nnlo p25-p75", "nnlo unframed",
                                  "unframed forced 1 message", "unframed forced 2 messages",
                                  "raw GB/s", "nnlo GB/s", "nnlo/raw", "paired median"]), *gpu_table,
                        f"Measured by the same script: raw 8-byte one-way latency "
                        f"{t(lat['raw_one_way_8B_s'])}; nnlo header-only round trip "
                        f"{t(lat['nnlo_header_round_trip_s'])}; one-core memory copy "
                        f"{d['memcpy_one_core']['GBps']:.2f} GB/s.", machine_line(d)])


def allreduce(d: dict) -> str:
    methods = list(dict.fromkeys(m for r in d["communication"] for m in r["seconds"]))  # as measured, in order
    rows = []
    for r in d["communication"]:
        s = r["seconds"]
        rows.append([f"{r['params']:,}", f"{r['bytes'] / 1e6:.0f} MB"] + [t(s.get(m)) for m in methods]
                    + [f"{r['gloo_over_mpi4py']:.2f}", f"{r['nnlo_over_best_alternative']:.2f}"
                       if "nnlo_over_best_alternative" in r else "n/a"])
    parts = [md(rows, ["params", "size", *methods, "gloo/mpi4py", "nnlo/best"])]
    if d.get("step") and "nnlo_flatten_overhead_s" in d["step"][0]:  # results from before the bucketed step
        rows = []
        for r in d["step"]:
            s, lab = r["seconds"], r["nnlo_method"]
            rows.append([f"{r['params']:,}", t(s["local"]), t(s["ddp_gloo"]), t(s[lab]),
                         C.fmt_time(r["exposed_comm_s"]["ddp_gloo"]), C.fmt_time(r["exposed_comm_s"][lab]),
                         f"**{r['nnlo_over_ddp']:.2f}**"])
        parts.append(md(rows, ["params", "local step", "DDP (gloo) step", f"nnlo step ({d['step'][0]['nnlo_method']})",
                               "DDP exposed", "nnlo exposed", "nnlo/DDP"]))
    elif d.get("step"):
        methods = [m for m in d["step"][0]["seconds"] if m != "local"]
        rows = []
        for r in d["step"]:
            s, e = r["seconds"], r["exposed_comm_s"]
            rows.append([f"{r['params']:,}", t(s["local"])]
                        + [f"{t(s[m])} ({signed(e[m])})" if m in s else "n/a" for m in methods]
                        + [f"**{r['nnlo_over_ddp']:.2f}**"])
        parts.append(md(rows, ["params", "local step", *[f"{m} (exposed)" for m in methods],
                               f"nnlo/DDP ({d['step'][0]['nnlo_method']})"]))
        if d.get("engines"):
            parts.append("Engines: " + "; ".join(f"`{m}` {e}" for m, e in d["engines"].items()) + ".")
    lat = d["latency"]
    parts.append("8-byte all-reduce latency, same script: " + ", ".join(
        f"{k.split('_')[0]} {t(v)}" for k, v in lat.items()) + f". nnlo all-reduce: {d['nnlo_allreduce']}. "
        f"Horovod: {d['horovod']}.")
    parts.append(machine_line(d))
    return "\n\n".join(parts)


def scaling(d: dict) -> str:
    local = d["local_process"]["samples_per_s"]
    rows = [["local process (no MPI)", "1", f"{local['median']:.0f}", f"{local['min']:.0f}-{local['max']:.0f}",
             "1.00", "", ""]]
    for mode, e in d["modes"].items():
        for w, run in e["runs"].items():
            s = run["samples_per_s"]
            eff = e.get(f"efficiency_{w}_workers")
            near = f" ({run['vs_local_just_before']:.2f})" if "vs_local_just_before" in run else ""
            rows.append([f"nnlo {mode}", w, f"{s['median']:.0f}", f"{s['min']:.0f}-{s['max']:.0f}",
                         f"{e[f'speedup_over_local_{w}_workers']:.2f}{near}", "" if eff is None else f"**{eff:.2f}**",
                         f"{e['master_overhead']:.2f}" if w == "1" and "master_overhead" in e else ""])
    m = d["model"]
    return "\n\n".join([f"Model: {m['kind']}, hidden {m['hidden']}, {m['params']:,} parameters, batch {m['batch']}, "
                        f"sync every {m['sync_every']}; {d['samples_per_epoch']} samples x {d['epochs']} epochs "
                        f"(first epoch not counted).",
                        md(rows, ["run", "workers", "samples/s (median)", "range",
                                  "vs local (vs the local run just before)", "efficiency (2w / 2x1w)",
                                  "master overhead"]), machine_line(d)])


def search(d: dict) -> str:
    parts = []
    if "trials_to_target" in d:
        rows = []
        for obj, o in d["trials_to_target"].items():
            for m, r in o["methods"].items():
                rows.append([obj, f"{o['target']:.4f}", o["budget"], m, str(r["trials_to_target"]).replace("None", "-"),
                             f"{r['reached']}/{o['seeds']}", f"{r['median_trials_to_target']:g}",
                             f"{r['median_best']:.4f}", t(r["wall_s_per_search"])])
        parts.append(md(rows, ["objective", "target", "budget", "method", "trials to target per seed", "reached",
                               "median (miss = budget+1)", "median best", "wall per search"]))
    if "ask_tell" in d:
        rows = []
        names = list(d["ask_tell"]["rows"][0]["seconds"])
        for r in d["ask_tell"]["rows"]:
            rows.append([r["observations"], r["repeats"]] + [t(r["seconds"].get(n)) for n in names])
        parts.append(md(rows, ["observations", "repeats"] + names))
    if "idle" in d:
        i = d["idle"]
        rows = [[eng, e["evaluations"], f"{e['search_window_s']:.1f} s",
                 ", ".join(f"{v:.0%}" for v in e["block_idle_fraction"].values()), f"**{e['mean_idle_fraction']:.0%}**"]
                for eng, e in i["engines"].items()]
        parts.append(f"`nnlo optimize`, {i['blocks']} blocks, {i['trials']} trials of {i['trial_seconds']:g} s each:")
        parts.append(md(rows, ["engine", "evaluations", "search wall time", "idle per block", "mean idle"]))
    parts.append(machine_line(d))
    return "\n\n".join(parts)


def orchestration(d: dict) -> str:
    lay = d["layout"]
    rows = [[case, t(lay[case]["in_process_s"]), t(lay[case]["cli_s"])]
            for case in ("layout", "layout_json", "submit_dry_run")]
    rows.append(["python -c pass (floor)", "", t(lay["python_startup_s"])])
    rows.append(["nnlo --help", "", t(lay["nnlo_help_cli_s"])])
    st = d["status"]
    alt = st["per_job_alternative"]
    return "\n\n".join([
        f"Full Summit: {lay['ranks_placed']['world_size']:,} ranks placed.",
        md(rows, ["command", "in-process", "CLI process"]),
        md([[st["runs"], t(st["status_cli_s"]), f"{st['scheduler_calls_per_status']:g}",
             f"{alt['estimated_s_for_all_runs']:.2f} s", alt["scheduler_calls"],
             f"**{st['alternative_over_nnlo']:.1f}x**"]],
           ["runs", "nnlo status --json", "squeue calls", "one squeue per job (est.)", "its calls", "nnlo faster by"]),
        machine_line(d)])


def slurm_requeue(d: dict) -> str:
    if d.get("skipped"):
        return f"Not run: {d['skipped']}.\n\n" + machine_line(d)
    rows = []
    n = d.get("nnlo", {})
    if "error" in n:
        rows.append(["nnlo chain", f"failed: {n['error']}", "", ""])
    elif n:
        when = f" (run at {n['carried_from_run_at']})" if n.get("carried_from_run_at") else ""
        rows.append([f"nnlo chain{when}", f"{n['job_end_to_successor_start_s']:.1f} s",
                     f"{n['job_end_to_training_resumed_s']:.1f} s", ""])
    s = d.get("submitit", {})
    if "error" in s:
        rows.append(["submitit requeue", f"failed: {s['error']}", "", ""])
    elif s:
        when = f" (run at {s['carried_from_run_at']})" if s.get("carried_from_run_at") else ""
        rows.append([f"submitit requeue{when}", "", "", f"{s['signal_to_code_running_again_s']:.1f} s"])
    return "\n\n".join([md(rows, ["path", "job end -> successor starts", "job end -> training resumed",
                                  "signal -> code running again"]), f"Slurm: {d.get('slurm')}.", machine_line(d)])


def hetero(d: dict) -> str:
    lost, better = d["hardware_aware_lost_rank_seconds"], d["deadline_nothing_fits"]
    head = [["typed speed-ups: trials per unit time, HA / FIFO (median)", "**"
             f"{d['typed_speedup_throughput_ratio']:.2f}x**", ">= 1.5"],
            ["small batch (1x-3x blocks): FIFO / HA makespan (median), size hint declared",
             f"**{d['small_batch_makespan_ratio']:.2f}x**", ">= 1.5"],
            ["the same, costs learnt online (no hint)", f"{d['small_batch_makespan_ratio_learned']:.2f}x", ""],
            ["rank-seconds lost to out-of-memory runs and deadline cuts, HA / FIFO (all seeds)",
             f"**{lost:.1f}** / {d['fifo_lost_rank_seconds']:.1f}", "0"],
            ["the same, counting every out-of-memory run beyond the first on a type",
             f"{d['hardware_aware_lost_rank_seconds_strict']:.1f} / {d['fifo_lost_rank_seconds_strict']:.1f}", ""],
            ["seeds where HA reaches the target FOM no later than FIFO",
             f"**{d['time_to_target_no_worse_seeds']}/{d['seeds']}**", ">= 8/10"]]
    parts = [md(head, ["measure", "result", "target"])]
    for engine, t in d["typed"].items():
        rows = [[r["seed"], r["fifo_trials"], r["ha_trials"], f"{r['throughput_ratio']:.2f}x",
                 _time(r["fifo_time_to_target"]), _time(r["ha_time_to_target"]),
                 ", ".join(f"{k.split(', ')[-1]} {v:.0%}" for k, v in sorted(r["ha_conv_share_by_type"].items()))]
                for r in t["rows"]]
        kinds = ", ".join(sorted(set(t["blocks"])))
        parts += [f"Typed speed-ups, engine {engine}: {len(t['blocks'])} blocks ({kinds}), "
                  f"{t['horizon']:g} time units; {t['cost_model']}; conv share of the trials FIFO "
                  f"{t['conv_share_of_trials']['fifo']:.0%}, HA {t['conv_share_of_trials']['hardware_aware']:.0%}; "
                  f"target FOM {t['target_fom']:g}.",
                  md(rows, ["seed", "trials FIFO", "trials HA", "ratio", "time to target FIFO", "time to target HA",
                            "HA: conv share per block type"]),
                  f"Median ratio **{t['median_throughput_ratio']:.2f}x**; time to target no worse on "
                  f"{t['seeds_time_to_target_no_worse']}/{len(t['rows'])} seeds."]
    sb = d["small_batch"]
    rows = [[n, f"{sb['declared']['median_ratio_by_batch'][str(n)]:.2f}x",
             f"{sb['declared']['median_fifo_over_bound_by_batch'][str(n)]:.2f}",
             f"{sb['declared']['median_ha_over_bound_by_batch'][str(n)]:.2f}",
             f"{sb['learned']['median_ratio_by_batch'][str(n)]:.2f}x"] for n in sb["batches"]]
    sizes = ", ".join(b.split(",")[0] for b in sb["blocks"])
    parts += [f"Small batches on blocks of {sizes}; cost {sb['cost_model']}, median over the seeds:",
              md(rows, ["trials", "FIFO / HA (hint)", "FIFO / lower bound", "HA / lower bound",
                        "FIFO / HA (learnt)"])]
    ch = d["chain"]
    rows = [[k, f"{m['lost_rank_s']:.1f}", f"{m['wall']:.1f}", f"{m['allocation_rank_s']:.0f}", f"{m['jobs']:g}",
             f"{m['failed']:g}", f"{m['best']:.3f}"] for k, m in ch["median"].items()]
    parts += [f"A chain of jobs of {ch['walltime']:g} time units ({ch['queue']:g} between jobs), {ch['budget']} "
              f"trials, {ch['checkpoints_per_trial']} checkpoint(s) per trial, blocks "
              f"{'; '.join(sorted(set(ch['blocks'])))}; "
              f"{ch['cost_model']}. Medians over the seeds:",
              md(rows, ["policy", "lost rank-s", "wall to finish", "allocation (rank-s)", "jobs", "failed trials",
                        "best FOM"]),
              f"When nothing fits before the deadline the better answer here: **{better}**.",
              machine_line(d)]
    return "\n\n".join(parts)


def _time(t: float) -> str:
    return "never" if t == float("inf") else f"{t:.1f}"


def proposers(d: dict) -> str:
    rows = [[r["proposers"], f"**{r['mean_idle_fraction']:.1%}**", f"{r['trials_per_s']:.1f}", r["duplicates_dropped"]]
            for r in d["rows"]]
    return "\n\n".join([
        f"{d['blocks']} simulated blocks, {d['trial_s']:g}-s trials, {d['ask_s']:g} s per proposal, "
        f"{d['horizon_s']:g} s of search, {d['seeds']} seed(s), engine {d['engine']}.",
        md(rows, ["proposers P", "mean block idle", "trials/s", "duplicates dropped"]),
        machine_line(d)])


def startup(d: dict) -> str:
    e = d["end_to_end"]
    rows = [[k, t(v), f"{C.fmt_time(v['min'])}-{C.fmt_time(v['max'])}"] for k, v in d["phases_s"].items()]
    rows.append(["**`nnlo train -n 3`: command to the first batch**", f"**{t(e['to_first_batch_s'])}**",
                 f"{C.fmt_time(e['to_first_batch_s']['min'])}-{C.fmt_time(e['to_first_batch_s']['max'])}"])
    rows.append(["`nnlo train -n 3`: whole run (1 epoch)", t(e["total_s"]),
                 f"{C.fmt_time(e['total_s']['min'])}-{C.fmt_time(e['total_s']['max'])}"])
    tops = ", ".join(f"{k} {C.fmt_time(v)}" for k, v in list(e["top_imports_all_ranks_s"].items())[:6])
    return "\n\n".join([md(rows, ["phase (each alone, fresh processes)", "median", "range"]),
                        "Imported by the ranks of the real run from tensorflow, keras, skopt, matplotlib: "
                        f"**{', '.join(e['forbidden_imported']) or 'none'}**. Slowest top-level imports (all ranks' "
                        f"`-X importtime` added up): {tops}.", machine_line(d)])


def fidelity(d: dict) -> str:
    parts = []
    r = d.get("ratio")
    if r:
        rows = []
        for x in r["seeds"]:
            rows.append([x["seed"], _sec(x["full"]["reached_s"], r["blocks"]), _sec(x["asha"]["reached_s"], r["blocks"]),
                         f"{x['asha_over_full']:.2f}", _sec(x["hyperband"]["reached_s"], r["blocks"]),
                         f"{x['hyperband_over_full']:.2f}", _num(x["full"]["best"]), _num(x["asha"]["best"]),
                         _num(x["hyperband"]["best"]), "yes" if x["asha_as_good"] else "no"])
        corr = ", ".join(f"{k} epoch(s) {v:.2f}" for k, v in r["rank_correlation_with_final"].items())
        parts += [f"**Simulated** ({r['blocks']} blocks, {r['epoch_s']:g}-s epochs, --epochs {r['epochs']}, "
                  f"min 1, eta 3, engine {r['engine']}, {r['rank_seconds_budget']:.0f} rank-seconds per search; "
                  f"`examples/curves.py`, rank correlation with the final loss after {corr}). Target: the "
                  f"{r['target_quantile']:.0%} quantile of the final loss over the prior, {r['target']:.4f}.",
                  md(rows, ["seed", "full: rank-s to target", "ASHA", "ASHA/full", "Hyperband", "Hyperband/full",
                            "best full", "best ASHA", "best Hyperband", "ASHA as good"]),
                  f"Median ASHA/full rank-seconds to the target **{r['asha_over_full_rank_seconds_median']:.2f}** "
                  f"(Hyperband {r['hyperband_over_full_rank_seconds_median']:.2f}); best at equal rank-seconds as good "
                  f"or better: ASHA **{r['asha_as_good_seeds']}/{len(r['seeds'])}**, Hyperband "
                  f"{r['hyperband_as_good_seeds']}/{len(r['seeds'])} seeds."]
    p = d.get("pbt")
    if p:
        rows = [[x["seed"], f"{x['rank_seconds']:.0f}", _num(x["pbt"]), _num(x["asha"]), _num(x["random"])]
                for x in p["seeds"]]
        parts += [f"PBT (population {p['population']}, steps of {p['interval']} epochs, {p['budget_trials']} trials "
                  f"at most) on the `{p['family']}` curves, where a learning-rate schedule pays; ASHA and random "
                  f"search get the rank-seconds PBT used:",
                  md(rows, ["seed", "rank-seconds", "best PBT", "best ASHA", "best random"]),
                  f"Median gain of PBT: **{_num(p['pbt_gain_over_asha_median'])}** over ASHA, "
                  f"**{_num(p['pbt_gain_over_random_median'])}** over random search (loss); PBT below the best "
                  f"constant configuration of 20,000 draws ({p['best_constant_configuration']:.4f}) on "
                  f"{p['pbt_below_every_constant_seeds']}/{len(p['seeds'])} seeds."]
    b = d.get("busy")
    if b:
        sync = ", ".join(f"{v:.1%} with brackets of {n}" for n, v in b["sync_halving_busy"].items())
        parts.append(f"{b['blocks']} simulated blocks, 1-s epochs (+-{b['jitter']:.0%}), ASHA, {b['horizon_s']:g} s: "
                     f"blocks busy **{b['asha_busy']:.1%}** ({b['asha_jobs']} jobs, {b['asha_trials']} trials; the "
                     f"coordinator's real decisions median {b['decide_ms_median']:.2f} ms, p99 "
                     f"{b['decide_ms_p99']:.1f} ms, {b['saves']} saves, the last {b['save_ms_last']:.0f} ms, on the "
                     f"simulated clock). Synchronous successive halving: {sync}.")
    w = d.get("walltimes")
    if w:
        k, u = w["killed"], w["uninterrupted"]
        parts.append(f"Across walltimes (real processes: 3 local chains of `nnlo optimize --shared --schedule asha`, "
                     f"{k['trials']} trials): {len(k['kills'])} SIGKILLs of jobs; trials lost {len(k['lost'])}, rung "
                     f"results recorded twice {k['rung_results_twice']}, rung histories intact "
                     f"{k['rung_histories_intact']}, epochs trained twice beyond a checkpoint "
                     f"{k['epochs_trained_twice_beyond_checkpoints']} (epochs of killed stages re-trained "
                     f"{k['epochs_retrained_of_killed_stages']}); best configuration the same as the uninterrupted "
                     f"run's: {w['same_best_configuration']} (promotion order the same: {w['same_promotions']}; "
                     f"{k['wall_s']:.0f} s against {u['wall_s']:.0f} s).")
    g = d.get("digits")
    if g:
        parts.append(f"Real training (`examples/digits_torch.py`, {g['ranks']} ranks, --epochs {g['epochs']}, "
                     f"{g['rank_seconds']:.0f} rank-seconds of search each): best val_accuracy full "
                     f"{_num(g['full']['best'])} ({g['full']['trials']} trials), ASHA {_num(g['asha']['best'])} "
                     f"({g['asha']['trials']} trials); ASHA/full rank-seconds to full's best: "
                     f"{_num(g['asha_over_full_rank_seconds'])}.")
    parts.append(machine_line(d))
    return "\n\n".join(parts)


def _sec(reached: float | None, blocks: int) -> str:
    return "not reached" if reached is None else f"{reached * blocks:.0f}"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


REPORTS = {"startup": startup, "ps_exchange": ps_exchange, "allreduce": allreduce, "scaling": scaling,
           "search": search, "orchestration": orchestration, "slurm_requeue": slurm_requeue, "hetero": hetero,
           "proposers": proposers, "fidelity": fidelity}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="benchmarks to report (default: all with a result)")
    p.add_argument("--results", default=str(C.RESULTS))
    p.add_argument("--update", metavar="FILE", help="rewrite the tables between <!-- bench:NAME --> markers")
    a = p.parse_args(argv)
    unknown = [n for n in a.names if n not in REPORTS]
    if unknown:
        p.error(f"no report for {', '.join(unknown)}; choose from {', '.join(REPORTS)}")
    if a.update:
        return update(Path(a.update), Path(a.results), a.names or list(REPORTS))
    for name in a.names or list(REPORTS):
        for suffix in ("", "-gpu"):  # bench/results/NAME-gpu.json: the same benchmark on a GPU node
            path = Path(a.results) / f"{name}{suffix}.json"
            if path.exists():
                print(f"### {name}{suffix}\n\n{REPORTS[name](json.loads(path.read_text()))}\n")
    return 0


def update(doc: Path, results: Path, names: list[str]) -> int:
    text = doc.read_text()
    for name in names:
        path = results / f"{name}.json"
        pattern = re.compile(rf"(<!-- bench:{name} -->\n).*?(<!-- /bench:{name} -->)", re.S)
        if not path.exists() or not pattern.search(text):
            continue
        table = REPORTS[name](json.loads(path.read_text()))
        text = pattern.sub(lambda m: m.group(1) + table + "\n" + m.group(2), text)
        print(f"updated {name}")
    doc.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
