"""A metric whose direction its name does not tell (``value``, ``score_delta``) ranks nothing
until a mode is given: the closing summary lists the trials in grid order and says in one line
how to choose, ``status`` calls no trial best, the report ranks none and marks no best, the
live view shows no best; given ``--mode``, each ranks. The same rule for the command line and
``sweep()`` (tests/front/test_hydra.py has it for a Hydra multirun)."""

from __future__ import annotations

import pytest
import sweep_fns
from conftest import run_cli, write_grid

import sweeper

#: Higher is better here, which nothing in the name ``value`` says: a guess of "lower" would
#: list x=1 first and call it the best.
GRID = "from sweep_fns import scored\ngrid = {'x': [2, 1, 3]}\n\ndef train(params):\n" \
       "    return {'value': scored(params)['value']}\n"

NOT_RANKED = ("not ranked: 'value' does not say by its name whether higher or lower is better; give --mode max "
              "or --mode min (mode='max' or 'min') to rank by it, or --metric (metric=) to rank by another")


def board(text: str, title: str) -> list[str]:
    """The trials a leaderboard lists after its title, in its order."""
    lines = text.split(title)[1].splitlines()[2:]
    return [line.split()[0] for line in lines if line.startswith("  ")]


def test_the_command_line_ranks_nothing_and_calls_nothing_best_until_the_mode_is_given(tmp_path):
    grid, out = write_grid(tmp_path, GRID), str(tmp_path / "out")
    done = run_cli(grid, "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"sweeper: {NOT_RANKED}\n" in done.stdout, done.stdout
    title = "sweeper: first 3 of 3 ok trials, in grid order (not ranked):"
    assert board(done.stdout, title) == ["x=2", "x=1", "x=3"], done.stdout
    assert "(min)" not in done.stdout and "assumed" not in done.stdout + done.stderr

    folder = str(tmp_path / "out" / "grid")
    status = run_cli("status", folder)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "best" not in status.stdout and f"sweeper: {NOT_RANKED}\n" in status.stdout, status.stdout
    report = run_cli("report", folder)
    assert report.returncode == 0, report.stdout + report.stderr
    assert board(report.stdout, "first 3 of 3 ok trials, in grid order (not ranked):") == ["x=2", "x=1", "x=3"]
    page = (tmp_path / "out" / "grid" / "report.html").read_text()
    assert "<h2>Leaderboard: not ranked (first 3 trials, in grid order)</h2>" in page
    assert "(min)" not in page and "red star" not in page and "no best marked" in page

    asked = run_cli("status", folder, "--mode", "max")  # the user says which way is better
    assert "sweeper: best so far: value = 3 (max): x=3" in asked.stdout, asked.stdout + asked.stderr
    again = run_cli(grid, "--out", out, "--mode", "max")  # and the sweep records it
    assert again.returncode == 0, again.stdout + again.stderr
    assert board(again.stdout, "sweeper: top 3 by value (max):") == ["x=3", "x=2", "x=1"], again.stdout
    assert "best so far: value = 3 (max): x=3" in run_cli("status", folder).stdout
    assert run_cli("report", folder).returncode == 0
    assert "<h2>Leaderboard: top 3 by value (max)</h2>" in (tmp_path / "out" / "grid" / "report.html").read_text()


def test_sweep_ranks_nothing_until_mode_is_given(tmp_path, capsys):
    df = sweeper.sweep(sweep_fns.echo, {"x": [2, 1, 3]}, out=str(tmp_path))  # value: 2x
    out = capsys.readouterr().out
    assert f"sweeper: {NOT_RANKED}\n" in out and "(min)" not in out, out
    assert board(out, "sweeper: first 3 of 3 ok trials, in grid order (not ranked):") == ["x=2", "x=1", "x=3"]
    assert (df.attrs["metric"], df.attrs["mode"]) == (None, None)
    sweeper.sweep(sweep_fns.echo, {"x": [2, 1, 3]}, out=str(tmp_path), mode="max")
    assert board(capsys.readouterr().out, "sweeper: top 3 by value (max):") == ["x=3", "x=2", "x=1"]


@pytest.mark.unit
def test_the_live_view_shows_no_best_of_a_metric_whose_direction_is_unknown():
    from sweeper.model.trial import Status, TrialResult
    from sweeper.front.progress import Tally

    def result(value: float) -> TrialResult:
        return TrialResult(f"t{value:g}", f"x={value:g}", 0, {"x": value}, Status.OK, {"value": value})

    guessing, told = Tally(None, None), Tally(None, "max")
    for value in (2.0, 1.0, 3.0):
        guessing.add(result(value))
        told.add(result(value))
    assert guessing.best is None and guessing.best_text() == ""
    assert told.best_text() == "best value=3 (x=3)"
