"""Values as given, and a table that cannot be written, from the user's side.

* A parameter's values come back exactly as given, whatever a text spells: through
   ``results.csv`` (as ``load()`` reads the folder), the frame ``sweep()`` returns, the
   console's leaderboard and ``export --optuna``. Text stays text, None stays missing and
   distinct from "None", booleans stay booleans, ints ints, floats exact.
* A results.csv that cannot be written (a folder in its place) fails the sweep in words
   the user cannot miss, and the rows are still on record.
"""

from __future__ import annotations

import ast
import csv
import html
import io
import re
import tokenize

import optuna
import pandas as pd
import pytest

import sweeper
import sweep_fns
from sweeper.results import query
from sweeper.results import report as analysis
from conftest import run_cli, write_grid

#: Columns a..e mix texts that pandas reads as missing, as numbers or as bools with values of
#: those kinds; f, g, h hold one kind each. Row i has rank i (its score): the leaderboard
#: lists them all, rank 4 first.
COLUMNS = {
    "a": ["nan", None, "None", "", "<NA>"],
    "b": ["NA", True, "True", False, "1"],
    "c": ["null", 7, "1e3", -2, " x "],
    "d": ["N/A", 0.1, "ünïcødé ✓", 2.5e-07, "a,b"],
    "e": ["NULL", 'say "hi", it\'s', "'quoted'", "back\\slash", 1000.0],  # newlines are refused
    "f": [0.1, 1 / 3, 0.1 + 0.2, 2.5e-07, 1e300],
    "g": [3, 2**53 + 1, -4, 0, 10**12],
    "h": [True, False, None, True, False],
    "rank": [0, 1, 2, 3, 4],
}
POINTS = [{k: [v[i]] for k, v in COLUMNS.items()} for i in range(5)]
DTYPES = {"a": "string", "f": "Float64", "g": "Int64", "h": "boolean", "rank": "Int64"}  # others: object


def exactly(got, want) -> bool:
    """The same value of the same type; None (missing) for None."""
    if want is None:
        return got is None or got is pd.NA
    return type(got) is type(want) and got == want


def assert_exact_params(df: pd.DataFrame) -> None:
    df = df.sort_values("param_rank")
    for name, want in COLUMNS.items():
        column = df[f"param_{name}"]
        assert str(column.dtype) == DTYPES.get(name, "object"), (name, column.dtype)
        got = column.tolist()
        assert all(exactly(g, w) for g, w in zip(got, want)), (name, got, want)
    assert df.param_a.isna().tolist() == [False, True, False, False, False]  # None only, never "None" or ""
    assert len(df[df.param_a == "nan"]) == 1 and len(df[df.param_b == "True"]) == 1


def literals(text: str) -> list:
    """The Python literals on a console line, in order (a minus sign joined to its number;
    anything else, e.g. a bare word, as its text)."""
    out, sign = [], 1
    for tok in tokenize.generate_tokens(io.StringIO(text.strip()).readline):
        if tok.type == tokenize.OP and tok.string == "-":
            sign = -1
        elif tok.type in (tokenize.STRING, tokenize.NUMBER, tokenize.NAME, tokenize.OP):
            try:
                value = ast.literal_eval(tok.string)
            except (ValueError, SyntaxError):  # not a literal (a bare text): kept as it was printed
                value = tok.string
            out.append(-value if sign < 0 else value)
            sign = 1
    return out


@pytest.fixture(scope="module")
def cli_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("values")
    grid = write_grid(tmp, f"from sweep_fns import ranked as train\ngrid = {POINTS!r}\n")
    done = run_cli(grid, "--out", str(tmp / "out"), "--metric", "score", "--mode", "max")
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp, tmp / "out" / "grid", done.stdout


def test_load_reads_every_value_back_as_given(cli_sweep):
    _, folder, _ = cli_sweep
    df = sweeper.load(str(folder))
    assert (df.status == "ok").all(), df.error.tolist()
    assert_exact_params(df)
    with open(folder / "results.csv", newline="", encoding="utf-8") as f:  # the file holds the text
        rows = sorted(csv.DictReader(f), key=lambda r: int(r["param_rank"]))
    assert [r["param_a"] for r in rows] == ["nan", "", "None", "", "<NA>"]
    assert [r["param_e"] for r in rows][:4] == COLUMNS["e"][:4]


