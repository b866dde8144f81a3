"""Wrong-but-silent requests become one-line errors or printed adjustments, and site facts hold: through the
real CLI entry point (``nnlo_sched.cli.main``), the profile schema and rendered batch scripts."""
from __future__ import annotations

import itertools
import shlex
from pathlib import Path

import pytest

from nnlo_sched.cli import COMMANDS
from nnlo_sched.profiles import ProfileError, load_profile
from nnlo_sched.profiles.schema import LAUNCHERS, LAUNCHERS_FOR, SCHEDULERS, profile_from_table
from tests.sched.cli_runner import run


def one_line_error(code: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("nnlo: note: ")]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("nnlo: error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NNLO_HOME", raising=False)
    monkeypatch.delenv("MEMBERWORK", raising=False)
    monkeypatch.delenv("SCRATCH", raising=False)
    (tmp_path / "m.py").write_text("x = 1\n")
    return tmp_path


# -- layout --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0.001", "1/100", "1e-9", "0.01"])
def test_a_gpu_share_too_small_is_refused_not_rounded_to_cpu(capsys, value: str) -> None:
    code, out, err = run(capsys, "layout", "-c", "summit", "--workers", "2", "--gpus-per-worker", value)
    assert "less than 1/64 of a GPU" in one_line_error(code, err) and "0 to run on CPU" in err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "1/0"])
def test_gpu_share_must_be_a_finite_non_negative_number(capsys, value: str) -> None:
    code, out, err = run(capsys, "layout", "-c", "summit", "--workers", "2", "--gpus-per-worker", value)
    assert code == 2 and "is not a number of GPUs" in err and "Traceback" not in err


def test_smallest_share_is_laid_out_sharing(capsys) -> None:
    code, out, err = run(capsys, "layout", "-c", "flatiron", "--workers", "20", "--gpus-per-worker", "1/64", "--json")
    assert code == 0, err
    assert '"ranks_per_gpu": 64' in out


@pytest.mark.parametrize("argv, words", [
    (("--n-processes", "0"), "'--n-processes': 0 is not in the range x>=1"),
    (("--n-fold", "0"), "'--n-fold': 0 is not in the range x>=1"),
    (("--block-size", "0"), "'--block-size': 0 is not in the range x>=1"),
    (("--n-masters", "-1"), "'--n-masters': -1 is not in the range x>=0"),
])
def test_layout_run_options_are_not_bent_into_range(capsys, argv, words: str) -> None:
    """nnlo layout takes the run's own declarations of these options (nnlo_sched/options.py): the same range
    and the same line as nnlo train/optimize."""
    code, out, err = run(capsys, "layout", "-c", "local", *argv)
    assert words in one_line_error(code, err)
    code, out, err = run(capsys, "optimize", *argv, "--model", "m.py", "--space", "s.toml")
    assert words in one_line_error(code, err)


def test_layout_refuses_an_unknown_mode(capsys) -> None:
    code, out, err = run(capsys, "layout", "-c", "local", "--mode", "bogus")
    assert code == 2 and "bogus" in err and out == ""


def test_layout_takes_the_cluster_as_its_first_word(capsys) -> None:
    a = run(capsys, "layout", "summit", "--workers", "11")
    b = run(capsys, "layout", "--cluster", "summit", "--workers", "11")
    assert a[0] == 0 and a == b
    code, out, err = run(capsys, "layout", "summit", "-c", "titan")
    assert "nnlo layout --cluster titan" in one_line_error(code, err)
    code, out, err = run(capsys, "layout", "--workers", "2")
    assert "nnlo layout --cluster NAME" in one_line_error(code, err)


def test_titan_runs_over_200_ranks(capsys) -> None:
    code, out, err = run(capsys, "layout", "--cluster", "titan", "--nodes", "300")
    assert code == 0, err
    assert "300 ranks" in out and "aprun -n 300 -N 1" in out
    code, out, err = run(capsys, "layout", "--cluster", "titan", "--nodes", "18688", "--walltime", "24h")
    assert code == 0, err


