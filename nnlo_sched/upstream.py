"""Upstream command lines, unchanged: every option of mpi_learn's ``MPIDriver.py`` and NNLO's
``TrainingDriver.py`` / ``OptimizationDriver.py``, and what ``nnlo train`` / ``nnlo optimize`` do with it.

:data:`TABLE` is the single source of truth (docs/migrating.md's option table is tested against it). Each
upstream option is one :class:`Upstream` entry of one :class:`Kind`:

- ``same``: nnlo has the option under that name (a few upstream values are respelled, e.g. ``--mode sgd``
  -> ``downpour``, ``--log-level warn`` -> ``warning``);
- ``alias``: a hidden spelling of an nnlo option (``--train_data`` -> ``--train``, ``--easgd`` ->
  ``--mode easgd``); it adds no line to ``--help``;
- ``noop``: accepted (its value too), one ``nnlo: warning:`` line says it has no effect and why;
- ``refuse``: one ``nnlo: error:`` line says what to use instead; exit 2.

:func:`translate` rewrites an argv into nnlo's own spelling before click parses it, so every way a command
line reaches nnlo (``nnlo train``, ``-n N``, an external ``mpirun``, ``nnlo submit ... train``) gets the
same treatment: upstream names, argparse-style unique prefixes of long options (``--early`` ->
``--early-stopping``; an exact name always wins, an ambiguous prefix is an error naming the candidates),
mpi_learn's positional ``MODEL TRAIN_LIST VAL_LIST`` form, and ``--worker-optimizer-params "{...}"``
folded into the ``--worker-optimizer`` spec. :class:`UpstreamCommand` is the click command class that
applies it. Pure except for :func:`warn`, which prints (once, on rank 0 only under an MPI launch).
"""
from __future__ import annotations

import ast
import enum
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from nnlo.contract import ENV_LAUNCHED, EXIT_BAD_INPUT, HISTORY_FILE, LOG_DIR
from nnlo.errors import ConfigError
from nnlo_sched.launchers.local_launch import launch_rank
from nnlo_sched.params import TypedCommand, keep_typed

TRAINING = "TrainingDriver.py"
OPTIMIZATION = "OptimizationDriver.py"
MPI_LEARN = "MPIDriver.py"
#: mpi_opt's search driver (``hyperparameter_search_option*.py``), NNLO's OptimizationDriver.py before the merger
MPI_OPT = "hyperparameter_search_option.py"
#: which nnlo command replaces each upstream driver
COMMAND_OF = {TRAINING: "train", MPI_LEARN: "train", OPTIMIZATION: "optimize", MPI_OPT: "optimize"}


class Kind(enum.StrEnum):
    SAME = "same"
    ALIAS = "alias"
    NOOP = "noop"
    REFUSE = "refuse"


@dataclass(frozen=True)
class Upstream:
    """One upstream option and what nnlo does with it."""

    name: str  # as upstream spelled it, e.g. "--train_data"
    drivers: tuple[str, ...]  # the upstream drivers that had it
    kind: Kind
    takes_value: bool  # upstream's option consumes the next word
    becomes: tuple[str, ...] = ()  # ALIAS: the nnlo words replacing the name (its value follows, if any)
    values: Mapping[str, str] = field(default_factory=dict)  # upstream value (any case) -> nnlo value
    refused_values: Mapping[str, str] = field(default_factory=dict)  # value -> what to use instead
    note: str = ""  # NOOP: why it has no effect; REFUSE: what to use instead; else a remark for the docs
    only: str | None = None  # the one nnlo command the entry is for (the other has its own option of that name)
    unused_in_search: str = ""  # SAME, but nnlo optimize sets it per trial (nnlo.optimize.options.trial_overrides)

    def applies_to(self, command: str) -> bool:
        """``nnlo optimize`` takes every training option (as OptimizationDriver.py did); ``nnlo train`` the
        options of TrainingDriver.py and MPIDriver.py."""
        if self.only is not None:
            return command == self.only
        return command == "optimize" or any(COMMAND_OF[d] == command for d in self.drivers)


