"""Smoke tests of the benchmarks: each script runs end to end in its ``--quick`` setting (real mpirun, real
``nnlo train``/``nnlo optimize``/``nnlo status`` subprocesses) and writes a well-formed JSON result. Every
benchmark has one here (``test_every_benchmark_has_a_smoke_test``), so a broken benchmark fails the test
command, and no benchmark imports the tests (what both need lives in ``bench/``: ``blobs.py``,
``private_slurm.py``).

Nothing here asserts a speed: timings on a shared 2-core machine say nothing, and the numbers belong in
docs/performance.md, not in a pass/fail. What is asserted is the shape and the internal consistency of
each result (every method measured, medians inside their own min..max, ratios that follow from the
medians), so a benchmark that silently stops measuring something fails here.
"""
from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"


def run_bench(name: str, tmp_path: Path, env: dict[str, str], *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), "--quick", "--out", str(out), *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    doc = json.loads(out.read_text())
    assert doc["schema"] == "nnlo-bench-1" and doc["benchmark"] == name
    m = doc["machine"]
    assert m["cores"] >= 1 and m["cpu_model"] and m["python"] and len(m["loadavg"]) == 3
    assert doc["command"].startswith(f"bench/run.sh {name}")
    assert len(doc["loadavg_start"]) == 3 and len(doc["loadavg_end"]) == 3
    return doc


def check_summary(s: dict) -> None:
    assert s["n"] >= 1 and len(s["samples"]) == s["n"]
    assert s["min"] <= s["median"] <= s["max"] and s["median"] > 0


@pytest.mark.mpi
def test_ps_exchange(tmp_path, nnlo_env, mpirun):
    doc = run_bench("ps_exchange", tmp_path, nnlo_env)
    assert "MPI" in doc["machine"]["mpi_library"] or "MPICH" in doc["machine"]["mpi_library"]
    assert [s["params"] for s in doc["sizes"]] == [1_000, 100_000]
    for s in doc["sizes"]:
        assert s["bytes"] == 4 * s["params"]
        check_summary(s["raw_round_trip_s"])
        check_summary(s["raw_two_messages_round_trip_s"])
        check_summary(s["nnlo_round_trip_s"])
        assert math.isclose(s["ratio_of_raw_bandwidth"],
                            s["raw_round_trip_s"]["median"] / s["nnlo_round_trip_s"]["median"])
    check_summary(doc["latency"]["raw_one_way_8B_s"])
    assert doc["memcpy_one_core"]["GBps"] > 0


@pytest.mark.mpi
def test_allreduce(tmp_path, nnlo_env, mpirun):
    doc = run_bench("allreduce", tmp_path, nnlo_env)
    assert doc["ranks"] == 2
    (row,) = doc["communication"]
    assert {"mpi4py", "gloo"} <= set(row["seconds"])
    for s in row["seconds"].values():
        check_summary(s)
    assert ("horovod" in row["seconds"]) == (not doc["horovod"].startswith("not available"))
    assert ("nnlo" in row["seconds"]) == (not doc["nnlo_allreduce"].startswith("not available"))
    try:
        import nnlo.allreduce  # noqa: F401 - the pure all-reduce mode exists: then it must be measured
        assert "nnlo" in row["seconds"] and "nnlo_over_best_alternative" in row
    except ImportError:
        pass
    from nnlo.allreduce import available_engines
    from nnlo.allreduce.mpi import PROGRESS

    engines = doc["engines"]
    assert "mpi over 2 rank(s)" in engines["nnlo"]  # auto on CPUs
    assert set(engines) == {"nnlo"} | {f"nnlo_{e}" for e in available_engines() if e != "mpi"}
    assert set(engines) <= set(row["seconds"]) | {"nnlo_horovod"}  # every engine's all-reduce, measured
    (step,) = doc["step"]
    mb = f"{step['bucket_mb'][0]:g}mb"
    default_progress = doc["mpi_progress"]
    assert default_progress in PROGRESS and f"progress by {default_progress}" in engines["nnlo"]
    expected = ({"local", "ddp_gloo", "nnlo_local", step["nnlo_method"]}
                | {f"nnlo_{mb}_progress_{m}" for m in PROGRESS if m != default_progress}
                | {f"{e}_{mb}" for e in engines if e != "nnlo"})
    assert expected == set(step["seconds"])
    assert step["ddp_method"] == "ddp_gloo" and doc["device"] == "cpu"
    assert math.isclose(step["nnlo_over_ddp"], step["seconds"][step["nnlo_method"]]["median"]
                        / step["seconds"]["ddp_gloo"]["median"])


@pytest.mark.mpi
def test_scaling(tmp_path, nnlo_env, mpirun):
    doc = run_bench("scaling", tmp_path, nnlo_env)
    check_summary(doc["local_process"]["samples_per_s"])
    gem = doc["modes"]["gem"]
    assert set(gem["runs"]) == {"1", "2"}
    for run in gem["runs"].values():
        check_summary(run["samples_per_s"])
        assert run["epochs"] == 2
        assert math.isclose(run["vs_local_just_before"], run["samples_per_s"]["median"] / run["local_just_before"])
    r1, r2 = (gem["runs"][w]["samples_per_s"]["median"] for w in ("1", "2"))
    assert math.isclose(gem["efficiency_2_workers"], r2 / (2 * r1))


