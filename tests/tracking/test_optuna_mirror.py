"""``--optuna``: a sweep kept as an Optuna study while it runs (a journal file in the sweep
folder by default), read back with Optuna's own API and optuna-dashboard; ``export --optuna``
writes the same study from the ledger, and the two agree."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import optuna
import pytest

import pbt_fns
import sweeper
import sweep_fns
from conftest import ROOT, run_cli, run_cli_here, write_grid
from tool_readers import studies

optuna.logging.set_verbosity(optuna.logging.WARNING)

#: A grid whose trial lr=0.2/relu reports epoch 1, then waits for the file RELEASE; lr=0.3 fails.
HELD = '''import os, time
import sweeper

grid = {{"lr": [0.1, 0.2, 0.3], "act": ["relu", "tanh"], "epochs": 3}}
options = {{"workers": 2, "metric": "loss"}}


def train(p):
    here = sweeper.current_trial().dir
    for epoch in range(1, p["epochs"] + 1):
        sweeper.report(epoch=epoch, loss=1 / (epoch * p["lr"]), acc=p["lr"] * epoch)
        if epoch == 1 and (p["lr"], p["act"]) == (0.2, "relu"):
            open(os.path.join(here, "reported"), "w").close()
            deadline = time.monotonic() + 600
            while not os.path.exists({release!r}) and time.monotonic() < deadline:
                time.sleep(0.02)
    if p["lr"] >= 0.3:
        raise ValueError("lr too high")
    return {{"loss": 1 / (p["epochs"] * p["lr"]), "acc": p["lr"] * p["epochs"]}}
'''


# -- reading back, with Optuna's own API ----------------------------------------------------


def latest(study: optuna.Study) -> dict[str, optuna.trial.FrozenTrial]:
    """Each sweeper trial's latest Optuna trial (an earlier attempt is an earlier one)."""
    out = {}
    for t in study.get_trials():
        out[t.user_attrs["trial_id"]] = t
    return out


def agree(live: optuna.Study, exported: optuna.Study) -> None:
    """The live study and an export of the same sweep hold the same trials: parameters,
    states, values, intermediate values, and what the row says of each."""
    a, b = latest(live), latest(exported)
    assert set(a) == set(b) and len(exported.trials) == len(b)
    assert live.directions == exported.directions and live.user_attrs["fixed"] == exported.user_attrs["fixed"]
    for tid, x in a.items():
        y = b[tid]
        assert (x.params, x.state, x.values, x.intermediate_values) == \
            (y.params, y.state, y.values, y.intermediate_values), (x, y)
        keys = ("trial", "status", "error", "device", "seed", "attempt", "log", "schedule")
        assert {k: x.user_attrs.get(k) for k in keys} == {k: y.user_attrs.get(k) for k in keys}


def exported(tmp_path, folder, *more: str) -> optuna.Study:
    """``export --optuna`` of ``folder`` into a database of its own, run in this process (not
    in an interpreter importing Optuna again; the command's CLI runs in the resume's test):
    the study it wrote."""
    url = f"sqlite:///{tmp_path / 'export.db'}"
    done = run_cli_here("export", str(folder), "--optuna", url, *more)
    assert done.returncode == 0, done.stderr
    return studies(url)[os.path.basename(folder)]


def wait_for(what, timeout: float = 120):
    """``what()`` once it is true (the journal read again until the sweep's tracker wrote it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.2)  # polling the study itself: what a user watching it sees
    raise AssertionError("not seen in the study in time")


def running_trial(journal, name: str):
    """The study's running trial ``name`` once it holds its first epoch, else None."""
    if not os.path.exists(journal):
        return None
    found = studies(journal)
    if not found:
        return None
    [study] = found.values()
    held = [t for t in study.get_trials() if t.user_attrs.get("trial") == name]
    return held[0] if held and held[0].state.name == "RUNNING" and held[0].intermediate_values else None


