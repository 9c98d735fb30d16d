"""The history's launch detail names the user the console logged in as (m007's ssh_user)."""

from __future__ import annotations

from rich.console import Console

from console.render.history_detail import launch_detail
from store.records import Launch


def _text(launch: Launch) -> str:
    console = Console(width=160, record=True, color_system=None)
    console.print(launch_detail(launch, []))
    return console.export_text()


def test_the_detail_says_who_logged_in() -> None:
    launch = Launch(id=7, node="research-v5e-1", requested_at="2026-12-01T12:00:00Z", project="research-sandbox",
                    zone="us-central1-a", provisioning_model="on-demand", ssh_user="alice_example_com")
    assert "research-sandbox/us-central1-a · on-demand · logged in as alice_example_com" in _text(launch)
    older = Launch(id=8, node="vllm-a", requested_at="2026-12-01T12:00:00Z", project="p", zone="z",
                   provisioning_model="spot")
    assert "logged in as" not in _text(older)
