"""Upstream (mpi_learn / NNLO) command lines parsed by ``nnlo train`` / ``nnlo optimize``: every entry of the
option table, argparse prefixes, the positional form, and the one-line messages. No MPI: the same click
commands ``nnlo submit`` re-parses its inner argv with (:func:`nnlo_sched.inner.parse_inner`)."""
from __future__ import annotations

from pathlib import Path

import pytest

from nnlo.config import CACHE_IN_MEMORY, TrainConfig
from nnlo.contract import ENV_LAUNCHED
from nnlo.errors import ConfigError
from nnlo_sched.inner import parse_inner
from nnlo_sched.inner import parser as command_for
from nnlo_sched.upstream import TABLE, Kind, Upstream, UpstreamError, native_options

REPO = Path(__file__).resolve().parents[2]
BASE = ["--model", "m.py"]
#: a value each upstream option accepts (only options that take one)
VALUES = {"--log-file": "run.log", "--example": "mnist", "--copy-command": "cp {} {}", "--output": "out",
          "--model_weights": "w.h5", "--max-gpus": "2", "--elastic-lr": "0.5", "--elastic-momentum": "0.1"}


def commands(entry: Upstream) -> list[str]:
    return [c for c in ("train", "optimize") if entry.applies_to(c)]


def cases(kind: Kind) -> list[tuple[str, Upstream]]:
    return [pytest.param(c, e, id=f"{c}{e.name}") for e in TABLE if e.kind is kind for c in commands(e)]


def argv_of(entry: Upstream) -> list[str]:
    return [entry.name, VALUES.get(entry.name, "1")] if entry.takes_value else [entry.name]


def train(*args: str) -> TrainConfig:
    return parse_inner("train", [*BASE, *args]).train


def warnings(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("nnlo: warning:")]


# -- the table ---------------------------------------------------------------------------------------------
def test_the_table_names_each_upstream_option_once_and_every_same_entry_is_an_nnlo_option() -> None:
    names = [e.name for e in TABLE]
    assert len(names) == len(set(names))
    for e in TABLE:
        for command in commands(e):
            native = native_options(command_for(command))
            if e.kind is Kind.SAME:
                assert e.name in native, f"{e.name} is 'same' but nnlo {command} has no such option"
                assert (native[e.name] != "flag") == e.takes_value, e.name
            else:
                assert e.name not in native, f"{e.name} is an nnlo option, so it cannot be {e.kind}"
            if e.kind is Kind.ALIAS:
                assert e.becomes[0] in native, e


@pytest.mark.parametrize(("command", "entry"), cases(Kind.REFUSE))
def test_each_refused_option_is_one_error_naming_what_to_use(command: str, entry: Upstream) -> None:
    if entry.name in native_options(command_for(command)):
        pytest.skip(f"nnlo {command} has its own {entry.name}")
    with pytest.raises(UpstreamError) as err:
        parse_inner(command, [*BASE, *argv_of(entry)])
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{entry.name} ") and entry.note in message


@pytest.mark.parametrize(("command", "entry"), cases(Kind.NOOP))
def test_each_no_op_option_is_accepted_with_one_warning_and_changes_nothing(
        command: str, entry: Upstream, capsys: pytest.CaptureFixture[str]) -> None:
    plain = parse_inner(command, BASE)
    capsys.readouterr()
    with_it = parse_inner(command, [*BASE, *argv_of(entry), *argv_of(entry)])  # twice: still one line
    lines = warnings(capsys.readouterr().err)
    assert lines == [f"nnlo: warning: {entry.name} has no effect in nnlo ({entry.note})"]
    assert with_it.train == plain.train and with_it.search == plain.search