# -- a sweep as it runs ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def held_sweep(tmp_path_factory):
    """The HELD grid swept from the CLI with --optuna, once for the module: its trial
    lr=0.2/relu as the study showed it while it ran, and what optuna-dashboard and a
    browser showed of the running sweep (read then, for the test that checks it: were each
    test to sweep it, that would be two sweeps held alike); then released, run to its end.

    ``dashboard``: what the dashboard showed, a reason to skip (no Chromium, no
    optuna-dashboard), or what went wrong there (raised again by that test alone)."""
    base = tmp_path_factory.mktemp("held")
    release = base / "release"
    grid = write_grid(base, HELD.format(release=str(release)))
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", grid, "--out", str(base), "--name", "g",
                             "--optuna"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    journal = base / "g" / "optuna.journal"
    dashboard: object = None
    try:
        held = wait_for(lambda: running_trial(journal, "act=relu,lr=0_2"))
        if not os.path.exists(CHROMIUM):
            dashboard = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
        elif importlib.util.find_spec("optuna_dashboard") is None:
            dashboard = "optuna-dashboard is in the test extra: pip install -e '.[test]'"
        else:
            try:
                dashboard = _dashboard_of_the_running_sweep(base, journal)
            except Exception as exc:  # noqa: BLE001 - the dashboard's test raises it; the others go on
                dashboard = exc
    finally:
        release.touch()
        out, err = proc.communicate(timeout=240)
    return SimpleNamespace(base=base, journal=journal, held=held, proc=proc, out=out, err=err, dashboard=dashboard)


def test_a_grid_shows_live_with_its_running_trial_and_agrees_with_its_export(tmp_path, held_sweep):
    held, proc, out, err = held_sweep.held, held_sweep.proc, held_sweep.out, held_sweep.err
    tmp_path_sweep, journal = held_sweep.base, held_sweep.journal
    # while it ran: its parameters with their distributions, its first epoch, who and where it is
    assert held.params == {"lr": 0.2, "act": "relu"} and held.intermediate_values == {1: 5.0}
    assert held.distributions["lr"] == optuna.distributions.FloatDistribution(0.1, 0.3)  # a grid's numbers: a range
    assert held.distributions["act"] == optuna.distributions.CategoricalDistribution(["relu", "tanh"])
    attrs = held.user_attrs
    assert attrs["status"] == "running" and attrs["device"] == "cpu" and attrs["attempt"] == 1
    assert attrs["log"] == str(tmp_path_sweep / "g" / "trials" / "act=relu,lr=0_2" / "log.txt")
    assert proc.returncode == 1, out + err  # two trials failed
    assert f"optuna-dashboard {journal}" in out
    [live] = studies(journal).values()
    assert live.study_name == "g" and live.direction == optuna.study.StudyDirection.MINIMIZE
    assert live.user_attrs["fixed"] == {"epochs": 3} and live.metric_names == ["loss"]
    df = sweeper.load(str(tmp_path_sweep / "g"))
    trials = latest(live)
    assert len(live.trials) == len(trials) == len(df) == 6  # each trial once
    for row in df.itertuples():
        t = trials[row.trial_id]
        assert t.user_attrs["status"] == row.status and t.user_attrs["trial"] == row.trial
        assert t.state.name == ("COMPLETE" if row.status == "ok" else "FAIL")
        assert t.intermediate_values == {e: 1 / (e * row.param_lr) for e in (1, 2, 3)}
        if row.status == "ok":
            assert t.value == row.loss and t.user_attrs["metric:loss"] == row.loss
        else:
            assert t.values is None and t.user_attrs["error"] == "ValueError: lr too high"
    agree(live, exported(tmp_path, tmp_path_sweep / "g"))


