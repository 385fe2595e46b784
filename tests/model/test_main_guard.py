"""A script that calls ``sweep()`` at its top level, outside ``if __name__ == "__main__":``, is
refused in one line before anything runs (no folder, no trial), whatever the call is spelled or
however it is reached from the top level; a script whose call does not run again when a trial
imports it is never refused. tests/backends/test_slurm_front_ends.py has the same on Slurm."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import HERE

HEAD = f"import sys\nsys.path.insert(0, {HERE!r})\n"


def run_script(tmp_path, body: str, name: str = "script.py") -> subprocess.CompletedProcess:
    """``python script.py`` in tmp_path, the script's sweep() writing into tmp_path/out."""
    path = tmp_path / name
    path.write_text(HEAD + body.replace("OUT", repr(str(tmp_path / "out"))))
    return subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=180)


#: (what, the script's body, the line its call runs from at the top level, what it passes through)
REFUSED = [
    ("sweeper.sweep at the top level", "import sweeper\nfrom sweep_fns import echo\n\n"
     "df = sweeper.sweep(echo, {'x': [1, 2]}, out=OUT)\n", 6, ""),
    ("an alias, train defined in the script", "from sweeper import sweep as run_grid\n\ndef train(params):\n"
     "    return {'acc': 1.0}\n\nrun_grid(\n    train,\n    {'x': [1]},\n    out=OUT,\n)\n", 8, ""),
    ("a main() called at the top level", "import sweeper\nfrom sweep_fns import echo\n\ndef main():\n"
     "    grid = {'x': [1]}\n    return sweeper.sweep(echo, grid, out=OUT)\n\nmain()\n", 10, ", through main()"),
    ("a loop, in a with block", "import contextlib\nimport sweeper\nfrom sweep_fns import echo\n\n"
     "with contextlib.suppress(KeyError):\n    for x in [1, 2]:\n        sweeper.sweep(echo, {'x': [x]}, out=OUT)\n",
     9, ""),
]

#: Scripts whose sweep() does not run again when a trial imports them: each runs its sweep.
RUN = [
    ("the guard", "import sweeper\nfrom sweep_fns import echo\n\nif __name__ == '__main__':\n"
     "    print(sweeper.sweep(echo, {'x': [1]}, out=OUT, progress=False).status.tolist())\n"),
    ("the guard, reversed, calling main()", "import sweeper\nfrom sweep_fns import echo\n\ndef main():\n"
     "    print(sweeper.sweep(echo, {'x': [1]}, out=OUT, progress=False).status.tolist())\n\n"
     "if '__main__' == __name__:\n    main()\n"),
    ("main() at the top level that returns early in a trial's process", "import sweeper\nfrom sweep_fns import echo\n\n"
     "def main():\n    if __name__ != '__main__':\n        return\n"
     "    print(sweeper.sweep(echo, {'x': [1]}, out=OUT, progress=False, workers=1).status.tolist())\n\n"
     "main()\n"),
    ("a dry run at the top level (no trial starts)", "import sweeper\nfrom sweep_fns import echo\n\n"
     "print(sweeper.sweep(echo, {'x': [1]}, out=OUT, dry_run=True).first_slot.tolist() and ['ok'])\n"),
]


def test_a_top_level_sweep_is_refused_before_anything_runs_and_a_guarded_one_runs(tmp_path):
    for what, body, line, via in REFUSED:
        folder = tmp_path / what.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
        folder.mkdir()
        done = run_script(folder, body)
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
        assert done.returncode == 1 and last == (
            f"sweeper.errors.SweepError: {folder / 'script.py'} calls sweep() at its top level (line {line}{via}), "
            "so every trial process, which imports it again, would call it again; put that line under if "
            "__name__ == \"__main__\": (nothing ran)"), (what, done.stdout, done.stderr)
        assert not (folder / "out").exists(), what  # no folder, no ledger, no trial
        assert "[1/" not in done.stdout, what
    for what, body in RUN:
        folder = tmp_path / f"run_{RUN.index((what, body))}"
        folder.mkdir()
        done = run_script(folder, body)
        assert done.returncode == 0 and "['ok']" in done.stdout, (what, done.stdout, done.stderr)


@pytest.mark.unit
def test_what_the_tree_tells_and_what_it_does_not(tmp_path, monkeypatch):
    """The decision itself, on a script's tree and the way the stack went through it: refused only
    where every step runs again on import."""
    import ast

    from sweeper.model.mainguard import Step, reruns

    source = ("import os\n"                                   # 1
              "def main():\n"                                 # 2
              "    go(1)\n"                                   # 3
              "def careful():\n"                              # 4
              "    if os.environ.get('X'):\n"                 # 5
              "        return\n"                              # 6
              "    go(2)\n"                                   # 7
              "main()\n"                                      # 8
              "x = None or main()\n"                          # 9
              "careful()\n"                                   # 10
              "y = [main() for _ in 'a']\n")                  # 11
    tree = ast.parse(source)

    def at(line: int, call: str) -> tuple[int, int, int, int]:
        col = source.splitlines()[line - 1].index(call)
        return (line, line, col, col + len(call))

    top = Step("<module>", 1, at(8, "main()"))
    assert reruns(tree, [top, Step("main", 2, at(3, "go(1)"))])
    assert not reruns(tree, [Step("<module>", 1, at(9, "main()")), Step("main", 2, at(3, "go(1)"))])  # after `or`
    assert not reruns(tree, [Step("<module>", 1, at(10, "careful()")), Step("careful", 4, at(7, "go(2)"))])
    assert not reruns(tree, [Step("<module>", 1, at(11, "main()")), Step("main", 2, at(3, "go(1)"))])
    assert not reruns(tree, [top, Step("main", 5, at(3, "go(1)"))])  # not the main the script defines
    assert not reruns(tree, [top, Step("other", 2, at(3, "go(1)"))])
