"""The typed run is the only carrier after the first parse: one table of option defaults (the dataclass fields),
later changes as field replacements (resume, search chains), and a spec that is never re-parsed."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import click
import pytest

from nnlo.config import TrainConfig
from nnlo.errors import ConfigError
from nnlo.optimize.options import SearchConfig
from nnlo_sched.inner import changed, parse_changes, parse_inner
from nnlo_sched.options import command
from nnlo_sched.search import chain_spec, check_search_options
from nnlo_sched.spec import RunSpec


def _field_defaults(cls: type) -> dict[str, object]:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def test_every_option_of_a_field_has_the_fields_default() -> None:
    """The click options read their defaults from TrainConfig and SearchConfig: no second table anywhere."""
    fields = {**_field_defaults(TrainConfig), **_field_defaults(SearchConfig)}
    checked = []
    for p in command("optimize").params:
        if p.name in fields and p.name not in ("model", "deadline"):  # required; $NNLO_DEADLINE on a command line
            assert p.default == fields[p.name], p.name
            checked.append(p.name)
    assert {"epochs", "batch", "mode", "gem_lr", "bucket_mb", "num_iterations", "lease_timeout", "assign"} <= set(
        checked)
    assert len(checked) >= 40


def test_an_option_parsed_with_no_value_given_is_the_fields_default() -> None:
    inner = parse_inner("optimize", ["--model", "m.py"])
    assert dataclasses.replace(inner.train, model="") == TrainConfig()
    assert inner.search == SearchConfig()


def test_changes_are_only_the_options_typed_in_any_spelling() -> None:
    changes = parse_changes("train", ["--epo", "12", "--model-arg", "hidden=8"])  # an argparse prefix
    assert changes.train == {"epochs": 12} and changes.search == {} and changes.model_args == {"hidden": 8}
    assert not parse_changes("train", [])
    search = parse_changes("optimize", ["--num-iterations", "40", "--seed", "3"])
    assert search.train == {"seed": 3} and search.search == {"num_iterations": 40}


def test_a_change_replaces_fields_keeps_the_others_and_merges_model_arguments() -> None:
    inner = parse_inner("train", ["--model", "m.py", "--epochs", "5", "--batch", "7", "--model-arg", "hidden=4",
                                  "--model-arg", "act=tanh"])
    new = changed(inner, parse_changes("train", ["--epochs", "12", "--model-arg", "hidden=8"]))
    assert (new.train.epochs, new.train.batch, new.train.model) == (12, 7, "m.py")
    assert new.train.model_args == {"hidden": 8, "act": "tanh"}
    with pytest.raises(ConfigError, match="train options: .*--epochs"):
        parse_changes("train", ["--epochs", "0"])
    with pytest.raises(ConfigError, match="--synchronous"):  # validated as a whole: gem is not synchronous
        changed(inner, parse_changes("train", ["--synchronous"]))


def test_a_search_chain_is_the_search_with_its_folder_and_shared_set(tmp_path: Path) -> None:
    spec = RunSpec.from_argv("optimize", ["--model", "m.py", "--num-iterations", "9"], "local")
    one = chain_spec(spec, tmp_path)
    assert one.search is not None and spec.search is not None
    assert (one.search.output, one.search.shared) == (str(tmp_path), True)
    assert dataclasses.replace(one.search, output=None, shared=False) == spec.search
    assert one.args == [*spec.args, "--output", str(tmp_path), "--shared"]  # for display only
    for given in (["--out", "x"], ["--shared"], ["--participant", "p"]):  # any spelling: typed, not scanned
        inner = parse_inner("optimize", ["--model", "m.py", *given])
        with pytest.raises(ConfigError, match="is set by nnlo submit --jobs/--join"):
            check_search_options(inner.search)


def test_a_spec_is_never_parsed_from_its_args() -> None:
    with pytest.raises(ConfigError, match="needs its typed options"):
        RunSpec("train", ["--model", "m.py"], "local")
    spec = RunSpec.from_argv("train", ["--model", "m.py", "--epochs", "3"], "local")
    again = RunSpec.from_dict({**spec.to_dict(), "args": ["--epochs", "99"]})  # the record decides, not args
    assert again.train.epochs == 3


def test_the_run_commands_are_built_from_the_table() -> None:
    from nnlo_sched.commands.optimize import optimize_command
    from nnlo_sched.commands.train import train_command

    def names(cmd: click.Command) -> list[str]:
        return [p.name or "" for p in cmd.params]

    assert names(train_command) == names(command("train"))
    assert names(optimize_command) == names(command("optimize"))
    assert "no_check" in names(train_command) and "no_check" in names(optimize_command)
