"""The searches a sweep can run, by name: the built-in ones (Optuna's samplers, population-based
training), each saying what the runner, planner and trackers need of it; a search from outside
(``tests/toy_search.py``) registered from code and as an installed package's entry point, each
driving a real sweep; and no code outside the registry comparing a search's name."""

from __future__ import annotations

import ast
import os
import re
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


# -- docs/search.md's "A search of your own", as a user pastes it --------------------------------


def _own_search_blocks() -> list[tuple[str, str]]:
    """The section's fenced blocks, in order: (language, text)."""
    page = open(os.path.join(ROOT, "docs", "search.md"), encoding="utf-8").read()
    section = re.search(r"^## A search of your own\n(.*?)(?=^## |^\*\*What it saves)", page, re.S | re.M)
    assert section is not None
    return re.findall(r"```(\w+)\n(.*?)```", section.group(1), re.S)


def _package(folder, blocks) -> str:
    """The page's package: its module as the first block names it (``# my_package/search.py``);
    returns the folder it lies in."""
    (language, module), *_ = blocks
    path = re.match(r"# ([\w/]+\.py)\n", module)
    assert language == "python" and path is not None
    os.makedirs(folder / os.path.dirname(path.group(1)), exist_ok=True)
    (folder / os.path.dirname(path.group(1)) / "__init__.py").write_text("")
    (folder / path.group(1)).write_text(module)
    return str(folder)


def _asked(module: str, trials: int) -> list[float]:
    """The values of ``x`` (uniform on [0, 1]) the page's sampler asks in a plain Optuna study
    seeded as a sweep of seed 0 seeds it: what a sweep it drives must train."""
    from sweeper.search import Made

    names: dict = {}
    exec(module, names)
    study = optuna.create_study(sampler=names["sobol"](optuna, Made(seed=0, trials=trials)))
    xs = []
    for _ in range(trials):
        trial = study.ask()
        xs.append(trial.suggest_float("x", 0.0, 1.0))
        study.tell(trial, 1.0)
    return sorted(xs)


SPACE = "{'x': sweeper.uniform(0.0, 1.0), 'pace': 0.0, 'epochs': 2}"


def test_the_docs_search_registered_from_code_drives_a_sweep(tmp_path):
    """The page's factory in its module, its ``register`` lines pasted into a script that then
    sweeps with ``search="sobol"``: the points are the sampler's."""
    blocks = _own_search_blocks()
    assert [language for language, _ in blocks] == ["python", "python", "ini", "toml"]
    site = _package(tmp_path / "src", blocks)
    script = ("import sweeper\nfrom sweep_fns import descent as train\n" + blocks[1][1]
              + f"\nif __name__ == '__main__':\n    sweeper.sweep(train, {SPACE}, search='sobol', trials=4, "
                f"metric='loss', workers=1, out={str(tmp_path / 'out')!r}, name='s', progress=False)\n")
    (tmp_path / "run.py").write_text(script)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, HERE, ROOT])}
    done = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = pd.read_csv(tmp_path / "out" / "s" / "results.csv")
    assert rows.status.tolist() == ["ok"] * 4
    assert sorted(rows.param_x.tolist()) == _asked(blocks[0][1], 4)


def _pip_install(project, target) -> str:
    """``pip install`` of a project folder into ``target``, as a user installs a package (here
    offline: this Python's setuptools builds it); returns ``target``."""
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                           "--quiet", "--target", str(target), str(project)], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return str(target)


def test_the_docs_entry_point_in_setup_cfg_adds_the_search_to_the_command_line(tmp_path):
    """The page's package with its ``setup.cfg`` (the block as written, after the name and the
    package every setup.cfg gives) and pip-installed: ``--search sobol`` asks its sampler."""
    blocks = _own_search_blocks()
    project = tmp_path / "project"
    _package(project, blocks)
    (project / "setup.cfg").write_text("[metadata]\nname = my_package\nversion = 1.0\n\n[options]\n"
                                       "packages = my_package\n\n" + blocks[2][1])
    (project / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n'
                                            'build-backend = "setuptools.build_meta"\n')
    site = _pip_install(project, tmp_path / "site")
    (tmp_path / "grid.py").write_text(f"from sweep_fns import descent as train\nimport sweeper\nspace = {SPACE}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, HERE, ROOT])}
    done = subprocess.run([sys.executable, "-m", "sweeper", str(tmp_path / "grid.py"), "--search", "sobol",
                           "--trials", "4", "--metric", "loss", "--workers", "1", "--out", str(tmp_path / "out"),
                           "--quiet"], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = pd.read_csv(tmp_path / "out" / "grid" / "results.csv")
    assert rows.status.tolist() == ["ok"] * 4
    assert sorted(rows.param_x.tolist()) == _asked(blocks[0][1], 4)


def test_the_docs_entry_point_in_pyproject_is_found_by_name(tmp_path):
    """The page's package with its ``pyproject.toml`` (the block as written, after the name and
    build system every pyproject gives), pip-installed: the search is found by its name, the
    page's factory."""
    blocks = _own_search_blocks()
    project = tmp_path / "project"
    _package(project, blocks)
    (project / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n'
                                            'build-backend = "setuptools.build_meta"\n\n'
                                            '[project]\nname = "my_package"\nversion = "1.0"\n\n' + blocks[3][1])
    site = _pip_install(project, tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, ROOT])}
    asked = ("from sweeper.search import registry\nfound = registry.lookup('sobol').sampler\n"
             "print(registry.names()[-1], found.__module__, found.__name__)\n")
    done = subprocess.run([sys.executable, "-c", asked], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["sobol", "my_package.search", "sobol"]


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