@pytest.mark.mpi
def test_search(tmp_path, nnlo_env, mpirun):
    doc = run_bench("search", tmp_path, nnlo_env)
    branin = doc["trials_to_target"]["branin"]
    # --quick also runs the bounded GP fit (issue 16 row 5) with a fit limit below the budget
    assert set(branin["methods"]) == {"nnlo_bayesian_2_blocks", "nnlo_random", "skopt_gp_minimize",
                                      "nnlo_bayesian_fit_limit_6"}
    for m in branin["methods"].values():
        assert len(m["trials_to_target"]) == 1 and len(m["best_values"]) == 1
        assert m["best_values"][0] >= 0.397887 - 1e-6  # Branin's global minimum bounds every result
        hit = m["trials_to_target"][0]
        assert hit is None or 1 <= hit <= branin["budget"]
    (row,) = doc["ask_tell"]["rows"]
    assert row["observations"] == 10
    assert set(row["seconds"]) == {"nnlo_bayesian_GP", "nnlo_bayesian_GP_unbounded", "nnlo_bayesian_RF", "nnlo_random",
                                   "skopt_optimizer_GP"}
    for engine in ("random", "bayesian"):
        e = doc["idle"]["engines"][engine]
        assert e["evaluations"] == 4
        assert len(e["block_idle_fraction"]) == 2  # both blocks evaluated something
        assert all(0.0 <= f < 1.0 for f in e["block_idle_fraction"].values())


@pytest.mark.slow
def test_orchestration(tmp_path, nnlo_env):
    doc = run_bench("orchestration", tmp_path, nnlo_env)
    lay = doc["layout"]
    assert lay["ranks_placed"] == {"world_size": 27648, "rank_entries": 27648}  # the full Summit
    for case in ("layout", "layout_json", "submit_dry_run"):
        check_summary(lay[case]["in_process_s"])
        check_summary(lay[case]["cli_s"])
    st = doc["status"]
    assert st["runs"] == 20
    assert st["scheduler_calls_per_status"] == 1  # one squeue for all runs
    assert st["job_ids_in_the_one_call"] == 20


@pytest.mark.slow
def test_fidelity(tmp_path, nnlo_env):
    """The simulated parts (the real Search, schedules and hook runner on simulated clocks): every seed measured,
    the summary follows from the seeds."""
    doc = run_bench("fidelity", tmp_path, nnlo_env, "--parts", "ratio,pbt,busy")
    r = doc["ratio"]
    assert len(r["seeds"]) == 2 and set(r["rank_correlation_with_final"]) == {"1", "3", "9"}
    for row in r["seeds"]:
        assert {"full", "asha", "hyperband"} <= set(row) and row["full"]["trials"] > 0
        assert row["asha"]["trials"] > row["full"]["trials"]  # ASHA starts more trials in the same time
    assert r["asha_as_good_seeds"] == sum(row["asha_as_good"] for row in r["seeds"])
    p = doc["pbt"]
    assert len(p["seeds"]) == 2 and all(row["pbt"] is not None for row in p["seeds"])
    b = doc["busy"]
    assert 0 < b["asha_busy"] <= 1 and b["saves"] >= 1 and set(b["sync_halving_busy"]) == {"81", "216"}
    assert doc["summary"]["asha_busy_32_blocks"] == b["asha_busy"]


