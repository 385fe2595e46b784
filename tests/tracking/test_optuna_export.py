"""Optuna's own tools on a sweep: ``python -m sweeper export <folder> --optuna URL`` writes
every row as a trial of an Optuna study (pruned ones with their intermediate values), so
optuna-dashboard and Optuna's plots and importances open it."""

from __future__ import annotations

from datetime import timezone

import optuna
import pandas as pd
import pytest

import sweeper
import sweep_fns
from conftest import run_cli


def test_a_search_exported_is_the_same_study_in_optunas_storage(tmp_path):
    df = sweeper.sweep(sweep_fns.descent, {"x": sweeper.uniform(0.0, 1.0), "pace": 0.02}, search="random",
                       trials=10, prune="median(n_startup_trials=3)", metric="loss", workers=2, seed=1,
                       out=str(tmp_path), name="s", progress=False)
    assert set(df.status) == {"ok", "pruned"}, df[["status", "error"]]
    url = f"sqlite:///{tmp_path / 'study.db'}"
    for _ in range(2):  # a second export replaces the first: never two copies
        done = run_cli("export", str(tmp_path / "s"), "--optuna", url)
        assert done.returncode == 0, done.stderr
        assert f"10 trials written to the Optuna study 's' in {url}" in done.stdout
    assert [s.study_name for s in optuna.get_all_study_summaries(url)] == ["s"]
    study = optuna.load_study(study_name="s", storage=url)
    assert study.direction == optuna.study.StudyDirection.MINIMIZE and study.user_attrs["fixed"] == {"pace": 0.02}
    trials = {t.user_attrs["trial_id"]: t for t in study.trials}
    assert set(trials) == set(df.trial_id)
    history = pd.read_csv(tmp_path / "s" / "history.csv")
    for row in df.itertuples():
        t = trials[row.trial_id]
        assert t.state.name == {"ok": "COMPLETE", "pruned": "PRUNED"}[row.status]
        assert t.params == {"x": row.param_x}  # pace is fixed: the study's, not searched
        steps = history[history.trial == row.trial].set_index("epoch").loss
        assert t.intermediate_values == steps.to_dict()  # every epoch, where a pruned one stopped too
        assert max(t.intermediate_values) == row.epoch_reached
        if row.status == "ok":
            assert t.value == row.loss and t.user_attrs["metric:loss"] == row.loss
        # when it ran: Optuna's naive local time
        assert t.datetime_start.astimezone(timezone.utc) == pd.Timestamp(row.started_at).to_pydatetime()
        assert abs(t.duration.total_seconds() - row.duration_s) < 1e-3
    assert study.best_value == df[df.status == "ok"].loss.min()
    assert set(optuna.importance.get_param_importances(study)) == {"x"}  # Optuna's own tools work on it


def test_a_grid_exports_with_its_first_metric_and_a_bad_url_is_one_line(tmp_path):
    sweeper.sweep(sweep_fns.surface, {"a": [1, 2], "b": [0.5, 2.0], "c": ["x", "y"]}, out=str(tmp_path),
                  name="g", progress=False)
    url = f"sqlite:///{tmp_path / 'g.db'}"
    done = run_cli("export", str(tmp_path / "g"), "--optuna", url)
    assert done.returncode == 0, done.stderr
    study = optuna.load_study(study_name="g", storage=url)
    assert len(study.trials) == 8 and study.user_attrs["metric"] == "score"
    assert sorted(t.params["c"] for t in study.trials) == ["x"] * 4 + ["y"] * 4  # a choice among texts
    assert {t.params["a"] for t in study.trials} == {1, 2}  # whole numbers: an integer range
    other = optuna.create_study(study_name="g2", storage=url)  # the user's own study, named as a folder
    other.set_user_attr("mine", True)
    (tmp_path / "g").rename(tmp_path / "g2")
    clash = run_cli("export", str(tmp_path / "g2"), "--optuna", url)
    assert clash.returncode == 2 and "already has a study named 'g2' that is not an export of" in clash.stderr
    assert optuna.load_study(study_name="g2", storage=url).user_attrs == {"mine": True}  # left as it was
    bad = run_cli("export", str(tmp_path / "g2"), "--optuna", "not-a-database")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "Optuna cannot open that storage" in bad.stderr and "sqlite:///study.db" in bad.stderr
