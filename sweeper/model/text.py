"""Text that reaches a console line or a CSV field: control characters never do.

Light on purpose (the standard library only): trial processes and the parent import it.
"""

from __future__ import annotations

import re

#: C0 and C1 control characters (and DEL): never in a console line or a CSV field.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\x1b``, ``\\n``), for one console line or CSV field."""
    return CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
