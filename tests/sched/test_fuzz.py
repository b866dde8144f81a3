"""Fuzz: every command over fuzzed command lines, profile files and run directories ends cleanly.

The REAL ``nnlo`` entry point (:func:`nnlo_sched.cli.main`, what the console script runs) is driven in this
process with hypothesis-generated inputs, against recording stand-ins for the batch systems' programs
(sbatch, squeue, sacct, scancel; bsub, bjobs, bkill; qsub, qstat, qdel) first on PATH. For every input:

* the exit status is 0 or 2 (bad input), never a traceback, never "internal error" (the last resort);
* a refusal is ONE line on stderr starting ``nnlo: error:`` (notes and warnings aside);
* a refused command changed no file (every run directory hashed before and after); ``--dry-run`` wrote none;
* no scheduler program saw a job id that is not one of the run's own, well-formed ids (``bkill 0``,
  ``qdel all``, ``scancel --user=x`` can never be built), and a cancel only ever touches the run it named.

Bounded (derandomized, a fixed number of examples per test: ~30 s on an idle 2-core machine, ~60 s on a busy
one) so that it runs in CI; ``NNLO_FUZZ_SCALE``/``NNLO_FUZZ_RANDOM`` make a longer hunt.
The options fuzzed are read from the click commands themselves, so a new option is fuzzed without a change
here; the profile keys from the profile schema; the state fields from the state record.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from nnlo_sched.cli import main

#: NNLO_FUZZ_SCALE=10 runs ten times the examples; NNLO_FUZZ_RANDOM=1 draws new ones each run (a longer hunt;
#: hypothesis prints how to reproduce a failure). CI runs the fixed, derandomized set.
SCALE = max(1, int(os.environ.get("NNLO_FUZZ_SCALE", "1") or "1"))
SETTINGS = dict(deadline=None, derandomize=not os.environ.get("NNLO_FUZZ_RANDOM"), database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.filter_too_much])

# -- values a fuzzer tries first ----------------------------------------------------------------------------
NUMBERS = ["nan", "NaN", "inf", "-inf", "+inf", "Infinity", "1e999", "-1e999", "1e308", "-0", "0", "-1", "1", "2",
           "0.5", "1/4", "1/0", "0/0", "1e-320", "9" * 30, "-" + "9" * 30, "1" + "0" * 400, "0x10", "1_000", "\uff13"]
WORDS = ["", " ", "\t", "-", "--", "-1", "--help", "all", "ALL", "0", "--user=x", "x,y", "a b", "1;rm -rf ~",
         "$(id)", "~nosuchuser/x", "/", ".", "..", "é", "\U0001f600", "x" * 300, "a" * 5000]
VALUES = st.one_of(st.sampled_from(NUMBERS), st.sampled_from(NUMBERS + WORDS),
                   st.text(max_size=12).filter(lambda s: "\x00" not in s), st.floats().map(repr),
                   st.integers().map(str))
#: job ids as a damaged record may hold them: the specials that mean "every job" to bkill and qdel, options,
#: lists, shell syntax, and JSON values of the wrong type
BAD_IDS = ["0", "00", "-1", "all", "ALL", "--user=x", "-u", "1,2", "1 2", "1;id", "$(id)", "", " ", "1[0]", "x",
           0, 7, -3, 1.5, None, True, [], {}]


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10),
                        st.sampled_from(BAD_IDS))
    return st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=3),
                                                     st.dictionaries(st.text(max_size=6), c, max_size=3)),
                        max_leaves=6)


# -- running the real command -------------------------------------------------------------------------------
def nnlo(*argv: str) -> tuple[int, str, str]:
    """``nnlo ARGV`` through the console script's entry point: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
            code: Any = 0
        except SystemExit as e:
            code = e.code
    code = 0 if code is None else code if isinstance(code, int) else 1
    return code, out.getvalue(), err.getvalue()


