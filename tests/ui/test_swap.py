"""The hot-swap and rollback screens driven by Pilot against the whole sandbox.

The sandbox is real: loopback TPU REST API (google-cloud-tpu client), one asyncssh server per
node whose ``docker`` runs simulated vLLM containers, and a SQLite history in a temp folder.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Input, OptionList, Static, TextArea

from console.app import TpuConsoleApp
from console.config import Config, load_config
from console.screens.confirm import ConfirmScreen
from console.screens.fleet import FleetScreen
from console.screens.swap.rollback import RollbackScreen
from console.screens.swap.screen import SwapScreen
from console.services import Services, build_services
from remote.container.spec import ContainerSpec
from remote.models import Node
from sandbox.runner import Sandbox
from tests.sandbox_keys import host_keys_unpublished
from tests.ui.conftest import FROZEN_NOW, text_of

NODE = "vllm-v5e-a"


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    """The whole sandbox in a temp state dir; vllm-v5e-a's container is ready within a second."""
    box = Sandbox(tmp_path / "sandbox", boot_s=2.0, fast_boot_s=0.3)
    box.start()
    yield box
    box.stop()


def _services(box: Sandbox) -> Services:
    return build_services(load_config(str(box.config_path)), db_path=box.db_path, sandbox=None)


async def _until(pilot: Any, cond: Callable[[], Any], what: str, timeout_s: float = 20.0) -> Any:
    for _ in range(int(timeout_s / 0.05)):
        value = cond()
        if value:
            return value
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def _open_from_fleet(pilot: Any) -> SwapScreen:
    """Select vllm-v5e-a in the fleet view and press ``s``."""
    fleet = await _until(pilot, lambda: isinstance(pilot.app.screen, FleetScreen) and pilot.app.screen.snapshot
                         and pilot.app.screen, "the fleet")
    table = fleet.query_one("#nodes", DataTable)
    names = [str(table.get_cell(row, "NAME")) for row in table.rows]
    table.move_cursor(row=names.index(NODE))
    await pilot.pause()
    await pilot.press("s")
    return await _loaded(pilot, SwapScreen)


async def _loaded(pilot: Any, kind: type[SwapScreen]) -> Any:
    return await _until(pilot, lambda: type(pilot.app.screen) is kind and (
        pilot.app.screen.base is not None or pilot.app.screen.problem) and pilot.app.screen, kind.__name__)


def _field(screen: SwapScreen, key: str) -> Input:
    return screen.query_one(f"#f-{key}", Input)


async def _set(pilot: Any, screen: SwapScreen, key: str, value: str) -> None:
    _field(screen, key).value = value
    await pilot.pause()
    await pilot.pause()


def _lint(screen: SwapScreen) -> list[str]:
    options = screen.query_one("#swap-lint", OptionList)
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


def _cmd(vm: Any) -> list[str]:
    return list(vm.docker.find("vllm").command)


def _docker_verbs(vm: Any) -> list[str]:
    """``pull``/``rm -f``/``run`` commands the VM received, in order (reads left out)."""
    out = []
    for line in vm.commands:
        argv = shlex.split(line)
        if argv[:3] == ["sudo", "-n", "docker"] and argv[3] in ("pull", "rm", "run"):
            out.append(" ".join(argv[3:5]) if argv[3] == "rm" else argv[3])
    return out


async def _confirm(pilot: Any, screen: SwapScreen) -> ConfirmScreen:
    await pilot.press("ctrl+s")
    modal = await _until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen) and pilot.app.screen,
                         "the confirm modal")
    commands = text_of(modal.query_one("#confirm-commands", Static), width=400)
    assert commands.splitlines() == [f"{i}. {c}" for i, c in enumerate(screen.plan.commands, 1)]
    return modal


