"""The one sanitizer for text from outside (APIs, logs, containers, servers) on its way to a screen.

Stdlib only. :func:`printable` is applied by every display path (stdout tables and panels, the
TUI, notifications, the swap plan and its confirm dialog) to each outside value it shows;
``--json`` output keeps the data as it came (JSON escapes it).
"""

from __future__ import annotations

import re

#: C0 controls except tab, DEL, C1 controls, and the Unicode bidi overrides/isolates that can
#: reorder what a line appears to say.
_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(value: object, *, keep_newlines: bool = False) -> str:
    r"""``str(value)`` safe to show on a terminal: one line, no control bytes.

    A newline (``\n``, ``\r\n`` or a lone ``\r``) becomes the two characters ``\n`` so a value
    cannot forge extra lines; every other C0/C1 control (ESC of CSI and OSC sequences, BEL, NUL,
    backspace, DEL...) is removed, so ``"\x1b[2J"`` shows as ``[2J``; tab is kept. Markup such
    as ``[/x]`` is left alone: callers show the result as plain text (``rich.text.Text``,
    ``markup=False``, Textual ``Content``), never parse it.

    ``keep_newlines=True`` is for multi-line text the console composed itself (a traceback):
    line breaks stay line breaks, everything else is cleaned the same way.
    """
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if keep_newlines:
        return "\n".join(_CONTROLS.sub("", line) for line in text.split("\n"))
    return _CONTROLS.sub("", text.replace("\n", "\\n"))
