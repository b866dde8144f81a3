"""The run spec's JSON round trip and walltime parsing."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from nnlo.errors import ConfigError
from nnlo_sched.profiles import load_profile
from nnlo_sched.schedulers.lsf import LsfScheduler
from nnlo_sched.spec import RunSpec
from nnlo_sched.walltime import format_hms, parse_walltime


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30", 1800),
        ("01:02:03", 3723),
        ("1-00:00:00", 86400),
        ("2-12:30:00", 2 * 86400 + 12 * 3600 + 1800),
        ("90m", 5400),
        ("2h", 7200),
        ("1.5h", 5400),
        ("45s", 45),
        (" 2H ", 7200),
    ],
)
def test_walltime_forms(text: str, seconds: int) -> None:
    assert parse_walltime(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "1:2:3:4", "2x", "-5", "0", "1-02", "0m", "1:00:60"])
def test_malformed_walltime_is_one_line_error(text: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_walltime(text)
    assert "\n" not in str(e.value) and "walltime" in str(e.value)


@given(st.integers(min_value=60, max_value=30 * 86400))
def test_hms_round_trips(seconds: int) -> None:
    assert parse_walltime(format_hms(seconds)) == seconds


def test_lsf_minutes_round_up() -> None:
    assert LsfScheduler.walltime_directive(45 * 60) == "45"
    assert LsfScheduler.walltime_directive(2 * 3600) == "2:00"
    assert LsfScheduler.walltime_directive(3600 + 1) == "1:01"  # never less than asked


def _a_layout():
    return RunSpec.from_argv("train", ["--model", "m.py"], "local", workers=1).layout_on(load_profile("local")).record()


def test_spec_json_round_trip() -> None:
    spec = RunSpec.from_argv("optimize", ["--block-size", "6", "--model", "a b.py"], "summit", name="x", walltime_s=7200,
                   queue="batch", account="ABC", nodes=3, blocks=2, gpus_per_worker=0.5, constraint="gpu",
                   directives=["#BSUB -B"], layout=_a_layout(), workdir="/w")
    again = RunSpec.from_json(spec.to_json())
    assert again == spec
    assert again.max_resubmits == 10


@pytest.mark.parametrize(
    "text, needle",
    [
        ("[1]", "JSON object"),
        ("{", "not valid JSON"),
        ('{"kind": "train", "args": [], "cluster": "local", "colour": 1}', "unknown key"),
        ('{"kind": "train", "args": []}', "incomplete"),
        ('{"kind": "sing", "args": [], "cluster": "local"}', "run kind"),
    ],
)
def test_bad_spec_json(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        RunSpec.from_json(text)


def test_directive_with_newline_is_refused() -> None:
    with pytest.raises(ConfigError, match="line break"):
        RunSpec.from_argv("train", ["--model", "m.py"], "local", directives=["--mail-type=END\nrm -rf ~"])


def _spec(**kw: object) -> RunSpec:
    return RunSpec.from_argv("train", ["--model", "m.py"], "local", **kw)  # type: ignore[arg-type]


def test_spec_defaults_are_the_documented_ones() -> None:
    """docs/chains.md: --max-resubmits 10, --max-retries 2; a job of one hour, named nnlo, no extras."""
    spec = _spec()
    assert (spec.max_resubmits, spec.max_retries, spec.walltime_s, spec.name) == (10, 2, 3600, "nnlo")
    assert (spec.queue, spec.account, spec.nodes, spec.workers, spec.blocks, spec.gpus_per_worker, spec.constraint,
            spec.layout, spec.workdir, spec.directives, spec.search) == (None,) * 9 + ([], None)
    assert spec.train.model == "m.py" and spec.inner.kind == "train"


@pytest.mark.parametrize("kw, message", [
    ({"walltime_s": 0}, r"^walltime must be positive, got 0 s$"),
    ({"walltime_s": -60}, r"^walltime must be positive, got -60 s$"),
    ({"max_resubmits": -1}, r"^--max-resubmits must be 0 or more, got -1$"),
    ({"max_retries": -1}, r"^--max-retries must be 0 or more, got -1$"),
    ({"directives": ["--a", "--b\r"]}, r"^an extra directive contains a line break; give one directive per option$"),
    ({"directives": ["--a\0"]}, "line break"),
])
def test_spec_values_out_of_range_are_one_line_errors(kw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _spec(**kw)


def test_spec_boundaries_are_accepted() -> None:
    spec = _spec(walltime_s=1, max_resubmits=0, max_retries=0, directives=["--mail-type=END"])
    assert (spec.walltime_s, spec.max_resubmits, spec.max_retries) == (1, 0, 0)
    with pytest.raises(ConfigError, match=r"^run kind must be one of train, optimize, script, got 'sing'$"):
        RunSpec("sing", [], "local")


def test_spec_keeps_args_as_text_and_reads_the_inner_command() -> None:
    spec = RunSpec.from_argv("optimize", ["--model", "m.py", "--block-size", "4", "--n-fold", "2"], "local")
    assert spec.args == ["--model", "m.py", "--block-size", "4", "--n-fold", "2"]
    assert spec.search is not None and spec.inner.kind == "optimize"
    assert (spec.shape.block_size, spec.shape.n_fold) == (4, 2)
    again = RunSpec.from_dict(json.loads(spec.to_json()))  # typed records come back from their dicts
    assert again.config == spec.config and again.search == spec.search and again == spec
    train = RunSpec("train", ["--model", "m.py"], "local", config=spec.config, search=spec.search)
    assert train.search is None and train.config == spec.config  # a training has no search
    assert json.loads(spec.to_json()) == spec.to_dict() and spec.to_json() == json.dumps(spec.to_dict(), indent=2,
                                                                                         sort_keys=True)


def test_spec_json_errors_name_the_problem() -> None:
    with pytest.raises(ConfigError, match=r"^run spec must be a JSON object$"):
        RunSpec.from_json("[1]")
    with pytest.raises(ConfigError, match=r"^run spec is not valid JSON: "):
        RunSpec.from_json("{")
    with pytest.raises(ConfigError, match=r"^run spec has unknown key\(s\) colour, size; was it written by a newer "
                                          r"nnlo\?$"):
        RunSpec.from_dict({"kind": "train", "args": [], "cluster": "local", "size": 1, "colour": 1})
    with pytest.raises(ConfigError, match=r"^run spec is incomplete or damaged: .*cluster"):
        RunSpec.from_dict({"kind": "train", "args": []})


@pytest.mark.parametrize("text, seconds", [
    (90, 90), ("1", 60), ("0:01:00", 60), ("00:00:01", 1), ("0-00:01:00", 60), ("59:59:00", 59 * 3600 + 59 * 60),
    ("0.5m", 30), ("1d", 86400), ("1.25h", 4500), ("0.0001h", 0),
])
def test_walltime_boundaries(text: str | int, seconds: int) -> None:
    if seconds == 0:
        with pytest.raises(ConfigError, match=r"^walltime '0.0001h' is not positive; give e.g. 2h or 01:30:00$"):
            parse_walltime(text)
    else:
        assert parse_walltime(text) == seconds


@pytest.mark.parametrize("text", ["1:00:60", "1:60:00", "1-01:00", "x1h", "1hh", 0, -5])
def test_walltime_out_of_range_parts(text: str | int) -> None:
    with pytest.raises(ConfigError) as e:
        parse_walltime(text)
    assert str(e.value) in (f"walltime {text!r} is malformed; use MM, HH:MM:SS, D-HH:MM:SS, 90m, 2h or 1.5h",
                            f"walltime {text!r} is not positive; give e.g. 2h or 01:30:00")


def test_a_two_field_walltime_is_refused_as_ambiguous() -> None:
    """``A:B`` is hours:minutes to LSF's -W and minutes:seconds to Slurm's --time: no reading is guessed.
    (Before, nnlo read it as LSF does and gave a Slurm user who meant 1 min 30 s a job of 1 h 30.)"""
    with pytest.raises(ConfigError) as e:
        parse_walltime("1:30")
    assert str(e.value) == ("walltime '1:30' is ambiguous (hours:minutes to LSF, minutes:seconds to Slurm); write "
                            "1:30:00 for 1 h 30 min or 0:01:30 for 1 min 30 s, or use a unit: 90m, 1.5h, 45s")


@pytest.mark.parametrize("text, readings", [
    ("02:30", "2:30:00 for 2 h 30 min or 0:02:30 for 2 min 30 s"), ("0:01", "0:01:00 for 0 h 1 min or 0:00:01 for "
                                                                           "0 min 1 s"),
    ("75:05", "75:05:00 for 75 h 5 min"), ("1:60", "H:MM:SS"), (" 12:00 ", "12:00:00 for 12 h 0 min or 0:12:00 for "
                                                                           "12 min 0 s"),
])
def test_a_two_field_walltime_names_both_readings_that_exist(text: str, readings: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_walltime(text)
    assert str(e.value) == (f"walltime {text!r} is ambiguous (hours:minutes to LSF, minutes:seconds to Slurm); "
                            f"write {readings}, or use a unit: 90m, 1.5h, 45s")


def test_the_typed_records_win_over_the_argv() -> None:
    """args are kept for display; the stored config and search are what runs (nothing re-reads the argv)."""
    spec = RunSpec.from_argv("optimize", ["--model", "m.py", "--epochs", "5", "--block-size", "4"], "local")
    data = spec.to_dict()
    data["config"]["epochs"] = 7
    data["search"]["block_size"] = 6
    again = RunSpec.from_dict(data)
    assert again.train.epochs == 7 and again.search is not None and again.search.block_size == 6
    assert again.args == spec.args
    trained = RunSpec("train", ["--model", "m.py", "--epochs", "5"], "local", config=again.config)
    assert trained.train.epochs == 7
    assert _spec(directives=["-X", "--mail-type=END"]).directives == ["-X", "--mail-type=END"]


@pytest.mark.parametrize("seconds, hms, lsf", [
    (0, "00:00:00", "0"), (1, "00:00:01", "1"), (59, "00:00:59", "1"), (60, "00:01:00", "1"),
    (3599, "00:59:59", "1:00"), (3600, "01:00:00", "1:00"), (3661, "01:01:01", "1:02"),
    (100 * 3600, "100:00:00", "100:00"), (59 * 60, "00:59:00", "59"),
])
def test_walltime_formats(seconds: int, hms: str, lsf: str) -> None:
    assert format_hms(seconds) == hms and LsfScheduler.walltime_directive(seconds) == lsf
