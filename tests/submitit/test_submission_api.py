"""``nnlo_sched.api`` on LSF through the recording stand-ins of tests/chain (they answer like bsub/bjobs/bkill
but run nothing): typed returns, one bjobs call for several runs, wait's timeout, cancel."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nnlo.errors import ConfigError
from nnlo_sched import api

CHAIN_STANDIN = Path(__file__).resolve().parent.parent / "chain" / "standin_batch.py"


@pytest.fixture
def lsf(plugin_env, monkeypatch):
    bin_dir = plugin_env / "bin"
    bin_dir.mkdir()
    for prog in ("bsub", "bjobs", "bkill"):
        (bin_dir / prog).symlink_to(CHAIN_STANDIN)
    state = plugin_env / "standin"
    state.mkdir()
    monkeypatch.setenv("STANDIN_DIR", str(state))
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("NNLO_HOME", str(plugin_env / "runs"))
    return state


def calls(state: Path, prog: str) -> list[dict]:
    return [c for c in map(json.loads, (state / "calls.jsonl").read_text().splitlines()) if c["prog"] == prog]


def test_spec_layout_render_and_refusals(plugin_env):
    spec = api.spec("train", ["--model", "m.py", "--epochs", "3"], "testlsf", account="ABC123", walltime="90m",
                    workers=3)
    assert spec.walltime_s == 5400 and spec.name == "m" and spec.layout is not None
    lay = api.layout(spec)
    assert lay.world_size == 4 and lay.nodes == 1  # a master and three workers on one 4-core node
    same = api.layout("testlsf", workers=3, walltime="90m")  # `nnlo layout -c testlsf --workers 3 -t 90m`
    assert same.to_dict(ranks=True) == lay.to_dict(ranks=True)
    assert api.layout("testlsf", nodes=2).nodes == 2
    text = api.render(spec, "/tmp/some-run")
    assert "#BSUB -P ABC123" in text and "#BSUB -W 1:30" in text and "/tmp/some-run" in text
    assert api.submit_argv(spec, "/tmp/some-run")[:3] == ["sh", "-c", 'exec bsub "$@" < "$0"']
    with pytest.raises(ConfigError, match="needs a project"):
        api.render(api.spec("train", ["--model", "m.py"], "testlsf"))
    with pytest.raises(ConfigError, match="walltime"):
        api.spec("train", ["--model", "m.py"], "testlsf", walltime="soon")


@pytest.mark.slow
def test_submit_query_wait_cancel(lsf, plugin_env):
    runs = [api.submit(api.spec("train", ["--model", "m.py"], "testlsf", account="A1", name=f"r{i}"), check=False)
            for i in range(2)]
    assert [r.job_id for r in runs] == ["1001", "1002"]
    before = len(calls(lsf, "bjobs"))
    statuses = api.query(runs)
    assert len(calls(lsf, "bjobs")) == before + 1  # one call for both runs
    assert sorted(calls(lsf, "bjobs")[-1]["args"][2:]) == ["1001", "1002"]
    assert [s.state for s in statuses] == ["queued", "queued"]
    assert statuses[0].jobs[0].job_id == "1001" and statuses[0].jobs[0].scheduler_state == "PENDING"
    assert statuses[0].run_id == runs[0].id and not statuses[0].ended
    with pytest.raises(api.WaitTimeout) as info:
        api.wait(runs[0].id, timeout=0.3, every=0.2)
    assert info.value.status.state == "queued"
    assert api.cancel(runs[0].dir) == ["1001"]
    assert calls(lsf, "bkill")[-1]["args"] == ["1001"]
    final = api.wait(runs[0], timeout=10, every=0.2)
    assert final.state == "cancelled" and final.ended and not final.done
    with pytest.raises(Exception, match="too short"):
        api.cancel(runs[1].id[:2])
    with pytest.raises(ConfigError, match="forbids job chaining"):
        api.submit(api.spec("train", ["--model", "m.py"], "testlsf", account="A1", queue="debug"), check=False)
    assert len(calls(lsf, "bsub")) == 2  # nothing was submitted


@pytest.mark.slow
def test_preflight_writes_nothing_and_submit_queues_a_search_with_its_notes(lsf, plugin_env, tmp_path):
    """The checks and the submission ``nnlo submit`` runs, from Python: preflight is a dry run's checks (nothing
    written, notes returned), submit runs them (notes to on_note) and queues a search of 2 chains as one array."""
    spec = api.spec("optimize", ["--model", "m.py", "--num-iterations", "4"], "testlsf", account="A1")
    found = api.preflight(spec, check=False, jobs=2)
    assert found.run_dir is None and "#BSUB -P A1" in found.script
    assert any(n.startswith("--no-check: skipped") for n in found.notes)
    assert not (plugin_env / "runs").exists() and not (lsf / "calls.jsonl").exists()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("")
    with pytest.raises(ConfigError, match="holds files but no nnlo run"):
        api.preflight(spec, run_dir=taken, check=False)
    with pytest.raises(ConfigError, match="needs optimize, not train"):
        api.submit(api.spec("train", ["--model", "m.py"], "testlsf", account="A1"), check=False, jobs=2)
    with pytest.raises(ConfigError, match="--output is set by nnlo submit"):
        api.submit(api.spec("optimize", ["--model", "m.py", "--output", "o"], "testlsf", account="A1"),
                   check=False, jobs=2)
    assert not (lsf / "calls.jsonl").exists()  # nothing was queued by a refusal
    notes: list[str] = []
    run = api.submit(spec, check=False, jobs=2, on_note=notes.append)
    assert notes == list(found.notes)
    assert api.is_search(run) and sorted(p.name for p in (run.dir / "chains").iterdir()) == ["c1", "c2"]
    assert len(calls(lsf, "bsub")) == 1  # one job array for both chains
    assert [s.state for s in api.query([run])] == ["queued"]