def test_messages_come_from_rank_0_only_under_an_mpi_launch(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PMI_RANK", "1")
    parse_inner("train", [*BASE, "--verbose"])
    assert capsys.readouterr().err == ""
    with pytest.raises(SystemExit) as stop:
        parse_inner("train", [*BASE, "--log-file", "x.log"])
    assert stop.value.code == 2 and capsys.readouterr().err == ""
    monkeypatch.setenv("PMI_RANK", "0")
    parse_inner("train", [*BASE, "--verbose"])
    assert len(warnings(capsys.readouterr().err)) == 1
    monkeypatch.setenv(ENV_LAUNCHED, "1")  # a rank of `nnlo ... -n N`: the launching nnlo has spoken
    parse_inner("optimize", [*BASE, "--checkpoint", "cp"])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("upstream", "nnlo"), [
    (["--train_data", "t.list", "--val_data", "v.list"], ["--train", "t.list", "--val", "v.list"]),
    (["--masters", "2", "--processes", "2", "-n", "7"], ["--n-masters", "2", "--n-processes", "2", "-n", "7"]),
    (["--trace"], ["--timeline"]),
    (["--easgd"], ["--mode", "easgd"]),
    (["--tf"], ["--backend", "keras"]),
    (["--torch"], ["--backend", "torch"]),
    (["--mode", "sgd"], ["--mode", "downpour"]),
    (["--mode=sgd"], ["--mode", "downpour"]),
    (["--log-level", "warn"], ["--log-level", "warning"]),
    (["--log-level", "WARNING"], ["--log-level", "warning"]),
    (["--log-level", "critical"], ["--log-level", "error"]),
    (["--log-level", "fatal"], ["--log-level", "error"]),
    (["--log-level", "DEBUG"], ["--log-level", "debug"]),
    (["--worker-optimizer", "adam", "--worker-optimizer-params", "{'lr': 0.01}"],
     ["--worker-optimizer", "adam:lr=0.01"]),
    (["--worker-optimizer-params", '{"learning_rate": 0.1, "momentum": 0.9}', "--worker-optimizer", "sgd"],
     ["--worker-optimizer", "sgd:lr=0.1,momentum=0.9"]),
    (["--worker-optimizer", "sgd:nesterov=true", "--worker-optimizer-params", "{'momentum': 0.5}"],
     ["--worker-optimizer", "sgd:nesterov=true,momentum=0.5"]),
    (["--worker-optimizer-params", "{}"], []),
    (["--preload-data"], ["--preload-data", "1"]),
    (["--preload-data", "4"], ["--preload-data", "4"]),
    (["--cache-data", "--epochs", "2"], ["--epochs", "2", "--cache-data", CACHE_IN_MEMORY]),
    (["--early", "val_loss,~<,4"], ["--early-stopping", "val_loss,~<,4"]),
    (["--checkpoint-int", "1", "--checkpoint", "cp"], ["--checkpoint-interval", "1", "--checkpoint", "cp"]),
    (["--target", "val_acc,>,0.97"], ["--target-metric", "val_acc,>,0.97"]),
    (["--train_d", "t.list"], ["--train", "t.list"]),
    (["--sync-", "2"], ["--sync-every", "2"]),
    (["--trai", "t.list", "--va", "v.list"], ["--train", "t.list", "--val", "v.list"]),  # both spellings: one
    (["--proc", "2", "-n", "3"], ["--n-processes", "2", "-n", "3"]),
])
def test_an_upstream_spelling_gives_the_same_training_as_the_nnlo_spelling(upstream: list[str],
                                                                           nnlo: list[str]) -> None:
    a, b = parse_inner("train", [*BASE, *upstream]), parse_inner("train", [*BASE, *nnlo])
    assert a.train == b.train and a.ranks == b.ranks


def test_the_data_options_take_upstream_values_and_keep_the_bare_flags(tmp_path: Path) -> None:
    assert train("--preload-data", "3").preload_data == 3 and train("--preload-data").in_memory
    assert train().preload_data == 0 and not train().in_memory
    cfg = train("--cache-data", str(tmp_path))
    assert cfg.cache_dir == str(tmp_path) and not cfg.in_memory
    assert train("--cache-data").in_memory and train("--cache-data").cache_dir is None


def test_optimize_takes_the_search_options_and_their_prefixes() -> None:
    inner = parse_inner("optimize", [*BASE, "--ga-population", "20", "--hyper-opt", "genetic", "--block-size",
                                     "3", "--num-it", "4", "--n-fold", "1", "--target-objective", "0.1"])
    assert inner.search is not None
    assert (inner.search.ga_populations, inner.search.hyper_opt, inner.search.block_size,
            inner.search.num_iterations, inner.search.target_objective) == (20, "genetic", 3, 4, 0.1)
    assert parse_inner("optimize", [*BASE, "--output", "o"]).search.output == "o"  # type: ignore[union-attr]


