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
#: Characters that show as nothing or as a blank, so one text can look exactly like another:
#: format characters (zero-width space, joiners, word joiner, invisible operators, BOM, soft
#: hyphen, variation selectors, tag characters), fillers that render blank (Hangul fillers,
#: Mongolian free variation selectors) and every space but the ASCII one. Shown as ``\uXXXX``.
_INVISIBLE = re.compile("[\u00a0\u00ad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f"
                        "\u2000-\u200d\u2028\u2029\u202f\u205f-\u2064\u206a-\u206f\u3000\u3164"
                        "\ufe00-\ufe0f\ufeff\uffa0\U000e0000-\U000e007f]")
_NON_ASCII = re.compile("[^\x00-\x7f]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(value: object, *, keep_newlines: bool = False) -> str:
    r"""``str(value)`` safe to show on a terminal: one line, no control bytes.

    A newline (``\n``, ``\r\n`` or a lone ``\r``) becomes the two characters ``\n`` so a value
    cannot forge extra lines; every other C0/C1 control (ESC of CSI and OSC sequences, BEL, NUL,
    backspace, DEL...) is removed, so ``"\x1b[2J"`` shows as ``[2J``; tab is kept. Invisible and
    blank-looking characters (zero-width space and joiners, BOM, soft hyphen, fillers, spaces other
    than ASCII's) are made visible as ``\uXXXX``, so ``"a\u200bb"`` (a zero-width space) shows
    as the six characters ``a\u200bb``: two names cannot look the same. Markup such
    as ``[/x]`` is left alone: callers show the result as plain text (``rich.text.Text``,
    ``markup=False``, Textual ``Content``), never parse it.

    ``keep_newlines=True`` is for multi-line text the console composed itself (a traceback):
    line breaks stay line breaks, everything else is cleaned the same way.
    """
    text = value if isinstance(value, str) else str(value)
    if text.isascii() and text.isprintable():
        return text
    text = _INVISIBLE.sub(_escaped, text)
    if text.isprintable():
        return text
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if keep_newlines:
        return "\n".join(_CONTROLS.sub("", line) for line in text.split("\n"))
    return _CONTROLS.sub("", text.replace("\n", "\\n"))


def shown_name(value: object) -> str:
    """A name from outside (node, zone, project, container) quoted for a message, so that no two
    different names look alike: :func:`printable`, then every character outside printable ASCII as
    ``\\uXXXX`` (a Cyrillic ``а`` or a zero-width space cannot pass for a Latin name);
    ``(none)`` for a missing one."""
    if value is None:
        return "(none)"
    text = printable(value)
    return f"'{text if text.isascii() else _NON_ASCII.sub(_escaped, text)}'"