# the drivers that had an option (OptimizationDriver.py took every option of TrainingDriver.py)
T, S, M, P = (TRAINING, OPTIMIZATION), (OPTIMIZATION,), (MPI_LEARN,), (MPI_OPT,)
TM = (TRAINING, OPTIMIZATION, MPI_LEARN)
_LEVELS = {"warn": "warning", "critical": "error", "fatal": "error", "debug": "debug", "info": "info",
           "warning": "warning", "error": "error"}
_BUILTIN = ("is one of upstream's built-in example names; nnlo has no built-in models or data paths: pass "
            "a model file (e.g. --model examples/digits_torch.py) and --train/--val list files")


def _same(name: str, drivers: tuple[str, ...], takes_value: bool, note: str = "", **kw: Any) -> Upstream:
    return Upstream(name, drivers, Kind.SAME, takes_value, note=note, **kw)


def _alias(name: str, drivers: tuple[str, ...], takes_value: bool, *becomes: str, note: str = "",
           **kw: Any) -> Upstream:
    return Upstream(name, drivers, Kind.ALIAS, takes_value, becomes=becomes, note=note, **kw)


def _noop(name: str, drivers: tuple[str, ...], takes_value: bool, why: str) -> Upstream:
    return Upstream(name, drivers, Kind.NOOP, takes_value, note=why)


def _refuse(name: str, drivers: tuple[str, ...], takes_value: bool, instead: str, only: str | None = None) -> Upstream:
    return Upstream(name, drivers, Kind.REFUSE, takes_value, note=instead, only=only)


