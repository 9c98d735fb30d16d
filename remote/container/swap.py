"""Hot swap: replace the serving container with a new spec while the TPU node stays.

A flex-start node cannot be extended and a new one means a new wait for capacity, so a swap
only ever touches the container: ``docker pull`` (while the old container keeps serving),
``docker rm -f``, ``docker run -d`` under the same name with ``--restart unless-stopped``.
Nothing here talks to the TPU API (this module does not import ``remote.tpu.api``).

Commands are argument vectors run through a :class:`CommandRunner` returning
``remote.ssh.CommandResult``; the SSH adapter joins them with :func:`shlex.join`, so no value can start a second shell command. Displays are
masked (``HF_TOKEN=***``); only the runner sees real values.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from remote.container.docker import container_id_of
from remote.container.spec import ContainerSpec, diff, display_argv
from remote.errors import RemoteError
from remote.ssh import CommandResult, run_command

#: Prefix of every remote docker command: never wait for a sudo password.
SUDO = ("sudo", "-n")


class CommandRunner(Protocol):
    """Runs one argument vector on the node: ``await runner(argv) -> CommandResult``.

    Raises ``RemoteError`` (``SshError``) when the command could not be run at all.
    """

    def __call__(self, argv: list[str]) -> Awaitable[CommandResult]: ...


@dataclass(frozen=True)
class SwapStep:
    """One command of a swap.

    Attributes:
        kind: ``pull``, ``rm`` or ``run``.
        argv: the real argument vector (secrets unmasked: for execution only).
        display: the command as shown, secrets masked.
    """

    kind: str
    argv: tuple[str, ...]
    display: str


@dataclass(frozen=True)
class SwapPlan:
    """The exact commands of a swap and what they change.

    Attributes:
        old: the running spec (kept for rollback), or ``None`` when no container ran.
        new: the spec to run.
        steps: pull, rm, run, in that order.
        changes: ``diff(old, new)``: ``[(field, old, new)]``, masked.
    """

    old: ContainerSpec | None
    new: ContainerSpec
    steps: tuple[SwapStep, ...]
    changes: tuple[tuple[str, str | None, str | None], ...] = ()

    @property
    def commands(self) -> list[str]:
        """The masked command lines, in order."""
        return [step.display for step in self.steps]


@dataclass(frozen=True)
class SwapResult:
    """How a swap ended.

    Attributes:
        ok: every step succeeded.
        plan: the plan executed.
        results: ``(step, result)`` for each step that ran.
        failed_step: the step that failed, or ``None``.
        error: what went wrong (the command's stderr, masked), or ``None``.
        container_id: the new container's id (``docker run -d`` output when it is hex, see
            :func:`~remote.container.docker.container_id_of`), or ``None``.
        old_container_removed: whether the old container was removed (``False`` after a failed pull).
    """

    ok: bool
    plan: SwapPlan
    results: tuple[tuple[SwapStep, CommandResult], ...] = ()
    failed_step: SwapStep | None = None
    error: str | None = None
    container_id: str | None = None
    old_container_removed: bool = False

    @property
    def rollback_spec(self) -> ContainerSpec | None:
        """The spec to return to (the one that ran before), or ``None``."""
        return self.plan.old


def _step(kind: str, argv: list[str], sudo: bool) -> SwapStep:
    full = [*SUDO, *argv] if sudo else list(argv)
    return SwapStep(kind, tuple(full), display_argv(full))


def plan_swap(old: ContainerSpec | None, new: ContainerSpec, *, sudo: bool = True) -> SwapPlan:
    """The commands that replace ``old`` by ``new``.

    1. ``sudo -n docker pull IMAGE`` while the old container keeps serving;
    2. ``sudo -n docker rm -f NAME`` (the old container's name, else the new one's);
    3. ``sudo -n docker run -d --name NAME --restart unless-stopped ... IMAGE vllm serve MODEL ...``.

    Args:
        old: the running spec, or ``None``.
        new: the spec to run (validated again here).
        sudo: prefix ``sudo -n`` (the sandbox and real TPU VMs need it).

    Raises:
        ValueError: ``new`` is invalid.
    """
    new.validate()
    names = [new.name] if old is None or old.name == new.name else [old.name, new.name]
    steps = [_step("pull", ["docker", "pull", new.image], sudo),
             _step("rm", ["docker", "rm", "-f", *names], sudo),
             _step("run", new.run_argv(), sudo)]
    return SwapPlan(old, new, tuple(steps), tuple(diff(old, new)))


def rollback_plan(previous: ContainerSpec, current: ContainerSpec | None = None, *,
                  sudo: bool = True) -> SwapPlan:
    """Re-run ``previous`` (the spec before a swap), with the same preview as any swap.

    The image is pinned to ``previous.image_digest`` when that is a pullable repo digest,
    so a floating tag that moved meanwhile still gives back the very image that ran.

    Args:
        previous: the spec to return to (``SwapResult.rollback_spec``).
        current: what runs now (the failed or unwanted spec), for the diff.
    """
    return plan_swap(current, previous.pinned(), sudo=sudo)


def _no_such_container(result: CommandResult) -> bool:
    return "no such container" in result.stderr.lower()


async def execute_swap(runner: CommandRunner, plan: SwapPlan, *,
                       on_step: Callable[[SwapStep, CommandResult | None], Any] | None = None) -> SwapResult:
    """Run the plan's steps in order, stopping at the first failure.

    A failed pull leaves the old container untouched; a failed run leaves ``plan.old`` for
    rollback and reports the command's stderr. ``rm -f`` of a container that does not
    exist counts as success.

    Args:
        runner: runs one argv on the node (see :func:`ssh_runner`).
        plan: from :func:`plan_swap` or :func:`rollback_plan`.
        on_step: called with ``(step, None)`` before each step and ``(step, result)`` after;
            may be a coroutine function.

    Returns:
        A :class:`SwapResult`; never raises for a failed command or a lost connection
        (``RemoteError`` becomes ``error``).
    """
    done: list[tuple[SwapStep, CommandResult]] = []
    removed = False
    mask = plan.new.mask_text

    async def notify(step: SwapStep, result: CommandResult | None) -> None:
        if on_step is not None:
            outcome = on_step(step, result)
            if inspect.isawaitable(outcome):
                await outcome

    for step in plan.steps:
        await notify(step, None)
        try:
            result = await runner(list(step.argv))
        except RemoteError as exc:
            return SwapResult(False, plan, tuple(done), step, mask(str(exc)), None, removed)
        result = CommandResult(result.exit_status, result.stdout, result.stderr, step.display)
        done.append((step, result))
        await notify(step, result)
        if result.exit_status != 0 and not (step.kind == "rm" and _no_such_container(result)):
            text = (result.stderr.strip() or result.stdout.strip()
                    or f"{step.kind} exited with status {result.exit_status}")
            return SwapResult(False, plan, tuple(done), step, mask(text), None, removed)
        if step.kind == "rm":
            removed = True
    run_out = done[-1][1].stdout.strip().splitlines() if done else []
    return SwapResult(True, plan, tuple(done), None, None, container_id_of(run_out[-1]) if run_out else None, removed)


#: Seconds each docker verb may take over SSH (a vLLM TPU image is several GB).
STEP_TIMEOUT_S = {"pull": 1800.0, "rm": 120.0, "run": 600.0}


def ssh_runner(conn: Any, *, label: str = "the node") -> CommandRunner:
    """A :class:`CommandRunner` over an open ``asyncssh.SSHClientConnection``.

    Each argv is sent as ``shlex.join(argv)`` (``remote.ssh.run_command``), the only form in
    which a value reaches the remote shell. Timeouts per docker verb: :data:`STEP_TIMEOUT_S`.

    Args:
        conn: the connection (``remote.ssh.connect``).
        label: the node, for messages.

    Raises (from the returned runner):
        SshTimeout, SshUnreachable, SudoPasswordRequired: see ``remote.ssh.run_command``.
    """
    async def run(argv: list[str]) -> CommandResult:
        sudo = argv[:2] == list(SUDO)
        body = argv[2:] if sudo else argv
        verb = body[1] if len(body) > 1 and body[0] == "docker" else ""
        return await run_command(conn, body, sudo=sudo, timeout_s=STEP_TIMEOUT_S.get(verb, 120.0), label=label)

    return run


__all__ = [
    "STEP_TIMEOUT_S",
    "CommandResult",
    "CommandRunner",
    "SwapPlan",
    "SwapResult",
    "SwapStep",
    "execute_swap",
    "plan_swap",
    "rollback_plan",
    "ssh_runner",
]
