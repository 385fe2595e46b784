"""The report and TensorBoard as a new user meets them, from the user's
side: real sweeps, then ``python -m sweeper report`` and ``sweeper.results.report.figures``.

* with constraints, the ok trials that miss them are drawn hollow grey, never dropped, and
  the trials off a Pareto front grey; every caption says which trials its figure shows;
* a parameter whose values span two decades, or a search's loguniform one, is on a log axis;
* the ``--logdir`` sweeper suggests names each TensorBoard run (HParams session) as its trial;
* ``report`` without matplotlib is one line naming the install command.

``tradeoff`` (tests/sweep_fns.py): accuracy = 1 - 1/units - |lr - 0.01|, size = 10 * units.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys

import pytest

import sweeper
import sweep_fns
from conftest import ROOT, run_cli, write_grid
from sweeper.results import report as analysis

pytest.importorskip("matplotlib")

#: lr spans exactly two decades over the sweep, one over the trials that meet the constraints
GRID = {"lr": [0.001, 0.01, 0.1], "units": [4, 16, 64]}
HOLLOW = "misses the constraints"  # the legend's word for an ok trial that misses them (hollow grey)


@pytest.fixture(scope="module")
def constrained(tmp_path_factory):
    """A grid sweep of two objectives under a constraint some ok trials miss, with TensorBoard:
    its folder, its table, the sweep's stdout and its report page."""
    pytest.importorskip("tensorboard")
    tmp = tmp_path_factory.mktemp("first_hour")
    grid = write_grid(tmp, "from sweep_fns import tradeoff as train\n"
                           f"grid = {GRID!r}\n"
                           "options = {'metric': ['accuracy', 'size'], 'mode': ['max', 'min'], "
                           "'constraints': 'accuracy>=0.9', 'tensorboard': True}\n")
    done = run_cli(grid, "--out", str(tmp), "--name", "s", "--workers", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    folder = str(tmp / "s")
    df = sweeper.load(folder)
    assert (df.status == "ok").all() and len(df) == 9
    assert sorted(df.feasible.astype(bool)) == [False] * 5 + [True] * 4  # units 4 and lr 0.1 miss it
    report = run_cli("report", folder)
    assert report.returncode == 0, report.stdout + report.stderr
    with open(os.path.join(folder, "report.html"), encoding="utf-8") as f:
        page = f.read()
    return folder, df, done.stdout, page


def _points(ax) -> dict[str, list[tuple[float, float]]]:
    """Each labelled scatter of an axes: its points, by legend label."""
    return {c.get_label(): sorted(map(tuple, c.get_offsets().tolist())) for c in ax.collections
            if not c.get_label().startswith("_")}


def _label(points: dict, word: str) -> str:
    (label,) = [k for k in points if k.startswith(word)]
    return label


def _captions(page: str) -> dict[str, str]:
    """Each figure's caption, by its image's class (param-plot:<name> for a parameter)."""
    out = {}
    for img, caption in re.findall(r"<figure>(<img\b[^>]*>)<figcaption>(.*?)</figcaption></figure>", page, re.S):
        cls = re.search(r'class="([^"]+)"', img).group(1)
        param = re.search(r'data-param="([^"]+)"', img)
        out[f"{cls}:{param.group(1)}" if param else cls] = html.unescape(caption)
    return out


def test_the_pareto_plot_draws_every_ok_trial_infeasible_hollow_and_off_front_grey(constrained):
    folder, df, _, page = constrained
    ax = analysis.figures(folder)["pareto"].axes[0]
    points = _points(ax)
    pairs = {row.trial: (float(row.accuracy), float(row.size)) for row in df.itertuples()}
    infeasible = sorted(pairs[t] for t in df.trial[~df.feasible.astype(bool)])
    front = sorted(pairs[t] for t in df.trial[df.pareto.astype(bool)])
    off = sorted(pairs[t] for t in df.trial[df.feasible.astype(bool) & ~df.pareto.astype(bool)])
    assert len(front) >= 1 and len(off) >= 1  # the premise: both kinds are there
    assert points[_label(points, HOLLOW)] == infeasible
    assert points[_label(points, "Pareto front")] == front
    assert points[_label(points, "not on the front")] == off
    assert sum(len(p) for p in points.values()) == len(df)  # every ok trial once, none dropped
    hollow = next(c for c in ax.collections if c.get_label().startswith(HOLLOW))
    assert len(hollow.get_facecolors()) == 0 or hollow.get_facecolors()[:, 3].max() == 0  # no fill: hollow
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert all(points.get(text) for text in legend), legend  # no legend entry without a dot
    caption = _captions(page)["pareto-plot"]
    assert f"each ok trial with both ({len(df)})" in caption, caption
    assert f"the {len(infeasible)} that miss the constraints" in caption, caption
    assert f"the {len(off)} off it" in caption and f"Pareto front ({len(front)}" in caption, caption


def test_parameter_plots_draw_infeasible_trials_hollow_on_a_log_axis_where_values_span_decades(constrained):
    folder, df, _, page = constrained
    figs = analysis.figures(folder)
    ax = figs["param:lr"].axes[0]
    assert ax.get_xscale() == "log"  # 0.001 to 0.1 over the sweep (the feasible ones span one decade)
    points = _points(ax)
    missed = ~df.feasible.astype(bool)
    assert points[_label(points, HOLLOW)] == sorted(zip(df.param_lr[missed].astype(float),
                                                        df.accuracy[missed].astype(float)))
    blue = [c for c in ax.collections if c.get_label().startswith("_")]  # the unlabelled dots
    assert sum(len(c.get_offsets()) for c in blue) == int((~missed).sum())
    assert figs["param:units"].axes[0].get_xscale() == "linear"  # 4 to 64: not two decades
    captions = _captions(page)
    for name in ("lr", "units"):
        caption = captions[f"param-plot:{name}"]
        assert f"each ok trial with a value of accuracy ({len(df)})" in caption, caption
        assert f"hollow grey the {int(missed.sum())} that miss them" in caption, caption
    assert "log x axis" in captions["param-plot:lr"]


def test_every_figure_says_which_trials_it_shows(constrained):
    _, _, _, page = constrained
    captions = _captions(page)
    assert len(captions) == len(re.findall(r"<img\b", page)) >= 3  # every image has its caption
    for key, caption in captions.items():
        assert "trial" in caption and "(" in caption, (key, caption)  # which trials, and how many


def test_a_searchs_loguniform_parameter_is_on_a_log_axis_and_its_misses_are_hollow(tmp_path):
    pytest.importorskip("optuna")
    space = {"lr": sweeper.loguniform(0.01, 0.1), "units": [4, 64]}  # one decade: values alone would not say
    df = sweeper.sweep(sweep_fns.tradeoff, space, search="random", trials=6, metric="accuracy", mode="max",
                       constraints="accuracy>=0.9", seed=3, out=str(tmp_path), name="s", progress=False)
    missed = (df.status == "ok") & ~df.feasible.astype(bool)
    assert missed.any() and (~missed).any(), df[["param_units", "accuracy"]]  # the premise
    figs = analysis.figures(tmp_path / "s")
    assert figs["param:lr"].axes[0].get_xscale() == "log"
    points = _points(figs["progress"].axes[0])
    assert len(points[_label(points, HOLLOW)]) == int(missed.sum())
    assert len(points["ok"]) == int((~missed).sum())


def test_the_logdir_sweeper_suggests_names_each_tensorboard_run_as_its_trial(constrained):
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
    from tensorboard.plugins.hparams import metadata

    folder, df, stdout, _ = constrained
    (logdir,) = re.findall(r"tensorboard --logdir (\S+)", stdout)
    logdir = os.path.join(ROOT, logdir)  # as printed: relative to where the sweep ran, or absolute
    mux = EventMultiplexer()
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    content = mux.PluginRunToTagToContent(metadata.PLUGIN_NAME)
    sessions = {run for run, tags in content.items() if metadata.SESSION_START_INFO_TAG in tags}
    assert sessions == set(df.trial)  # the HParams table's names: the trials', not "tensorboard/..."
    assert any(metadata.EXPERIMENT_TAG in tags for tags in content.values())  # and its columns are found


def test_report_without_matplotlib_is_one_line_naming_the_install(constrained, tmp_path):
    folder = constrained[0]
    blocked = tmp_path / "blocked" / "matplotlib"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text('raise ImportError("matplotlib is not installed (as the test pretends)")\n')
    os.remove(os.path.join(folder, "report.html"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "blocked"), ROOT])}
    done = subprocess.run([sys.executable, "-m", "sweeper", "report", folder], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, lines
    assert "matplotlib" in lines[0] and "pip install matplotlib" in lines[0], lines
    assert not os.path.exists(os.path.join(folder, "report.html"))
    check = subprocess.run([sys.executable, "-c", "import matplotlib"], capture_output=True, text=True, env=env)
    assert "as the test pretends" in check.stderr  # the block was in force