async def test_swap_rollback_whole_flow_against_the_sandbox(sandbox: Sandbox) -> None:
    vm = sandbox.vms[NODE]
    first_id = vm.docker.find("vllm").id
    services = _services(sandbox)
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open_from_fleet(pilot)
        assert screen.problem is None
        assert _field(screen, "model").value == "meta-llama/Llama-3.1-8B-Instruct"
        assert _field(screen, "max-model-len").value == "32768"
        assert _field(screen, "tensor-parallel-size").value == "4"
        assert _field(screen, "image").value == "vllm/vllm-tpu:v0.29.1"
        assert vm.commands and not _docker_verbs(vm)           # reading changed nothing

        # 1. raise max-model-len: lint, diff and the exact commands follow the edit
        await _set(pilot, screen, "max-model-len", "131072")
        assert "--max-model-len: 32768 → 131072" in text_of(screen.query_one("#swap-diff", Static))
        commands = text_of(screen.query_one("#swap-commands", Static), width=400)
        assert "1. sudo -n docker pull vllm/vllm-tpu:v0.29.1" in commands
        assert "2. sudo -n docker rm -f vllm" in commands
        assert "--max-model-len 131072" in commands.splitlines()[2]
        assert any(line.startswith("WARNING compile-cache") for line in _lint(screen))
        assert not any("hbm-utilization" in line for line in _lint(screen))
        modal = await _confirm(pilot, screen)
        assert "vllm-v5e-a" in str(modal.title_text)
        await pilot.press("y")
        await _until(pilot, lambda: not isinstance(pilot.app.screen, (SwapScreen, ConfirmScreen)), "the swap")
        second = vm.docker.find("vllm")
        assert second.id != first_id
        assert _cmd(vm)[_cmd(vm).index("--max-model-len") + 1] == "131072"
        assert _docker_verbs(vm) == ["pull", "rm -f", "run"]
        node: Node = screen.node
        assert services.previous_specs[node.key].serve_flags["max-model-len"] == "32768"
        [launch, observed] = services.store.list_launches(node=NODE)
        assert launch.container_id == second.id and launch.max_model_len == 131072
        assert launch.replaced_launch_id == observed.id and observed.container_id == first_id
        assert observed.origin == "observed" and observed.outcome == "replaced"
        assert type(pilot.app.screen).__name__ in ("StartupScreen", "FleetScreen")

        # 2. utilization 0.95 on a v5e: the warning shows, swap anyway
        pilot.app.open_feature("swap", node)
        screen = await _loaded(pilot, SwapScreen)
        assert _field(screen, "max-model-len").value == "131072"    # read back from the new container
        await _set(pilot, screen, "gpu-memory-utilization", "0.95")
        [hbm] = [line for line in _lint(screen) if "hbm-utilization" in line]
        assert hbm.startswith("WARNING") and "RESOURCE_EXHAUSTED" in hbm
        await _confirm(pilot, screen)
        await pilot.press("y")
        await _until(pilot, lambda: not isinstance(pilot.app.screen, (SwapScreen, ConfirmScreen)), "the 2nd swap")
        third = vm.docker.find("vllm")
        assert third.id != second.id
        assert _cmd(vm)[_cmd(vm).index("--gpu-memory-utilization") + 1] == "0.95"

        # 3. roll back: the same preview and confirm re-run the previous flags
        pilot.app.open_feature("rollback", node)
        back = await _loaded(pilot, RollbackScreen)
        assert back.problem is None
        assert _field(back, "gpu-memory-utilization").value == "0.90"
        assert "--gpu-memory-utilization: 0.95 → 0.90" in text_of(back.query_one("#swap-diff", Static))
        await _confirm(pilot, back)
        await pilot.press("y")
        await _until(pilot, lambda: not isinstance(pilot.app.screen, (RollbackScreen, ConfirmScreen)), "rollback")
        restored = vm.docker.find("vllm")
        assert restored.id != third.id
        assert restored.command == second.command                    # the previous flags, exactly
        assert restored.image.startswith("vllm/vllm-tpu@sha256:")   # pinned to the image that ran
        assert _docker_verbs(vm) == ["pull", "rm -f", "run"] * 3

    # 4. after a restart (no session memory), rollback finds the previous spec in the history
    services.close()
    app = TpuConsoleApp(_services(sandbox))
    async with app.run_test(size=(200, 50)) as pilot:
        pilot.app.open_feature("rollback", node)
        back = await _loaded(pilot, RollbackScreen)
        assert back.problem is None and "from the history" in back.note
        assert _field(back, "gpu-memory-utilization").value == "0.95"     # what the rollback replaced
        assert back.plan is not None and "--gpu-memory-utilization: 0.90 → 0.95" in text_of(
            back.query_one("#swap-diff", Static))

    requests = list(sandbox.tpu_api.requests)
    # Only reads: GETs, and the startup view's getGuestAttributes (a read that the REST API spells POST).
    assert requests and [r for r in requests if r[0] != "GET" and ":getGuestAttributes" not in r[1]] == []
    assert not any(verb in path for _, path in requests for verb in (":stop", ":reset", ":start", ":delete"))


