"""Formatting of domain values for display: durations, countdowns, states, sizes.

Pure functions returning plain strings or Rich ``Text``; the only place where
state names get their colours (theme variables in TCSS cover the rest).
"""

from __future__ import annotations

from datetime import datetime

from rich.text import Text

from remote.models import utc_now
from remote.printable import printable

#: State -> Rich style. Green: serving/usable; yellow: in progress; red: broken or gone.
STATE_STYLES: dict[str, str] = {
    "READY": "bold green",
    "ACTIVE": "bold green",
    "HEALTHY": "green",
    "CREATING": "yellow",
    "STARTING": "yellow",
    "RESTARTING": "yellow",
    "REIMAGING": "yellow",
    "REPAIRING": "yellow",
    "PROVISIONING": "yellow",
    "ACCEPTED": "cyan",
    "WAITING_FOR_RESOURCES": "cyan",
    "SUSPENDING": "magenta",
    "SUSPENDED": "magenta",
    "STOPPING": "magenta",
    "STOPPED": "magenta",
    "DELETING": "red",
    "PREEMPTED": "bold red",
    "TERMINATED": "red",
    "FAILED": "bold red",
    "UNHEALTHY_MAINTENANCE": "red",
    "TIMEOUT": "red",
    "UNHEALTHY_TENSORFLOW": "red",
}


def styled_state(state: str | None) -> Text:
    """``state`` as Rich text coloured by :data:`STATE_STYLES` (``-`` when missing)."""
    if not state:
        return Text("-", style="dim")
    return Text(printable(state), style=STATE_STYLES.get(state, ""))


def duration(seconds: float | None) -> str:
    """Compact duration: ``42s``, ``7m05s``, ``3h07m``, ``2d04h``; ``-`` for ``None``."""
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def countdown(seconds: float | None) -> Text:
    """Time left before termination as ``H:MM:SS``, red under 15 min, yellow under 1 h."""
    if seconds is None:
        return Text("-", style="dim")
    s = int(max(0, seconds))
    text = f"{s // 3600}:{(s % 3600) // 60:02d}:{s % 60:02d}"
    style = "bold red" if s < 900 else "yellow" if s < 3600 else "green"
    return Text(text, style=style)


def age(created: datetime | None, now: datetime | None = None) -> str:
    """Age since ``created`` in :func:`duration` form."""
    if created is None:
        return "-"
    return duration(((now or utc_now()) - created).total_seconds())


def when(value: datetime | None) -> str:
    """A UTC time as ``2025-06-01 14:05:31Z``; ``-`` for ``None``."""
    if value is None:
        return "-"
    return value.strftime("%Y-%m-%d %H:%M:%SZ")


def dash(value: object) -> str:
    """``str(value)`` made printable (:func:`remote.printable.printable`), or ``-`` for ``None``/empty."""
    return "-" if value is None or value == "" else printable(value)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 chip``, ``2 chips``, ``0 chips``: ``n`` and the noun in the number it needs (``plural``
    when adding ``s`` is wrong: ``count(2, "queued resource")`` is fine, ``count(2, "match", "matches")``)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


#: Queued-resource states after which a flex-start run's clock has stopped.
QR_ENDED_STATES = ("SUSPENDED", "SUSPENDING", "FAILED", "DELETING")


def qr_state_label(state: str, state_initiator: str | None) -> str:
    """A queued resource's state as ``nodes`` and the fleet both show it: ``SUSPENDED by SERVICE``."""
    return printable(state + (f" by {state_initiator}" if state_initiator else ""))


def qr_run_ended(state: str, termination_time: datetime | None) -> bool:
    """Whether a time-limited run is over (``ended`` in the TIME LEFT / LEFT column, not ``0m``)."""
    return state in QR_ENDED_STATES and termination_time is not None
