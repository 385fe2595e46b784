"""Hostile inputs are one line, never a traceback or a silent start-over.

* a ``ledger.sqlite`` that is not sweeper's (an empty file, another program's database, a
  ledger without one of sweeper's tables, a file that is not SQLite): the sweep and every
  command say so in one line and exit 2, and leave the file as it was;
* a malformed ``--prune`` text is one line (SweepError), a repeated keyword refused;
* an exception whose ``__str__`` raises (or returns no text) is the trial's ``error``,
  with its type's name, not a ``crashed`` trial run again.
"""

from __future__ import annotations

import os
import shutil
import sqlite3

import pandas as pd
import pytest

import sweeper
from conftest import HERE, run_cli, write_grid
from sweeper.errors import SweepError
from sweeper.store.ledger import Ledger, SCHEMA_VERSION

# -- a ledger that is not sweeper's ----------------------------------------------------------


def _empty(path):
    path.write_bytes(b"")


def _foreign(path):
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (name TEXT, email TEXT)")
        db.execute("INSERT INTO users VALUES ('ada', 'ada@example.org')")
    db.close()


def _partial(path):  # a ledger of sweeper 0.1.0 without its history table
    shutil.copy(os.path.join(HERE, "data", "v0_ledger.sqlite"), path)
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE history")
    db.close()


def _text(path):
    path.write_text("name,score\nada,1\n")


FOREIGN = {  # how the file is made, words its line must have
    "empty": (_empty, "an empty file"),
    "foreign_tables": (_foreign, "another program's database: its tables are users"),
    "partial": (_partial, "it has no table history"),
    "not_sqlite": (_text, "file is not a database"),
}

GRID = "from sweep_fns import echo as train\ngrid = {'x': [1, 2]}\n"


def _state(folder):
    """What must not change: the ledger's bytes and time, and which ledger files exist
    (SQLite's own -wal and -shm aside: a reader of a WAL-mode file makes them, empty)."""
    ledger, wal = folder / "ledger.sqlite", folder / "ledger.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # nothing written through the WAL either
    return ledger.read_bytes(), ledger.stat().st_mtime_ns, sorted(
        p.name for p in folder.glob("ledger*") if not p.name.endswith(("-wal", "-shm")))


@pytest.mark.parametrize("kind", sorted(FOREIGN))
def test_a_ledger_that_is_not_sweepers_is_one_line_for_the_sweep_and_every_command(tmp_path, kind):
    make, words = FOREIGN[kind]
    out = tmp_path / "out"
    folder = out / "grid"
    folder.mkdir(parents=True)
    make(folder / "ledger.sqlite")
    before = _state(folder)
    grid = write_grid(tmp_path, GRID)
    commands = {
        "sweep": [grid, "--out", str(out)],
        "dry-run": [grid, "--out", str(out), "--dry-run"],
        "status": ["status", str(folder)],
        "report": ["report", str(folder)],
        "export": ["export", str(folder), "--optuna", f"sqlite:///{tmp_path / 'study.db'}"],
        "replay": ["replay", str(folder), "--all"],
    }
    for name, args in commands.items():
        done = run_cli(*args)
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stdout + done.stderr, (name, done.stderr)
        assert str(folder / "ledger.sqlite") in done.stderr and words in done.stderr, (name, done.stderr)
        assert "--fresh" in done.stderr and "move it away" in done.stderr, (name, done.stderr)
        assert _state(folder) == before, name  # untouched: not written, not taken for a new sweep
    assert not (folder / "results.csv").exists() and not (tmp_path / "study.db").exists()
    assert not (out / "grid-replay").exists()
    with pytest.raises(SweepError, match=words) as caught:
        sweeper.load(str(folder))
    assert "\n" not in str(caught.value) and "--fresh" in str(caught.value)
    assert _state(folder) == before