@pytest.mark.slow
def test_run_sh_rejects_an_unknown_benchmark():
    proc = subprocess.run(["bash", str(BENCH / "run.sh"), "nosuch"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "bench/run.sh: no benchmark named 'nosuch'; choose from: ps_exchange allreduce scaling search "
        "orchestration startup hetero proposers validation fold_noise fidelity slurm_requeue"]


def test_committed_results_are_valid_json():
    results = sorted((BENCH / "results").glob("*.json"))
    assert results, "bench/results/ holds the results docs/performance.md reports"
    for path in results:
        doc = json.loads(path.read_text())
        # NAME.json, or NAME-VARIANT.json for the same benchmark run with other options
        assert doc["schema"] == "nnlo-bench-1" and path.stem.split("-")[0] == doc["benchmark"]
        assert doc["machine"]["cores"] >= 1


@pytest.mark.slow
def test_hetero(tmp_path, nnlo_env):
    """Where typed placement pays, on simulated clocks (the real placement and search code)."""
    doc = run_bench("hetero", tmp_path, nnlo_env)
    assert doc["seeds"] == 2
    for key in ("typed_speedup_throughput_ratio", "small_batch_makespan_ratio", "small_batch_makespan_ratio_learned",
                "hardware_aware_lost_rank_seconds", "fifo_lost_rank_seconds", "time_to_target_no_worse_seeds"):
        assert isinstance(doc[key], (int, float)), key
    typed = doc["typed"]["random"]
    assert [r["seed"] for r in typed["rows"]] == [0, 1]
    for r in typed["rows"]:
        assert r["fifo_trials"] > 0 and r["throughput_ratio"] == r["ha_trials"] / r["fifo_trials"]
    assert doc["typed_speedup_throughput_ratio"] == typed["median_throughput_ratio"]
    for r in doc["small_batch"]["declared"]["rows"]:
        assert r["ratio"] == r["fifo_makespan"] / r["ha_makespan"] and r["lower_bound"] <= r["ha_makespan"] + 1e-9
    chain = doc["chain"]
    assert doc["deadline_nothing_fits"] in ("cheaper", "end")
    assert doc["fifo_lost_rank_seconds"] == sum(r["fifo"]["lost_rank_s"] for r in chain["rows"])
    assert doc["hardware_aware_lost_rank_seconds"] == sum(r[doc["deadline_nothing_fits"]]["lost_rank_s"]
                                                          for r in chain["rows"])


@pytest.mark.slow
def test_proposers(tmp_path, nnlo_env):
    """More proposer ranks leave the blocks less idle (simulated clocks)."""
    doc = run_bench("proposers", tmp_path, nnlo_env)
    idle = {r["proposers"]: r["mean_idle_fraction"] for r in doc["rows"]}
    assert set(idle) == {1, 2, 4} and idle[4] < idle[2] < idle[1]


@pytest.mark.slow
def test_fold_noise(tmp_path, nnlo_env):
    """One seed of noisy k-fold Branin, both engines: the counts follow from the seed."""
    doc = run_bench("fold_noise", tmp_path, nnlo_env)
    (row,) = doc["per_seed"]
    assert doc["seeds"] == 1 and doc["budget"] == 8
    for label in ("noise_aware", "mean_only"):
        hit = row[label]
        assert (hit is None) == row[f"{label}_censored"] and (hit is None or 1 <= hit <= doc["budget"])
        assert row[f"{label}_best_true"] >= 0.397887 - 1e-6  # Branin's global minimum
        check_summary(doc["wall_s_per_search"][label])
    assert doc["noise_aware_fewer"] + doc["ties"] + doc["noise_aware_more"] == 1


@pytest.mark.mpi
def test_startup(tmp_path, nnlo_env, mpirun):
    doc = run_bench("startup", tmp_path, nnlo_env)
    e2e = doc["end_to_end"]
    check_summary(e2e["total_s"])
    check_summary(e2e["to_first_batch_s"])
    assert e2e["to_first_batch_s"]["median"] < e2e["total_s"]["median"]
    assert e2e["forbidden_imported"] == [] and doc["rank_imports_without_a_model"] == []
    assert {"interpreter (python -c pass)", "import torch", "first batch"} <= set(doc["phases_s"])
    for phase in doc["phases_s"].values():
        assert phase["n"] == 1


@pytest.mark.mpi
def test_validation(tmp_path, nnlo_env, mpirun):
    doc = run_bench("validation", tmp_path, nnlo_env)
    run = doc["runs"]["downpour"]["2"]
    check_summary(run["validate_s"])
    check_summary(doc["single_rank"]["seconds"])
    assert run["ranks_with_a_share"] == 2 and doc["epochs"] == 2 and run["validate_s"]["n"] == 2
    assert math.isclose(run["measured_over_ideal"], run["validate_s"]["median"] / run["ideal_s"])


@pytest.mark.slurm
def test_slurm_requeue(tmp_path, nnlo_env):
    """--quick starts the benchmark's private Slurm and stops it (a walltime is a minute at least)."""
    doc = run_bench("slurm_requeue", tmp_path, nnlo_env)
    if "skipped" in doc:
        if os.environ.get("NNLO_REQUIRE_SLURM") == "1":
            pytest.fail(f"NNLO_REQUIRE_SLURM=1 but the benchmark's Slurm cannot start: {doc['skipped']}")
        pytest.skip(f"no private Slurm: {doc['skipped']}")
    assert doc["slurm"].startswith("slurm") and doc["quick"]
    assert "nnlo" not in doc and "submitit" not in doc


def _run_sh_names() -> list[str]:
    text = (BENCH / "run.sh").read_text()
    return [n for group in ("all", "extra") for n in re.search(rf"^{group}=\(([^)]*)\)", text, re.M).group(1).split()]


def test_every_benchmark_has_a_smoke_test():
    """Every script bench/run.sh knows has a --quick setting and a test above that runs it; every script of
    bench/ with a --quick is one run.sh knows."""
    names = _run_sh_names()
    quick = sorted(p.stem for p in BENCH.glob("*.py") if '"--quick"' in p.read_text())
    assert sorted(names) == quick
    tree = ast.parse(Path(__file__).read_text())
    smoked = {node.args[0].value for node in ast.walk(tree) if isinstance(node, ast.Call)
              and getattr(node.func, "id", None) == "run_bench" and isinstance(node.args[0], ast.Constant)}
    assert smoked == set(names), f"no smoke test: {sorted(set(names) - smoked)}"


def test_no_benchmark_imports_the_tests():
    for path in sorted(BENCH.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad = [m for m in modules if m == "tests" or m.startswith("tests.")]
            assert not bad, f"{path.relative_to(REPO)}:{node.lineno} imports {bad[0]}: move what it needs into bench/"