@pytest.mark.parametrize("nodes, limit", [(1, "2h"), (125, "2h"), (126, "6h"), (312, "6h"), (313, "12h"),
                                          (3749, "12h"), (3750, "24h"), (18688, "24h")])
def test_titan_walltime_bins(capsys, nodes: int, limit: str) -> None:
    code, out, err = run(capsys, "layout", "-c", "titan", "--nodes", str(nodes), "-t", limit)
    assert code == 0, err
    over = {"2h": "2:01:00", "6h": "6:01:00", "12h": "12:01:00", "24h": "24:01:00"}[limit]
    code, out, err = run(capsys, "layout", "-c", "titan", "--nodes", str(nodes), "-t", over)
    assert f"exceeds the {limit} limit of queue 'batch' for {nodes} node(s)" in one_line_error(code, err)


@pytest.mark.parametrize("cluster, extra", [("cscs", ()), ("flatiron", ()), ("cscs", ("-C", "mc"))])
def test_sizes_beyond_the_machine_are_refused(capsys, cluster: str, extra: tuple[str, ...]) -> None:
    p = load_profile(cluster).for_constraint(extra[1] if extra else None)
    assert p.nodes is not None
    code, out, err = run(capsys, "layout", "-c", cluster, *extra, "--nodes", str(p.nodes), "-t", "1h")
    assert code == 0, err
    code, out, err = run(capsys, "layout", "-c", cluster, *extra, "--nodes", str(p.nodes + 1))
    assert f"ask for at most --nodes {p.nodes}" in one_line_error(code, err)


def test_cscs_multicore_nodes_have_no_gpus(capsys) -> None:
    code, out, err = run(capsys, "layout", "-c", "cscs", "-C", "mc", "--nodes", "1", "--json")
    assert code == 0, err
    assert '"gpus_per_node": 0' in out and '"ranks_per_node": 36' in out
    code, out, err = run(capsys, "layout", "-c", "cscs", "-C", "mc", "--workers", "2", "--gpus-per-worker", "1")
    assert "'cscs -C mc' has no GPUs" in one_line_error(code, err)


# -- profiles ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scheduler, launcher", list(itertools.product(SCHEDULERS, LAUNCHERS)))
def test_scheduler_launcher_pairs(scheduler: str, launcher: str) -> None:
    table = {"scheduler": scheduler, "launcher": launcher, "cores_per_node": 4}
    if launcher in LAUNCHERS_FOR[scheduler]:
        assert profile_from_table("p", table, "p.toml").launcher == launcher
    else:
        with pytest.raises(ProfileError, match=f"launcher '{launcher}' does not run under scheduler "
                                               f"'{scheduler}'.*use launcher"):
            profile_from_table("p", table, "p.toml")


def test_lsf_with_srun_user_profile_is_refused_when_loaded(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "odd.toml").write_text('extends = "summit"\nlauncher = "srun"\n')
    monkeypatch.setenv("NNLO_CLUSTERS", str(tmp_path))
    code, out, err = run(capsys, "submit", "-c", "odd", "-A", "X", "--dry-run", "--no-check", "train",
                         "--model", "m.py")
    assert "does not run under scheduler 'lsf'" in one_line_error(code, err) and out == ""


def test_max_processes_is_explained_not_applied() -> None:
    with pytest.raises(ProfileError, match="service node"):
        profile_from_table("t", {"scheduler": "pbs", "launcher": "aprun", "cores_per_node": 16,
                                 "max_processes": 200}, "t.toml")


@pytest.mark.parametrize("value, ok", [("$MEMBERWORK/{account}/r", True), ("$SCRATCH/{user}", True),
                                       ("$X/{acount}", False), ("$X/{", False), (3, False)])