def test_a_search_with_pruning_keeps_its_space_and_agrees_with_its_export(tmp_path):
    df = sweeper.sweep(sweep_fns.descent, {"x": sweeper.uniform(0.0, 1.0), "pace": 0.02}, search="tpe",
                       trials=10, prune="median(n_startup_trials=3)", metric="loss", workers=2, seed=1,
                       optuna=True, out=str(tmp_path), name="s", progress=False)
    assert set(df.status) == {"ok", "pruned"}, df[["status", "error"]]
    live = studies(tmp_path / "s" / "optuna.journal")["s"]
    assert {t.distributions["x"] for t in live.trials} == {optuna.distributions.FloatDistribution(0.0, 1.0)}
    assert live.user_attrs["fixed"] == {"pace": 0.02}
    pruned = [t for t in live.trials if t.state.name == "PRUNED"]
    assert pruned and all(t.value == t.intermediate_values[max(t.intermediate_values)] for t in pruned)
    agree(live, exported(tmp_path, tmp_path / "s"))


def test_population_based_members_show_as_they_began_with_their_schedule(tmp_path):
    df = sweeper.sweep(pbt_fns.climb, {"lr": sweeper.loguniform(0.01, 0.5), "epochs": 6}, search="pbt",
                       metric="acc", workers=2, optuna=True, out=str(tmp_path), name="p", progress=False,
                       pbt={"population": 4, "interval": 2})
    assert set(df.status) == {"ok"}, df[["status", "error"]]
    live = studies(tmp_path / "p" / "optuna.journal")["p"]
    trials = latest(live)
    assert len(live.trials) == len(trials) == 4
    copied = 0
    for row in df.itertuples():
        segments = trials[row.trial_id].user_attrs["schedule"]
        assert segments[0]["epoch"] == 0 and trials[row.trial_id].params == {"lr": segments[0]["params"]["lr"]}
        assert segments[-1]["params"]["lr"] == row.param_lr  # the row: its last segment's
        copied += sum(1 for s in segments if s["copied_from"])
        assert trials[row.trial_id].intermediate_values.keys() == set(range(1, 7))
    assert copied >= 1  # members were copied, and say from whom
    agree(live, exported(tmp_path, tmp_path / "p"))


def test_several_objectives_make_a_multi_objective_study(tmp_path):
    sweeper.sweep(sweep_fns.tradeoff, {"units": [0, 4, 8], "lr": [0.1, 0.01]}, metric=["accuracy", "size"],
                  mode=["max", "min"], optuna=True, out=str(tmp_path), name="m", progress=False)
    live = studies(tmp_path / "m" / "optuna.journal")["m"]
    assert [d.name for d in live.directions] == ["MAXIMIZE", "MINIMIZE"] and live.metric_names == ["accuracy", "size"]
    states = sorted(t.state.name for t in live.trials)
    assert states == ["COMPLETE"] * 4 + ["FAIL"] * 2
    for t in live.trials:
        if t.state.name == "COMPLETE":
            units = t.params["units"]
            assert t.values == [pytest.approx(1 - 1 / units - abs(t.params["lr"] - 0.01)), 10 * units]
    assert {n for t in live.best_trials for n in [t.params["units"]]} == {4, 8}
    agree(live, exported(tmp_path, tmp_path / "m"))


def test_a_metric_whose_direction_is_unknown_is_one_warning_and_a_mode_makes_the_study(tmp_path, caplog):
    """The sweep names no metric and the one its rows pick, ``value``, does not say which way is
    better: an Optuna study needs a direction and none is guessed. Said once, the sweep goes on;
    with --mode there is a study."""
    caplog.set_level(logging.WARNING, logger="sweeper")
    df = sweeper.sweep(sweep_fns.nan_first, {"x": [1, 2, 3]}, optuna=True, out=str(tmp_path), name="u",
                       progress=False)
    assert list(df.status) == ["ok"] * 3
    said = [r.getMessage() for r in caplog.records if "Optuna" in r.getMessage()]
    assert len(said) == 1 and "'value' does not say whether higher is better" in said[0], said
    assert "give --mode max or --mode min" in said[0] and f"export {tmp_path / 'u'} --optuna" in said[0]
    assert studies(tmp_path / "u" / "optuna.journal") == {}
    sweeper.sweep(sweep_fns.nan_first, {"x": [1, 2, 3]}, optuna=True, mode="max", out=str(tmp_path), name="u",
                  progress=False)
    study = studies(tmp_path / "u" / "optuna.journal")["u"]
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert sorted(t.state.name for t in study.trials) == ["COMPLETE", "COMPLETE", "FAIL"]  # NaN: nothing to rank