def assert_clean(argv: tuple[str, ...], code: int, err: str) -> None:
    """Exit 0 or 2, no traceback, no last-resort line; a refusal is one ``nnlo: error:`` line."""
    shown = f"nnlo {' '.join(map(repr, argv))[:400]}\n--- stderr ---\n{err[-3000:]}"
    assert "Traceback" not in err, shown
    assert "internal error" not in err, shown
    assert code in (0, 2), f"exit {code}: {shown}"
    if code != 0:
        lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("nnlo: note:", "nnlo: warning:"))]
        assert len(lines) == 1 and lines[0].startswith("nnlo: error: "), shown


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` by relative path -> content hash (folders and links by kind)."""
    out: dict[str, str] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# -- the world: stand-in batch systems, test profiles, a runs home ------------------------------------------
PROFILES = {
    "fzslurm": 'scheduler = "slurm"\nlauncher = "srun"\ncores_per_node = 8\nnodes = 4\n',
    "fzlsf": 'scheduler = "lsf"\nlauncher = "mpirun"\ncores_per_node = 8\nnodes = 4\nsignal = "USR1"\n',
    "fzpbs": 'scheduler = "pbs"\nlauncher = "mpirun"\ncores_per_node = 8\nnodes = 4\n',
}
SCHED_OF = {"fzslurm": "slurm", "fzlsf": "lsf", "fzpbs": "pbs"}
CANCEL_PROGRAMS = {"scancel": "slurm", "bkill": "lsf", "qdel": "pbs"}
QUERY_PROGRAMS = {"squeue": "slurm", "sacct": "slurm", "bjobs": "lsf", "qstat": "pbs"}
SUBMIT_PROGRAMS = {"sbatch", "bsub", "qsub"}


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.clusters = root / "clusters"
        self.user = root / "user-clusters"
        self.bin = root / "bin"
        self.calls_file = root / "calls.jsonl"
        self.home = root / "runs"
        self.work = root / "work"

    def calls(self) -> list[dict[str, Any]]:
        if not self.calls_file.exists():
            return []
        calls = []
        for line in self.calls_file.read_text().split("\n"):
            if line:
                prog, *args = line.split("\037")
                calls.append({"prog": prog, "args": args})
        return calls

    def reset(self) -> None:
        import shutil

        for d in (self.home, self.user, self.work):  # emptied, not removed: the work folder is the cwd
            d.mkdir(exist_ok=True)
            for p in d.iterdir():
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink()
        for f in (self.calls_file, self.root / "jobs.json"):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()


def _program(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    w = World(tmp_path_factory.mktemp("fuzz"))
    for d in (w.clusters, w.bin):
        d.mkdir()
    for name, text in PROFILES.items():
        (w.clusters / f"{name}.toml").write_text(text + f'python = "{sys.executable}"\n')
    # one line per call: the program, then each argument after a \037 (unit separator); plain sh, since
    # status and cancel call them many times per example
    record = (f'{{ printf "%s" "$(basename "$0")"; for a in "$@"; do printf "\\037%s" "$a"; done; echo; }} '
              f'>> {w.calls_file}\n')
    answers = {"sbatch": "echo 4242\n", "bsub": "cat > /dev/null\necho 'Job <4242> is submitted to queue <b>.'\n",
               "qsub": "echo 4242.pbs01\n"}
    for prog in ("sbatch", "squeue", "sacct", "scancel", "bsub", "bjobs", "bkill", "qsub", "qstat", "qdel"):
        # queries know no job (absent = ended), cancels succeed, submits print a new id
        _program(w.bin / prog, record + answers.get(prog, ""))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{w.bin}{os.pathsep}{os.environ['PATH']}")
        mp.setenv("NNLO_CLUSTERS", f"{w.clusters}{os.pathsep}{w.user}")
        mp.setenv("XDG_CONFIG_HOME", str(w.root / "xdg"))
        mp.setenv("NNLO_HOME", str(w.home))
        mp.setenv("NNLO_SCHED_RETRIES", "0")
        mp.delenv("NNLO_DEADLINE", raising=False)
        w.reset()
        mp.chdir(w.work)
        yield w


# -- 1. option values of submit (and the inner train/optimize options), layout and status ------------------
def _options(command: click.Command, skip: tuple[str, ...] = ()) -> list[tuple[str, bool]]:
    """(longest spelling, is a flag) of every option of ``command``."""
    out = []
    for p in command.params:
        if isinstance(p, click.Option) and not (set(p.opts) & {"--help", *skip}):
            out.append((max(p.opts, key=len), bool(p.is_flag)))
    return out


def _argv_from(options: list[tuple[str, bool]]) -> st.SearchStrategy[list[str]]:
    def one(choice: tuple[str, bool]) -> st.SearchStrategy[list[str]]:
        name, flag = choice
        return st.just([name]) if flag else VALUES.map(lambda v: [name, v])
    return st.lists(st.sampled_from(options).flatmap(one), max_size=4).map(lambda parts: [a for p in parts for a in p])


def _commands() -> dict[str, click.Command]:
    from nnlo_sched.commands.layout import layout_command
    from nnlo_sched.commands.optimize import optimize_command
    from nnlo_sched.commands.submit import submit_command
    from nnlo_sched.commands.train import train_command

    return {"submit": submit_command, "train": train_command, "optimize": optimize_command, "layout": layout_command}


CMDS = _commands()
SUBMIT_OPTS = _options(CMDS["submit"], skip=("--dry-run", "--run-dir"))
INNER_OPTS = {k: _options(CMDS[k], skip=("--np",)) for k in ("train", "optimize")}
LAYOUT_OPTS = _options(CMDS["layout"])
CLUSTERS = ["local", "summit", "titan", "cscs", "flatiron", *PROFILES]


@settings(max_examples=300 * SCALE, **SETTINGS)
@given(cluster=st.sampled_from(CLUSTERS), outer=_argv_from(SUBMIT_OPTS), kind=st.sampled_from(["train", "optimize"]),
       data=st.data())
def test_submit_dry_run_over_fuzzed_options(world: World, cluster: str, outer: list[str], kind: str,
                                            data: st.DataObject) -> None:
    inner = data.draw(_argv_from(INNER_OPTS[kind]), label="inner")
    world.reset()
    argv = ("submit", "-c", cluster, "-A", "acct", *outer, "--dry-run", "--no-check", kind, "--model", "m.py", *inner)
    code, _, err = nnlo(*argv)
    assert_clean(argv, code, err)
    assert tree(world.work) == {} and tree(world.home) == {}, "a dry run wrote a file"
    assert world.calls() == [], "a dry run ran a scheduler program"


@settings(max_examples=300 * SCALE, **SETTINGS)
@given(cluster=st.sampled_from(CLUSTERS), argv=_argv_from(LAYOUT_OPTS))
def test_layout_over_fuzzed_options(world: World, cluster: str, argv: list[str]) -> None:
    """A layout is either one refusal line or a placement whose rank map covers exactly its world; it never
    runs a scheduler program."""
    full = ("layout", "-c", cluster, *argv)
    code, out, err = nnlo(*full)
    assert_clean(full, code, err)
    assert world.calls() == []
    if code == 0 and "--help" not in argv and "-h" not in argv:
        if "--json" in argv:
            lay = json.loads(out)
            world_size, nodes = lay["world_size"], lay["nodes"]
            assert len(lay["ranks"]) == world_size and world_size >= 1
        else:
            head = re.search(r"^run +(?:train|optimize): (\d+) ranks", out, re.MULTILINE)
            last = re.search(r"^rank map .*?(\d+)(?:-(\d+))? \S+$", out, re.MULTILINE)
            assert head and last, out
            world_size = int(head[1])
            assert int(last[2] or last[1]) == world_size - 1, out  # the map ends at the last rank
            nodes = int(re.search(r"^nodes +(\d+) x", out, re.MULTILINE)[1])  # type: ignore[index]
        assert 1 <= nodes <= world_size


@settings(max_examples=150 * SCALE, **SETTINGS)
@given(argv=st.lists(st.sampled_from(["--every", "-w", "--json", "--interval", "--job", "--from", "--to",
                                      "--summary"]) | VALUES, max_size=4),
       verb=st.sampled_from(["status", "logs", "timeline", "cancel", "resume", "clusters", "job", "run", "nope"]))
def test_any_command_over_fuzzed_argv(world: World, argv: list[str], verb: str) -> None:
    """Commands over argv of nothing but fuzz (an empty runs home): refusals, never a crash or a hang."""
    world.reset()
    if "-w" in argv or "--watch" in argv:
        argv = [a for a in argv if a not in ("-w", "--watch")]  # a watch on no runs ends at once anyway
    full = (verb, *argv)
    code, _, err = nnlo(*full)
    assert_clean(full, code, err)
    assert world.calls() == []


ENV_VALUES = ["", " ", "~nosuchuser/x", "~", "/etc/passwd", "/nonexistent/x", "x" * 5000, "1" * 300, ":", "::",
              "a:~nosuchuser",
              "nan", "-1", "é"]


@settings(max_examples=100 * SCALE, **SETTINGS)
@given(env=st.dictionaries(st.sampled_from(["NNLO_HOME", "NNLO_CLUSTERS", "XDG_CONFIG_HOME", "NNLO_SCHED_RETRIES",
                                            "NNLO_SCHED_RETRY_DELAY", "NNLO_DEADLINE"]),
                           st.sampled_from(ENV_VALUES) | VALUES, min_size=1, max_size=3),
       argv=st.sampled_from([("status",), ("status", "--json"), ("clusters",), ("cancel", "abcd"),
                             ("layout", "-c", "local", "--workers", "1"), ("logs", "abcd"),
                             ("submit", "-c", "local", "--workers", "1", "--dry-run", "--no-check", "train",
                              "--model", "m.py")]))
def test_commands_over_fuzzed_environment_variables(world: World, env: dict[str, str], argv: tuple[str, ...]) -> None:
    """nnlo's own environment variables (runs home, profile folders, retry policy, deadline) hold junk."""
    world.reset()
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        code, _, err = nnlo(*argv)
    assert_clean(argv, code, err)
    assert tree(world.work) == {} and world.calls() == []


#: the dictionary a fuzzer sweeps every option with: non-finite and out-of-range numbers, empty, junk
SWEEP = ["nan", "inf", "-inf", "1e999", "-1", "0", "9" * 30, "1/0", "", "x"]
NON_FINITE = ("nan", "inf", "-inf", "1e999", "NaN", "Infinity")
_TRAIN_NAMES = {name for name, _ in INNER_OPTS["train"]}


def _numeric(command: click.Command, name: str) -> bool:
    """Whether option ``name`` of ``command`` takes a number by its click type (int, float, ranges, finite)."""
    for p in command.params:
        if name in getattr(p, "opts", ()):
            return isinstance(p.type, click.types._NumberParamTypeBase) or p.type.name in ("number", "float",
                                                                                             "integer")
    return False


def _templates(command: click.Command, name: str) -> list[str]:
    """Values of an option that holds numbers inside text (``sgd:lr=1.0``, ``val_loss,<,4``): its default and
    the examples in its help, each number replaced by every non-finite spelling."""
    import re

    for p in command.params:
        if name in getattr(p, "opts", ()):
            seeds = [p.default] if isinstance(p.default, str) else []
            seeds += re.findall(r"'([^'\s]*\d[^'\s]*)'", getattr(p, "help", "") or "")
            seeds += re.findall(r"e\.g\. (?:" + re.escape(name) + r" )?([^\s']*\d[^\s']*?)[).,;]?(?:\s|$)",
                                getattr(p, "help", "") or "")
            return [re.sub(r"\d+(?:\.\d+)?", bad, s, count=1) for s in seeds if re.search(r"\d", s)
                    for bad in NON_FINITE]
    return []


def _sweep(prefix: tuple[str, ...], options: list[tuple[str, bool]], suffix: tuple[str, ...] = (),
           command: click.Command | None = None) -> list[str]:
    """Run ``nnlo PREFIX --opt VALUE SUFFIX`` for every option and every :data:`SWEEP` value (and, for text
    that holds numbers, every :func:`_templates` value); the failures. A numeric option must refuse a
    non-finite value (exit 2), not only survive it."""
    failures = []
    for name, flag in options:
        if flag:
            continue
        values = SWEEP + (_templates(command, name) if command is not None else [])
        for value in values:
            argv = (*prefix, name, value, *suffix)
            code, _, err = nnlo(*argv)
            try:
                assert_clean(argv, code, err)
                if command is not None and value in NON_FINITE and _numeric(command, name):
                    assert code == 2, f"nnlo {' '.join(argv)} accepted a non-finite number"
            except AssertionError as e:
                failures.append(str(e).split("\n--- stderr ---\n")[0] + " -> " + " ".join(err.split())[-200:])
    return failures


@pytest.mark.parametrize("what", ["submit", "train", "optimize", "layout", "others"])
def test_every_numeric_option_over_a_dictionary_of_bad_numbers(world: World, what: str) -> None:
    """Each option of each command alone with each value of :data:`SWEEP` (the dictionary pass of a fuzzer,
    so that a class such as "nan in any option" is found for every option, not by luck)."""
    world.reset()
    base = ("--dry-run", "--no-check")
    from nnlo_sched.commands.control import logs_command
    from nnlo_sched.commands.status import status_command
    from nnlo_sched.commands.timeline import timeline_command

    if what == "submit":
        failures = _sweep(("submit", "-c", "summit", "-A", "a"), SUBMIT_OPTS, (*base, "train", "--model", "m.py"),
                          CMDS["submit"])
    elif what == "train":
        failures = _sweep(("submit", "-c", "summit", "-A", "a", *base, "train", "--model", "m.py"),
                          [o for o in INNER_OPTS["train"] if o[0] != "--model"], (), CMDS["train"])
    elif what == "optimize":  # the search's own options (its training options are those of train)
        failures = _sweep(("submit", "-c", "cscs", "-A", "a", "--blocks", "2", *base, "optimize", "--model", "m.py"),
                          [o for o in INNER_OPTS["optimize"] if o[0] not in _TRAIN_NAMES], (), CMDS["optimize"])
    elif what == "layout":
        failures = _sweep(("layout", "-c", "summit"), LAYOUT_OPTS, (), CMDS["layout"])
    else:
        failures = (_sweep(("status",), [("--every", False)], (), status_command)
                    + _sweep(("logs", "nope"), [("--interval", False)], (), logs_command)
                    + _sweep(("timeline", "nope"), [("--from", False), ("--to", False)], (), timeline_command))
    assert failures == [], f"{len(failures)} failure(s):\n" + "\n".join(failures[:40])
    assert tree(world.work) == {} and tree(world.home) == {} and world.calls() == []


# -- 2. user profile files: fuzzed values, bytes that are not UTF-8, cycles through extends and aliases ----
def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if value != value else "inf" if value == float("inf") else "-inf" if value == -float("inf") \
            else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    return '""'


def _profile_keys() -> list[str]:
    from nnlo_sched.profiles import schema

    return [*schema._SCALARS, "queues", "extends", "aliases", "default_queue"]


TOML_VALUES = st.recursive(
    st.one_of(st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
              st.sampled_from(["local", "slurm", "fz0", "fz1", "fz2", "auto", "1h", "nan"])),
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.sampled_from(["walltime", "max_nodes", "x"]), c,
                                                                 max_size=2)),
    max_leaves=5)


@st.composite
def profile_files(draw: st.DrawFn) -> dict[str, bytes]:
    """1-3 user profiles ``fz0``... that may extend each other (by name or alias) and hold fuzzed values."""
    n = draw(st.integers(1, 3))
    files = {}
    for i in range(n):
        lines = []
        if draw(st.booleans()):
            lines.append(f'aliases = [{json.dumps(draw(st.sampled_from(["a0", "a1", "a2", f"fz{i}", "local"])))}]')
        parent = draw(st.sampled_from(["local", "fzslurm", "summit", "fz0", "fz1", "fz2", "a0", "a1", "a2", f"fz{i}"]))
        lines.append(f'extends = "{parent}"')
        for key, value in draw(st.lists(st.tuples(st.sampled_from(_profile_keys()), TOML_VALUES), max_size=3)):
            if key not in ("extends", "aliases"):
                lines.append(f"{key} = {_toml(value)}")
        text = ("\n".join(dict.fromkeys(lines)) + "\n").encode()
        damage = draw(st.sampled_from(["none", "none", "latin1", "bytes", "truncate"]))
        if damage == "latin1":
            text += 'description = "caf\xe9"\n'.encode("latin-1")
        elif damage == "bytes":
            text = draw(st.binary(max_size=40))
        elif damage == "truncate":
            text = text[:draw(st.integers(0, len(text)))]
        files[f"fz{i}"] = text
    return files


@settings(max_examples=150 * SCALE, **SETTINGS)
@given(files=profile_files(), which=st.sampled_from(["fz0", "fz1", "a0", "local", "summit"]))
def test_user_profiles_over_fuzzed_files(world: World, files: dict[str, bytes], which: str) -> None:
    world.reset()
    for name, data in files.items():
        (world.user / f"{name}.toml").write_bytes(data)
    for argv in (("clusters",), ("clusters", "show", which), ("layout", "-c", which, "--workers", "1"),
                 ("submit", "-c", which, "-A", "x", "--dry-run", "--no-check", "train", "--model", "m.py")):
        code, _, err = nnlo(*argv)
        assert_clean(argv, code, err)
    assert tree(world.work) == {} and tree(world.home) == {} and world.calls() == []


# -- 3. run directories: fuzzed state records, then status, cancel and resume -------------------------------
def _make_run(world: World, cluster: str, index: int, state: str, alive: bool) -> tuple[str, list[str]]:
    """A run made by the real code (spec, script, state) under the runs home, with two recorded jobs."""
    from nnlo_sched.profiles import load_profile
    from nnlo_sched.runs import create_run
    from nnlo_sched.spec import RunSpec
    from nnlo_sched.state import JobRecord, update_state

    spec = RunSpec.from_argv(kind="train", args=["--model", "m.py"], cluster=cluster, name=f"r{index}", walltime_s=600,
                   workers=1, workdir=str(world.work))
    run = create_run(spec, load_profile(cluster), world.home)
    ids = {"slurm": ["41", "42"], "lsf": ["41", "42"], "pbs": ["41.pbs01", "42.pbs01"]}[SCHED_OF[cluster]]
    with update_state(run.dir) as st_:
        st_.state = state
        st_.jobs = [JobRecord(job_id=ids[0], submitted_at=1.0, started_at=2.0, ended_at=3.0, status="walltime"),
                    JobRecord(job_id=ids[1], submitted_at=3.0, depends_on=ids[0],
                              status="queued" if alive else "failed", started_at=None if alive else 4.0)]
    return run.id, ids


@st.composite
def damage(draw: st.DrawFn) -> tuple[str, Any]:
    """How one run's files are damaged: a state field set to a fuzzed value or deleted, the text torn,
    replaced by bytes, the scheduler unknown, a job id that acts on other jobs, the spec torn."""
    from nnlo_sched.state import JobRecord, RunState

    run_keys = [f.name for f in dataclasses.fields(RunState)]
    job_keys = [f.name for f in dataclasses.fields(JobRecord)]
    kind = draw(st.sampled_from(["set", "set_job", "del", "del_job", "tear", "bytes", "scheduler", "job_id",
                                 "spec", "spec", "queue", "none"]))
    if kind == "set":
        return kind, (draw(st.sampled_from(run_keys)), draw(_json_values()))
    if kind == "set_job":
        return kind, (draw(st.sampled_from(job_keys)), draw(_json_values()))
    if kind == "del":
        return kind, draw(st.sampled_from(run_keys))
    if kind == "del_job":
        return kind, draw(st.sampled_from(job_keys))
    if kind == "tear":
        return kind, draw(st.floats(0, 1))
    if kind == "bytes":
        return kind, draw(st.binary(max_size=30))
    if kind == "scheduler":
        return kind, draw(st.sampled_from(["", "SLURM", "nope", "torque", " slurm", "slurm\n"]))
    if kind == "job_id":
        return kind, draw(st.sampled_from(BAD_IDS))
    if kind == "spec":
        from nnlo_sched.spec import RunSpec

        return kind, draw(st.one_of(st.sampled_from(["tear", "list", "missing"]),
                                    st.tuples(st.sampled_from([f.name for f in dataclasses.fields(RunSpec)]),
                                              _json_values())))
    if kind == "queue":  # the local scheduler's queue; pids only of no process (0: our own group, 1: init)
        job = st.fixed_dictionaries({"id": st.sampled_from(["1", "2", 1, None]),
                                     "state": st.sampled_from(["PENDING", "RUNNING", "nope", None]),
                                     "pid": st.sampled_from([None, 0, 1, -1, "7", 2**40, 1.5])})
        return kind, draw(st.one_of(_json_values(), st.fixed_dictionaries(
            {"next_id": st.sampled_from([3, 0, "x"]), "jobs": st.lists(job, max_size=2)})))
    return kind, None


def _apply(run_dir: Path, how: tuple[str, Any]) -> None:
    kind, arg = how
    path = run_dir / "state.json"
    data = json.loads(path.read_text())
    if kind == "set":
        data[arg[0]] = arg[1]
    elif kind == "set_job":
        data["jobs"][-1][arg[0]] = arg[1]
    elif kind == "del":
        data.pop(arg, None)
    elif kind == "del_job":
        data["jobs"][-1].pop(arg, None)
    elif kind == "scheduler":
        data["scheduler"] = arg
    elif kind == "job_id":
        data["jobs"][-1]["job_id"] = arg
        data["jobs"][-1]["status"] = "queued"
        data["state"] = "queued"
    elif kind == "spec":
        spec = run_dir / "spec.json"
        text = spec.read_text()
        if arg == "tear":
            spec.write_text(text[: len(text) // 2])
        elif arg == "list":
            spec.write_text("[]")
        elif arg == "missing":
            spec.unlink()
        else:
            d = json.loads(text)
            d[arg[0]] = arg[1]
            spec.write_text(json.dumps(d))
        return
    if kind == "queue":  # the run becomes a local one with a queued job and this queue file
        (run_dir / "local").mkdir(exist_ok=True)
        (run_dir / "local" / "queue.json").write_text(json.dumps(arg))
        data.update(scheduler="local", state="queued")
        data["jobs"][-1].update(job_id="1", status="queued")
    text = json.dumps(data)
    if kind == "tear":
        path.write_text(text[: int(len(text) * arg)])
    elif kind == "bytes":
        path.write_bytes(arg)
    elif kind != "none":
        path.write_text(text)


@st.composite
def run_sets(draw: st.DrawFn) -> tuple[list[tuple[str, str, bool]], tuple[str, Any]]:
    """2-3 runs (cluster, state, has a queued job) and the damage done to the first one."""
    runs = draw(st.lists(st.tuples(st.sampled_from(list(PROFILES)),
                                   st.sampled_from(["queued", "running", "failed", "cancelled", "done"]),
                                   st.booleans()), min_size=2, max_size=3))
    return runs, draw(damage())


def _setup_runs(world: World, runs: list[tuple[str, str, bool]], how: tuple[str, Any]) -> list[tuple[str, list[str]]]:
    world.reset()
    made = [_make_run(world, c, i, s, a) for i, (c, s, a) in enumerate(runs)]
    _apply(world.home / made[0][0], how)
    return made


def _state_of(world: World, run_id: str) -> Any:
    from nnlo_sched.state import StateError, read_state

    try:
        return read_state(world.home / run_id)
    except StateError:
        return None


def _assert_calls_are_own(world: World, allowed: dict[str, set[str]], cancels_of: set[str] | None = None) -> None:
    """Every id a scheduler program saw is well formed and one of ``allowed[scheduler]``; cancel programs saw
    only ``cancels_of`` (the named run's ids)."""
    from nnlo_sched.schedulers import get_scheduler

    for call in world.calls():
        prog, args = call["prog"], call["args"]
        if prog in SUBMIT_PROGRAMS:
            continue
        sched = CANCEL_PROGRAMS.get(prog) or QUERY_PROGRAMS[prog]
        s = get_scheduler(sched)
        if prog in ("squeue", "sacct"):
            ids = args[args.index("-j") + 1].split(",")
        elif prog == "bjobs":
            ids = [a for a in args if a not in ("-a", "-w")]
        else:
            ids = list(args)
        for j in ids:
            assert s.job_id_syntax.fullmatch(j), f"{prog} was run with {j!r}: {call}"
            assert j in allowed.get(sched, set()), f"{prog} was run with {j!r}, no run's job: {call}"
            if prog in CANCEL_PROGRAMS:
                assert cancels_of is not None and j in cancels_of, f"{prog} cancelled {j!r} of another run: {call}"


def _allowed(world: World, made: list[tuple[str, list[str]]]) -> dict[str, set[str]]:
    from nnlo_sched.schedulers import NAMES

    out: dict[str, set[str]] = {}
    for run_id, _ in made:
        st_ = _state_of(world, run_id)
        if st_ is not None and st_.scheduler in NAMES:
            out.setdefault(st_.scheduler, set()).update(j.job_id for j in st_.jobs)
    return out


@pytest.mark.slow
@settings(max_examples=150 * SCALE, **SETTINGS)
@given(runs=run_sets())
def test_status_over_fuzzed_run_directories(world: World, runs: tuple[list[tuple[str, str, bool]],
                                                                      tuple[str, Any]]) -> None:
    made = _setup_runs(world, *runs)
    allowed = _allowed(world, made)
    for argv in (("status", "--json"), ("status",)):
        code, out, err = nnlo(*argv)
        assert_clean(argv, code, err)
        assert code == 0, f"one damaged run failed the listing: {err}"
        if argv == ("status", "--json"):
            views = {v["run_id"]: v for v in json.loads(out)}
            assert set(views) == {run_id for run_id, _ in made}, "a run is missing from the listing"
            for run_id, _ in made[1:]:  # the undamaged runs are shown as such
                assert views[run_id]["state"] != "damaged", views[run_id]
            first = views[made[0][0]]
            assert first["state"] != "damaged" or (first["error"] and "\n" not in first["error"]), first
        else:
            assert all(run_id in out for run_id, _ in made)
    _assert_calls_are_own(world, allowed)
    for argv in (("status", made[0][0]), ("logs", made[0][0])):
        code, _, err = nnlo(*argv)
        assert_clean(argv, code, err)


@st.composite
def references(draw: st.DrawFn, ids: list[str]) -> str:
    """What a user (or an unset variable) types for a run: empty, blank, prefixes of any length, paths, junk."""
    target = draw(st.sampled_from(ids))
    return draw(st.one_of(
        st.sampled_from(["", " ", "\t", "\n", "*", ".", "..", "/", "~", "-", "--all", "r", "r0", "r1-"]),
        st.integers(0, len(target)).map(lambda n: target[:n]),
        st.just(target), VALUES))


@pytest.mark.slow
@settings(max_examples=150 * SCALE, **SETTINGS)
@given(runs=run_sets(), verb=st.sampled_from(["cancel", "cancel", "resume"]), data=st.data())
def test_cancel_and_resume_over_fuzzed_references_and_records(world: World, runs: Any, verb: str,
                                                              data: st.DataObject) -> None:
    made = _setup_runs(world, *runs)
    ids = [run_id for run_id, _ in made]
    if verb == "resume":  # a resumed local run would start its job on this machine
        assume(all(getattr(_state_of(world, r), "scheduler", "") != "local" for r in ids))
    ref = data.draw(references(ids), label="ref")
    extra = data.draw(st.sampled_from([[], [], ["--epochs", "nan"], ["--epochs", "20"], ["--n-masters", "3"],
                                       ["--bogus"], ["--force"]]), label="options") if verb == "resume" else []
    allowed = _allowed(world, made)
    own_before = {r: {j.job_id for j in s.jobs} for r in ids if (s := _state_of(world, r)) is not None}
    before = tree(world.home)
    argv = (verb, ref, *extra)
    code, out, err = nnlo(*argv)
    assert_clean(argv, code, err)
    after = tree(world.home)
    changed = {p.split("/")[0] for p in set(before) | set(after) if before.get(p) != after.get(p)}
    if code != 0 or out.startswith("Usage:"):  # refused, or only the help was asked for (--help, -h)
        assert changed == set(), f"refused `nnlo {verb} {ref!r}` changed {sorted(changed)}: {err}"
        assert [c for c in world.calls() if c["prog"] in CANCEL_PROGRAMS or c["prog"] in SUBMIT_PROGRAMS] == []
        _assert_calls_are_own(world, allowed)
        return
    # it acted: on exactly one run, named by its whole id, its directory or a prefix of >= MIN_PREFIX chars
    from nnlo_sched.runs import MIN_PREFIX

    target = next((r for r in ids if f"run {r} (" in out), None)
    assert target is not None, f"`nnlo {verb} {ref!r}` did not say which run it acts on: {out}"
    assert ref == target or Path(ref).expanduser().resolve() == (world.home / target).resolve() or (
        len(ref) >= MIN_PREFIX and target.startswith(ref)), f"{verb} {ref!r} acted on {target}"
    assert changed <= {target}, f"{verb} {target} changed other runs: {sorted(changed)}"
    _assert_calls_are_own(world, allowed, own_before.get(target, set()))
