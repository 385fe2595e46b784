"""One source for each fact: the CLI's flags come from :class:`Options`'
fields, and the results table's and the ledger's columns from :class:`TrialResult`'s."""

from __future__ import annotations

import argparse
import dataclasses
import sqlite3

import pytest

from sweeper.backends import registry
from sweeper.errors import SweepError
from sweeper.front.cli import parser
from sweeper.model import metrics
from sweeper.model.option_texts import brief, filled
from sweeper.model.options import Flag, Options
from sweeper.model.trial import (
    BACK_COLUMNS,
    CONSTRAINT_COLUMNS,
    DETERMINISM_COLUMNS,
    EPOCH_COLUMNS,
    FRONT_COLUMNS,
    GPU_COLUMNS,
    JOB_COLUMNS,
    MEMORY_COLUMNS,
    PARETO_COLUMNS,
    RESULT_COLUMNS,
    SEGMENT_COLUMNS,
    Place,
    Status,
    TrialResult,
)
from sweeper.results import query
from sweeper.store import table
from sweeper.store.ledger import Ledger
from sweeper.store.paths import SweepPaths

#: results.csv's fixed columns, in its order: a contract with the analysts who load it,
#: written out here so that a change to TrialResult that would move one fails a test.
CSV_CONTRACT = ("trial_id", "trial", "status", "seed", "device", "started_at", "duration_s", "error",
                "attempts", "epoch_reached", "segments", "mem_peak_mb", "gpu_uuid", "gpu_mem_cap_mb", "gpu_mem_peak_mb",
                "gpu_mem_reserved_mb", "feasible", "deterministic", "job_id", "pareto")


def _actions() -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser()._actions}


# -- the command line from Options ------------------------------------------------------

@pytest.mark.unit
def test_every_options_flag_is_in_the_parser_as_its_field_says():
    actions = _actions()
    flagged = registry.flags()  # Options' fields, then each backend's options group's (Ray's)
    assert len(flagged) >= 20 and flagged[:len(Options.flags())] == Options.flags()
    for f, flag in flagged:
        assert isinstance(flag, Flag)
        action = actions[f.name]
        assert action.option_strings == [flag.flag(f.name)], f.name
        assert action.default is None, f.name  # a flag not given leaves the grid file's value
        assert action.help == brief(filled(flag.help, f.default)), f.name
        if "{default" in flag.help:
            shown = f"{f.default:g}" if isinstance(f.default, float) else str(f.default)
            assert f"default {shown}" in action.help, (f.name, action.help)
        assert action.type is flag.type, f.name
        assert tuple(action.choices or ()) == flag.choices, f.name
        assert action.metavar == flag.metavar, f.name
        if flag.nargs is not None:
            assert (action.nargs, action.const) == (flag.nargs, flag.const), f.name


@pytest.mark.unit
def test_the_flags_are_named_after_their_fields_and_every_field_is_one_but_progress():
    flags = {f.name: flag.flag(f.name) for f, flag in registry.flags()}
    assert flags["per_gpu"] == "--per-gpu" and flags["cpus_per_trial"] == "--cpus-per-trial"
    assert flags["prefetch"] == "--no-prefetch" and flags["address"] == "--address"
    # --quiet says more than --no-progress would; a backend's group is made of its own flags
    assert set(Options.names()) - set(flags) == {"progress", "backend_options"}


@pytest.mark.unit
def test_the_flags_keep_their_order_and_the_cli_only_flags_stand_around_them():
    order = [a.dest for a in parser()._actions]
    names = [f.name for f, _ in registry.flags()]
    start = order.index(names[0])
    assert order[start:start + len(names)] == names
    assert order[:start] == ["help", "version", "grid_file", "command", "grid_data", "shell"]
    assert order[start + len(names):] == ["quiet", "detach"]  # how the command runs, not what the sweep is


@pytest.mark.unit
def test_parsed_flags_build_options_and_the_choices_are_the_ones_checked():
    args = parser().parse_args(["--workers", "2", "--cpus-per-trial", "0.5", "--no-prefetch", "--mode", "min",
                                "--backend", "ray", "--mlflow", "--fresh"])
    given = {f.name: getattr(args, f.name) for f, _ in registry.flags() if getattr(args, f.name) is not None}
    opts = registry.options(given)
    assert (opts.workers, opts.backend_options.cpus_per_trial, opts.prefetch, opts.mode, opts.backend, opts.mlflow,
            opts.fresh) == (2, 0.5, False, "min", "ray", True, True)
    assert Options.choices("start_method")
    with pytest.raises(SweepError, match="start_method must be " + " or ".join(map(repr, Options.choices("start_method")))):
        Options(start_method="nope").checked()
    assert not Options.choices("backend")  # the registry's names: a backend may come from an installed package
    with pytest.raises(SweepError, match="backend must be a backend's name"):
        Options(backend="").checked()
    with pytest.raises(SweepError, match="mode must be 'max' or 'min' \\(one per metric\\), got 'nope'"):
        Options(mode="nope").checked()  # a list of them for several metrics: checked by sweeper.model.objectives