def test_the_frame_sweep_returns_has_every_value_as_given(tmp_path):
    df = sweeper.sweep(sweep_fns.ranked, POINTS, metric="score", mode="max", out=str(tmp_path), name="api",
                       progress=False)
    assert (df.status == "ok").all(), df.error.tolist()
    assert_exact_params(df)
    pd.testing.assert_frame_equal(df, sweeper.load(str(tmp_path / "api")))


def test_the_console_leaderboard_shows_each_value_as_itself(cli_sweep):
    _, _, stdout = cli_sweep
    lines = stdout.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("sweeper: top 5 by score (max):"))
    head, rows = lines[top + 1].split(), lines[top + 2:top + 7]
    assert head == ["trial", "score", *COLUMNS], head
    for line, rank in zip(rows, [4, 3, 2, 1, 0]):
        trial, rest = line.split(maxsplit=1)
        got = literals(rest)
        want = [float(rank), *(COLUMNS[k][rank] for k in COLUMNS)]
        assert got[0] == want[0] and all(exactly(g, w) for g, w in zip(got[1:], want[1:])), (line, got, want)
        assert len(got) == len(want), line  # None is None (never nan), "1e3" no number, " x " one value


def test_the_reports_leaderboard_tells_none_from_the_text_none(cli_sweep):
    _, folder, _ = cli_sweep
    with open(analysis.write_html(str(folder), metric="score", mode="max"), encoding="utf-8") as f:
        page = f.read()
    board = page[page.index('<table class="leaderboard">'):]
    cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", board[:board.index("</table>")])]
    assert {"'None'", "None", "''", "'nan'", "'True'", "True", "'1e3'"} <= set(cells), cells


def test_export_optuna_writes_real_bools_none_and_texts(cli_sweep):
    tmp, folder, _ = cli_sweep
    url = f"sqlite:///{tmp / 'study.db'}"
    done = run_cli("export", str(folder), "--optuna", url)
    assert done.returncode == 0, done.stdout + done.stderr
    study = optuna.load_study(study_name="grid", storage=url)
    assert study.user_attrs["fixed"] == {}
    for trial in study.trials:
        rank = trial.params["rank"]
        for name, values in COLUMNS.items():
            assert exactly(trial.params[name], values[rank]), (name, trial.params[name], values[rank])
    assert study.best_params["h"] is False and study.best_params["b"] == "1"  # rank 4 is best
    assert study.best_trial.distributions["h"].choices == (None, False, True)


def test_a_results_csv_that_cannot_be_written_fails_the_sweep_and_says_where_the_rows_are(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import ranked as train\ngrid = {'rank': [1, 2]}\n")
    folder = tmp_path / "out" / "grid"
    (folder / "results.csv").mkdir(parents=True)  # a folder where the file goes
    (folder / "results.csv" / "keep").write_text("not sweeper's")
    done = run_cli(grid, "--out", str(tmp_path / "out"), "--metric", "score", "--mode", "max")
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert not last.startswith("sweeper: results:"), last
    assert f"could not write {folder / 'results.csv'}" in last and "Is a directory" in last, last
    assert "python -m sweeper status" in last and "load(" in last, last
    assert "Traceback" not in done.stdout + done.stderr
    df = sweeper.load(str(folder))  # every row is on record
    assert df.status.tolist() == ["ok", "ok"] and df.score.tolist() == [1.0, 2.0]
    assert (folder / "results.csv" / "keep").read_text() == "not sweeper's"  # the user's folder is left alone


@pytest.mark.unit
def test_values_optuna_cannot_tell_apart_are_a_choice_among_their_reprs():
    from sweeper.results import studies

    dist, write = studies.distribution(optuna, [1, True, "1"])  # 1 == True to Optuna's choices.index
    assert dist.choices == ("'1'", "1", "True") and [write(v) for v in (1, True, "1")] == ["1", "True", "'1'"]
    dist, write = studies.distribution(optuna, ["b", None, False, 2.5, "a", True])
    assert dist.choices == (None, False, True, 2.5, "a", "b") and write(None) is None


@pytest.mark.unit
def test_a_column_of_plain_words_is_shown_bare_and_one_word_that_misreads_quotes_them_all():
    assert query.param_texts(["adam", "sgd", None]) == ["adam", "sgd", "None"]
    assert query.param_texts(["adam", "None"]) == ["'adam'", "'None'"]
    assert query.param_texts(["adam", "1e3"]) == ["'adam'", "'1e3'"]
    assert query.param_texts([0.1 + 0.2, 1e-05]) == ["0.30000000000000004", "1e-05"]  # floats exact
