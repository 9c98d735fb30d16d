"""Sentences the console shows: numbers with their nouns in the right number."""

from __future__ import annotations

from console.flows.bench import Pricing
from console.render.format import count


def test_count_puts_the_noun_in_the_number_it_needs() -> None:
    assert count(1, "chip") == "1 chip"
    assert count(0, "chip") == "0 chips"
    assert count(4, "chip") == "4 chips"
    assert count(1, "more column") == "1 more column"
    assert count(3, "queued resource") == "3 queued resources"
    assert count(2, "match", "matches") == "2 matches"
    assert count(12_000, "token") == "12,000 tokens"


def test_a_one_chip_price_says_1_chip() -> None:
    assert Pricing(1.2, 1, "v5e", "on-demand").describe() == "$1.20 per chip-hour x 1 chip = $1.20/h (v5e, on-demand)"
    assert Pricing(1.2, 4, "v5e", "on-demand").describe() == "$1.20 per chip-hour x 4 chips = $4.80/h (v5e, on-demand)"


def test_the_swap_confirm_says_nothing_keeps_serving_when_no_container_runs() -> None:
    from console.render.swap_preview import confirm_message, steps_text
    from remote.container.spec import ContainerSpec
    from remote.container.swap import plan_swap
    from remote.models import Node

    node = Node("p", "z", "vllm-new", "READY", "v5litepod-1")
    new = ContainerSpec(name="vllm", image="vllm/vllm-tpu:latest", model="Qwen/Qwen3-8B")
    first = plan_swap(None, new)
    message = confirm_message(first, node, [])
    assert message.startswith("No container runs on vllm-new: the image is pulled, then vllm is started")
    assert "keeps serving" not in message and "replaced" not in message
    assert "keeps serving" not in steps_text(first, {}).plain
    swap = plan_swap(new, new.with_changes({"image": "vllm/vllm-tpu:v0.12.0"}))
    assert "pulled first while the old container keeps serving" in confirm_message(swap, node, [])
    assert "pull the image (the old container keeps serving)" in steps_text(swap, {}).plain


def test_with_no_config_the_cli_names_the_file_it_looked_for(tmp_path, monkeypatch, capsys) -> None:
    from console.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    looked = tmp_path / "tpu-console" / "config.toml"
    assert main(["nodes"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"tpu-console: no projects to list: pass --project P or add [[projects]] to {looked} "
        "(looked for there, not found)")
    assert main(["watch", "vllm-x"]) == 2
    assert f"add [[projects]] to {looked} (looked for there, not found)" in capsys.readouterr().err
