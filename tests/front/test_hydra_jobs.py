"""The Hydra launcher's decisions, in-process: a job's overrides as a point, the
book's job numbers, a task function's return as metrics, the settings as sweeper's options."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from sweeper.errors import SweepError
from sweeper.store.paths import SweepPaths

pytest.importorskip("hydra", reason="hydra-core is not installed (pip install -e '.[hydra]')")

from sweeper.front.hydra.jobs import Book, params_of  # noqa: E402
from sweeper.front.hydra.settings import LEFT_TO_HYDRA, defaults, options  # noqa: E402
from sweeper.front.hydra.task import metrics_of  # noqa: E402

pytestmark = pytest.mark.unit


def test_overrides_become_parameters_by_their_keys_with_hydras_values():
    assert params_of(["lr=0.1", "units=32", "name=abc", "flag=true", "x=null"]) == {
        "lr": 0.1, "units": 32, "name": "abc", "flag": True, "x": None}
    assert params_of(["+extra=3", "++forced=1", "~gone", "db@backup=mysql"]) == {
        "extra": 3, "forced": 1, "~gone": None, "db@backup": "mysql"}
    assert params_of(["layers=[16,32]", "q='a b'"]) == {"layers": [16, 32], "q": "a b"}
    with pytest.raises(SweepError, match="do not parse"):
        params_of(["lr=[0.1"])
    with pytest.raises(SweepError, match=r"opt=\{lr:0.1\} gives opt a dict.*opt.KEY=VALUE"):
        params_of(["opt={lr:0.1}"])
    with pytest.raises(SweepError, match="'lr' has the value nan"):
        params_of(["lr=nan"])


def test_the_same_overrides_in_any_order_are_one_job_with_its_number(tmp_path):
    paths = SweepPaths(str(tmp_path))
    book = Book(paths)
    jobs = book.number([["lr=0.1", "u=1"], ["lr=0.2", "u=1"]], 0)
    assert [j.num for j in jobs] == [0, 1]
    book.save()
    again = Book(paths).number([["u=1", "lr=0.2"], ["lr=0.3", "u=1"], ["lr=0.1", "u=1"]], 0)
    assert [j.num for j in again] == [1, 2, 0]  # lr=0.3 is new: its place (1) is taken, so 2
    assert again[0].overrides == ("u=1", "lr=0.2")  # as given today


def test_a_new_job_never_takes_a_number_a_folder_has(tmp_path):
    (tmp_path / "0").mkdir()  # a job folder of an earlier run (Hydra's basic launcher, say)
    (tmp_path / "2").mkdir()
    jobs = Book(SweepPaths(str(tmp_path))).number([["a=1"], ["a=2"], ["a=3"]], 0)
    assert [j.num for j in jobs] == [1, 3, 4]


def test_a_fresh_start_retires_every_number_it_had(tmp_path):
    paths = SweepPaths(str(tmp_path))
    book = Book(paths)
    book.number([["a=1"], ["a=2"]], 0)
    book.save()
    fresh = Book(paths, fresh=True)
    assert [j.num for j in fresh.number([["a=1"]], 0)] == [2]
    fresh.save()
    assert json.load(open(paths.hydra_book))["retired"] == [0, 1]
    assert [j.num for j in Book(paths).number([["a=2"]], 0)] == [3]  # retired numbers stay retired


def test_a_trial_finds_its_job_by_its_point(tmp_path):
    paths = SweepPaths(str(tmp_path))
    book = Book(paths)
    book.number([["lr=0.1", "+x=2"]], 5)
    book.save()
    job = Book.job_of(paths, {"x": 2, "lr": 0.1})
    assert (job.num, job.overrides) == (5, ("lr=0.1", "+x=2"))
    with pytest.raises(SweepError, match="no job"):
        Book.job_of(paths, {"lr": 0.2})


def test_a_task_functions_return_value_as_metrics():
    import numpy

    assert metrics_of(None) == {}
    assert metrics_of(0.5) == {"value": 0.5}
    assert metrics_of(numpy.float32(0.5)) == {"value": numpy.float32(0.5)}
    assert metrics_of({"acc": 0.9}) == {"acc": 0.9}
    assert metrics_of([0.1, 2]) == {"value_0": 0.1, "value_1": 2}


def test_what_is_no_number_is_left_out_of_the_metrics_and_said(capsys):
    assert metrics_of("done") == {}
    assert "returned str, no number: no metric" in capsys.readouterr().err
    assert metrics_of({"acc": 0.9, "ckpt": "/tmp/m.keras", "status": 1}) == {"acc": 0.9}
    assert "ckpt, status: no metrics" in capsys.readouterr().err


def test_the_settings_are_sweepers_options_by_name_with_its_defaults():
    from sweeper.model.options import Options

    given = defaults()
    for f in fields(Options):
        assert (f.name in given) != (f.name in LEFT_TO_HYDRA), f.name
    assert given["workers"] is None and given["start_method"] == "forkserver" and given["backend"] == "local"
    assert {"address", "cpus_per_trial", "slurm"} <= set(given)  # the backends' own, None until chosen
    opts = options({**given, "_target_": "x", "workers": 2, "per_gpu": "auto", "timeout": "10m"}, "/x/multirun/a")
    assert (opts.workers, opts.per_gpu, opts.timeout, opts.out, opts.name) == (2, "auto", 600.0, "/x/multirun", "a")
    with pytest.raises(SweepError, match="^hydra.launcher: .*workers"):
        options({"workers": -3}, "/x/a")
    with pytest.raises(SweepError, match="hydra.launcher.search is not a setting"):
        options({"search": "tpe"}, "/x/a")
    with pytest.raises(SweepError, match="address goes with backend='ray'"):
        options({"address": "auto"}, "/x/a")


def test_the_docs_name_every_setting_and_what_is_left_to_hydra():
    import os

    from conftest import ROOT

    text = open(os.path.join(ROOT, "docs", "hydra.md")).read()
    missing = [name for name in [*defaults(), *LEFT_TO_HYDRA] if name != "backend_options" and f"`{name}`" not in text]
    assert missing == []


def test_an_earlier_batchs_jobs_stand_whatever_their_status_and_one_never_started_is_not_run(tmp_path):
    """``Definition.settled`` (a Hydra sweeper's earlier batches): a failed row stays as it is,
    a job of those batches with no row at all is not run by a later batch; the others run."""
    from sweeper.model.options import Options
    from sweeper.model.settings import parse
    from sweeper.model.trial import Status, TrialResult
    from sweeper.run.planning import kept_and_todo, plan

    specs = plan([{"a": 1}, {"a": 2}, {"a": 3}, {"a": 4}], str(tmp_path), 0)
    failed = TrialResult(specs[0].trial_id, specs[0].name, 0, specs[0].params, Status.ERROR, error="boom")
    ok = TrialResult(specs[3].trial_id, specs[3].name, 3, specs[3].params, Status.OK, {"v": 1.0})
    previous = {failed.trial_id: failed, ok.trial_id: ok}
    kept, todo = kept_and_todo(specs, previous, parse(Options()), {specs[0].key, specs[1].key})
    assert set(kept) == {specs[0].trial_id, specs[3].trial_id} and kept[specs[0].trial_id].status is Status.ERROR
    assert [s.params for s in todo] == [{"a": 3}]
    kept, todo = kept_and_todo(specs, previous, parse(Options()), ())  # nothing settled: the failed one runs again
    assert set(kept) == {specs[3].trial_id} and [s.params for s in todo] == [{"a": 1}, {"a": 2}, {"a": 3}]


#: sweeper's advice, and the words a multirun takes for it (None: the same words)
ADVICE = {
    "give this one another --name": "give this multirun another hydra.sweep.dir",
    "give this run another --name (name=...), or start over with --fresh (fresh=True)":
        "give this multirun another hydra.sweep.dir, or start over with hydra.launcher.fresh=true",
    "give --mode max or --mode min (mode='max' or 'min') to rank by it, or --metric (metric=) to rank by another":
        "give hydra.launcher.mode=max or hydra.launcher.mode=min to rank by it, or hydra.launcher.metric to rank by "
        "another",
    "give --metric/--mode (metric=, mode=) to choose another":
        "give hydra.launcher.metric/hydra.launcher.mode to choose another",
    "give --per-gpu 2, --gpus none or --timeout 10m":
        "give hydra.launcher.per_gpu=2, hydra.launcher.gpus=none or hydra.launcher.timeout=10m",
    "give --metric and --mode to choose": "give hydra.launcher.metric and hydra.launcher.mode to choose",
    "did you mean val_accuracy? run again with --metric val_accuracy (metric='val_accuracy'); its rows are kept":
        "did you mean val_accuracy? run again with hydra.launcher.metric=val_accuracy; its rows are kept",
    "3 ok trials did not meet the constraints (feasible=False): not ranked": None,  # no flag
    "run python -m sweeper --search tpe yourself": None,  # not a setting of the launcher
    "the grid file changed since the last run (3 trials on record)":
        "the app's script changed since the last run (3 trials on record)",
}


def test_sweepers_advice_is_said_in_the_words_a_multirun_takes():
    from sweeper.front.hydra.launcher import in_hydra_words

    assert {said: in_hydra_words(said) for said in ADVICE} == {
        said: said if in_hydra is None else in_hydra for said, in_hydra in ADVICE.items()}


class _Task:
    def __call__(self, cfg):
        return cfg * 2


def test_a_task_function_no_name_finds_goes_by_value_and_returns_the_same():
    """A closure or a callable object (what Hydra's launcher test suites launch in-process) is
    sent by value; a function a name finds, by its name (and how far ``__wrapped__`` leads)."""
    import functools
    import pickle

    from sweeper.front.hydra.sending import by_value, found_by_name

    scale = 3

    def closure(cfg):
        return cfg * scale

    assert found_by_name(closure) is None and found_by_name(_Task()) is None
    assert pickle.loads(by_value(closure))(2) == 6 and pickle.loads(by_value(_Task()))(2) == 4
    assert found_by_name(json.dumps) == ("json", "dumps", 0)
    wrapped = functools.wraps(json.dumps)(lambda *a, **k: json.dumps(*a, **k))
    assert found_by_name(wrapped) is None  # its name finds json.dumps, which leads nowhere to it
    assert found_by_name(test_a_task_function_no_name_finds_goes_by_value_and_returns_the_same)[2] == 0


def test_hydras_context_goes_by_name_where_a_plugin_scan_ran_its_module_again(tmp_path, monkeypatch):
    """Hydra's plugin scan executes a plugin's module again in the process of a second multirun:
    an object made before holds a class the module no longer has under its name, which plain
    pickle refuses; the context goes all the same, and loads as the class the module has now."""
    import importlib
    import pickle
    import sys

    from sweeper.front.hydra.sending import context_blob

    (tmp_path / "rescanned_plugin.py").write_text("class Source:\n    def __init__(self):\n        self.path = 'p'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("rescanned_plugin")
    try:
        made = module.Source()
        importlib.util.find_spec("rescanned_plugin").loader.exec_module(module)  # as Hydra's scan does
        with pytest.raises(pickle.PicklingError, match="not the same object"):
            pickle.dumps(made)
        loaded = pickle.loads(context_blob(made, {"a": 1}, {"instances": {}, "omegaconf_resolvers": {}}))
        assert type(loaded["hydra_context"]) is module.Source and loaded["hydra_context"].path == "p"
        assert loaded["config"] == {"a": 1}
    finally:
        sys.modules.pop("rescanned_plugin", None)


def test_the_apps_code_is_its_files_beside_and_below_its_script_never_installed_code(tmp_path, monkeypatch):
    import importlib
    import sys

    from sweeper.front.hydra.appcode import app_code

    app = tmp_path / "app"
    (app / "lib").mkdir(parents=True)
    (app / "sweep").mkdir()
    (app / "main.py").write_text("import lib.model\n\ndef task(cfg):\n    return cfg\n")
    (app / "helper.py").write_text("X = 1\n")  # beside: the app's, imported or not
    (app / "notes.txt").write_text("no code\n")
    (app / "lib" / "__init__.py").write_text("")
    (app / "lib" / "model.py").write_text("Y = 2\n")  # below, imported by the app
    (app / "lib" / "unused.py").write_text("Z = 3\n")  # below, never imported
    (app / "sweep" / "kept.py").write_text("")  # in the sweep folder
    monkeypatch.syspath_prepend(str(app))
    try:
        main = importlib.import_module("main")
        code = app_code(main.task, str(app / "sweep"))
    finally:
        for name in ("main", "lib", "lib.model"):
            sys.modules.pop(name, None)
    assert sorted(code) == ["helper.py", "lib/__init__.py", "lib/model.py", "main.py"]
    assert all(len(sha) == 16 for sha in code.values())
    assert app_code(json.dumps, str(tmp_path)) == {} and app_code(pytest.fixture, str(tmp_path)) == {}


def test_kept_jobs_other_code_made_are_said_in_one_line_with_what_changed():
    from sweeper.front.hydra.appcode import changed_line

    now = {"app.py": "b", "new.py": "n"}
    assert changed_line([("0", now), ("1", dict(now))], now) is None
    line = changed_line([("0", {"app.py": "a", "old.py": "o"}), ("1", now), ("2", {"app.py": "b"})], now)
    assert line == ("the app's code changed since 2 jobs (#0, #2) on record ran ok (edited: app.py; added: new.py; "
                    "gone: old.py): their rows are kept as made, as a resume keeps every job ok on record; "
                    "hydra.launcher.fresh=true runs every job again")
    many = changed_line([(str(n), {}) for n in range(7)], now)
    assert many is not None and "7 jobs (#0, #1, #2, #3, #4 and 2 more)" in many


def test_a_failed_batch_is_summarised_at_once_only_where_the_sweeper_stops_there(monkeypatch, capsys):
    """Hydra's basic sweeper raises on a batch with a failed job, so its summary comes at once;
    another sweeper may go on (Optuna's within its failure rate): its summary comes once, at the
    end of the multirun, or as the process exits if the sweeper raised instead."""
    import atexit
    import types

    from sweeper.front.hydra import closing as closing_module
    from sweeper.model.lifecycle import SweepEnd
    from sweeper.model.trial import Status

    said: list[str] = []
    monkeypatch.setattr("sweeper.front.shown.summary", lambda outcome, *ranking: ["summary"])
    registered: list = []
    monkeypatch.setattr(atexit, "register", registered.append)
    failed = types.SimpleNamespace(ran=1, results=[types.SimpleNamespace(key="k", status=Status.ERROR)],
                                   interrupted=None, end=SweepEnd.FINISHED, elapsed_s=0.0)
    for basic, at_once in ((True, 1), (False, 0)):
        said.clear()
        registered.clear()
        closing = closing_module.MultirunSummary(lambda line: said.append(line) or line)
        closing.started()
        monkeypatch.setattr(closing_module.dataclasses, "replace", lambda outcome, **changes: outcome)
        closing.ended(failed, {"k"}, (None, None), hooked=True, basic=basic)
        assert len(said) == at_once, basic
        closing.ended(failed, {"k"}, (None, None), hooked=True, basic=basic)  # a second failed batch
        closing.say()  # the end of the multirun
        assert len(said) == (2 if basic else 1), basic
        assert len(registered) == (0 if basic else 1), basic