#: Every option of the three upstream drivers (see docs/migrating.md, generated checks in tests/compat).
TABLE: tuple[Upstream, ...] = (
    # -- the model and the data ----------------------------------------------------------------------
    _same("--model", T, True, "a .py model module, a torch .pt file or a Keras .json/.keras/.h5 file; "
          "MPIDriver.py's first positional argument", refused_values={n: _BUILTIN for n in
                                                                      ("mnist", "mnist_torch", "cifar10")}),
    _refuse("--example", S, True, "upstream's built-in examples (mnist, topclass, gan, cifar10) read "
            "hard-coded site paths; pass --model FILE --train LIST --val LIST"),
    _alias("--train_data", T, True, "--train", note="MPIDriver.py's second positional argument"),
    _alias("--val_data", T, True, "--val", note="MPIDriver.py's third positional argument"),
    _same("--features-name", TM, True),
    _same("--labels-name", TM, True),
    _same("--preload-data", TM, True, "any N >= 1 (or the bare flag) reads every listed file into memory "
          "once before training (nnlo samples across files at random, so it cannot read N files ahead)"),
    _same("--cache-data", TM, True, "DIR: each listed file is copied once, atomically, into DIR (node-local) "
          "and read from there; the bare flag keeps the data in memory"),
    _refuse("--copy-command", T, True, "nnlo copies into --cache-data DIR itself (atomically, once per "
            "file); stage data with your own command before the run instead"),
    _refuse("--model_weights", M, True, "load initial weights inside get_model() of a model module, or "
            "resume a run with --restore DIR"),
    # -- backends and devices ------------------------------------------------------------------------
    _same("--backend", T, True, "auto (default) follows the model's type"),
    _alias("--tf", M, False, "--backend", "keras"),
    _alias("--torch", M, False, "--backend", "torch"),
    _noop("--max-gpus", TM, True, "each rank uses the GPU its launcher or CUDA_VISIBLE_DEVICES gives it; "
          "nnlo submit --gpus-per-worker sizes GPU jobs"),
    _noop("--master-gpu", TM, False, "the master only adds updates; it runs on the CPU"),
    # -- the algorithm ---------------------------------------------------------------------------------
    _same("--mode", TM, True, "mpi_learn's sgd is downpour", values={"sgd": "downpour"}),
    _alias("--easgd", M, False, "--mode", "easgd"),
    _same("--synchronous", TM, False, "averages the workers' updates (upstream summed them)"),
    _same("--optimizer", TM, True, "the master's rule; default sgd:lr=1.0 (upstream: adam)"),
    _same("--worker-optimizer", TM, True, "NAME or NAME:key=value,...; default sgd:lr=<gem-lr> with GEM, "
          "adam:lr=0.001 otherwise"),
    _alias("--worker-optimizer-params", T, True, "--worker-optimizer",
           note="the dict is folded into the --worker-optimizer spec: --worker-optimizer adam "
                "--worker-optimizer-params \"{'lr': 0.01}\" -> --worker-optimizer adam:lr=0.01"),
    _same("--sync-every", TM, True),
    _same("--elastic-force", TM, True),
    _noop("--elastic-lr", TM, True, "upstream's EASGD never used it either; the step size is the worker "
          "optimizer's and the pull strength --elastic-force"),
    _noop("--elastic-momentum", TM, True, "upstream's EASGD never used it either; give the worker optimizer "
          "a momentum instead (e.g. --worker-optimizer sgd:lr=0.01,momentum=0.9)"),
    _same("--gem-lr", T, True, "the step of GEM's proxy and of its default worker SGD; refused beside a "
          "--worker-optimizer with another step"),
    _same("--gem-momentum", T, True),
    _same("--gem-kappa", T, True),
    _alias("--masters", M, True, "--n-masters"),
    _same("--n-masters", T, True),
    _alias("--processes", M, True, "--n-processes"),
    _same("--n-processes", T, True),
    # -- training length and stopping ------------------------------------------------------------------
    _same("--epochs", TM, True, "default 10 (upstream: 1)"),
    _same("--batch", TM, True),
    _same("--loss", TM, True, "default categorical_crossentropy (upstream: binary_crossentropy)"),
    _same("--early-stopping", TM, True),
    _same("--target-metric", TM, True),
    # -- checkpoints -------------------------------------------------------------------------------------
    _same("--checkpoint", T, True, "NAME becomes the run directory NAME/ (history, model, checkpoints/)",
          unused_in_search="one warning: every trial checkpoints into its own folder under --output every "
                           "--checkpoint-interval epochs, and --opt-restore resumes the search with its trials"),
    _same("--checkpoint-interval", T, True),
    _same("--restore", T, True, "a run or checkpoint folder that holds a checkpoint (else an error), or auto",
          unused_in_search="refused: a search resumes with --opt-restore, each interrupted trial from its "
                           "own checkpoint"),
    # -- output and observation ----------------------------------------------------------------------
    _same("--trial-name", TM, True, "names the run directory nnlo-runs/NAME",
          unused_in_search="one warning: it names the search (its default --output and its trials "
                           "NAME-<trial>-fold-<f>)"),
    _refuse("--output", T, True, f"nnlo train writes {HISTORY_FILE}, the model and checkpoints into its run "
            "directory: pass --checkpoint DIR (nnlo optimize has --output: its run directory)", only="train"),
    _same("--log-level", T, True, "warn, critical and fatal are accepted (critical/fatal = error)",
          values=_LEVELS),
    _refuse("--log-file", T, True, f"nnlo writes every rank's log to <run dir>/{LOG_DIR}/rank-<r>.log; redirect "
            "the console with 2> FILE"),
    _same("--monitor", TM, False),
    _same("--timeline", T, False, "see nnlo timeline RUN"),
    _alias("--trace", M, False, "--timeline"),
    _noop("--verbose", TM, False, f"per-epoch metrics go to the console and {HISTORY_FILE}; --log-level debug "
          "shows more"),
    _noop("--profile", M, False, "it profiled Theano; use --timeline or --monitor"),
    _noop("--thread_validation", T, False, "validation runs on the master between updates"),
    # -- hyperparameter search (nnlo optimize) ---------------------------------------------------------
    _same("--block-size", S, True, "default: the smallest block, n-fold x 2 ranks (upstream: 2)"),
    _same("--n-fold", S, True),
    _same("--num-iterations", S, True),
    _same("--hyper-opt", S, True, "bayesian (default), genetic, or random"),
    _same("--ga-populations", S, True, "argparse's prefix --ga-population works"),
    _same("--opt-restore", S, False, "resumes the search saved in --output"),
    _same("--target-objective", S, True),
    # -- mpi_opt's own spellings (its driver took mpi_learn's training options and O's search options) ------
    _noop("--label", P, True, "it named mpi_opt's coordinator files; a search writes into --output DIR and "
          "--trial-name names it"),
    _alias("--n-master", P, True, "--n-masters"),
    _alias("--n-process", P, True, "--n-processes"),
    _refuse("--previous-result", P, True, "resume a search with --opt-restore: it reads the state the search "
            "saved in --output"),
    _refuse("--try-restore", P, False, "resume a search with --opt-restore: it reads the state the search "
            "saved in --output"),
)

