"""Tool calling read from how vLLM was started: the serve argv, or a container's docker inspect."""

from __future__ import annotations

from typing import Any

import pytest

from console.flows.bench import container_tool_calling
from remote.bench.smoke import tool_calling_enabled


@pytest.mark.parametrize(("argv", "enabled"), [
    (["vllm", "serve", "m", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"], True),
    (["vllm", "serve", "m", "--tool-call-parser=llama3_json", "--enable-auto-tool-choice"], True),
    (["vllm", "serve", "m", "--enable-auto-tool-choice"], False),               # no parser: vLLM refuses auto
    (["vllm", "serve", "m", "--tool-call-parser", "hermes"], False),            # parser alone: no auto choice
    (["vllm", "serve", "m", "--enable-auto-tool-choice", "--tool-call-parser"], False),   # no value
    (["vllm", "serve", "m", "--enable-auto-tool-choice", "--tool-call-parser="], False),
    (["vllm", "serve", "m"], False),
])
def test_tool_calling_needs_both_flags(argv: list[str], enabled: bool) -> None:
    assert tool_calling_enabled(argv) is enabled


def _inspect(entrypoint: list[str], cmd: list[str]) -> dict[str, Any]:
    return {"Id": "c0ffee", "Config": {"Entrypoint": entrypoint, "Cmd": cmd, "Env": []}}


def test_a_containers_flags_are_its_entrypoint_and_cmd() -> None:
    with_tools = _inspect(["vllm", "serve"], ["Qwen/Qwen3-8B", "--enable-auto-tool-choice", "--tool-call-parser",
                                              "hermes"])
    assert container_tool_calling(with_tools) is True
    assert container_tool_calling(_inspect(["vllm", "serve", "Qwen/Qwen3-8B"], [])) is False
    assert container_tool_calling(None) is None and container_tool_calling({}) is None