async def test_failed_pull_shows_docker_error_and_keeps_the_old_container(sandbox: Sandbox) -> None:
    vm = sandbox.vms[NODE]
    before = vm.docker.find("vllm")
    services = _services(sandbox)
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open_from_fleet(pilot)
        await _set(pilot, screen, "image", "vllm/vllm-tpu:no-such-tag")
        await _set(pilot, screen, "max-model-len", "16384")
        await _confirm(pilot, screen)
        await pilot.press("y")
        await _until(pilot, lambda: screen.result is not None and not screen.busy, "the failed swap")
        assert pilot.app.screen is screen
        problem = text_of(screen.query_one("#swap-problem", Static), width=400)
        assert "docker pull failed" in problem and "manifest unknown" in problem
        assert "still serving" in problem
        steps = text_of(screen.query_one("#swap-steps", Static), width=400).splitlines()
        assert steps[0].startswith("✗ pull") and steps[1].startswith("· remove")
        after = vm.docker.find("vllm")
        assert after is before and not after.exited(0)
        assert _docker_verbs(vm) == ["pull"]
        # nothing is lost: the edits are still there to fix and retry
        assert _field(screen, "image").value == "vllm/vllm-tpu:no-such-tag"
        assert _field(screen, "max-model-len").value == "16384"
        assert not screen.query_one("#swap-form").disabled
        assert services.previous_specs == {}
        # recorded before the pull ran, failed with the pull's error; the container it was to replace
        # (unknown to the history: recorded as observed) still serves, so it is not marked replaced
        [attempt, observed] = services.store.list_launches(node=NODE)
        assert (attempt.outcome, attempt.failure_kind) == ("failed", "docker pull failed")
        assert "manifest unknown" in attempt.failure_detail and attempt.replaced_launch_id == observed.id
        assert (observed.origin, observed.outcome) == ("observed", "unwatched")

        # nothing was swapped, so there is nothing to roll back to
        await pilot.press("escape")
        pilot.app.open_feature("rollback", screen.node)
        back = await _loaded(pilot, RollbackScreen)
        assert back.problem.startswith(f"Nothing to roll back to on {NODE}")
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert pilot.app.screen is back


async def test_unknown_host_key_asks_once_and_refusal_changes_nothing(sandbox: Sandbox) -> None:
    known_hosts = sandbox.known_hosts_path
    known_hosts.write_text("")
    vm = sandbox.vms[NODE]
    app = TpuConsoleApp(_services(sandbox))
    with host_keys_unpublished(sandbox, NODE):
        async with app.run_test(size=(200, 50)) as pilot:
            await _open_from_fleet_until_modal(pilot)
            modal = pilot.app.screen
            message = text_of(modal.query_one("#confirm-message", Static), width=400)
            assert "unknown host key SHA256:" in message and str(known_hosts) in message
            await pilot.press("n")
            screen = await _loaded(pilot, SwapScreen)
            assert "was not accepted" in screen.problem and screen.base is None
            # (the fleet's serving columns pin the other nodes' published keys meanwhile)
            assert "tpu.4711000000000000001-" not in known_hosts.read_text() and not _docker_verbs(vm)
            await pilot.press("escape")
            pilot.app.open_feature("swap", screen.node)
            await _until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen), "the host-key modal again")
            await pilot.press("y")
            screen = await _loaded(pilot, SwapScreen)
            assert screen.problem is None and _field(screen, "max-model-len").value == "32768"
            # recorded under gcloud's plain alias (no published key to suffix it with), the name watch,
            # bench and the startup view look up too
            assert [line.split()[:2] for line in known_hosts.read_text().splitlines()
                    if line.startswith("tpu.4711000000000000001-")] == [["tpu.4711000000000000001-0", "ssh-ed25519"]]


async def _open_from_fleet_until_modal(pilot: Any) -> None:
    fleet = await _until(pilot, lambda: isinstance(pilot.app.screen, FleetScreen) and pilot.app.screen.snapshot
                         and pilot.app.screen, "the fleet")
    table = fleet.query_one("#nodes", DataTable)
    names = [str(table.get_cell(row, "NAME")) for row in table.rows]
    table.move_cursor(row=names.index(NODE))
    await pilot.pause()
    await pilot.press("s")
    await _until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen), "the host-key modal")


# ---- the form alone (an injected spec: no SSH) -------------------------------------------------

SECRET = "hf_SecretSecret123456"