def test_runs_home_placeholders_are_checked(value, ok: bool) -> None:
    table = {"scheduler": "slurm", "launcher": "srun", "cores_per_node": 4, "runs_home": value}
    if ok:
        profile_from_table("p", table, "p.toml")
    else:
        with pytest.raises(ProfileError, match="runs_home"):
            profile_from_table("p", table, "p.toml")


# -- rendered scripts ----------------------------------------------------------------------------------
def _dry(capsys, *argv: str) -> tuple[int, str, str]:
    return run(capsys, "submit", *argv[:-1], "--dry-run", "--no-check", argv[-1], "--model", "m.py")


def test_short_walltime_shrinks_the_lsf_warning_with_a_note(capsys, workdir) -> None:
    code, out, err = _dry(capsys, "-c", "summit", "-A", "X", "--nodes", "1", "-t", "30s", "train")
    assert code == 0, err
    assert "#BSUB -wa" not in out and "#BSUB -wt" not in out
    assert "nnlo: note: walltime" in err and "no SIGUSR2 warning" in err
    code, out, err = _dry(capsys, "-c", "summit", "-A", "X", "--nodes", "1", "-t", "5m", "train")
    assert "#BSUB -wa USR2" in out and "#BSUB -wt 2" in out and "comes 120 s before" in err
    code, out, err = _dry(capsys, "-c", "summit", "-A", "X", "--nodes", "1", "-t", "2h", "train")
    assert "#BSUB -wt 10" in out and "warning lead" not in err


def test_short_walltime_shrinks_the_slurm_warning_with_a_note(capsys, workdir) -> None:
    code, out, err = _dry(capsys, "-c", "cscs", "-A", "s1", "--workers", "1", "-t", "30s", "train")
    assert code == 0, err
    assert "#SBATCH --signal=B:USR2@15" in out and "comes 15 s before the limit" in err
    code, out, err = _dry(capsys, "-c", "cscs", "-A", "s1", "--workers", "1", "-t", "1h", "train")
    assert "#SBATCH --signal=B:USR2@300" in out and "warning lead" not in err


def test_cscs_mc_renders_no_gpu_request(capsys, workdir) -> None:
    code, out, err = _dry(capsys, "-c", "cscs", "-A", "s1", "-C", "mc", "--nodes", "2", "train")
    assert code == 0, err
    assert "#SBATCH --constraint=mc" in out and "#SBATCH --ntasks-per-node=36" in out
    assert "--gres" not in out and "gpus" not in out and "daint-mc" in out and "daint-gpu" not in out
    code, out, err = _dry(capsys, "-c", "cscs", "-A", "s1", "--nodes", "2", "train")
    assert "#SBATCH --gres=gpu:1" in out and "daint-gpu" in out


# -- run directory and run home -------------------------------------------------------------------------
@pytest.mark.parametrize("dry", [True, False])
def test_dry_run_refuses_the_run_dir_that_submit_refuses(capsys, workdir, dry: bool) -> None:
    taken = workdir / "taken"
    taken.mkdir()
    (taken / "f").write_text("keep me")
    argv = ["submit", "-c", "local", "--run-dir", str(taken), *(["--dry-run"] if dry else []), "--no-check",
            "train", "--model", "m.py"]
    code, out, err = run(capsys, *argv)
    assert f"--run-dir {taken} holds files but no nnlo run" in one_line_error(code, err)
    assert (taken / "f").read_text() == "keep me" and out == ""


def test_dry_run_shows_the_run_dir_the_real_submit_uses(capsys, workdir, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(workdir))
    code, out, err = _dry(capsys, "-c", "local", "--run-dir", "~/r1", "train")
    assert code == 0, err
    assert f"# run directory: {workdir / 'r1'}" in out and f"NNLO_RUN_DIR={workdir / 'r1'}" in out


