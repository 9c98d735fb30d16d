"""Hostile outside text, and a sandbox world carrying it (built per test; the demo fleet stays clean).

``HOSTILE`` has Rich markup that raises (``[/x]``), a hyperlink, OSC 52 (clipboard write), CSI
``2J`` (clear screen), a newline that would forge a line, and NUL. Every display path must show
it as :data:`SHOWN`: the markup literally, no control byte, the newline as ``\\n``.
"""

from __future__ import annotations

from datetime import datetime

HOSTILE = "[/x][link=http://e.x]L[/link]\x1b]52;c;QQ==\x07\x1b[2J\nforged\x00!"
SHOWN = "[/x][link=http://e.x]L[/link]]52;c;QQ==[2J\\nforged!"
#: A node name from a hostile API (no ``/``: the name is the resource path's last part).
HOSTILE_NAME = "[b]evil\x1b[2J"
SHOWN_NAME = "[b]evil[2J"
CONTROL_BYTES = tuple(chr(c) for c in (*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f))


def assert_clean(text: str) -> None:
    """No control byte except tab and newline (the display's own line breaks)."""
    found = sorted({repr(ch) for ch in text if ch in CONTROL_BYTES or 0x80 <= ord(ch) <= 0x9f})
    assert not found, f"control bytes reached the display: {found}"


def hostile_world(now: datetime):
    """The demo world with :data:`HOSTILE` in ``vllm-v5e-a``'s health description and runtime version
    (its ``health`` too, which the client's enum turns into a known value), in ``qr-failed``'s failure message, and a READY node named :data:`HOSTILE_NAME`."""
    import copy

    from sandbox.fleet_data import default_world

    world = default_world(now)
    project = world.projects["inference-prod"]
    name = next(k for k in project.nodes if k.endswith("/vllm-v5e-a"))
    node = project.nodes[name]
    node.update(health=HOSTILE, healthDescription=HOSTILE, runtimeVersion=HOSTILE)
    qr = next(v for k, v in project.queued_resources.items() if k.endswith("/qr-failed"))
    qr["state"]["failedData"]["error"]["message"] = HOSTILE
    twin = copy.deepcopy(node)
    twin["name"] = name.rsplit("/", 1)[0] + "/" + HOSTILE_NAME
    twin["id"] = "4711000000000000999"
    twin.update(health="HEALTHY", runtimeVersion="v2-alpha-tpuv5-lite")
    world.add_node("inference-prod", twin)
    return world