CHROMIUM = "/usr/bin/chromium"
#: Headless, and nothing that reaches outside this machine.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--virtual-time-budget=10000", "--window-size=1400,1600"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str):
    import json
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def chromium(tmp_path, url: str, *what: str) -> str:
    """Headless Chromium (a fresh profile) on ``url``: its DOM once the page's scripts ran."""
    done = subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", *what, url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _dashboard_of_the_running_sweep(base, journal) -> dict:
    """optuna-dashboard on the study of a sweep held running: the study as its API gives it
    (what the page draws from), the trials page's text in headless Chromium, a screenshot."""
    port = free_port()
    dashboard = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "optuna-dashboard"), str(journal),
                                  "--port", str(port), "--server", "wsgiref"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base_url = f"http://127.0.0.1:{port}"
    try:
        def answers():
            assert dashboard.poll() is None, dashboard.communicate()[1]
            try:
                return get_json(f"{base_url}/api/studies")
            except OSError:  # not listening yet
                return None

        [summary] = wait_for(answers)["study_summaries"]
        study = get_json(f"{base_url}/api/studies/{summary['study_id']}")  # what the page draws from
        page = f"{base_url}/dashboard/studies/{summary['study_id']}"
        text = " ".join(re.sub(r"<[^>]+>", " ", chromium(base, f"{page}/trials", "--dump-dom")).split())
        shot = base / "optuna-dashboard.png"
        chromium(base, page, f"--screenshot={shot}")
        return {"study": study, "text": text, "shot": shot}
    finally:
        dashboard.terminate()
        dashboard.communicate(timeout=30)


def test_optuna_dashboard_shows_the_running_sweep_in_a_browser(held_sweep):
    """The module's held sweep, as optuna-dashboard showed it while it ran (the dashboard
    and Chromium ran then: :func:`held_sweep`)."""
    shown = held_sweep.dashboard
    if isinstance(shown, str):
        pytest.skip(shown)
    if isinstance(shown, BaseException):
        raise shown
    states = {t["user_attrs"][0]["value"]: (t["number"], t["state"]) for t in shown["study"]["trials"]}
    number, state = states["act=relu,lr=0_2"]
    assert state == "Running" and sum(s == "Complete" for _, s in states.values()) >= 1, states
    text = shown["text"]
    assert f"Trial {number} Running" in text and f"{len(states)} Trials" in text, text[:2000]
    assert shown["shot"].stat().st_size > 10_000
    print(f"optuna-dashboard, the sweep running: {shown['shot']}")
    assert held_sweep.proc.returncode == 1  # its two failing trials


def docs_snippet() -> list[str]:
    """The commands of docs/trackers.md's "A live Optuna study", as written (comments aside)."""
    text = open(os.path.join(ROOT, "docs", "trackers.md"), encoding="utf-8").read()
    block = re.search(r"## A live Optuna study.*?```bash\n(.*?)```", text, re.S).group(1)
    return [line.split("#")[0].strip() for line in block.strip().splitlines()]