def fixed_node() -> Node:
    """vllm-v5e-a as the sandbox lists it (no SSH needed for form-only tests)."""
    from remote.models import WorkerEndpoint

    return Node(project="inference-prod", zone="us-west4-a", name=NODE, state="READY",
                accelerator_type="v5litepod-4", node_id="4711000000000000001",
                workers=(WorkerEndpoint(0, "10.11.0.2", "34.11.0.2"),))


def fixed_spec() -> ContainerSpec:
    """The v5e container with a secret in env and in the extra arguments."""
    return ContainerSpec.from_template(
        name="vllm", image="vllm/vllm-tpu:v0.29.1", model="meta-llama/Llama-3.1-8B-Instruct",
        args=["--max-model-len", "32768", "--gpu-memory-utilization", "0.90", "--max-num-batched-tokens", "2048",
              "--tensor-parallel-size", "4", "--api-key", "sk-abcdefabcdefabcdef12"],
        env={"HF_TOKEN": SECRET, "JAX_PLATFORMS": "tpu"}, volumes=["/dev/shm:/dev/shm"])


class _NoFleet:
    async def list_fleet(self) -> Any:
        from remote.models import FleetSnapshot

        return FleetSnapshot(nodes=(), queued_resources=(), problems=())


class FormApp(TpuConsoleApp):
    """The console with the swap form of :func:`fixed_spec` on top (no SSH, no TPU API)."""

    CSS_PATH = str(Path(__file__).resolve().parents[2] / "console" / "app.tcss")

    def __init__(self, tmp_path: Path, screen: Callable[[], SwapScreen] | None = None) -> None:
        super().__init__(Services(config=Config(), fleet=_NoFleet(), db_path=tmp_path / "history.db",
                                  clock=lambda: FROZEN_NOW))
        self.make_screen = screen or (lambda: SwapScreen(fixed_node(), spec=fixed_spec()))

    def on_mount(self) -> None:
        super().on_mount()
        self.call_later(self.push_screen, self.make_screen())


async def test_invalid_values_disable_the_swap_with_the_reason(tmp_path: Path) -> None:
    app = FormApp(tmp_path)
    async with app.run_test(size=(180, 50)) as pilot:
        screen = await _loaded(pilot, SwapScreen)
        assert screen.plan is not None
        await _set(pilot, screen, "max-model-len", "abc")
        await _set(pilot, screen, "gpu-memory-utilization", "1.5")
        assert screen.plan is None
        assert "max-model-len must be a positive integer (tokens), got 'abc'" in text_of(
            screen.query_one("#e-max-model-len", Static))
        assert "gpu-memory-utilization must be a fraction in (0, 1], got '1.5'" in text_of(
            screen.query_one("#e-gpu-memory-utilization", Static))
        assert _field(screen, "max-model-len").has_class("-invalid")
        problem = text_of(screen.query_one("#swap-problem", Static))
        assert problem.startswith("Swap disabled") and "got 'abc'" in problem and "got '1.5'" in problem
        assert text_of(screen.query_one("#swap-commands", Static)).strip() == ""
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert pilot.app.screen is screen                              # no confirm: nothing can run
        await _set(pilot, screen, "max-model-len", "65536")
        assert screen.plan is None and not _field(screen, "max-model-len").has_class("-invalid")
        await _set(pilot, screen, "gpu-memory-utilization", "0.9")
        assert screen.plan is not None and not screen.query_one("#swap-problem").display
        await _set(pilot, screen, "extra", "--enable-thing 'unclosed")
        assert screen.plan is None and "No closing quotation" in text_of(screen.query_one("#e-extra", Static))
        await _set(pilot, screen, "extra", "--max-model-len 5")
        assert "--max-model-len has its own field" in text_of(screen.query_one("#e-extra", Static))


