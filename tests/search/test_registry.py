"""The searches a sweep can run, by name: the built-in ones (Optuna's samplers, population-based
training), each saying what the runner, planner and trackers need of it; a search from outside
(``tests/toy_search.py``) registered from code and as an installed package's entry point, each
driving a real sweep; and no code outside the registry comparing a search's name."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import optuna
import pandas as pd
import pytest

import sweep_fns
import sweeper
import toy_search
from conftest import HERE, ROOT, install_module
from sweeper.search import GROUP, register, registry
from sweeper.search.sampling import sampler

BUILT_IN = ["auto", "tpe", "nsga2", "random", "cmaes", "qmc", "gp", "pbt"]


@pytest.mark.unit
def test_the_built_in_searches_and_what_each_says_of_itself():
    assert registry.names()[:len(BUILT_IN)] == BUILT_IN
    made = {name: (type(sampler(name, 0, trials=20)).__name__, type(sampler(name, 0, several=True, trials=20)).__name__)
            for name in ("auto", "tpe", "nsga2", "random", "qmc")}
    assert made == {"auto": ("TPESampler", "NSGAIISampler"), "tpe": ("TPESampler", "TPESampler"),
                    "nsga2": ("NSGAIISampler", "NSGAIISampler"), "random": ("RandomSampler", "RandomSampler"),
                    "qmc": ("QMCSampler", "QMCSampler")}
    assert sampler("tpe", 0)._constant_liar and sampler("nsga2", 0, trials=40)._population_size == 10
    pbt = registry.lookup("pbt")
    assert pbt.pauses and pbt.settings == "pbt" and not pbt.needs_optuna and pbt.sampler is None
    asking = [registry.lookup(n) for n in BUILT_IN if n != "pbt"]
    assert all(k.needs_optuna and not k.pauses and k.settings is None for k in asking)
    assert [n for n in BUILT_IN if registry.lookup(n).constraints] == ["tpe", "nsga2", "gp"]
    assert [n for n in BUILT_IN if registry.lookup(n).single_objective] == ["cmaes"]
    assert [n for n in BUILT_IN if registry.lookup(n).generations] == ["nsga2"]
    assert [n for n in BUILT_IN if registry.lookup(n).picks is not None] == ["auto"]
    given = optuna.samplers.RandomSampler(seed=3)
    assert sampler(given, 0) is given and registry.of(given) is registry.OTHER and registry.of(None) is registry.OTHER


@pytest.mark.unit
def test_a_search_name_none_has_is_one_line_naming_the_known_ones():
    with pytest.raises(sweeper.SweepError, match="^search is 'bogus'; give one of auto, tpe, nsga2, random, cmaes, "
                                                 "qmc, gp, pbt or an Optuna sampler$"):
        sampler("bogus", 0)
    with pytest.raises(sweeper.SweepError, match="^search='cmaes' optimises one objective"):
        sampler("cmaes", 0, several=True)
    assert registry.of("bogus") is registry.OTHER  # refused by the search's check, in its turn


@pytest.mark.unit
def test_a_search_name_is_registered_once():
    register("ladder_once", toy_search.ladder)
    try:
        register("ladder_once", toy_search.ladder)  # the same again: fine
        with pytest.raises(sweeper.SweepError, match="registered already"):
            register("ladder_once", lambda optuna, made: None)
        with pytest.raises(sweeper.SweepError, match="not a plain name"):
            register("my search", toy_search.ladder)
    finally:
        registry._SEARCHES.pop("ladder_once", None)


@pytest.fixture
def ladder():
    register("ladder", toy_search.ladder)
    yield "ladder"
    registry._SEARCHES.pop("ladder", None)


def test_a_search_registered_from_outside_drives_a_sweep(tmp_path, ladder):
    df = sweeper.sweep(sweep_fns.descent, {"x": sweeper.uniform(0.0, 1.0), "pace": 0.0, "epochs": 2},
                       search=ladder, trials=4, metric="loss", workers=1, out=str(tmp_path), name="s",
                       progress=False)
    assert df.status.tolist() == ["ok"] * 4
    assert sorted(df.param_x.tolist()) == toy_search.XS  # the points its sampler chose, each once
    with pytest.raises(sweeper.SweepError, match="pbt's settings go with search='pbt'"):
        sweeper.sweep(sweep_fns.descent, {"x": sweeper.uniform(0.0, 1.0)}, search=ladder, trials=4,
                      metric="loss", pbt={"population": 4}, out=str(tmp_path), name="t")


def test_an_installed_packages_entry_point_adds_a_search_to_the_command_line(tmp_path):
    """A package that declares ``ladder = toy_search:ladder`` in the ``sweeper.search`` group:
    ``--search ladder`` asks its sampler; no line of sweeper's names it."""
    site = install_module(tmp_path / "site", "toy_search_dist", None)
    with open(os.path.join(site, "toy_search_dist-1.0.dist-info", "entry_points.txt"), "w") as f:
        f.write(f"[{GROUP}]\nladder = toy_search:ladder\n")
    (tmp_path / "grid.py").write_text("from sweep_fns import descent as train\nimport sweeper\n"
                                      "space = {'x': sweeper.uniform(0, 1), 'pace': 0.0, 'epochs': 2}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, HERE, ROOT])}
    command = [sys.executable, "-m", "sweeper", str(tmp_path / "grid.py"), "--trials", "4", "--metric", "loss",
               "--workers", "1", "--out", str(tmp_path / "out"), "--quiet"]
    done = subprocess.run([*command, "--search", "ladder"], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = pd.read_csv(tmp_path / "out" / "grid" / "results.csv")
    assert rows.status.tolist() == ["ok"] * 4 and sorted(rows.param_x.tolist()) == toy_search.XS
    wrong = subprocess.run([*command, "--search", "ladderr"], env=env, capture_output=True, text=True, timeout=240)
    assert wrong.returncode == 2
    assert "search is 'ladderr'; give one of auto, tpe, nsga2, random, cmaes, qmc, gp, pbt, ladder or an Optuna " \
           "sampler" in wrong.stdout + wrong.stderr


# -- no code compares a search's name --------------------------------------------------------------

PACKAGE = os.path.join(ROOT, "sweeper")
#: Names that are also other options' values (workers="auto", per_gpu="auto", a pruner's
#: min_resource='auto'): a comparison with them counts where it is about a search or a sampler.
SHARED = {"auto"}


def _strings(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_strings(e) for e in node.elts)) if node.elts else set()
    return set()


def _comparisons(source: str) -> list[tuple[int, str]]:
    """Each comparison of something with a search's name (``==``, ``!=``, ``in``, ``startswith``):
    its line and the name."""
    names = set(BUILT_IN)
    out: list[tuple[int, str]] = []
    if not any(f'"{n}"' in source or f"'{n}'" in source for n in names):  # no name written: nothing to read
        return out
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("startswith", "endswith"):
            sides = [node.func.value, *node.args]
        else:
            continue
        for side in sides:
            for name in sorted(_strings(side) & names):
                about = " ".join(ast.unparse(s) for s in sides if s is not side).lower()
                if name not in SHARED or "search" in about or "sampler" in about or "how" in about:
                    out.append((node.lineno, name))
    return out


@pytest.mark.unit
def test_the_comparison_finder_finds_a_search_named_in_code():
    assert _comparisons('if options.search == "pbt":\n    pass\n') == [(1, "pbt")]
    assert _comparisons('x = search in ("cmaes",)\ny = how.startswith(("nsga2", "auto"))\n') == \
        [(1, "cmaes"), (2, "auto"), (2, "nsga2")]
    assert _comparisons('if search != "auto":\n    pass\n') == [(1, "auto")]
    assert _comparisons('if options.workers == "auto":\n    pass\n') == []


@pytest.mark.unit
def test_no_code_outside_the_registry_compares_a_searchs_name():
    found = []
    for folder, _, files in os.walk(PACKAGE):
        for f in files:
            path = os.path.join(folder, f)
            if f.endswith(".py") and path != os.path.join(PACKAGE, "search", "registry.py"):
                with open(path) as source:
                    found += [f"{os.path.relpath(path, ROOT)}:{line}: {name!r}" for line, name in
                              _comparisons(source.read())]
    assert found == []