def test_run_dir_on_a_read_only_file_system_is_refused(capsys, workdir, tmp_path, monkeypatch) -> None:
    ro = tmp_path / "nfs-home"
    (tmp_path / "site.toml").write_text(
        f'extends = "summit"\nruns_home = "$MEMBERWORK/{{account_lower}}/nnlo-runs"\n'
        f'compute_read_only = ["{ro}"]\n')
    monkeypatch.setenv("NNLO_CLUSTERS", str(tmp_path))
    for dry in (["--dry-run"], []):
        code, out, err = run(capsys, "submit", "-c", "site", "-A", "ABC1", "--nodes", "1", "--run-dir",
                             str(ro / "r"), *dry, "--no-check", "train", "--model", "m.py")
        line = one_line_error(code, err)
        assert f"under {ro}" in line and "NNLO_HOME=$MEMBERWORK/abc1/nnlo-runs" in line
    monkeypatch.setenv("NNLO_HOME", str(ro / "runs"))
    code, out, err = _dry(capsys, "-c", "site", "-A", "ABC1", "--nodes", "1", "train")
    assert "cannot write" in one_line_error(code, err)
    assert not (ro / "runs").exists()


def test_run_dir_outside_the_site_run_home_gets_a_note(capsys, workdir, monkeypatch) -> None:
    monkeypatch.setenv("MEMBERWORK", str(workdir / "gpfs"))
    code, out, err = _dry(capsys, "-c", "summit", "-A", "ABC1", "--nodes", "1", "-t", "2h", "train")
    assert code == 0, err
    want = workdir / "gpfs" / "abc1" / "nnlo-runs"
    assert f"is not under {want.parent}, where summit runs belong" in err and f"NNLO_HOME={want}" in err
    for home in (want, want.parent / "project-a" / "runs"):  # anywhere in the project's scratch area will do
        monkeypatch.setenv("NNLO_HOME", str(home))
        code, out, err = _dry(capsys, "-c", "summit", "-A", "ABC1", "--nodes", "1", "-t", "2h", "train")
        assert code == 0 and "runs belong" not in err


# -- usage: say exactly what to type ---------------------------------------------------------------------
def _typed_fix(err: str) -> list[str]:
    line = one_line_error(2, err)
    if "type: " in line:
        return shlex.split(line.split("type: ", 1)[1])
    return shlex.split(line.split("before the word ", 1)[1].split(": ", 1)[1])


@pytest.mark.parametrize("argv, kind", [
    (("-c", "summit", "-A", "X", "--nodes", "2", "--model", "m.py", "--epochs", "3"), "train"),
    (("-c", "cscs", "-A", "s1", "--blocks", "2", "--block-size", "3", "--model", "m.py"), "optimize"),
    (("-c", "local", "tarin", "--model", "m.py"), "train"),
    (("--model", "m.py", "--cluster", "local", "--workers", "2"), "train"),
    (("train", "--model", "m.py", "-c", "local"), "train"),
])
def test_forgotten_kind_word_says_what_to_type(capsys, workdir, argv, kind: str) -> None:
    code, out, err = run(capsys, "submit", "--dry-run", "--no-check", *argv)
    assert code == 2 and "one of 'train'" not in err and "Missing option" not in err
    fixed = _typed_fix(err)
    assert fixed[:2] == ["nnlo", "submit"] and kind in fixed
    code, out, err = run(capsys, *fixed[1:])  # what it says to type works
    assert code == 0, err


@pytest.mark.parametrize("after", [
    ("--nodes", "2"), ("--nodes=2",), ("-t", "1h", "--dry-run"), ("--walltime", "1h", "--account", "X"),
])
def test_submit_options_after_the_kind_word_say_what_to_type(capsys, workdir, after) -> None:
    dry = [] if "--dry-run" in after else ["--dry-run"]
    argv = ["submit", "-c", "summit", "-A", "X", "--no-check", *dry, "train", "--model", "m.py", *after,
            "--epochs", "2"]
    code, out, err = run(capsys, *argv)
    assert "Did you mean" not in err and "of nnlo submit, not of train" in err
    fixed = _typed_fix(err)
    before = {a.split("=")[0] for a in fixed[:fixed.index("train")]}
    assert {a.split("=")[0] for a in after if a.startswith("-")} <= before
    assert fixed[fixed.index("train"):] == ["train", "--model", "m.py", "--epochs", "2"]
    code, out, err = run(capsys, *fixed[1:])
    assert code == 0, err
    assert "#BSUB" in out