@pytest.mark.slow
def test_the_docs_commands_give_a_study_the_dashboard_opens(tmp_path):
    """As pasted, in a folder with the example: real Keras models, each epoch's val_accuracy;
    the dashboard on a free port (the one change: 8080 may be taken here)."""
    import shlex
    import shutil

    pytest.importorskip("sklearn")
    pytest.importorskip("optuna_dashboard", reason="optuna-dashboard is in the test extra: pip install -e '.[test]'")
    sweep_line, dashboard_line = docs_snippet()
    os.makedirs(tmp_path / "experiments")
    shutil.copy(os.path.join(ROOT, "experiments", "digits_mlp.py"), tmp_path / "experiments")
    argv = shlex.split(sweep_line)
    assert argv[:3] == ["python", "-m", "sweeper"]
    done = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "optuna-dashboard results/digits_mlp/optuna.journal" in done.stdout  # where to look, as the page says
    argv, port = shlex.split(dashboard_line), free_port()
    dashboard = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), argv[0]), *argv[1:], "--port",
                                  str(port), "--server", "wsgiref"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
    try:
        def answers():
            assert dashboard.poll() is None, dashboard.communicate()[1]
            try:
                return get_json(f"http://127.0.0.1:{port}/api/studies")
            except OSError:  # not listening yet
                return None

        [summary] = wait_for(answers)["study_summaries"]
        assert summary["study_name"] == "digits_mlp" and summary["directions"] == ["maximize"]
        study = get_json(f"http://127.0.0.1:{port}/api/studies/{summary['study_id']}")
    finally:
        dashboard.terminate()
        dashboard.communicate(timeout=30)
    assert [t["state"] for t in study["trials"]] == ["Complete"] * 8
    assert all(len(t["intermediate_values"]) == 8 for t in study["trials"])  # every epoch's val_accuracy


