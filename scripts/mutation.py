"""Mutation testing of nnlo's pure modules: would the unit tests notice a small wrong change?

Run it as ``scripts/mutation.sh`` (docs/testing.md, "Mutation testing"). For each group of :data:`GROUPS` it
runs mutmut (pinned in setup.cfg's ``test`` extra) in a scratch folder ``.mutation/<group>/``: mutmut copies
the sources there, makes every mutant of the group's modules (a flipped comparison, an off-by-one, a changed
constant or default, a dropped argument...), learns which of the group's tests reach each function, and runs
those tests against each mutant, one at a time. A mutant is *killed* when a test fails (or hangs) with it.
Only the process-free unit tests listed with each group run: no MPI, no Slurm, no subprocess.

It prints each module's score (killed / mutants), writes ``mutation-report.json`` (every module's counts and
the diff of every mutant that survived) and exits 1 when a module scores below ``--fail-under`` (80 %).
``scripts/mutation.sh GROUP|MODULE ...`` runs only those (the report keeps the other modules' last results);
``--list`` prints the map of modules to tests; ``--survivors`` prints the survivors' diffs.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCRATCH = REPO / ".mutation"
REPORT = REPO / "mutation-report.json"
FAIL_UNDER = 80.0


@dataclass(frozen=True)
class Group:
    """Modules mutated together and the process-free tests that pin them.

    ``modules``: globs of the files to mutate; ``tests``: pytest paths or node ids; ``functions``: where only
    part of a module is in scope, globs of the functions (``name`` or ``Class.method``) to mutate.
    """

    name: str
    modules: tuple[str, ...]
    tests: tuple[str, ...]
    functions: tuple[str, ...] = ()


# The scheduler adapters' job-id syntax and the parsing of what their programs print; submitting, running and
# cancelling (subprocesses, locks, the local supervisor) are the chain tests' business.
_SCHEDULER_PARSING = (
    "Scheduler.check_job_id", "Scheduler.is_job_id", "Scheduler.check_cancel", "Scheduler.parse_submit_output",
    "Scheduler.job_name", "Scheduler.query", "Scheduler.current_job_id", "Scheduler.unknown",
    "Scheduler.array_task_id", "unique_ids", "one_line",
    "*Scheduler._query", "*Scheduler._sacct", "*Scheduler.array_task_id", "*Scheduler._array_job_id",
    "*Scheduler.submit_argv", "*Scheduler.job_name", "normalise", "_parse", "short_id",
    "_read", "_queue_problem", "_whole", "_pid", "_number",
)

# The tree-space tests but the Bayesian search runs (seconds each: a mutant that survives runs every test of its
# function, so the map holds the fast ones; the search quality is test_engines.py's, outside the map).
_TREE_SPACE = tuple(f"tests/optimize/test_tree_space.py::{t}" for t in (
    "test_toml_and_python_forms_agree_and_round_trip", "test_samples_hold_only_active_parameters",
    "test_flat_space_behaviour_is_unchanged", "test_bad_tree_files_give_one_line_errors",
    "test_numeric_and_boolean_branch_labels", "test_every_engine_proposes_valid_tree_points[random]",
    "test_every_engine_proposes_valid_tree_points[genetic]", "test_trials_csv_blanks_inactive_and_restore_round_trips",
    "test_fold_spread_reaches_the_gp_as_per_sample_noise", "test_without_folds_the_gp_is_skopts_default",
    "test_python_form_errors_are_one_line"))

GROUPS: tuple[Group, ...] = (
    Group("roles", ("nnlo/roles.py",), ("tests/test_roles.py",)),
    Group("algorithms", ("nnlo/algorithms/*.py",),
          ("tests/algorithms/test_exchange_rules.py", "tests/algorithms/test_flat_optimizers.py",
           "tests/algorithms/test_gem_rescale.py", "tests/algorithms/test_specs.py")),
    Group("journal", ("nnlo/optimize/journal.py",), ("tests/optimize/test_journal.py",)),
    Group("space", ("nnlo/optimize/space.py",), ("tests/optimize/test_space.py", *_TREE_SPACE)),
    Group("engines", ("nnlo/optimize/engines/*.py",),
          ("tests/optimize/test_engine_units.py", *_TREE_SPACE, *(f"tests/optimize/test_engines.py::{t}" for t in (
              "test_broken_estimators_are_not_offered", "test_pending_points_are_not_proposed_again[genetic]",
              "test_pending_points_are_not_proposed_again[random]", "test_failed_trials_do_not_crash_engines[genetic]",
              "test_failed_trials_do_not_crash_engines[random]", "test_all_failures_before_any_success_still_propose",
              "test_genetic_handles_integer_real_and_categorical", "test_genetic_rejects_tiny_population",
              "test_state_round_trip_continues_identically[genetic]",
              "test_state_round_trip_continues_identically[random]", "test_mixed_spaces_in_the_other_engines[random]",
              "test_a_scikit_optimize_failure_falls_back_to_a_random_point")))),
    Group("assign", ("nnlo/optimize/assign.py", "nnlo/optimize/placement/*.py"),
          ("tests/optimize/test_assign.py", "tests/optimize/test_placement.py")),
    Group("spec", ("nnlo_sched/spec.py",), ("tests/sched/test_spec.py",)),
    Group("schedulers", ("nnlo_sched/schedulers/*.py",),
          ("tests/sched/test_scheduler_parsing.py", "tests/chain/test_schedulers.py::test_job_id_from_submit_output",
           "tests/chain/test_schedulers.py::test_submit_argv",
           "tests/chain/test_schedulers.py::test_template_facts_are_the_schedulers"),
          functions=_SCHEDULER_PARSING),
    Group("layout", ("nnlo_sched/layout/*.py",), ("tests/sched/test_layout.py",)),
    Group("atomic", ("nnlo/atomic.py",), ("tests/test_atomic.py",)),
    Group("checkpoint", ("nnlo/checkpoint.py",),
          ("tests/test_checkpoint.py",
           "tests/reliability/test_checkpoint_kills.py::test_a_truncated_or_garbled_part_is_a_one_line_error",
           "tests/reliability/test_checkpoint_kills.py::"
           "test_leftovers_of_other_hosts_go_once_a_newer_checkpoint_is_published")),
)

# pytest plugins the unit tests do not use: each mutant starts a pytest session, and registering these (and the
# garbage collection unraisableexception forces at the end of each session) is about half of that session's cost.
UNUSED_PLUGINS = ("cacheprovider", "xdist", "unraisableexception", "threadexception", "faulthandler", "doctest",
                  "junitxml", "pastebin", "stepwise", "legacypath", "setupplan", "setuponly", "nose")

# mutmut's verdicts (its exit codes, mutmut/stats.py): a mutant is caught when a test failed, hung or crashed.
KILLED = {"killed", "timeout", "segfault"}
NOT_KILLED = {"survived", "no tests", "suspicious"}


def mutmut_status(exit_code: int | None) -> str:
    from mutmut.stats import status_by_exit_code

    return str(status_by_exit_code[exit_code])


def group_files(group: Group) -> list[str]:
    files = sorted({str(p.relative_to(REPO)) for pattern in group.modules for p in REPO.glob(pattern)})
    if not files:
        sys.exit(f"mutation: group {group.name}: no module matches {', '.join(group.modules)}: fix GROUPS in "
                 f"{Path(__file__).relative_to(REPO)}")
    return files


def tests_of(group: Group) -> list[str]:
    missing = [t for t in group.tests if not (REPO / t.split("::")[0]).is_file()]
    if missing:
        sys.exit(f"mutation: group {group.name}: no test file {', '.join(missing)}: fix GROUPS in "
                 f"{Path(__file__).relative_to(REPO)}")
    return list(group.tests)


def function_of(mutant: str) -> str:
    """``nnlo.x.xǁClassǁmethod__mutmut_3`` -> ``Class.method``; ``nnlo.x.x_func__mutmut_3`` -> ``func``."""
    tail = mutant.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]
    if tail.startswith("xǁ"):
        return ".".join(tail[2:].split("ǁ"))
    return tail.removeprefix("x_")


def mutant_glob(function: str) -> str:
    """The mutmut names of a function glob's mutants: ``Class.method`` -> ``*.xǁClassǁmethod__mutmut_*``."""
    cls, _, name = function.rpartition(".")
    return f"*.xǁ{cls}ǁ{name}__mutmut_*" if cls else f"*.x_{name}__mutmut_*"


