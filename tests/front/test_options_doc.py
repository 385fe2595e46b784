"""Each flag's meaning is written once, where the flag is defined: the table
in docs/options.md is made from it (``python -m sweeper.front.optionsdoc``), and ``--help``
says its first sentence."""

from __future__ import annotations

import os

import pytest

from conftest import ROOT
from sweeper.errors import SweepError
from sweeper.front import cli, optionsdoc
from sweeper.model.option_texts import brief, filled, first_sentence

pytestmark = pytest.mark.unit

PAGE = os.path.join(ROOT, "docs", "options.md")


def test_the_options_reference_is_what_its_generator_makes_now():
    page = open(PAGE, encoding="utf-8").read()
    assert os.path.samefile(optionsdoc.PAGE, PAGE)
    assert page.count(optionsdoc.BEGIN) == 1 and page.count(optionsdoc.END) == 1, "the table's markers"
    start, end = page.index(optionsdoc.BEGIN), page.index(optionsdoc.END) + len(optionsdoc.END)
    assert page[start:end] == optionsdoc.table(), (
        f"docs/options.md's table of flags is out of step with the flags' texts; run: {optionsdoc.COMMAND}")


def test_help_says_the_first_sentence_of_each_flags_row():
    said = optionsdoc.texts()
    rows = 0
    for action in cli.parser()._actions:
        if action.option_strings and action.dest not in ("help", "version"):
            assert action.help is not None and action.help.replace("%%", "%") == brief(said[action.dest]), action.dest
            rows += 1
    assert rows == len(optionsdoc.table().splitlines()) - 6  # markers, blank lines, head


def test_a_flag_with_no_text_is_refused_naming_it(monkeypatch):
    said = {dest: text for dest, text in optionsdoc.texts().items() if dest != "quiet"}
    monkeypatch.setattr(optionsdoc, "texts", lambda: said)
    with pytest.raises(SweepError, match=r"^--quiet has no text for docs/options\.md"):
        optionsdoc.table()


def test_the_generator_rewrites_only_its_table_and_checks_it(tmp_path, capsys):
    page = open(PAGE, encoding="utf-8").read()
    start, end = page.index(optionsdoc.BEGIN), page.index(optionsdoc.END)
    stale = tmp_path / "options.md"
    stale.write_text(page[:start] + optionsdoc.BEGIN + "\n| `--gone` | a flag no more |\n" + page[end:])
    assert optionsdoc.main([str(stale), "--check"]) == 1
    assert f"out of step with the flags' texts; run {optionsdoc.COMMAND}" in capsys.readouterr().err
    assert "--gone" in stale.read_text()  # --check changes nothing
    assert optionsdoc.main([str(stale)]) == 0 and stale.read_text() == page
    assert optionsdoc.main([str(stale), "--check"]) == 0
    bare = tmp_path / "bare.md"
    bare.write_text("# Options\n")
    assert optionsdoc.main([str(bare)]) == 2 and "no place for the table" in capsys.readouterr().err


def test_a_text_is_markdown_and_its_first_sentence_is_the_help():
    text = ("with `--x`: the cluster (`a. B`, or e.g. Z), such as `GPU-5f...` (see [GPUs](gpus.md)); "
            "... more (default `{default:g}`; see [Ray](ray.md)). Rows gain `y`. More")
    assert first_sentence(filled(text, 1.0)) == text.split(". Rows")[0].replace("{default:g}", "1")
    assert brief(filled(text, 1.0)) == ("with --x: the cluster (a. B, or e.g. Z), such as GPU-5f...; ... more "
                                        "(default 1)")
    assert filled('{"params": 1} (default `{default}`)', "local") == '{"params": 1} (default `local`)'
    assert brief("one line, no stop") == "one line, no stop"
    assert optionsdoc.invocation(next(a for a in cli.parser()._actions if a.dest == "mlflow")) == "--mlflow [URI]"
    assert optionsdoc.invocation(next(a for a in cli.parser()._actions if a.dest == "start_method")) == \
        "--start-method forkserver|spawn"
