"""Everything that talks to the outside world, and the pure domain.

Keep this module light: it re-exports the models and errors only, so importing
``remote`` never loads asyncssh, httpx or the Google client. ``remote`` never
imports Textual or Rich.
"""

from __future__ import annotations

from remote.errors import RemoteError
from remote.models import FleetProblem, FleetSnapshot, Node, QueuedResource

__all__ = ["FleetProblem", "FleetSnapshot", "Node", "QueuedResource", "RemoteError"]