def in_scope(group: Group, mutant: str) -> bool:
    return not group.functions or any(fnmatch.fnmatchcase(function_of(mutant), f) for f in group.functions)


def write_config(group: Group, work: Path) -> None:
    """The scratch folder: the sources and tests (links; mutmut copies them) and mutmut's setup.cfg."""
    for name in ("nnlo", "nnlo_sched", "tests"):
        (work / name).symlink_to(REPO / name)
    tests = "\n    ".join(tests_of(group))
    only = "\n    ".join(group_files(group))
    plugins = "\n    ".join(a for p in UNUSED_PLUGINS for a in ("-p", f"no:{p}"))
    # The repository's own pytest configuration (markers, timeout) comes along; mutmut reads [mutmut].
    (work / "setup.cfg").write_text((REPO / "setup.cfg").read_text() + f"""
[mutmut]
source_paths =
    nnlo
    nnlo_sched
only_mutate =
    {only}
pytest_add_cli_args_test_selection =
    {tests}
pytest_add_cli_args =
    {plugins}
    --hypothesis-seed=0
use_git_change_detection = false
""")


def run_group(group: Group, log_all: bool) -> dict[str, Any]:
    work = SCRATCH / group.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    write_config(group, work)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the mutants, not the checkout
    mutmut = Path(sys.executable).parent / "mutmut"
    start, cpu = time.monotonic(), _children_cpu()
    log = work / "mutmut.log"
    with open(log, "w") as out:
        proc = subprocess.run([str(mutmut), "run", "--max-children", "1", *map(mutant_glob, group.functions)],
                              cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    seconds, cpu = time.monotonic() - start, _children_cpu() - cpu
    if proc.returncode != 0 or log_all:
        text = log.read_text(errors="replace").replace("\r", "\n")
        tail = "\n".join(line for line in text.splitlines()[-40:] if line.strip() and "⠋" not in line)
        if proc.returncode != 0:
            sys.exit(f"mutation: mutmut failed on group {group.name} (exit {proc.returncode}); {log}:\n{tail}")
        print(tail)
    return collect(group, work, seconds, cpu)


def _children_cpu() -> float:
    """CPU seconds of every finished child (mutmut and the mutants it forked): the run's time on an idle
    machine, whatever the load while it ran."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def collect(group: Group, work: Path, seconds: float, cpu: float) -> dict[str, Any]:
    """Each module's verdicts from mutmut's records, and the diff of every mutant that was not killed."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    modules: dict[str, Any] = {}
    cwd = Path.cwd()
    os.chdir(work)  # mutmut's records are relative to its folder
    try:
        for path in group_files(group):
            meta = json.loads(Path("mutants", path + ".meta").read_text())
            verdicts = {k: mutmut_status(v) for k, v in meta["exit_code_by_key"].items() if in_scope(group, k)}
            if not verdicts:
                continue
            counts = Counter(verdicts.values())
            unknown = set(counts) - KILLED - NOT_KILLED
            if unknown:
                sys.exit(f"mutation: {path}: mutants left {', '.join(sorted(unknown))}; see {work / 'mutmut.log'}")
            killed = sum(counts[s] for s in KILLED)
            modules[path] = {
                "group": group.name,
                "mutants": len(verdicts),
                "killed": killed,
                "survived": counts["survived"],
                "no_tests": counts["no tests"],
                "suspicious": counts["suspicious"],
                "timeout": counts["timeout"],
                "score": round(100.0 * killed / len(verdicts), 1),
                "not_killed": [{"mutant": k, "status": s, "function": function_of(k),
                                "diff": get_diff_for_mutant(k, path=path)}
                               for k, s in sorted(verdicts.items()) if s in NOT_KILLED],
            }
    finally:
        os.chdir(cwd)
    if group.functions:
        names: set[str] = set()  # every glob must still name a function (code moves)
        for path in group_files(group):
            meta = json.loads((work / "mutants" / (path + ".meta")).read_text())
            names |= {function_of(k) for k in meta["exit_code_by_key"]}
        stale = [f for f in group.functions if not any(fnmatch.fnmatchcase(n, f) for n in names)]
        if stale:
            print(f"mutation: group {group.name}: no function matches {', '.join(stale)} (renamed? fix GROUPS)")
    return {"seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1), "tests": list(group.tests),
            "modules": modules}


def changed_lines(diff: str) -> str:
    lines = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return " | ".join(" ".join(ln.split()) for ln in lines)


def print_table(modules: dict[str, Any], survivors: bool) -> None:
    print(f"{'module':<36} {'mutants':>7} {'killed':>6} {'survived':>8} {'no tests':>8} {'score':>6}")
    for path, m in sorted(modules.items()):
        print(f"{path:<36} {m['mutants']:>7} {m['killed']:>6} {m['survived']:>8} {m['no_tests']:>8} "
              f"{m['score']:>5.1f}%")
        if survivors:
            for s in m["not_killed"]:
                print(f"    {s['status']:<9} {s['function']}: {changed_lines(s['diff'])}")


def git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                         check=False).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "nnlo", "nnlo_sched", "tests"], cwd=REPO,
                           capture_output=True, text=True, check=False).stdout.strip()
    return out + ("+changes" if dirty else "")


