"""GCP's naming rules for the names the console takes in or reads from an API, and printed commands.

Stdlib only. Nodes, queued resources and zones follow the resource name rule of Compute and
Cloud TPU (RFC 1035 labels): ``[a-z]([-a-z0-9]*[a-z0-9])?``, 1-63 characters. Project ids are
6-30 characters of the same alphabet, starting with a letter and not ending with a hyphen
(Resource Manager's rule; a legacy domain-scoped id such as ``example.com:my-project`` keeps that
rule after its ``domain:`` prefix; a project number, as some resource names hold, is taken too).
A name from the command line that breaks its rule is bad input
(one sentence, exit 2); a record from the API whose name breaks it is shown as unreadable.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

_RESOURCE = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
_PROJECT = re.compile(r"(?:[a-z][-a-z0-9.]{0,61}[a-z0-9]:)?[a-z][-a-z0-9]{4,28}[a-z0-9]|[1-9][0-9]{0,19}")

#: What each kind of name must be, in words.
RULES = {
    "node": "lowercase letters, digits and hyphens, starting with a letter, not ending with a hyphen, "
            "at most 63 characters",
    "project": "6-30 lowercase letters, digits and hyphens, starting with a letter, not ending with a hyphen; "
               "or a project number",
}
KINDS = ("node", "queued resource", "zone", "project")


def is_valid_name(kind: str, value: object) -> bool:
    """Whether ``value`` is a well-formed ``kind`` (one of :data:`KINDS`) name."""
    if not isinstance(value, str):
        return False
    pattern = _PROJECT if kind == "project" else _RESOURCE
    return pattern.fullmatch(value) is not None


def name_problem(kind: str, value: object) -> str | None:
    """``None`` for a well-formed ``kind`` name, else the sentence saying why it is not one
    (the value shown with :func:`remote.printable.shown_name`)."""
    if is_valid_name(kind, value):
        return None
    from remote.printable import shown_name

    rule = RULES["project" if kind == "project" else "node"]
    return f"{shown_name(value)} is not a {kind} name ({rule})"


def check_name(kind: str, value: object) -> str:
    """``value`` when it is a well-formed ``kind`` name.

    Raises:
        ValueError: it is not (the message is :func:`name_problem`'s sentence).
    """
    problem = name_problem(kind, value)
    if problem is not None:
        raise ValueError(problem)
    assert isinstance(value, str)
    return value


def console_command(words: Iterable[str]) -> str:
    """A ``tpu-console`` command line to print for a person to paste: ``tpu-console`` and
    ``words``, each quoted with ``shlex.join`` (no value can run anything in the shell)."""
    return shlex.join(["tpu-console", *words])
