"""Keys typed faster than the screen answers (a fast typist, a paste through tmux) land where they were typed."""

from __future__ import annotations

import asyncio

from textual import events
from textual.widgets import Input

from console.app import TpuConsoleApp
from console.services import Services
from tests.ui.test_narrow import _fleet


async def test_keys_right_after_a_tab_go_to_the_next_field(services: Services) -> None:
    """Each key posted 10 ms after the last, as the terminal driver delivers them: the text typed after a
    tab goes to the field the tab moved to (it went to the field being left: "us-east5-b<tab>v6e-1" gave
    the zone "s-east5-bv" and the type "6e-1")."""
    from console.screens.request import RequestScreen

    app = TpuConsoleApp(services)
    async with app.run_test(size=(160, 45)) as pilot:
        await _fleet(pilot)
        await pilot.press("n")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, RequestScreen)
        for char in "demo-walk\t\tus-east5-b\tv6e-1\tv5":
            app.post_message(events.Key("tab", None) if char == "\t" else events.Key(char, char))
            await asyncio.sleep(0.01)
        fields = ("name", "project", "zone", "accelerator_type")
        expected = {"name": "demo-walk", "project": services.config.projects[0].id, "zone": "us-east5-b",
                    "accelerator_type": "v6e-1"}
        for _ in range(100):
            await pilot.pause(0.02)
            if {f: form.query_one(f"#rq-{f}", Input).value for f in fields} == expected:
                break
        assert {f: form.query_one(f"#rq-{f}", Input).value for f in fields} == expected
        assert form.value("provisioning_model") == "flex-start"      # the Select after it took no letters