def write_report(report: dict[str, Any]) -> None:
    import mutmut

    report.update(tool=f"mutmut {mutmut.__version__}", commit=git_commit(),
                  seconds=round(sum(g["seconds"] for g in report["groups"].values()), 1),
                  cpu_seconds=round(sum(g.get("cpu_seconds", 0.0) for g in report["groups"].values()), 1))
    REPORT.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")


def select(names: list[str]) -> list[Group]:
    if not names:
        return list(GROUPS)
    chosen = []
    for name in names:
        found = [g for g in GROUPS if name == g.name or name in group_files(g)]
        if not found:
            sys.exit(f"mutation: no group or module {name!r}; groups: {', '.join(g.name for g in GROUPS)}")
        chosen += [g for g in found if g not in chosen]
    return chosen


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/mutation.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="GROUP|MODULE", help="run only these (default: all)")
    parser.add_argument("--list", action="store_true", help="print the modules and the tests that pin them")
    parser.add_argument("--survivors", action="store_true", help="print every mutant that was not killed")
    parser.add_argument("--fail-under", type=float, default=FAIL_UNDER, metavar="PERCENT",
                        help=f"exit 1 if a module scores below this (default {FAIL_UNDER:g})")
    parser.add_argument("--verbose", action="store_true", help="print the end of mutmut's own output")
    args = parser.parse_args(argv)
    groups = select(args.names)
    if args.list:
        for g in groups:
            scope = f" (functions: {', '.join(g.functions)})" if g.functions else ""
            print(f"{g.name}: {' '.join(group_files(g))}{scope}\n    tests: {' '.join(tests_of(g))}")
        return 0
    report: dict[str, Any] = {"modules": {}, "groups": {}}
    if args.names and REPORT.is_file():  # a partial run updates the last full report
        report = json.loads(REPORT.read_text())
    start = time.monotonic()
    for g in groups:
        print(f"mutation: {g.name} ({', '.join(group_files(g))}) ...", flush=True)
        result = run_group(g, args.verbose)
        report["modules"] = {p: m for p, m in report["modules"].items() if m["group"] != g.name}
        report["modules"].update(result.pop("modules"))
        report["groups"][g.name] = result
        print(f"    {result['seconds']:.0f} s ({result['cpu_seconds']:.0f} s of CPU)", flush=True)
        write_report(report)  # after each group: an interrupted run keeps what it measured
    elapsed = time.monotonic() - start
    ran = {p: m for p, m in report["modules"].items() if m["group"] in {g.name for g in groups}}
    print()
    print_table(ran, args.survivors)
    low = [p for p, m in ran.items() if m["score"] < args.fail_under]
    cpu = sum(report["groups"][g.name]["cpu_seconds"] for g in groups)
    print(f"\n{len(ran)} modules in {elapsed / 60:.1f} min ({cpu / 60:.1f} min of CPU); report: "
          f"{REPORT.relative_to(REPO)}")
    if low:
        print(f"below {args.fail_under:g} %: {', '.join(low)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
