"""Values under a shell, from the user's side: under a shell a value never runs, whatever
the template (values reach /bin/sh as environment variables, never in its text); a
parameter named like sweeper's own ``{flags}`` placeholder is refused in one line."""

from __future__ import annotations

import json
import os
import shlex
import sys

import pandas as pd
import pytest

import sweeper
from conftest import HERE, run_cli, write_grid

SCRIPT = os.path.join(HERE, "scripts", "argv_echo.py")
PY = shlex.quote(sys.executable)
HOSTILE = ["$(touch {m})", "`touch {m}`", "'; touch {m}; '", '"; touch {m}; "', "a  *  b\\"]


def hostile(tmp_path) -> tuple[str, list[str]]:
    marker = str(tmp_path / "pwned")
    return marker, [h.format(m=marker) for h in HOSTILE]


def seen(folder, trial: str) -> dict:
    return json.loads((folder / "trials" / trial / "seen.json").read_text())


def one_line_refusal(done, *words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


# -- 6. a shell still ran values ------------------------------------------------------------

def test_a_here_document_never_runs_a_value(tmp_path):
    marker, values = hostile(tmp_path)
    template = ('cat > "$SWEEPER_TRIAL_DIR/text.txt" <<EOF\n{text}\nEOF\n'
                f"{PY} {SCRIPT} {{flags}}")
    grid = write_grid(tmp_path, f"command = {template!r}\nshell = True\ngrid = {{'text': {values!r}}}\n")
    done = run_cli(grid, "--out", str(tmp_path / "out"))
    assert not os.path.exists(marker), "a value ran as shell code"
    assert done.returncode == 0, done.stdout + done.stderr
    folder = tmp_path / "out" / "grid"
    df = pd.read_csv(folder / "results.csv", keep_default_na=False)
    assert (df.status == "ok").all(), df.error.tolist()
    for trial, value in zip(df.trial, df.param_text):
        assert (folder / "trials" / trial / "text.txt").read_text() == value + "\n"  # expanded once, verbatim
        assert seen(folder, trial)["argv"] == [f"--text={value}"]  # {flags}: one word each
        log = (folder / "trials" / trial / "log.txt").read_text()
        assert "sweeper: running cat > " in log and f" {shlex.quote('--text=' + value)}\n" in log  # for the human


def test_a_quote_in_a_comment_never_runs_a_value_in_double_quotes(tmp_path):
    marker, values = hostile(tmp_path)
    (tmp_path / "g.json").write_text(json.dumps({"text": values[:3]}))
    template = f"# a \"quote, it's a comment\n{PY} {SCRIPT} --text=\"{{text}}\""
    done = run_cli("--command", template, "--grid", str(tmp_path / "g.json"), "--shell",
                   "--out", str(tmp_path / "out"))
    assert not os.path.exists(marker), "a value ran as shell code"
    assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_csv(tmp_path / "out" / "argv_echo" / "results.csv")  # named after its script
    assert (df.status == "ok").all(), df.error.tolist()
    for trial, value in zip(df.trial, df.param_text):
        assert seen(tmp_path / "out" / "argv_echo", trial)["argv"] == [f"--text={value}"]


def test_placeholders_in_quotes_and_substitutions_get_values_verbatim(tmp_path):
    marker, values = hostile(tmp_path)
    command = sweeper.Command(f'{PY} {SCRIPT} --text="{{text}}" "$(printf %s {{text}})" {{n}}', shell=True)
    df = sweeper.sweep(command, {"text": values, "n": [" x "]}, out=str(tmp_path), name="q", progress=False)
    assert not os.path.exists(marker), "a value ran as shell code"
    assert (df.status == "ok").all(), df.error.tolist()
    for trial, value in zip(df.trial, df.param_text):
        assert seen(tmp_path / "q", trial)["argv"] == [f"--text={value}", value, " x "]


@pytest.mark.parametrize("template,words", [
    ("{py} {script} '{text}'", "inside '...'"),
    ("{py} {script} \\{text}", "after a backslash"),
    ("cat <<'EOF'\n{text}\nEOF\n{py} {script}", "delimiter is quoted"),
    ("{py} {script} $(( {text} + 1 ))", "arithmetic"),
    ("{py} {script} {text} # was {text}", "comment"),
    ("{py} {script} ${text}", "right after $"),
])
@pytest.mark.unit
def test_placeholders_that_cannot_stand_as_themselves_are_refused(tmp_path, template, words):
    marker, values = hostile(tmp_path)
    template = template.replace("{py}", PY).replace("{script}", SCRIPT)
    with pytest.raises(sweeper.SweepError, match=r"^the shell command has \{text\} ") as caught:
        sweeper.sweep(sweeper.Command(template, shell=True), {"text": values}, out=str(tmp_path), name="r",
                      progress=False)
    assert words in str(caught.value) and "\n" not in str(caught.value)
    assert not os.path.exists(marker) and not (tmp_path / "r").exists()


# -- 7. a parameter named flags -------------------------------------------------------------

@pytest.mark.parametrize("shell", [True, False])
def test_a_parameter_named_flags_is_refused_from_a_grid_file(tmp_path, shell):
    body = (f"command = {PY + ' ' + SCRIPT + ' {flags}'!r}\nshell = {shell}\n"
            "grid = {'flags': ['-O2'], 'x': [1]}\n")
    done = run_cli(write_grid(tmp_path, body), "--out", str(tmp_path / "out"))
    one_line_refusal(done, "'flags'", "{flags}", "rename")
    assert not (tmp_path / "out").exists()


def test_a_parameter_named_flags_is_refused_with_command_and_grid(tmp_path):
    (tmp_path / "g.json").write_text(json.dumps({"flags": ["-O2"], "x": [1]}))
    done = run_cli("--command", f"{PY} {SCRIPT} --flags={{flags}} --x={{x}}", "--grid", str(tmp_path / "g.json"),
                   "--out", str(tmp_path / "out"))
    one_line_refusal(done, "'flags'", "rename")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("template", ["{py} {script} {flags}", "{py} {script} --flags={flags} --x={x}",
                                      "{py} {script} --x={x}"])
@pytest.mark.unit
@pytest.mark.parametrize("shell", [True, False])
def test_the_api_refuses_a_parameter_named_flags_with_a_sweep_error(tmp_path, template, shell):
    template = template.replace("{py}", PY).replace("{script}", SCRIPT)
    with pytest.raises(sweeper.SweepError, match="parameter 'flags' has the name of sweeper's own"):
        sweeper.sweep(sweeper.Command(template, shell=shell), {"flags": ["-O2"], "x": [1]}, out=str(tmp_path),
                      progress=False)
    assert not (tmp_path / "command").exists()