def test_every_trial_reaches_the_study_and_the_sweep_never_imports_optuna(tmp_path):
    """Instant trials of a grid: each one in the study by the sweep's end, written by the
    trackers' process; the sweep's own interpreter never imports Optuna."""
    from conftest import HERE

    n = 200
    code = ("import sys, sweeper, sweep_fns\n"
            f"df = sweeper.sweep(sweep_fns.const, {{'x': list(range({n}))}}, optuna=True, mode='max', "
            f"out={str(tmp_path)!r}, name='i', progress=False)\n"
            "print(int((df.status == 'ok').sum()), 'optuna' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, ROOT])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split()[-2:] == [str(n), "False"]
    study = studies(tmp_path / "i" / "optuna.journal")["i"]
    assert len(study.trials) == n and {t.state.name for t in study.trials} == {"COMPLETE"}
    assert sorted(t.params["x"] for t in study.trials) == list(range(n))


# -- resumes, and a folder that already has a study -------------------------------------------


def test_a_resume_adds_no_trial_twice_and_a_rerun_names_the_attempt_it_replaces(tmp_path):
    opts = dict(optuna=True, out=str(tmp_path), name="r", progress=False, workers=1)
    first = sweeper.sweep(sweep_fns.tracked, {"lr": [0.1, 0.3], "fail_once": [True]}, **opts)
    assert first.status.tolist() == ["ok", "error"]
    journal = tmp_path / "r" / "optuna.journal"
    before = {t.number: t for t in studies(journal)["r"].trials}
    second = sweeper.sweep(sweep_fns.tracked, {"lr": [0.1, 0.2, 0.3], "fail_once": [True]}, **opts)
    assert second.status.tolist() == ["ok", "ok", "ok"]
    live = studies(journal)["r"]
    assert len(studies(journal)) == 1 and len(live.trials) == 4  # the kept one once, the rerun's earlier attempt
    kept, rerun = first.trial_id[0], first.trial_id[1]
    now = latest(live)
    assert now[kept] == before[now[kept].number]  # untouched
    assert now[rerun].state.name == "COMPLETE" and now[rerun].user_attrs["attempt"] == 2
    earlier = live.trials[now[rerun].user_attrs["replaces"]]
    assert earlier.state.name == "FAIL" and earlier.user_attrs["trial_id"] == rerun  # left as it ended
    sweeper.sweep(sweep_fns.tracked, {"lr": [0.1, 0.2, 0.3], "fail_once": [True]}, **opts)
    assert studies(journal)["r"].trials == live.trials  # nothing to do: nothing written
    export = exported(tmp_path, tmp_path / "r")
    agree(live, export)
    done = run_cli("export", str(tmp_path / "r"), "--optuna")  # the sweep's own journal, written anew
    assert done.returncode == 0 and f"3 trials written to the Optuna study 'r' in {journal}" in done.stdout, done.stderr
    [rewritten] = studies(journal).values()
    assert len(rewritten.trials) == 3 and "replaces" not in rewritten.trials[-1].user_attrs
    agree(rewritten, export)


def test_a_trial_left_running_by_a_killed_sweep_is_failed_and_replaced_once(tmp_path):
    """The ledger written as the engine writes it: a tracker that died with its sweep left a
    trial running, and one enqueued but never asked for; the next sweep's tracker fails both
    and shows the trial's new attempt once, with its own parameters."""
    from sweeper.model.lifecycle import SweepEnd
    from sweeper.model.protocol import Began
    from sweeper.model.trial import Status, TrialResult
    from sweeper.run.planning import plan
    from sweeper.store.ledger import Ledger
    from sweeper.tracking import SweepInfo, domains_of_points
    from sweeper.tracking.mirror import Mirror
    from sweeper.tracking.optuna_study import OptunaStudy

    folder = str(tmp_path / "k")
    os.makedirs(folder)
    specs = plan([{"lr": 0.1}, {"lr": 0.2}], folder, seed=0)
    ledger = Ledger(folder)
    ledger.set_grid((s.trial_id, s.index, s.name) for s in specs)
    journal = os.path.join(folder, "optuna.journal")
    info = SweepInfo(name="k", folder=folder, uid="u1", domains=domains_of_points([s.params for s in specs]),
                     metric="loss", mode="min")
    by_id = {s.trial_id: s for s in specs}

    def mirror() -> Mirror:
        return Mirror(folder, [OptunaStudy(journal, folder)], info, by_id.get, strict=True)

    first = mirror()
    ledger.mark_running(specs[0], Began(100, "cpu"), "2026-01-01T00:00:00.000Z")
    ledger.add_history(specs[0].trial_id, [{"epoch": 1, "metrics": {"loss": 9.0}, "t": 1.0}])
    assert first.sync()
    study = studies(journal)["k"]
    study.enqueue_trial({"lr": 0.1}, user_attrs={"trial_id": specs[1].trial_id})  # killed before its ask
    del first  # the sweep and its tracker die here: no end
    ledger.clear_history(specs[0].trial_id)
    ledger.mark_running(replace(specs[0], attempt=2), Began(101, "cpu"), "2026-01-01T00:01:00.000Z")
    ledger.mark_running(specs[1], Began(102, "cpu"), "2026-01-01T00:01:00.000Z")
    second = mirror()
    assert second.sync()
    for spec, n in ((specs[0], 2), (specs[1], 1)):
        ledger.add_history(spec.trial_id, [{"epoch": 1, "metrics": {"loss": 1.0}, "t": 1.0}])
        ledger.not_running(spec.trial_id)
        ledger.record(TrialResult(spec.trial_id, spec.name, spec.index, spec.params, Status.OK, {"loss": 1.0},
                                  started_at="2026-01-01T00:01:00.000Z", attempts=n, duration_s=1.0, epoch_reached=1))
    second.end(SweepEnd.FINISHED)
    ledger.close()
    study = studies(journal)["k"]
    assert [t.state.name for t in study.trials] == ["FAIL", "FAIL", "COMPLETE", "COMPLETE"]
    now = latest(study)
    assert now[specs[0].trial_id].user_attrs["replaces"] == 0 and now[specs[0].trial_id].params == {"lr": 0.1}
    assert now[specs[1].trial_id].params == {"lr": 0.2} and now[specs[1].trial_id].user_attrs["replaces"] == 1
    assert study.trials[0].intermediate_values == {1: 9.0} and now[specs[0].trial_id].intermediate_values == {1: 1.0}


def test_a_fresh_sweep_sets_the_old_journal_aside_and_a_changed_grid_writes_its_study_anew(tmp_path):
    opts = dict(optuna=True, out=str(tmp_path), name="f", progress=False)
    sweeper.sweep(sweep_fns.tracked, {"lr": [0.1, 0.2], "act": ["relu"]}, **opts)
    folder = tmp_path / "f"
    # a value a choice did not have, and a setting that was fixed and now varies: written anew
    sweeper.sweep(sweep_fns.tracked, {"lr": [0.1, 0.2], "act": ["relu", "tanh"]}, **opts)
    [study] = studies(folder / "optuna.journal").values()
    assert len(study.trials) == 4 and study.user_attrs["fixed"] == {}
    assert {t.distributions["act"] for t in study.trials} == {
        optuna.distributions.CategoricalDistribution(["relu", "tanh"])}
    sweeper.sweep(sweep_fns.tracked, {"lr": [0.2]}, fresh=True, **opts)
    (aside,) = [n for n in os.listdir(folder) if n.startswith("optuna.") and n != "optuna.journal"]
    assert len(studies(folder / aside)["f"].trials) == 4  # the earlier sweep's, kept whole
    [new] = studies(folder / "optuna.journal").values()
    assert [t.params for t in new.trials] == [{}] and new.user_attrs["fixed"] == {"lr": 0.2}


def test_a_storage_with_another_study_of_the_name_keeps_it_and_a_resume_finds_its_own(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    mine = optuna.create_study(study_name="n", storage=url)
    mine.set_user_attr("mine", True)
    opts = dict(optuna=url, out=str(tmp_path), name="n", progress=False)
    sweeper.sweep(sweep_fns.tracked, {"lr": [0.1, 0.2]}, **opts)
    sweeper.sweep(sweep_fns.tracked, {"lr": [0.1, 0.2]}, **opts)
    found = studies(url)
    assert found["n"].user_attrs == {"mine": True} and found["n"].trials == []  # left as it was
    [name] = [n for n in found if n != "n"]
    assert name.startswith("n.") and len(found[name].trials) == 2  # the sweep's, once


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("value, where", [
    (True, "{folder}/optuna.journal"), ("sqlite:///x.db", "sqlite:///x.db"), ("runs.journal", "{cwd}/runs.journal"),
    ("a.log", "{cwd}/a.log")])
def test_where_the_study_is_kept(tmp_path, value, where):
    from sweeper.tracking.chosen import optuna_storage

    assert optuna_storage(value, str(tmp_path)) == where.format(folder=os.path.abspath(tmp_path), cwd=os.getcwd())


@pytest.mark.unit
@pytest.mark.parametrize("value", ["not-a-database", "", 5])
def test_a_storage_that_is_neither_a_url_nor_a_journal_is_one_line(value):
    from types import SimpleNamespace

    from sweeper.tracking import chosen

    with pytest.raises(sweeper.SweepError, match="Optuna cannot open that storage; give a database URL such as "
                                                  "sqlite:///study.db, or a journal file such as study.journal"):
        chosen.check(SimpleNamespace(tensorboard=False, mlflow=None, optuna=value))


def test_a_bad_storage_on_the_command_line_is_refused_before_anything_runs(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import tracked as train\ngrid = {'lr': [0.1]}\n")
    done = run_cli(grid, "--out", str(tmp_path), "--name", "b", "--optuna", "nowhere")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "--optuna nowhere: Optuna cannot open that storage" in done.stderr
    assert not os.path.exists(tmp_path / "b" / "trials")
