"""How an option is given on the command line: its :class:`Flag` (help, type, choices), and
the flags' own readers of text (a count or ``auto``, words, a duration), each a one-line error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from sweeper.errors import SweepError
from sweeper.model.units import duration


@dataclass(frozen=True)
class Flag:
    """How an :class:`~sweeper.model.options.Options` field is given on the command line:
    ``sweeper.front.cli`` builds its parser from these, so a new option is written once, beside
    its field. A field without one is
    no flag (``progress``: the CLI's ``--quiet`` says more than it)."""

    help: str  #: what the option means, in Markdown; --help says its first sentence (see :mod:`.option_texts`)
    name: str = ""  #: the flag, when not ``--`` and the field's name with ``-`` for ``_``
    type: Callable[[str], Any] | None = None  #: what the text is read as (``int``, ``float``); None: text
    choices: tuple[str, ...] = ()  #: the values allowed (``checked()`` refuses others from code too)
    action: str = "store"  #: an argparse action: ``store_true`` for a switch, ``store_false`` for a ``--no-`` one
    nargs: str | None = None  #: ``"?"``: the value may be left out, and is then ``const``
    const: Any = None
    metavar: str | None = None  #: what ``--help`` calls the value (default: the field's name in capitals)

    def flag(self, field_name: str) -> str:
        return self.name or "--" + field_name.replace("_", "-")


def count_or_auto(text: str) -> int | str:
    """A flag's whole number, or ``auto``."""
    import argparse

    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"give a whole number or auto, got {text!r}") from None


def words(text: str) -> list[str]:
    """A flag's comma-separated words."""
    return [w.strip() for w in text.split(",") if w.strip()]


def duration_flag(text: str) -> float:
    """A flag's duration in seconds (``90``, ``10m``, ``1.5h``)."""
    import argparse

    try:
        return duration(text)
    except SweepError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("a duration must be ", "")) from None


def flag(help: str, **how: Any) -> dict[str, Flag]:
    """A field's metadata that makes it a command-line flag (see :class:`Flag`)."""
    return {"flag": Flag(help, **how)}