async def test_lint_fix_applies_with_one_key_and_secrets_stay_masked(tmp_path: Path) -> None:
    app = FormApp(tmp_path)
    async with app.run_test(size=(180, 50)) as pilot:
        screen = await _loaded(pilot, SwapScreen)
        env = screen.query_one("#f-env", TextArea)
        assert env.text == "HF_TOKEN=***\nJAX_PLATFORMS=tpu"
        assert _field(screen, "extra").value == "--api-key '***'"
        assert [f.rule_id for f in screen.findings] == ["compile-cache"]
        await _set(pilot, screen, "kv-cache-dtype", "fp8")
        assert [f.rule_id for f in screen.findings] == ["fp8-kv-cache", "compile-cache"]
        lint = screen.query_one("#swap-lint", OptionList)
        lint.focus()
        lint.highlighted = 1
        await pilot.press("f")                                          # the compile-cache fix
        await pilot.pause()
        assert [f.rule_id for f in screen.findings] == ["fp8-kv-cache"]
        assert "VLLM_XLA_CACHE_PATH=/root/.cache/vllm/xla_cache" in env.text
        assert "/mnt/disks/persist/xla-cache:/root/.cache/vllm/xla_cache" in screen.query_one("#f-volumes",
                                                                                          TextArea).text
        screen.query_one("#swap-lint", OptionList).highlighted = 0
        await pilot.press("enter")                                      # enter applies too: unset fp8
        await pilot.pause()
        assert screen.findings == [] and _field(screen, "kv-cache-dtype").value == ""
        # the secrets went through two refills: real in memory, masked on screen
        assert screen.spec.env["HF_TOKEN"] == SECRET and "HF_TOKEN=***" in env.text
        assert screen.spec.extra_args == ("--api-key", "sk-abcdefabcdefabcdef12")
        shown = text_of(screen.query_one("#swap-commands", Static), width=600)
        assert SECRET not in shown and "sk-abcdef" not in shown and "'HF_TOKEN=***'" in shown
        # a new secret value typed over the mask is used, and masked in the commands
        env.text = "HF_TOKEN=hf_NewSecretValue9999\nJAX_PLATFORMS=tpu"
        await pilot.pause()
        assert screen.spec.env["HF_TOKEN"] == "hf_NewSecretValue9999"
        assert "hf_New" not in text_of(screen.query_one("#swap-commands", Static), width=600)
        assert any(f == "env.HF_TOKEN" and a == "*** (changed)" for f, _, a in screen.plan.changes)
        _field(screen, "kv-cache-dtype").focus()
        await pilot.press("ctrl+y")                                     # copy, from inside a field too
        await pilot.pause()
        copied = pilot.app.clipboard
        assert copied.splitlines() == list(screen.plan.commands) and "docker run" in copied
        assert "hf_New" not in copied and SECRET not in copied and "'HF_TOKEN=***'" in copied
        assert any(n.message.startswith(f"Copied the {len(screen.plan.commands)} swap commands")
                   for n in pilot.app._notifications)


async def test_lint_errors_require_typing_the_node_name(tmp_path: Path) -> None:
    app = FormApp(tmp_path)
    async with app.run_test(size=(180, 50)) as pilot:
        screen = await _loaded(pilot, SwapScreen)
        await _set(pilot, screen, "tensor-parallel-size", "3")
        assert screen.findings[0].rule_id == "tp-chips" and screen.findings[0].severity == "error"
        await pilot.press("ctrl+s")
        modal = await _until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen) and pilot.app.screen,
                             "the confirm modal")
        assert modal.query_one("#confirm-yes").disabled
        await pilot.press("y")                                          # typed into the box, not a confirm
        await pilot.pause()
        assert pilot.app.screen is modal and not modal.allowed
        modal.query_one("#confirm-typed", Input).value = NODE
        await pilot.pause()
        assert not modal.query_one("#confirm-yes").disabled
        await pilot.press("escape")
        await pilot.pause()
        assert pilot.app.screen is screen and not screen.busy


async def test_typing_right_after_the_form_opens_keeps_every_key(tmp_path: Path) -> None:
    """The first field (the image) is focused with its value selected: keys typed at once replace it,
    none lost; Tab goes on to the next field (the model), in the form's order."""
    app = FormApp(tmp_path)
    async with app.run_test(size=(180, 50)) as pilot:
        screen = await _loaded(pilot, SwapScreen)
        fields = [w for w in screen.query_one("#swap-form").query("Input")]
        assert fields[0] is _field(screen, "image") and _field(screen, "image").has_focus
        await pilot.press(*"vllm/vllm-tpu:v0.12.0")   # no pause between the form opening and the keys
        for _ in range(20):
            await pilot.pause()
        assert _field(screen, "image").value == "vllm/vllm-tpu:v0.12.0"
        assert screen.spec is not None and screen.spec.image == "vllm/vllm-tpu:v0.12.0"
        await pilot.press("tab")
        assert _field(screen, "model").has_focus