@pytest.mark.parametrize("kind", ["empty", "foreign_tables"])
def test_fresh_sets_a_ledger_that_is_not_sweepers_aside_whole_and_starts_a_new_one(tmp_path, kind):
    out = tmp_path / "out"
    folder = out / "grid"
    folder.mkdir(parents=True)
    FOREIGN[kind][0](folder / "ledger.sqlite")
    original = (folder / "ledger.sqlite").read_bytes()
    done = run_cli(write_grid(tmp_path, GRID), "--out", str(out), "--fresh", "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    aside = list(folder.glob("ledger.*.sqlite"))
    assert len(aside) == 1 and aside[0].read_bytes() == original  # kept as it was
    assert sweeper.load(str(folder)).status.tolist() == ["ok", "ok"]


@pytest.mark.unit
def test_a_new_ledger_appears_whole_and_an_empty_one_is_never_taken_for_it(tmp_path):
    """A sweep makes its ledger in one step (schema and all), so an empty ``ledger.sqlite``
    is never one a sweep made and died making; such a file is refused, left empty."""
    (tmp_path / "new").mkdir()
    Ledger(str(tmp_path / "new")).close()
    assert sorted(os.listdir(tmp_path / "new")) == ["ledger.sqlite"]  # nothing half-made beside it
    with sqlite3.connect(tmp_path / "new" / "ledger.sqlite") as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {"trials", "running", "meta", "grid", "history", "schedule"}
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "ledger.sqlite").write_bytes(b"")
    for readonly in (False, True):
        with pytest.raises(SweepError, match="is not a sweep ledger .an empty file.; sweeper left it as it is"):
            Ledger(str(tmp_path / "old"), readonly=readonly)
    assert (tmp_path / "old" / "ledger.sqlite").read_bytes() == b""
    assert sorted(os.listdir(tmp_path / "old")) == ["ledger.sqlite"]


# -- malformed pruner texts -------------------------------------------------------------------

BAD_PRUNERS = [  # text, words its line must have
    ("asha(min_resource={[]: 1})", "min_resource= must be a number, text, True or False"),
    ("asha(min_resource={{1}})", "min_resource= must be a number, text, True or False"),
    ("asha(min_resource={1: [], 2: {3}})", "min_resource must be a whole number"),
    ("asha(**x)", "name each value (keyword=value)"),
    ("asha(1, 2)", "asha takes keywords only"),
    ("asha(*x)", "asha takes keywords only"),
    ("asha(", "not a pruner's name or call"),
    ("asha(min_resource=1, min_resource=200)", "min_resource is given twice; give it once"),
    ("asha(min_resource=1, reduction_factor=2, min_resource=1)", "min_resource is given twice"),
    ("patient(asha(min_resource=1, min_resource=2), patience=2)", "min_resource is given twice"),
    ("patient(asha, patience=2, patience=3)", "patience is given twice"),
    ("asha(min_resource=lambda: 1)", "min_resource= must be a number"),
    ("asha(min_resource=__import__('os').getpid())", "min_resource= must be a number"),
    ("asha(min_resource=x.y)", "min_resource= must be a number"),
    ("asha(min_resource=1 if True else 2)", "min_resource= must be a number"),
    ("optuna.pruners.MedianPruner", "not a pruner's name or call"),
    ("asha.x(min_resource=1)", "not a pruner's name or call"),
    ("asha(min_resource=1)(2)", "not a pruner's name or call"),
    ("(lambda: 1)()", "not a pruner's name or call"),
    ("asha[1]", "not a pruner's name or call"),
    ("asha\x00", "not a pruner's name or call"),
    ("", "not a pruner's name or call"),
    ("asha(min_resource=" + "[" * 300 + "]" * 300 + ")", "not a pruner's name or call"),
    ("asha(min_resource=1.5)", "min_resource must be a whole number"),
    ("asha(min_resource=None)", "min_resource must be a whole number"),
    ("patient(asha, asha, patience=1)", "patient wraps one pruner"),
    ("patient(bogus, patience=1)", "no pruner 'bogus'"),
    ("bogus(x=1)", "no pruner 'bogus'"),
]


@pytest.mark.unit
@pytest.mark.parametrize("text,words", BAD_PRUNERS, ids=range(len(BAD_PRUNERS)))
def test_every_malformed_pruner_text_is_one_line(text, words):
    from sweeper.search.pruners import pruner

    with pytest.raises(SweepError) as caught:
        pruner(text)
    said = str(caught.value)
    assert words in said and "\n" not in said, said