# -- help text -------------------------------------------------------------------------------------------
def _commands_and_subcommands() -> list[tuple[str, ...]]:
    import click

    from nnlo_sched.cli import cli

    out: list[tuple[str, ...]] = [()]
    ctx = click.Context(cli)
    for name in COMMANDS:
        cmd = cli.get_command(ctx, name)
        out.append((name,))
        if isinstance(cmd, click.Group):
            out.extend((name, sub) for sub in cmd.list_commands(ctx))
    return out


@pytest.mark.parametrize("path", _commands_and_subcommands(), ids=lambda p: " ".join(p) or "nnlo")
def test_help_has_no_rst_markup(capsys, path: tuple[str, ...]) -> None:
    code, out, err = run(capsys, *path, "--help")
    assert code == 0 and out.strip(), err
    assert "``" not in out, [line for line in out.splitlines() if "``" in line]
    assert ":func:" not in out and ":class:" not in out and ":mod:" not in out


@pytest.mark.parametrize("dry", [True, False])
@pytest.mark.parametrize("name", ["a" * 300, "a/" * 3000, "bad\x00name"])
def test_unusable_run_dir_names_are_one_line_in_both_paths(capsys, workdir, dry: bool, name: str) -> None:
    code, out, err = run(capsys, "submit", "-c", "local", "--run-dir", name, *(["--dry-run"] if dry else []),
                         "--no-check", "train", "--model", "m.py")
    assert "--run-dir" in one_line_error(code, err) and out == ""


def test_a_missing_cluster_says_where_it_goes(capsys, workdir) -> None:
    code, out, err = run(capsys, "submit", "--dry-run", "--no-check", "train", "--model", "m.py")
    assert "type: nnlo submit --dry-run --no-check --cluster NAME train --model m.py" in one_line_error(code, err)


def test_a_link_into_a_read_only_folder_is_refused(capsys, workdir, tmp_path, monkeypatch) -> None:
    ro = tmp_path / "nfs-home"
    ro.mkdir()
    (workdir / "link").symlink_to(ro)
    (tmp_path / "site.toml").write_text(f'extends = "summit"\ncompute_read_only = ["{ro}"]\n')
    monkeypatch.setenv("NNLO_CLUSTERS", str(tmp_path))
    code, out, err = run(capsys, "submit", "-c", "site", "-A", "A1", "--nodes", "1", "--run-dir", "link/r",
                         "--dry-run", "--no-check", "train", "--model", "m.py")
    assert "cannot write" in one_line_error(code, err)


def test_a_search_option_after_train_says_to_type_optimize(capsys, workdir) -> None:
    code, out, err = run(capsys, "submit", "-c", "local", "--dry-run", "--no-check", "train", "--block-size", "3",
                         "--model", "m.py")
    fixed = _typed_fix(err)
    assert "--block-size is an option of nnlo optimize, not of train" in err
    assert fixed == ["nnlo", "submit", "-c", "local", "--dry-run", "--no-check", "optimize", "--block-size", "3",
                     "--model", "m.py"]
    code, out, err = run(capsys, *fixed[1:])
    assert code == 0, err


def test_layout_constraint_only_where_the_scheduler_has_them(capsys) -> None:
    code, out, err = run(capsys, "layout", "summit", "-C", "mc", "--workers", "2")
    assert "--constraint is a Slurm option" in one_line_error(code, err)