class UpstreamError(ConfigError):
    """An upstream option nnlo refuses, an ambiguous prefix, or a malformed upstream form (exit 2)."""


@dataclass(frozen=True)
class Translation:
    """An argv in nnlo's spelling, and the warnings (one line each) to print once."""

    args: list[str]
    warnings: list[str]


# ----------------------------------------------------------------------------------------------------
# the rewriting
# ----------------------------------------------------------------------------------------------------
def native_options(command: click.Command) -> dict[str, str]:
    """The command's own option names -> "flag", "value" or "optional" (a value that may be left out)."""
    found: dict[str, str] = {}
    for p in command.params:
        if not isinstance(p, click.Option):
            continue
        how = "flag" if p.is_flag else "optional" if getattr(p, "_flag_needs_value", False) else "value"
        for name in (*p.opts, *p.secondary_opts):
            found[name] = how
    return found


def resolve(name: str, candidates: Sequence[str], same: Mapping[str, str] | None = None,
            upstream: frozenset[str] = frozenset()) -> str | None:
    """argparse's rule, where upstream had it: an exact name; else the one option upstream had (``upstream``)
    that ``name`` is a prefix of; None if none. An option nnlo added is taken only by its whole name: a
    prefix is accepted where an upstream parser accepted it, never one that only nnlo's options would give a
    meaning (mpi_opt's ``--label`` is never ``--labels-name``: it is mpi_opt's own, exact, entry). An
    ambiguous prefix is an :class:`UpstreamError` naming the candidates, unless they are all spellings of one
    option (``same``: alias -> the option it spells; ``--va`` is ``--val`` or ``--val_data``)."""
    if name in candidates:
        return name
    matches = sorted({c for c in candidates if c.startswith(name) and c in upstream})
    meant = {(same or {}).get(c, c) for c in matches}
    if len(meant) == 1:
        return meant.pop()
    if matches:
        raise UpstreamError(f"{name} is ambiguous: it could be {', '.join(matches)}; spell the option out")
    return None


