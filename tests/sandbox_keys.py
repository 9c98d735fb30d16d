"""Test helper: a sandbox node whose workers publish no host keys in their guest attributes.

The sandbox's VMs publish their real host keys (as TPU VMs do), so the console pins them before
the first connection; tests of the unknown-key question (trust on first use) hide them first.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def host_keys_unpublished(sandbox: Any, node: str) -> Iterator[None]:
    """Remove the ``hostkeys`` guest attributes of every worker of ``node`` until the block ends."""
    world = sandbox.tpu_api.world
    name = next(k for k in world.guest_attributes if k.endswith(f"/nodes/{node}"))
    saved = world.guest_attributes[name]
    world.guest_attributes[name] = [[i for i in items if i.get("namespace") != "hostkeys"] for items in saved]
    try:
        yield
    finally:
        world.guest_attributes[name] = saved
