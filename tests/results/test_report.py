"""sweeper.report: the leaderboard, the failures and the self-contained HTML page."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys

import pandas
import pytest

from sweeper.errors import SweepError

from sweeper.results import query
from sweeper.results import report as report

PNG = b"\x89PNG\r\n\x1a\n"

TRIALS = [  # name, status, lr, units, act, val_accuracy, val_loss, error
    ("t0", "ok", 1e-4, 16, "relu", 0.70, 0.90, ""),
    ("t1", "ok", 1e-3, 64, "tanh", 0.85, 0.40, ""),
    ("t2", "ok", 1e-2, 16, "tanh", 0.91, 0.30, ""),
    ("t3", "ok", 1e-1, 64, "relu", 0.60, 1.20, ""),
    ("t4", "ok", 1e-2, 64, "relu", 0.88, 0.35, ""),
    ("t5", "crashed", 1e-1, 16, "tanh", float("nan"), float("nan"),
     "worker died with signal 9 (SIGKILL)\nsecond line"),
]


def _results(trials=TRIALS) -> pandas.DataFrame:
    rows = []
    for i, (name, status, lr, units, act, acc, loss, error) in enumerate(trials):
        rows.append({
            "trial_id": i, "trial": name, "status": status,
            "param_act": act, "param_lr": lr, "param_units": units,
            "val_accuracy": acc, "val_loss": loss,
            "seed": 100 + i, "device": "cpu", "started_at": f"2024-05-01T12:00:0{i}Z",
            "duration_s": 1.5 + i, "error": error or None, "attempts": 1,
        })
    return pandas.DataFrame(rows)


def _history(trials=TRIALS) -> pandas.DataFrame:
    rows = []
    for i, (name, status, _lr, _units, _act, acc, loss, _error) in enumerate(trials):
        if status != "ok":
            continue
        for epoch in range(3):
            f = (epoch + 1) / 3
            rows.append({"trial_id": i, "trial": name, "epoch": epoch,
                         "loss": 1.5 - f * 0.5, "accuracy": 0.5 + f * 0.3,
                         "val_loss": loss * (2 - f), "val_accuracy": acc * (0.7 + 0.3 * f)})
    return pandas.DataFrame(rows)


def _sweep(folder, trials=TRIALS, history=True) -> str:
    os.makedirs(folder, exist_ok=True)
    df = _results(trials)
    df.to_csv(os.path.join(folder, "results.csv"), index=False)
    if history:
        _history(trials).to_csv(os.path.join(folder, "history.csv"), index=False)
    for name, *_ in trials:
        os.makedirs(os.path.join(folder, "trials", name), exist_ok=True)
        with open(os.path.join(folder, "trials", name, "log.txt"), "w") as f:
            f.write(f"log of {name}\n")
    return str(folder)


@pytest.fixture
def sweep_dir(tmp_path) -> str:
    return _sweep(tmp_path / "mysweep")


@pytest.fixture
def df(sweep_dir) -> pandas.DataFrame:
    return pandas.read_csv(os.path.join(sweep_dir, "results.csv"))


def _imgs(page: str) -> list[str]:
    return re.findall(r"<img\b[^>]*>", page)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------- table functions


def test_metric_columns(df):
    assert query.metric_columns(df) == ["val_accuracy", "val_loss"]


def test_leaderboard_max(df):
    board = query.leaderboard(df, "val_accuracy", "max", top=3)
    assert list(board.columns) == ["trial", "val_accuracy", "act", "lr", "units"]
    assert list(board["trial"]) == ["t2", "t4", "t1"]


def test_leaderboard_min_and_ok_only(df):
    board = query.leaderboard(df, "val_loss", "min", top=10)
    assert list(board["trial"]) == ["t2", "t4", "t1", "t0", "t3"]  # t5 crashed: left out


def test_leaderboard_nan_last(df):
    df.loc[df["trial"] == "t2", "val_accuracy"] = float("nan")
    board = query.leaderboard(df, "val_accuracy", "max")
    assert list(board["trial"]) == ["t4", "t1", "t0", "t3", "t2"]


def test_leaderboard_lines(df):
    lines = query.leaderboard_lines(df, "val_accuracy", "max")
    assert lines[0] == "top 5 by val_accuracy (max):"
    assert lines[1].split() == ["trial", "val_accuracy", "act", "lr", "units"]
    assert lines[2].split()[:2] == ["t2", "0.91"]
    assert len({len(line) for line in lines[1:]}) == 1  # aligned
    assert not any("\x1b" in line for line in lines)


def test_choose_defaults(df):
    assert query.choose(df) == ("val_accuracy", "max")
    assert query.choose(df, "val_loss") == ("val_loss", "min")
    assert query.choose(df, "val_loss", "max") == ("val_loss", "max")
    loss_first = df[["trial_id", "trial", "status", "param_lr", "val_loss", "val_accuracy", "seed"]]
    assert query.choose(loss_first) == ("val_loss", "min")
    assert query.choose(df.rename(columns={"val_accuracy": "Val_ACC"})) == ("Val_ACC", "max")


def test_choose_unknown_metric(df):
    with pytest.raises(SweepError) as info:
        query.choose(df, "f1")
    message = str(info.value)
    assert "f1" in message and "val_accuracy" in message and "val_loss" in message
    assert "\n" not in message
    with pytest.raises(SweepError):
        query.choose(df, "val_loss", "biggest")


def test_failures(df, sweep_dir):
    bad = query.failures(df, sweep_dir)
    assert list(bad.columns) == ["trial", "status", "error", "log"]
    assert bad.to_dict("records") == [{
        "trial": "t5", "status": "crashed", "error": "worker died with signal 9 (SIGKILL)",
        "log": os.path.join(sweep_dir, "trials", "t5", "log.txt"),
    }]
    assert os.path.isfile(bad["log"][0])


def test_use_log_axis():
    from sweeper.results.studies import spans_decades  # the one rule: the report's axes and a study's ranges

    assert spans_decades([1e-4, 1e-3, 1e-2, 1e-1])
    assert spans_decades([0.01, 1.0])  # exactly 2 decades
    assert not spans_decades([16, 64])
    assert not spans_decades([0.5])
    assert not spans_decades([0, -3, 5])
    assert spans_decades([0, 1, 1000, float("nan")])


# ---------------------------------------------------------------- the page


def test_write_html(sweep_dir):
    pytest.importorskip("matplotlib")
    path = report.write_html(sweep_dir)
    assert path == os.path.join(sweep_dir, "report.html")
    assert [f for f in os.listdir(sweep_dir) if ".tmp" in f] == []
    page = _read(path)
    assert "mysweep" in page
    imgs = _imgs(page)
    params = sorted(re.findall(r'class="param-plot" data-param="([^"]+)"', page))
    assert params == ["act", "lr", "units"]
    assert len(re.findall(r'class="curves"', page)) == 1
    assert len(imgs) == 4
    for img in imgs:
        src = re.search(r'src="([^"]*)"', img).group(1)
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG)
    assert "http://" not in page and "https://" not in page
    assert not re.search(r"<(link|script)\b", page)
    # the leaderboard and the failure row
    assert '<table class="leaderboard">' in page
    row = re.search(r'<tr class="failure">.*?</tr>', page, re.S).group(0)
    assert "t5" in row and "crashed" in row and "worker died with signal 9 (SIGKILL)" in row
    assert "second line" not in page
    assert os.path.join(sweep_dir, "trials", "t5", "log.txt") in row
    assert "log x axis" in page  # lr's caption


def test_write_html_metric_and_escaping(tmp_path):
    pytest.importorskip("matplotlib")
    trials = [list(t) for t in TRIALS]
    trials[1][4] = "<b>x</b>"  # an act value with markup
    trials[5][7] = "ValueError: bad <input> & more"
    folder = _sweep(tmp_path / "esc", [tuple(t) for t in trials])
    page = _read(report.write_html(folder, metric="val_loss"))
    assert "<b>x</b>" not in page and "&lt;input&gt; &amp; more" in page
    assert "top 5 by val_loss (min)" in page
    with pytest.raises(SweepError):
        report.write_html(folder, metric="nope")


def test_write_html_without_history(tmp_path):
    pytest.importorskip("matplotlib")
    folder = _sweep(tmp_path / "nohist", history=False)
    page = _read(report.write_html(folder))
    assert 'class="curves"' not in page
    assert "history.csv is missing or empty" in page
    assert len(re.findall(r'class="param-plot"', page)) == 3
    open(os.path.join(folder, "history.csv"), "w").close()  # empty file
    page = _read(report.write_html(folder))
    assert 'class="curves"' not in page and "history.csv is missing or empty" in page


def test_write_html_curves_fallback_metric(sweep_dir):
    pytest.importorskip("matplotlib")
    hist = _history()[["trial_id", "trial", "epoch", "loss"]]
    hist.to_csv(os.path.join(sweep_dir, "history.csv"), index=False)
    page = _read(report.write_html(sweep_dir))
    assert len(re.findall(r'class="curves"', page)) == 1
    assert "loss per epoch" in page


def test_write_html_no_ok_trials(tmp_path):
    pytest.importorskip("matplotlib")
    trials = [(n, "error", lr, u, a, float("nan"), float("nan"), "RuntimeError: boom")
              for n, _s, lr, u, a, *_ in TRIALS]
    folder = _sweep(tmp_path / "allbad", trials, history=False)
    page = _read(report.write_html(folder))
    assert _imgs(page) == []
    assert "No trial finished ok" in page
    assert page.count('<tr class="failure">') == len(TRIALS)


def test_write_html_single_value_and_nan(tmp_path):
    pytest.importorskip("matplotlib")
    trials = [(n, s, lr, 32, "relu", acc, loss, e) for n, s, lr, _u, _a, acc, loss, e in TRIALS]
    trials[0] = trials[0][:5] + (float("nan"),) + trials[0][6:]
    folder = _sweep(tmp_path / "single", trials)
    page = _read(report.write_html(folder))
    assert sorted(re.findall(r'data-param="([^"]+)"', page)) == ["lr"]  # act and units: one value, no panel
    assert "Fixed in every trial: <code>act=relu, units=32</code>" in page
    assert "1 of 5 ok trials have no val_accuracy" in page


def test_write_html_missing_results(tmp_path):
    with pytest.raises(SweepError) as info:
        report.write_html(tmp_path)
    assert str(tmp_path) in str(info.value) and "python -m sweeper report" in str(info.value)


def test_write_html_without_matplotlib(sweep_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    # the lean install's hint: matplotlib alone (sweeper[report] would pull TensorFlow and Keras too)
    with pytest.raises(SweepError, match=r"pip install matplotlib$"):
        report.write_html(sweep_dir)


@pytest.mark.slow
def test_report_renders_in_chromium(sweep_dir, tmp_path):
    pytest.importorskip("matplotlib")
    browser = "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else shutil.which("chromium")
    if not browser:
        pytest.skip("chromium is not installed: apt-get install chromium")
    path = report.write_html(sweep_dir)
    # the figures are drawn: the plots' coloured markers and lines show in the browser
    # (a broken image's icon is grey): thousands of coloured pixels more than the same page
    # with its images' data taken out, so the check tells a page that draws from one that does not.
    drawn = _coloured_pixels(browser, path, tmp_path / "drawn")
    blank = tmp_path / "blank.html"
    blank.write_text(re.sub(r'src="data:image/png;base64,[^"]*"', 'src=""', _read(path)), encoding="utf-8")
    undrawn = _coloured_pixels(browser, str(blank), tmp_path / "undrawn")
    assert drawn - undrawn > 2_000, (drawn, undrawn)  # (the page's own colours: status words, links)


def _coloured_pixels(browser: str, page: str, where) -> int:
    """How many pixels of a headless browser's screenshot of ``page`` are clearly coloured."""
    import matplotlib.image

    shot, profile = where / "shot.png", where / "profile"
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1200,4000",
         f"file://{os.path.abspath(page)}"],
        capture_output=True, timeout=60,
    )
    assert proc.returncode == 0 and shot.exists(), proc.stderr.decode(errors="replace")[-2000:]
    rgb = matplotlib.image.imread(str(shot))[..., :3]
    return int(((rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.25).sum())
