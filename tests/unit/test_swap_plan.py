"""Swap plan and executor with a recording runner: order, stop at first failure, masking, rollback."""

from __future__ import annotations

import ast
import json
import shlex
from pathlib import Path

import pytest

from remote.container.spec import ContainerSpec
from remote.container.swap import execute_swap, plan_swap, rollback_plan
from remote.errors import SshError
from remote.ssh import CommandResult

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "docker-inspect-vllm-tpu.json"
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"


class Recorder:
    """Answers each docker verb with a canned result and records every argv."""

    def __init__(self, answers: dict[str, CommandResult | Exception] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[list[str]] = []

    async def __call__(self, argv: list[str]) -> CommandResult:
        self.calls.append(argv)
        verb = argv[3]
        answer = self.answers.get(verb, CommandResult(0, "f00dfeed" * 8 + "\n" if verb == "run" else "", "",
                                                      shlex.join(argv)))
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def old() -> ContainerSpec:
    return ContainerSpec.from_inspect(json.loads(FIXTURE.read_text()))


@pytest.fixture
def new(old) -> ContainerSpec:
    return old.with_changes({"max-model-len": "131072"}, image="vllm/vllm-tpu:v0.11.1")


def test_plan_pulls_first_then_removes_then_runs(old, new):
    plan = plan_swap(old, new)
    assert [s.kind for s in plan.steps] == ["pull", "rm", "run"]
    assert list(plan.steps[0].argv) == ["sudo", "-n", "docker", "pull", "vllm/vllm-tpu:v0.11.1"]
    assert list(plan.steps[1].argv) == ["sudo", "-n", "docker", "rm", "-f", "vllm"]
    assert list(plan.steps[2].argv) == ["sudo", "-n", *new.run_argv()]
    assert plan.commands[0] == "sudo -n docker pull vllm/vllm-tpu:v0.11.1"
    assert plan.commands[2].startswith("sudo -n docker run -d --name vllm --restart unless-stopped ")
    assert HF not in plan.commands[2] and "'HF_TOKEN=***'" in plan.commands[2]
    assert f"HF_TOKEN={HF}" in plan.steps[2].argv          # the real value only in the argv
    assert ("--max-model-len", "32768", "131072") in plan.changes
    assert ("image", "vllm/vllm-tpu:nightly", "vllm/vllm-tpu:v0.11.1") in plan.changes


def test_plan_removes_both_names_when_the_name_changes(old):
    plan = plan_swap(old, old.with_changes({"name": "vllm-b"}))
    assert list(plan.steps[1].argv)[-3:] == ["-f", "vllm", "vllm-b"]
    assert plan_swap(None, old).steps[1].argv[-1] == "vllm"


def test_plan_refuses_an_invalid_spec(old):
    from dataclasses import replace
    with pytest.raises(ValueError, match="gpu-memory-utilization"):
        plan_swap(old, replace(old, serve_flags={"gpu-memory-utilization": "2"}))


async def test_successful_swap_runs_three_commands_and_reports_the_container(old, new):
    runner, seen = Recorder(), []
    result = await execute_swap(runner, plan_swap(old, new), on_step=lambda s, r: seen.append((s.kind, r is None)))
    assert result.ok and result.container_id == "f00dfeed" * 8 and result.old_container_removed
    assert [c[3] for c in runner.calls] == ["pull", "rm", "run"]
    assert seen == [("pull", True), ("pull", False), ("rm", True), ("rm", False), ("run", True), ("run", False)]
    assert all(HF not in r.command for _, r in result.results)


async def test_only_hex_from_docker_run_is_taken_as_the_container_id(old, new):
    """Whatever else a node prints after ``docker run -d`` (an ESC byte, markup) is no container id."""
    from remote.container.docker import container_id_of

    for printed in ("f00dfeed" * 8 + "\x1b[2J", "[b]evil", "F00DFEED" * 8, "f00d", "f00dfeed" * 9):
        runner = Recorder({"run": CommandResult(0, printed + "\n", "", "x")})
        result = await execute_swap(runner, plan_swap(old, new))
        assert result.ok and result.container_id is None, printed
    assert container_id_of(" " + "ab12" * 16 + "\n") == "ab12" * 16 and container_id_of("0123456789ab") == "0123456789ab"
    assert container_id_of(None) is None and container_id_of(7) is None


async def test_failed_pull_leaves_the_old_container_untouched(old, new):
    err = "Error response from daemon: manifest for vllm/vllm-tpu:v9 not found: manifest unknown"
    runner = Recorder({"pull": CommandResult(1, "", err + "\n", "x")})
    result = await execute_swap(runner, plan_swap(old, new))
    assert not result.ok and result.failed_step.kind == "pull" and result.error == err
    assert [c[3] for c in runner.calls] == ["pull"]            # no rm, no run
    assert not result.old_container_removed and result.rollback_spec == old


async def test_failed_run_shows_stderr_masked_and_keeps_the_old_spec(old, new):
    err = f"docker: invalid env HF_TOKEN={HF}: exec: \"vllm\": not found"
    result = await execute_swap(Recorder({"run": CommandResult(127, "", err, "x")}), plan_swap(old, new))
    assert not result.ok and result.failed_step.kind == "run" and result.old_container_removed
    assert HF not in result.error and "HF_TOKEN=***" in result.error and "not found" in result.error
    assert result.rollback_spec is old and result.container_id is None


async def test_rm_of_a_missing_container_counts_as_done(old):
    runner = Recorder({"rm": CommandResult(1, "", "Error response from daemon: No such container: vllm", "x")})
    result = await execute_swap(runner, plan_swap(None, old))
    assert result.ok and [c[3] for c in runner.calls] == ["pull", "rm", "run"]


async def test_a_lost_connection_becomes_an_error_not_an_exception(old, new):
    result = await execute_swap(Recorder({"rm": SshError(f"dropped while running HF_TOKEN={HF}")}),
                                plan_swap(old, new))
    assert not result.ok and result.failed_step.kind == "rm" and HF not in result.error


async def test_async_on_step_is_awaited(old, new):
    seen = []

    async def on_step(step, res):
        seen.append(step.kind)

    await execute_swap(Recorder(), plan_swap(old, new), on_step=on_step)
    assert seen == ["pull", "pull", "rm", "rm", "run", "run"]


def test_rollback_reruns_the_previous_spec_pinned(old, new):
    previous = ContainerSpec.from_inspect(json.loads(FIXTURE.read_text()),
                                          {"RepoDigests": ["vllm/vllm-tpu@sha256:" + "a" * 64]})
    plan = rollback_plan(previous, new)
    assert plan.old is new
    assert plan.steps[0].argv[-1] == "vllm/vllm-tpu@sha256:" + "a" * 64
    assert ("--max-model-len", "131072", "32768") in plan.changes
    unpinned = rollback_plan(old)   # the local image id is not pullable: keep the tag
    assert unpinned.steps[0].argv[-1] == "vllm/vllm-tpu:nightly"


def test_swap_module_never_imports_the_tpu_api():
    tree = ast.parse((Path(__file__).resolve().parents[2] / "remote" / "container" / "swap.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any((m or "").startswith("remote.tpu") for m in imported)