@pytest.mark.unit
def test_well_formed_pruner_texts_still_build():
    import optuna

    from sweeper.search.pruners import pruner

    assert isinstance(pruner("asha(min_resource=2, reduction_factor=3)"), optuna.pruners.SuccessiveHalvingPruner)
    patient = pruner("patient(asha(min_resource=1), patience=2)")
    assert isinstance(patient, optuna.pruners.PatientPruner)


def test_a_malformed_pruner_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    grid = write_grid(tmp_path, "from sweep_fns import descent as train\nimport sweeper\n"
                                "space = {'x': sweeper.uniform(0, 1)}\n")
    for text, words in [("asha(min_resource={[]: 1})", "must be a number"),
                        ("asha(min_resource=1, min_resource=200)", "min_resource is given twice")]:
        done = run_cli(grid, "--search", "tpe", "--trials", "3", "--metric", "loss", "--prune", text,
                       "--out", str(tmp_path / "out"))
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert words in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert "Traceback" not in done.stdout + done.stderr
        assert not (tmp_path / "out" / "grid" / "results.csv").exists()


# -- an exception that cannot say what it is ------------------------------------------------------

UNSAYABLE = """
class StrRaises(Exception):
    def __str__(self):
        raise RuntimeError("no str")


class ReprRaises(Exception):
    def __repr__(self):
        raise RuntimeError("no repr")


class BothRaise(Exception):
    def __str__(self):
        raise RuntimeError("no str")

    def __repr__(self):
        raise RuntimeError("no repr")


class StrNotText(Exception):
    def __str__(self):
        return 42


class StrExits(Exception):
    def __str__(self):
        raise SystemExit(3)


KINDS = {"str": StrRaises, "repr": ReprRaises, "both": BothRaise, "not_text": StrNotText, "exit": StrExits}
"""


def test_an_exception_whose_str_raises_is_the_trials_error_and_not_retried(tmp_path):
    grid = write_grid(tmp_path, UNSAYABLE + "\n\ndef train(params):\n    raise KINDS[params['how']]('x')\n\n\n"
                                "grid = {'how': list(KINDS)}\noptions = {'retries': 2, 'workers': 2}\n")
    done = run_cli(grid, "--out", str(tmp_path / "out"), "--quiet")
    assert done.returncode == 1, done.stdout + done.stderr  # trials failed; the sweep did not
    rows = pd.read_csv(tmp_path / "out" / "grid" / "results.csv").set_index("param_how")
    assert (rows.status == "error").all(), rows[["status", "error"]]
    assert (rows.attempts == 1).all(), rows[["status", "attempts"]]  # an error is not run again
    for how, name, why in [("str", "StrRaises", "RuntimeError"), ("both", "BothRaise", "RuntimeError"),
                           ("not_text", "StrNotText", "TypeError"), ("exit", "StrExits", "SystemExit")]:
        assert rows.loc[how, "error"].endswith(f"{name}: (its message could not be rendered: {why})"), \
            rows.loc[how, "error"]
    assert rows.loc["repr", "error"].endswith("ReprRaises: x")  # its __repr__ is never needed
    log = (tmp_path / "out" / "grid" / "trials" / "how=str" / "log.txt").read_text()
    assert "Traceback" in log and "raise KINDS" in log  # the traceback is in the log all the same


@pytest.mark.unit
def test_the_judge_names_an_unsayable_exception_by_its_type():
    from sweeper.model.outcome import Verdict, last_line, raised
    from sweeper.model.trial import Status

    scope: dict = {"__name__": "hostile"}
    exec(UNSAYABLE, scope)
    why = {"str": "RuntimeError", "both": "RuntimeError", "not_text": "TypeError", "exit": "SystemExit"}
    for how, kind in scope["KINDS"].items():
        verdict = raised(kind("x"))
        said = f"(its message could not be rendered: {why[how]})" if how in why else "x"
        assert verdict == Verdict(Status.ERROR, f"hostile.{kind.__name__}: {said}"), verdict
        assert last_line(kind("x")) == verdict.error

    class OutOfMemoryError(scope["StrRaises"]):  # its name says what its message cannot
        pass

    assert raised(OutOfMemoryError()).status is Status.OOM