# -- prefixes ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("prefix", "candidates"), [
    ("--n", ("--n-masters", "--n-processes")),  # not nnlo's own --np: its options are never prefixed
    ("--gem", ("--gem-kappa", "--gem-lr", "--gem-momentum")),
    ("--ch", ("--checkpoint", "--checkpoint-interval")),
    ("--sync", ("--sync-every", "--synchronous")),
    ("--mast", ("--master-gpu", "--masters")),
    ("--worker-opt", ("--worker-optimizer", "--worker-optimizer-params")),
    ("--e", ("--early-stopping", "--epochs", "--elastic-force", "--easgd", "--elastic-lr")),
])
def test_an_ambiguous_prefix_is_one_error_listing_the_candidates(prefix: str, candidates: tuple[str, ...]) -> None:
    with pytest.raises(UpstreamError) as err:
        parse_inner("train", [*BASE, prefix, "1"])
    message = str(err.value)
    assert message.startswith(f"{prefix} is ambiguous") and "\n" not in message
    listed = message.split("could be ", 1)[1].split(";")[0].split(", ")
    assert set(candidates) <= set(listed)
    assert all(c.startswith(prefix) for c in listed)


def test_mpi_opts_own_options_are_its_own_never_a_prefix_of_another() -> None:
    """mpi_opt's --label named its files: one warning, never --labels-name (a missing dataset later)."""
    inner = parse_inner("optimize", [*BASE, "--label", "hOpt", "--n-master", "2", "--n-process", "3"])
    assert inner.train.labels_name == TrainConfig(model="m.py").labels_name
    assert (inner.train.n_masters, inner.train.n_processes) == (2, 3)
    for option in (["--try-restore"], ["--previous-result", "coordinator.pkl"]):
        with pytest.raises(UpstreamError, match=r"not supported by nnlo optimize; resume a search with --opt-restore"):
            parse_inner("optimize", [*BASE, *option])


@pytest.mark.parametrize("prefix", ["--overw", "--max-fail", "--validate-ev", "--trial-na"])
def test_an_option_nnlo_added_is_never_taken_by_a_prefix(prefix: str) -> None:
    """Prefixes are accepted where an upstream parser accepted them; nnlo's own options need their whole name
    (--trial-na is upstream's --trial-name: still taken)."""
    if prefix == "--trial-na":
        assert parse_inner("optimize", [*BASE, prefix, "x"]).train.trial_name == "x"
        return
    with pytest.raises(ConfigError, match=f"No such option '{prefix}'"):
        parse_inner("optimize", [*BASE, prefix, "1"])


def test_exact_names_win_over_longer_names_they_prefix() -> None:
    cfg = train("--train", "t.list", "--val", "v.list", "--checkpoint", "cp")
    assert (cfg.train, cfg.val, cfg.checkpoint, cfg.checkpoint_interval) == ("t.list", "v.list", "cp", 5)
    assert parse_inner("train", ["--model", "m.py", "--model-arg", "hidden=3"]).train.model_args == {"hidden": 3}


def test_an_unknown_option_is_still_clicks_error() -> None:
    with pytest.raises(ConfigError, match="--no-such-thing"):
        parse_inner("train", [*BASE, "--no-such-thing", "1"])


# -- the positional form -----------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["arch.json", "model.py"])
def test_mpi_learns_positional_form(model: str) -> None:
    a = parse_inner("train", [model, "train.list", "val.list", "--loss", "mse", "--epochs", "3", "--tf"]).train
    b = parse_inner("train", ["--model", model, "--train", "train.list", "--val", "val.list", "--loss", "mse",
                              "--epochs", "3", "--backend", "keras"]).train
    assert a == b and (a.model, a.train, a.val) == (model, "train.list", "val.list")


def test_the_positional_form_refuses_extra_words_and_duplicates() -> None:
    with pytest.raises(UpstreamError, match="unexpected argument 'x'"):
        parse_inner("train", ["m.json", "t.list", "v.list", "x"])
    with pytest.raises(UpstreamError, match="--model is given twice"):
        parse_inner("train", ["m.json", "--model", "n.json"])
    with pytest.raises(UpstreamError, match="--train is given twice"):
        parse_inner("train", ["m.json", "t.list", "--train_data", "u.list"])


