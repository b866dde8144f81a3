"""The run spec's JSON round trip and walltime parsing."""
from __future__ import annotations

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
        ("02:30", 9000),
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


@pytest.mark.parametrize("text", ["", "abc", "1:2:3:4", "01:99", "2x", "-5", "0", "1-02", "0m", "1:00:60"])
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
