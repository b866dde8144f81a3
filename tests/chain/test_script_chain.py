"""``nnlo submit --cluster local ... script FILE.py ARGS``: a user's script with an ArraySource in a real
checkpoint-restart chain. The first job is stopped by a forced signal (the runtime's test hook, not a raced
walltime): nnlo.train inside the script checkpoints and ends the job with exit 75 without a word from the
script; the chain's next job runs the script again, which resumes, and the run ends ``done`` after two jobs with
the final loss of an uninterrupted run of the same script (3 ranks of the warm MPI world, outside any chain)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.chain import nnlo

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "chained_script.py"
WORDS = ["--label", "two words; $HOME 'quoted'"]  # the script's own arguments, verbatim


@pytest.mark.mpi
@pytest.mark.slow
def test_a_script_run_chains_through_a_forced_stop_to_the_uninterrupted_result(chain_env, nnlo_mpi,
                                                                              monkeypatch) -> None:
    reference = chain_env / "reference.json"
    alone = nnlo_mpi(3, SCRIPT, reference, *WORDS, timeout=240)  # the uninterrupted run: mpirun -np 3 python SCRIPT
    assert alone.returncode == 0, alone.stderr[-3000:]
    monkeypatch.setenv("NNLO_TEST_SIGNAL_AT_UPDATE", "14")  # in epoch 3 of 4 (6 updates an epoch)
    chained = chain_env / "chained.json"
    out = nnlo("submit", "--cluster", "local", "--workers", "2", "--walltime", "10m", "--name", "mine",
               "script", str(SCRIPT), str(chained), *WORDS).stdout
    run_id = out.split()[2]
    waited = nnlo("wait", run_id, "--timeout", "300", "--every", "1", check=False, timeout=330)
    view = json.loads(nnlo("status", run_id, "--json").stdout)
    assert waited.returncode == 0 and view["state"] == "done", (waited.stdout, view.get("error"))
    started = [j for j in view["jobs"] if j.get("started_at")]
    assert [j["rc"] for j in started] == [75, 0]  # stopped with its checkpoint, resubmitted, finished
    ref, got = json.loads(reference.read_text()), json.loads(chained.read_text())
    assert got["argv"] == [str(chained), *WORDS]
    assert [e["epoch"] for e in got["history"]] == [1, 2, 3, 4]
    assert got["history"][-1]["loss"] == pytest.approx(ref["history"][-1]["loss"], rel=1e-6)
    assert got["history"][-1]["val_loss"] == pytest.approx(ref["history"][-1]["val_loss"], rel=1e-6)
    run_dir = Path(view["dir"])
    assert Path(got["run_dir"]).parent == run_dir  # the training went into the run folder by itself
    assert view["progress"]["epoch"] == 4  # nnlo status follows the script's training
    logs = nnlo("logs", run_id).stdout
    assert "restoring from" in logs


@pytest.mark.mpi
def test_a_script_that_raises_on_one_rank_ends_the_whole_job(tmp_path, mpirun, nnlo_env) -> None:
    from nnlo.contract import SPEC_FILE
    from nnlo_sched.inner import SCRIPT as KIND
    from nnlo_sched.inner import parse_inner
    from nnlo_sched.spec import RunSpec

    script = tmp_path / "uneven.py"
    script.write_text("from mpi4py import MPI\n\nif MPI.COMM_WORLD.Get_rank() == 1:\n"
                      "    raise RuntimeError('rank 1 gives up')\nMPI.COMM_WORLD.Barrier()  # rank 0 waits here\n")
    words = [str(script)]
    (tmp_path / SPEC_FILE).write_text(RunSpec.of(parse_inner(KIND, words), words, "local",
                                                 workdir=str(tmp_path)).to_json())
    done = subprocess.run([mpirun, "-np", "2", sys.executable, "-m", "nnlo_sched", "run", str(tmp_path)],
                          env=nnlo_env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0  # not a hang: rank 0 is ended with rank 1
    assert f"nnlo: error: RuntimeError in {script}:4: rank 1 gives up" in done.stderr