# -- values ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mnist", "cifar10", "mnist_torch"])
def test_upstreams_built_in_model_names_are_refused(name: str) -> None:
    with pytest.raises(UpstreamError, match=f"--model {name} is one of upstream's built-in"):
        parse_inner("train", ["--model", name])


@pytest.mark.parametrize(("args", "match"), [
    (["--worker-optimizer-params", "{'lr': 0.01}"], "needs --worker-optimizer NAME"),
    (["--worker-optimizer", "adam", "--worker-optimizer-params", "[1, 2]"], "is not a dict of numbers"),
    (["--worker-optimizer", "adam", "--worker-optimizer-params", "{'lr': 'x'}"], "is not a dict of numbers"),
    (["--worker-optimizer", "adam", "--worker-optimizer-params", "{lr: 1"], "is not a dict of numbers"),
])
def test_worker_optimizer_params_that_cannot_be_folded_are_refused(args: list[str], match: str) -> None:
    with pytest.raises(UpstreamError, match=match):
        parse_inner("train", [*BASE, *args])


def test_a_folded_parameter_the_optimizer_lacks_is_the_optimizers_error() -> None:
    with pytest.raises(ConfigError, match="--worker-optimizer"):
        parse_inner("train", [*BASE, "--worker-optimizer", "adam", "--worker-optimizer-params", "{'bogus': 1}"])


# -- the documentation -------------------------------------------------------------------------------------
def test_docs_migrating_holds_the_current_option_table() -> None:
    from nnlo_sched.upstream import markdown_table

    doc = (REPO / "docs" / "migrating.md").read_text()
    assert markdown_table() in doc, "docs/migrating.md is stale: paste `python -m nnlo_sched.upstream` into it"
    for e in TABLE:
        assert f"| `{e.name}" in doc, f"{e.name} is missing from docs/migrating.md"


# -- the upstream README lines (words after the driver's name), parsed --------------------------------------
README_LINES = [
    ("train", "--model m.py --loss categorical_crossentropy --epochs 3 --trial-name n3g1epoch3 "
              "--train_data T.list --val_data V.list"),
    ("train", "--model examples/example_mnist_torch.py --loss categorical_crossentropy --epochs 3"),
    ("train", "--model examples/example_mnist.py --loss categorical_crossentropy --epochs 3 --n-processes 2"),
    ("train", "--model examples/example_mnist.py --loss categorical_crossentropy --epochs 10000 --early "
              "val_loss,~<,4"),
    ("train", "--model examples/example_mnist.py --loss categorical_crossentropy --epochs 10000 --target-metric "
              "val_acc,>,0.97"),
    ("train", "dummy.json train_3d.list test_1_3d.list --loss mse --epochs 5 --master-gpu --features-name X "
              "--labels-name y --tf --mode easgd --worker-optimizer rmsprop --checkpoint ganGP --checkpoint-int 1 "
              "--restore ganCP"),
    ("optimize", "--model examples/example_mnist.py --block-size 3 --epochs 3 --num-iterations 10"),
    ("optimize", "--model examples/example_mnist.py --block-size 6 --epochs 5 --num-iterations 10 --n-fold 2"),
    ("optimize", "--model examples/example_mnist.py --block-size 3 --epochs 5 --num-iterations 10 --checkpoint CP "
                 "--checkpoint-interval 2 --opt-restore"),
    ("optimize", "--model m.py --block-size 5 --epochs 10 --num-iterations 10 --n-fold 5 --hyper-opt genetic "
                 "--ga-population 20"),
    ("train", "mnist_arch.json train_mnist.list test_mnist.list --loss categorical_crossentropy --epochs 3"),
]


@pytest.mark.parametrize(("command", "line"), README_LINES)
def test_the_upstream_readme_lines_parse_unchanged(command: str, line: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    inner = parse_inner(command, line.split())
    assert inner.train.epochs == int(line.split("--epochs ")[1].split()[0])
    said = warnings(capsys.readouterr().err)
    expected = ["--master-gpu"] * ("--master-gpu" in line)  # a search's per-trial --checkpoint: at run time
    assert [ln.split()[2] for ln in said] == expected, said


def test_upstreams_built_in_example_is_refused_in_one_line() -> None:
    with pytest.raises(UpstreamError, match="--example"):
        parse_inner("optimize", ["--block-size", "5", "--example", "mnist", "--epochs", "10", "--num-iterations", "10"])
