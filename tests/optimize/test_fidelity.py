"""What a staged search's own trials say about its fidelities (best.json): the best at each fidelity and the
rank correlation between rungs. Pure, no processes."""
from __future__ import annotations

import json

import pytest

from nnlo.optimize.fidelity import LOW_CORRELATION, best_any_fidelity, rung_correlation, spearman
from nnlo.optimize.results import Objective, Trial, write_results

LOSS = Objective.parse("val_loss")


def staged(tid, values, epochs=(1, 3, 9, 27)):
    """A trial with one successful result per rung (``values[r]`` at rung r)."""
    t = Trial(tid, {"x": tid})
    for rung, v in enumerate(values):
        t.finish_stage([{"metrics": {"val_loss": v}, "epochs": epochs[rung]}], LOSS, 0, rung, epochs[rung], 1.0 + rung)
    return t


def results(trials):
    return [(t.id, r) for t in trials for r in t.rungs]


def test_spearman_ranks_with_ties_and_refuses_unpaired_values():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(0.9487, abs=1e-4)  # ties share their mean rank
    assert spearman([1], [2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None
    with pytest.raises(ValueError, match="pairs"):
        spearman([1, 2], [1])


def test_the_correlation_is_measured_against_the_highest_rung_enough_trials_reached():
    # 6 trials reach 9 epochs, 2 of them 27 (too few): rung 0 and 1 are compared with 9 epochs
    crossing = [staged(i, [1.0 + i / 10, 0.9 - i / 20, 0.5 - i / 30]) for i in range(6)]
    crossing += [staged(10 + i, [2.0, 1.0, 0.6, 0.2]) for i in range(2)]
    corr = rung_correlation(results(crossing), LOSS)
    assert corr["top_rung"] == 2 and corr["top_epochs"] == 9
    assert [(r["epochs"], r["n"]) for r in corr["rungs"]] == [(1, 8), (3, 8)]
    assert corr["rungs"][1]["rho"] == pytest.approx(1.0) and corr["rungs"][0]["rho"] < LOW_CORRELATION
    assert corr["low"]
    agreeing = [staged(i, [1.0 + i, 0.9 + i, 0.5 + i]) for i in range(5)]
    assert rung_correlation(results(agreeing), LOSS)["low"] is False
    assert rung_correlation(results(agreeing[:3]), LOSS) is None  # 3 pairs say nothing


def test_best_json_says_at_which_fidelity_and_shows_the_best_at_any(tmp_path):
    # the 27-epoch trial's 0.209 is the search's best; 3-epoch trials reached 0.127 (overfitting later)
    trials = [staged(0, [0.5, 0.3, 0.25, 0.209]), staged(1, [0.4, 0.127]), staged(2, [0.6])]
    write_results(tmp_path, trials, LOSS, ["x"], 1)
    best = json.loads((tmp_path / "best.json").read_text())
    assert (best["best_trial"], best["best_fom"], best["best_epochs"], best["best_rung"]) == (0, 0.209, 27, 3)
    assert best["best_any"] == {"trial": 1, "fom": 0.127, "epochs": 3, "rung": 1}
    assert best_any_fidelity(results(trials[:1]), LOSS)["fom"] == 0.209
    write_results(tmp_path, trials[:1], LOSS, ["x"], 1)  # the best is the best at any fidelity: not repeated
    assert json.loads((tmp_path / "best.json").read_text())["best_any"] is None
