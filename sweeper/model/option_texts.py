"""What an option means, written once (no fact written twice): a :class:`~sweeper.model.options.Flag`'s
``help`` is Markdown (links relative to ``docs/``). docs/options.md's table shows the whole of it
(:mod:`sweeper.front.optionsdoc` writes the table), ``--help`` its first sentence as plain text;
``{default}`` (or ``{default:g}``, a format spec) in it stands for the field's default as the code
has it, so neither can drift from the code."""

from __future__ import annotations

import re
from typing import Any

_DEFAULT = re.compile(r"\{default(?::([^{}]*))?\}")
_LINK = re.compile(r"\[([^\]]*)\]\([^)\s]*\)")
#: A pointer into the docs, once links are their words: ``(see GPUs)``, or ``; see GPUs`` ending a
#: parenthesis. It leads nowhere in a terminal, so ``--help`` leaves it out.
_SEE = (re.compile(r" ?\(see [^()]*\)"), re.compile(r"; see [^();]*(?=\))"))


def filled(text: str, default: Any) -> str:
    """``text`` with each ``{default}`` (``{default:g}``) replaced by ``default`` (so formatted);
    nothing else in it is read as a format (a brace in an example stays as it is)."""
    return _DEFAULT.sub(lambda m: format(default, m.group(1) or ""), text)


def first_sentence(text: str) -> str:
    """``text`` up to its first full stop that ends a sentence, that stop left out: one outside
    code and brackets, after no other stop (``...``), and followed by a space and a capital."""
    depth, code = 0, False
    for i, ch in enumerate(text):
        if ch == "`":
            code = not code
        elif code:
            continue
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif (ch == "." and depth == 0 and text[i - 1:i] != "." and text[i + 1:i + 2] == " "
              and text[i + 2:i + 3].isupper()):
            return text[:i]
    return text


def brief(text: str) -> str:
    """What ``--help`` says of an option whose text (defaults filled) is ``text``: its first
    sentence, links as their words, pointers into the docs left out, code as plain text."""
    said = _LINK.sub(r"\1", first_sentence(text))
    for pointer in _SEE:
        said = pointer.sub("", said)
    return said.replace("`", "")