# -- the table's columns from TrialResult -------------------------------------------------

def _result(index: int, device: str = "cpu", epoch: int | None = None, mem: int | None = None) -> TrialResult:
    return TrialResult(f"t{index:012x}", f"lr={index}", index, {"lr": index, "units": [64, 32]}, Status.OK,
                       {"val_loss": 0.5, "acc": 1}, seed=7, device=device, started_at="2024-01-01T00:00:00Z",
                       duration_s=1.23456, attempts=2, pid=99, exitcode=0, log="log.txt",
                       gpu_uuid="GPU-1" if device != "cpu" else "", gpu_mem_cap_mb=1000 if device != "cpu" else None,
                       gpu_mem_peak_mb=None, epoch_reached=epoch, mem_peak_mb=mem)


@pytest.mark.unit
def test_the_csv_fixed_columns_are_the_ones_derived_from_trialresult():
    assert RESULT_COLUMNS == CSV_CONTRACT
    assert query.FIXED_COLUMNS == RESULT_COLUMNS
    assert (*FRONT_COLUMNS, *BACK_COLUMNS, *EPOCH_COLUMNS, *SEGMENT_COLUMNS, *MEMORY_COLUMNS, *GPU_COLUMNS,
            *CONSTRAINT_COLUMNS, *DETERMINISM_COLUMNS, *JOB_COLUMNS, *PARETO_COLUMNS) == RESULT_COLUMNS
    assert metrics.RESERVED == set(RESULT_COLUMNS)  # no metric may take one of these names
    everything = [_result(1, "gpu:0", epoch=3), _result(2, mem=512)]
    cols = table.columns(everything)
    assert cols == [*FRONT_COLUMNS, "param_lr", "param_units", "val_loss", "acc", *BACK_COLUMNS, *EPOCH_COLUMNS,
                    *MEMORY_COLUMNS, *GPU_COLUMNS]
    assert [c for c in cols if c in RESULT_COLUMNS] == [c for c in RESULT_COLUMNS
                                                        if c not in CONSTRAINT_COLUMNS + DETERMINISM_COLUMNS
                                                        + JOB_COLUMNS + SEGMENT_COLUMNS + PARETO_COLUMNS]
    assert table.columns([_result(1)]) == [*FRONT_COLUMNS, "param_lr", "param_units", "val_loss", "acc",
                                           *BACK_COLUMNS]
    assert table.columns([]) == [*FRONT_COLUMNS, *BACK_COLUMNS]


@pytest.mark.unit
def test_a_row_writes_each_column_as_before():
    assert table.row(_result(1, "gpu:0", epoch=3)) == {
        "trial_id": "t000000000001", "trial": "lr=1", "status": "ok", "param_lr": 1, "param_units": "[64, 32]",
        "val_loss": 0.5, "acc": 1, "seed": 7, "device": "gpu:0", "started_at": "2024-01-01T00:00:00Z",
        "duration_s": 1.235, "error": "", "attempts": 2, "epoch_reached": 3, "gpu_uuid": "GPU-1",
        "gpu_mem_cap_mb": 1000, "gpu_mem_peak_mb": None, "gpu_mem_reserved_mb": None}
    assert list(table.row(_result(2))) == ["trial_id", "trial", "status", "param_lr", "param_units", "val_loss",
                                           "acc", *BACK_COLUMNS]


@pytest.mark.unit
def test_every_trialresult_field_has_a_place_and_the_ledger_stores_each(tmp_path):
    places = {f.name: f.metadata["place"] for f in dataclasses.fields(TrialResult)}
    assert all(isinstance(p, Place) for p in places.values())
    assert {n for n, p in places.items() if p is Place.LEDGER} == {"index", "pid", "exitcode", "log", "env"}
    ledger = Ledger(str(tmp_path))
    try:
        result = _result(5, "gpu:1", epoch=2)
        ledger.record(result)
        assert ledger.results() == {result.trial_id: result}
    finally:
        ledger.close()
    db = sqlite3.connect(SweepPaths(str(tmp_path)).ledger)
    try:
        stored = {row[1] for row in db.execute("PRAGMA table_info(trials)")}
    finally:
        db.close()
    assert stored == {"idx" if n == "index" else n for n in places} | {"recorded_at"}