async def test_typing_at_100_keys_per_second_keeps_every_key(tmp_path: Path) -> None:
    """Keys arrive as the terminal driver delivers them (posted to the app every 10 ms, without
    waiting for the form to catch up): every character lands, in order, in each field typed into."""
    from textual import events

    async def type_at_100_per_s(text: str) -> None:
        for char in text:
            app.post_message(events.Key(char, char))
            await asyncio.sleep(0.01)

    app = FormApp(tmp_path)
    async with app.run_test(size=(180, 50)) as pilot:
        screen = await _loaded(pilot, SwapScreen)
        _field(screen, "max-model-len").focus()               # (the form opens on its first field, the image)
        await pilot.pause()
        await type_at_100_per_s("16384")                      # replaces the selected value
        extra = _field(screen, "extra")
        extra.focus()
        extra.value = ""
        await pilot.pause()
        typed = "--enable-prefix-caching --swap-space 16 --disable-log-requests --seed 1234567890"
        await type_at_100_per_s(typed)
        for _ in range(50):
            await pilot.pause(0.02)
            if extra.value == typed:
                break
        assert _field(screen, "max-model-len").value == "16384"
        assert extra.value == typed
        assert screen.spec is not None, screen.problem
        assert screen.spec.flag("max-model-len") == "16384" and "--swap-space" in screen.spec.extra_args


async def test_going_to_the_fleet_asks_before_dropping_the_forms_edits(sandbox: Sandbox) -> None:
    """``:fleet`` over an unchanged form just goes; over edits it asks, and "Keep editing" keeps them."""
    app = TpuConsoleApp(_services(sandbox))
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await _open_from_fleet(pilot)
        assert not screen.has_unsaved_edits()
        await _set(pilot, screen, "max-model-len", "16384")
        assert screen.has_unsaved_edits()
        app.set_focus(None)                                           # (in a field, ":" is typed there)
        await pilot.press("colon", *"fleet", "enter")
        ask = await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen, "the question")
        assert "Discard the swap form's edits for vllm-v5e-a?" in text_of(ask.query_one("#confirm-title"))
        await pilot.press("escape")                                   # keep editing
        await _until(pilot, lambda: app.screen is screen, "back on the form")
        assert _field(screen, "max-model-len").value == "16384"
        app.set_focus(None)
        await pilot.press("colon", *"fleet", "enter")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question again")
        await pilot.press("y")                                        # discard
        await _until(pilot, lambda: isinstance(app.screen, FleetScreen), "the fleet")
        screen = await _open_from_fleet(pilot)                        # an unchanged form: no question
        app.set_focus(None)
        await pilot.press("colon", *"fleet", "enter")
        await _until(pilot, lambda: isinstance(app.screen, FleetScreen), "the fleet without a question")


async def test_the_swap_screen_and_the_dry_run_verb_report_the_same_findings(sandbox: Sandbox, tmp_path: Path,
                                                                             capsys: Any) -> None:
    """One input through both doors: a history file that is not SQLite and max-model-len 200000 on a
    model whose limit (read from its container) is 131072. Both report the same findings, the
    max-model-len-model ERROR among them, and the screen's confirm asks for the typed name."""
    import json

    from console.cli import main

    bad = tmp_path / "not-a-db.sqlite"
    bad.write_text("this is not SQLite\n" * 100)
    code = await asyncio.to_thread(main, ["swap", NODE, "--set", "max-model-len=200000", "--dry-run", "--json",
                                          "--config", str(sandbox.config_path), "--db", str(bad)])
    out, err = capsys.readouterr()
    report = json.loads(out)
    verb_findings = [(f["severity"], f["rule_id"], f["message"]) for f in report["plan"]["lint"]]
    assert code == 1 and ("error", "max-model-len-model") in [f[:2] for f in verb_findings]
    assert "the history could not be opened" in report["history"] and str(bad) in report["history"]
    assert "the history could not be opened" in err
    assert not _docker_verbs(sandbox.vms[NODE])

    services = build_services(load_config(str(sandbox.config_path)), db_path=bad, sandbox=None)
    app = TpuConsoleApp(services)
    async with app.run_test(size=(200, 50)) as pilot:
        app.open_feature("swap", await _node(services))
        screen = await _loaded(pilot, SwapScreen)
        await _set(pilot, screen, "max-model-len", "200000")
        screen_findings = [(f.severity, f.rule_id, f.message) for f in screen.findings]
        assert screen_findings == verb_findings
        modal = await _confirm(pilot, screen)
        assert modal.require_text == NODE                       # an ERROR: the typed confirm
        assert any("History not used" in n.message for n in app._notifications)
    services.close()


async def _node(services: Services) -> Node:
    snapshot = await services.fleet.list_fleet()
    return next(n for n in snapshot.nodes if n.name == NODE)