def translate(command_name: str, native: Mapping[str, str], argv: Sequence[str]) -> Translation:
    """``argv`` of ``nnlo <command_name>`` rewritten into nnlo's own options (see the module docstring)."""
    upstream = {e.name: e for e in TABLE if e.applies_to(command_name)}
    longs = sorted({n for n in native if n.startswith("--")} | set(upstream))
    # the names upstream's parsers had here: this command's entries, and those another command refuses for
    # itself (``only``: this command has the option of that name, as upstream did)
    had = frozenset(upstream) | {e.name for e in TABLE if e.only is not None}
    same = {e.name: e.becomes[0] for e in upstream.values()
            if e.kind is Kind.ALIAS and len(e.becomes) == 1 and e.name != "--worker-optimizer-params"}
    out: list[str] = []
    warnings: list[str] = []
    positionals: list[str] = []
    given: set[str] = set()
    worker_params: str | None = None
    args = list(argv)
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            positionals += args[i:]
            break
        if not token.startswith("-") or token == "-" or _is_number(token):
            positionals.append(token)
            continue
        if not token.startswith("--"):  # a short option (-n 3): click's own
            if token not in native and token[:2] in native:  # -n3: the value attached
                out.append(token)
                continue
            if token not in native:  # not ours: click names it (and nnlo submit's hint for its own options)
                out += args[i - 1:]
                break
            out.append(token)
            if native.get(token) == "value" and i < len(args):
                out.append(args[i])
                i += 1
            continue
        typed, eq, inline = token.partition("=")
        name = resolve(typed, longs, same, had)
        if name is None:  # not ours, not upstream's: click names it (with its suggestions), as typed
            out += args[i - 1:]
            break
        entry = upstream.get(name)
        how = native.get(name) or ("value" if entry is not None and entry.takes_value else "flag")
        value: str | None = None
        if eq:
            value = inline
        elif i < len(args) and (how == "value" or (how == "optional" and not args[i].startswith("-"))):
            value, i = args[i], i + 1
        if name in native:  # an nnlo option (exact names always win over upstream ones)
            given.add(name)
            out += [name] if value is None else [name, _value(entry, name, value)]
            continue
        assert entry is not None
        if entry.kind is Kind.REFUSE:
            raise UpstreamError(f"{name} (upstream {', '.join(entry.drivers)}) is not supported by nnlo "
                                f"{command_name}; {entry.note}")
        if entry.kind is Kind.NOOP:
            _once(warnings, f"nnlo: warning: {name} has no effect in nnlo ({entry.note})")
            continue
        if name == "--worker-optimizer-params":
            worker_params = value if value is not None else "{}"
            continue
        given.add(entry.becomes[0])
        out += list(entry.becomes)
        if entry.takes_value and value is not None:
            out.append(_value(upstream.get(entry.becomes[0]) or entry, name, value))
    out = _positional(positionals, given) + out
    if worker_params is not None:
        out = _fold_worker_params(out, worker_params)
    return Translation(out, warnings)


def _once(lines: list[str], line: str) -> None:
    if line not in lines:
        lines.append(line)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _value(entry: Upstream | None, name: str, value: str) -> str:
    """An upstream value in nnlo's spelling (``sgd`` -> ``downpour``); a refused value is an error."""
    if entry is None:
        return value
    why = entry.refused_values.get(value)
    if why is not None and not Path(value).exists():
        raise UpstreamError(f"{name} {value} {why}")
    return entry.values.get(value.lower(), entry.values.get(value, value))


#: mpi_learn's MPIDriver.py positional arguments, in order
POSITIONAL = ("--model", "--train", "--val")


def _positional(words: list[str], given: set[str]) -> list[str]:
    """``MODEL TRAIN_LIST VAL_LIST`` (mpi_learn's form) -> ``--model MODEL --train ... --val ...``."""
    if len(words) > len(POSITIONAL):
        raise UpstreamError(f"unexpected argument {words[len(POSITIONAL)]!r}; the positional form is "
                            "MODEL TRAIN_LIST VAL_LIST [options] (mpi_learn's MPIDriver.py)")
    out: list[str] = []
    for option, word in zip(POSITIONAL, words, strict=False):
        if option in given:
            raise UpstreamError(f"{option} is given twice: as {option} and as the positional argument "
                                f"{word!r}; keep one")
        out += [option, word]
    return out


def _fold_worker_params(args: list[str], params: str) -> list[str]:
    """``--worker-optimizer NAME`` + ``--worker-optimizer-params "{'lr': 0.01}"`` -> ``NAME:lr=0.01``."""
    try:
        parsed = ast.literal_eval(params)
    except (ValueError, SyntaxError):
        parsed = None
    if not isinstance(parsed, dict) or not all(isinstance(k, str) for k in parsed) or not all(
            isinstance(v, (int, float)) and not isinstance(v, complex) for v in parsed.values()):
        raise UpstreamError(f"--worker-optimizer-params {params!r} is not a dict of numbers, e.g. "
                            "\"{'lr': 0.01, 'momentum': 0.9}\"")
    where = [k for k, a in enumerate(args[:-1]) if a == "--worker-optimizer"]
    if not where:
        if not parsed:
            return args
        raise UpstreamError("--worker-optimizer-params needs --worker-optimizer NAME in nnlo (the default "
                            "differs from upstream's adam), e.g. --worker-optimizer adam")
    k = where[-1] + 1
    pairs = [f"{'lr' if key == 'learning_rate' else key}={_number(v)}" for key, v in parsed.items()]
    if pairs:
        name, colon, own = args[k].partition(":")
        args = [*args[:k], f"{name}:{','.join(([own] if colon and own else []) + pairs)}", *args[k + 1:]]
    return args


def _number(v: float | int | bool) -> str:
    return str(v).lower() if isinstance(v, bool) else repr(v)


# ----------------------------------------------------------------------------------------------------
# the click side
# ----------------------------------------------------------------------------------------------------
def speaks_for_the_world() -> bool:
    """Whether this process prints the command line's messages, so that they are printed once: not in the
    ranks of nnlo's own ``-n`` launch (the ``nnlo`` that launched them has spoken), and only rank 0 of any
    other MPI launch."""
    return not os.environ.get(ENV_LAUNCHED) and launch_rank() in (None, 0)


def warn(lines: Sequence[str]) -> None:
    if lines and speaks_for_the_world():
        for line in lines:
            click.echo(line, err=True)


class UpstreamCommand(TypedCommand):
    """A click command that first rewrites upstream command lines (:func:`translate`); the arguments as typed,
    before the rewriting, are :func:`~nnlo_sched.params.typed_args`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        keep_typed(ctx, args)
        try:
            result = translate(self.name or "", native_options(self), args)
        except UpstreamError:
            if not speaks_for_the_world():
                raise SystemExit(EXIT_BAD_INPUT) from None  # rank 0 says it
            raise
        warn(result.warnings)
        return super().parse_args(ctx, result.args)


# ----------------------------------------------------------------------------------------------------
# the documentation (docs/migrating.md holds this table; tests/compat checks it is current)
# ----------------------------------------------------------------------------------------------------
_SHORT = {TRAINING: "T", OPTIMIZATION: "O", MPI_LEARN: "M", MPI_OPT: "P"}


def _doc_effect(e: Upstream) -> str:
    if e.kind is Kind.SAME:
        return f"same: `{e.name}`"
    if e.kind is Kind.ALIAS:
        return "`" + " ".join(e.becomes) + ("` (folded)" if e.name == "--worker-optimizer-params" else "`")
    return "no effect (one warning)" if e.kind is Kind.NOOP else "refused (one error, exit 2)"


def _doc_note(e: Upstream) -> str:
    parts = [e.note] if e.note else []
    mapped = [f"`{k}` -> `{v}`" for k, v in e.values.items() if k != v]
    if mapped:
        parts.append("values: " + ", ".join(mapped))
    if e.refused_values:
        parts.append("refused values: " + ", ".join(f"`{v}`" for v in e.refused_values))
    if e.unused_in_search:
        parts.append(f"nnlo optimize sets it per trial; {e.unused_in_search}")
    return "; ".join(parts).replace("|", "\\|")


def markdown_table() -> str:
    """The option table of docs/migrating.md (``python -m nnlo_sched.upstream`` prints it)."""
    lines = ["| upstream option | drivers | nnlo | notes |", "|---|---|---|---|"]
    for e in TABLE:
        value = " VALUE" if e.takes_value else ""
        drivers = ",".join(_SHORT[d] for d in e.drivers)
        lines.append(f"| `{e.name}{value}` | {drivers} | {_doc_effect(e)} | {_doc_note(e)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
