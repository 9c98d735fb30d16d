"""A simulated TPU VM: an asyncssh server on loopback whose ``docker`` drives a simulated vLLM.

One :class:`SandboxVm` per sandbox node. It has its own ed25519 host key (so clients verify it
like a real node through a known-hosts line), authorizes one client public key (any user name),
and runs commands through a tiny shell: ``&&``, ``||``, ``;``, ``2>&1``, ``$$`` (the command's
simulated PID), ``exec``, ``sudo -n``, ``docker`` (see :mod:`sandbox.docker_sim`), ``echo``,
``true``, ``hostname``, ``cat /proc/PID/cmdline`` and ``kill [-TERM] PID`` (root's processes
need sudo) for running ``docker logs -f`` followers. Local port forwards
to ``127.0.0.1:<container_port>`` reach the node's sandbox OpenAI-compatible server.

Options reproduce failures the console must explain: ``sudo_password_required`` and
``docker_missing``; ``burst_lines_per_s``/``burst_s`` prefix each container's log with a burst
of vLLM metrics lines (for benches).
"""

from __future__ import annotations

import asyncio
import dataclasses
import shlex
from collections.abc import Callable, Sequence
from typing import Any

import asyncssh

from sandbox.docker_sim import DEFAULT_IMAGES, SimContainer, SimDocker, normalize_ref


def split_shell(command: str) -> list[tuple[str, str]]:
    """Split ``command`` at unquoted ``&&``, ``||``, ``;`` and newlines.

    Returns:
        ``[(operator before the segment, segment text)]``; the first operator is ``";"``.
    """
    parts: list[tuple[str, str]] = []
    op, start, i, quote = ";", 0, 0, ""
    while i < len(command):
        ch = command[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "\\":
            i += 2
            continue
        elif command.startswith(("&&", "||"), i) or ch in ";\n":
            parts.append((op, command[start:i]))
            op = ";" if ch in ";\n" else command[i:i + 2]
            i += 1 if ch in ";\n" else 2
            start = i
            continue
        i += 1
    parts.append((op, command[start:]))
    return [(o, s) for o, s in parts if s.strip()]


def _refuse_unsupported(segment: str) -> None:
    """Raise ``ValueError`` for unquoted pipes, redirections (other than ``2>&1``) and substitutions."""
    quote, i = "", 0
    while i < len(segment):
        ch = segment[i]
        if quote == "'":
            quote = "" if ch == "'" else quote
        elif ch == "\\":
            i += 1
        elif ch in "`" or segment.startswith("$(", i):
            raise ValueError("command substitution is not supported")
        elif quote == '"':
            quote = "" if ch == '"' else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "|<>" and not segment.startswith("2>&1", i - 1 if i else 0):
            raise ValueError("pipes and redirections (other than 2>&1) are not supported")
        i += 1


class _Server(asyncssh.SSHServer):
    def __init__(self, vm: SandboxVm) -> None:
        self.vm = vm
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        self.vm._connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.vm._connections.discard(self.conn)

    def begin_auth(self, username: str) -> bool:
        assert self.conn is not None
        if self.vm.login_keys is None:
            self.conn.set_authorized_keys(self.vm._authorized)
        else:                                 # OS Login: only this user's imported keys, only its POSIX name
            keys = self.vm.login_keys(username)
            self.conn.set_authorized_keys(asyncssh.import_authorized_keys("".join(f"{k}\n" for k in keys)))
        self.vm.auth_users.append(username)
        return True

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> Any:
        if dest_host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0") or dest_port != self.vm.container_port:
            return False                      # nothing else listens inside the simulated VM
        if not self.vm.openai_port or self.conn is None:      # nothing listens: sshd's words for it
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "Connection refused")
        return self._forward(self.conn, self.vm.openai_port)

    @staticmethod
    async def _forward(conn: asyncssh.SSHServerConnection, port: int) -> Any:
        """The channel to the OpenAI server; refused in sshd's words (``Connection refused``, not
        asyncssh's ``[Errno 111] Connect call failed ...``) when it has stopped."""
        try:
            return await conn.forward_connection("127.0.0.1", port)
        except asyncssh.ChannelOpenError:
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "Connection refused") from None


class SandboxVm:
    """One simulated TPU VM worker reachable over SSH on 127.0.0.1.

    Args:
        node_name: the node's name (messages, hostname).
        accelerator_type: e.g. ``v5litepod-8``; shapes the simulated engine's figures.
        authorized_client_key: the client public key (``SSHKey`` or OpenSSH text) to accept.
        container_port: vLLM's port inside the VM (forwards to it reach the OpenAI server).
        boot_s: wall seconds a ready boot takes.
        known_images: ref -> repo digest that ``docker pull`` can fetch (default: vllm-tpu tags).
        sudo_password_required: every ``sudo -n`` fails with "a password is required".
        docker_missing: ``docker`` is "command not found".
        burst_lines_per_s, burst_s: put a burst of metrics lines before each container's startup log.
        burst_chunk_bytes: in the middle of the burst, this many bytes of long lines due at the same
            instant, so ``docker logs`` writes them at once (one big chunk for the client to read).
        burst_huge_lines, burst_huge_line_bytes: that many lines of that many bytes spread evenly
            through the burst (a model config or an args dump printed on one line).
        burst_cr_line_bytes: in the middle of the burst, one progress bar of this many bytes redrawn
            with carriage returns on one line (``docker run -t`` + tqdm).
        plan_for: ``(serve_argv, accelerator_type, boot_s) -> plan`` (default: the engine's ``plan_startup``).
        openai_server: the node's OpenAI-compatible server, not started yet (default: a new
            ``sandbox.openai_server.SandboxOpenAIServer``); the VM starts and stops it.
        worker: this VM's worker index in a multi-host slice; a worker above 0 runs the
            container with its own worker log (``sandbox.engine.worker_plan``) and serves nothing.
        login_keys: an OS Login node: ``user name -> OpenSSH key lines`` it may log in with
            (:meth:`sandbox.google_apis.SandboxGoogleApis.authorized_keys`); ``authorized_client_key``
            then counts for nothing. ``None``: any user name with ``authorized_client_key``.

    Attributes:
        host_public_key: the host key in OpenSSH form (``ssh-ed25519 AAAA...``).
        ssh_port / openai_port: ports after :meth:`start`.
        commands: every command line received, in order.
        auth_users: every user name a client tried to log in as, in order.
        docker: the simulated daemon (containers, images).
    """

    def __init__(self, *, node_name: str, accelerator_type: str, authorized_client_key: asyncssh.SSHKey | str,
                 container_port: int = 8000, boot_s: float = 20.0, known_images: dict[str, str] | None = None,
                 sudo_password_required: bool = False, docker_missing: bool = False,
                 burst_lines_per_s: int = 0, burst_s: float = 0.0, burst_chunk_bytes: int = 0,
                 burst_huge_lines: int = 0, burst_huge_line_bytes: int = 250_000, burst_cr_line_bytes: int = 0,
                 plan_for: Callable[[list[str], str, float], Any] | None = None,
                 openai_server: Any = None, worker: int = 0,
                 login_keys: Callable[[str], list[str]] | None = None) -> None:
        self.node_name = node_name
        self.worker = worker
        self.accelerator_type = accelerator_type
        self.container_port = container_port
        self.boot_s = boot_s
        self.sudo_password_required = sudo_password_required
        self.docker_missing = docker_missing
        self.burst_lines_per_s = burst_lines_per_s
        self.burst_s = burst_s
        self.burst_chunk_bytes = burst_chunk_bytes
        self.burst_huge = (burst_huge_lines, burst_huge_line_bytes, burst_cr_line_bytes)
        key = authorized_client_key
        text = key if isinstance(key, str) else key.export_public_key().decode()
        self._authorized = asyncssh.import_authorized_keys(text.strip() + "\n")
        self._host_key = asyncssh.generate_private_key("ssh-ed25519")
        self.host_public_key = self._host_key.export_public_key().decode().strip()
        self.login_keys = login_keys
        self.auth_users: list[str] = []
        self._plan_for = plan_for
        self._openai = openai_server
        self._serving_id: str | None = None
        self._server: Any = None
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self.ssh_port = 0
        self.openai_port = 0
        self.commands: list[str] = []
        self._next_pid = 4000
        self._followers: dict[int, tuple[list[str], asyncio.Future[Any]]] = {}
        self.docker = SimDocker(plan_for=self._plan, known_images=known_images or DEFAULT_IMAGES,
                                on_ready=self._on_ready, on_stopped=self._on_stopped)

    @property
    def openai_server(self) -> Any:
        """The node's OpenAI-compatible server (``SandboxOpenAIServer``; its ``stats`` say what it served)."""
        return self._openai

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> int:
        """Start the SSH server (and the node's OpenAI server); returns the SSH port."""
        if self._openai is None:
            from sandbox.openai_server import SandboxOpenAIServer

            self._openai = SandboxOpenAIServer("127.0.0.1", 0)
        if self._openai is not None:
            port = self._openai.start()
            self.openai_port = int(await port if asyncio.iscoroutine(port) else port)
        self._server = await asyncssh.create_server(
            lambda: _Server(self), "127.0.0.1", 0, server_host_keys=[self._host_key],
            process_factory=self._handle, encoding="utf-8", errors="replace",
            keepalive_interval=0, allow_scp=False, line_editor=False)
        self.ssh_port = self._server.sockets[0].getsockname()[1]
        return self.ssh_port

    async def stop(self) -> None:
        """Stop serving, drop every connection and every container's timers."""
        for box in list(self.docker.containers.values()):
            for timer in box.timers:
                timer.cancel()
            box.removed.set()
        self.drop_connections()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if self._openai is not None:
            result = self._openai.stop()
            if asyncio.iscoroutine(result):
                await result

    def known_hosts_line(self, alias: str) -> str:
        """``<alias> ssh-ed25519 AAAA...`` for a known-hosts file (gcloud alias or ``[127.0.0.1]:port``)."""
        return f"{alias} {self.host_public_key}\n"

    def drop_connections(self) -> None:
        """Abort every client connection at once (a network drop, for reconnect tests)."""
        for conn in list(self._connections):
            conn.abort()
        self._connections.clear()

    async def boot_container(self, serve_argv: Sequence[str], image: str = "vllm/vllm-tpu:latest", *,
                             name: str = "vllm", env: Sequence[str] = ()) -> str:
        """Start a container as if ``docker run -d --name NAME --privileged --net host ...`` ran.

        Returns:
            The new container id (64 hex).
        """
        ref = normalize_ref(image)
        self.docker.local.setdefault(ref, self.docker.digest_known(ref) or "sha256:" + "0" * 64)
        box = self.docker.start_container(
            name=name, image=image, command=["vllm", "serve", *serve_argv], env=list(env),
            binds=["/dev/shm:/dev/shm"], network="host", restart="unless-stopped", privileged=True,
            shm_size=16 * 1024**3)
        return box.id

    # --- engine and OpenAI server -------------------------------------------------------

    def _plan(self, serve_argv: list[str], image: str = "") -> Any:
        if self._plan_for is not None:
            plan = self._plan_for(serve_argv, self.accelerator_type, self.boot_s)
        else:
            from sandbox.engine import plan_startup

            plan = plan_startup(serve_argv, self.accelerator_type, boot_s=self.boot_s, image=image or None)
        if self.worker > 0 and getattr(plan, "outcome", "") in ("ready", "failed"):
            from sandbox.engine import worker_plan

            plan = worker_plan(plan, self.worker)
        if not self.burst_lines_per_s:
            return plan
        huge_lines, huge_line_bytes, cr_line_bytes = self.burst_huge
        return with_burst(plan, self.burst_lines_per_s, self.burst_s, chunk_bytes=self.burst_chunk_bytes,
                          huge_lines=huge_lines, huge_line_bytes=huge_line_bytes, cr_line_bytes=cr_line_bytes)

    def _on_ready(self, box: SimContainer) -> None:
        plan = box.plan
        self._serving_id = box.id
        if self._openai is not None:
            model = getattr(plan, "model", "") or ""
            try:
                self._openai.configure(model=model, served_model_name=getattr(plan, "served_model_name", "") or model,
                                       max_model_len=getattr(plan, "max_model_len", 0),
                                       accelerator_type=self.accelerator_type, chips=getattr(plan, "chips", 1),
                                       kv_cache_tokens=getattr(plan, "kv_cache_tokens", None),
                                       gpu_memory_utilization=getattr(plan, "gpu_memory_utilization", None),
                                       block_size=getattr(plan, "kv_block_size", None),
                                       api_key=_api_key(box.command, box.env),
                                       auto_tool_choice="--enable-auto-tool-choice" in box.command,
                                       tool_call_parser=_flag_value(box.command, "--tool-call-parser"))
            except ValueError:
                return                        # an unservable plan: the server keeps refusing
            self._openai.set_ready(True)

    def _on_stopped(self, box: SimContainer) -> None:
        if box.id == self._serving_id:
            self._serving_id = None
            if self._openai is not None:
                self._openai.set_ready(False)

    # --- shell --------------------------------------------------------------------------

    async def _handle(self, process: asyncssh.SSHServerProcess) -> None:
        command = process.command or ""
        self.commands.append(command)
        self._next_pid += 1
        pid = self._next_pid
        ended: asyncio.Future[Any] = asyncio.get_running_loop().create_future()   # channel closed or killed
        closed = asyncio.ensure_future(process.channel.wait_closed())
        closed.add_done_callback(lambda _: _settle(ended))
        status = 0
        try:
            for op, segment in split_shell(command.replace("$$", str(pid))):
                if (op == "&&" and status != 0) or (op == "||" and status == 0):
                    continue
                status = await self._run_segment(segment, process, ended, pid)
        except (OSError, asyncssh.Error):
            status = 255                      # the client went away mid-write
        finally:
            closed.cancel()
            self._followers.pop(pid, None)
        try:
            process.exit(status)
        except (OSError, asyncssh.Error):
            pass

    def follower_pids(self) -> list[int]:
        """Simulated PIDs of the ``docker logs -f`` followers running now."""
        return sorted(self._followers)

    async def _run_segment(self, segment: str, process: asyncssh.SSHServerProcess,
                           closed: asyncio.Future[Any], pid: int) -> int:
        try:
            _refuse_unsupported(segment)
            argv = shlex.split(segment)
        except ValueError as exc:
            await _write(process.stderr, f"sandbox shell: {exc}\n")
            return 2
        merge = "2>&1" in argv
        argv = [a for a in argv if a != "2>&1"]
        if argv[:1] == ["exec"]:
            argv = argv[1:]
        full_argv = list(argv)

        async def out(text: str) -> None:
            await _write(process.stdout, text)

        async def err(text: str) -> None:
            await _write(process.stdout if merge else process.stderr, text)

        sudo = argv[:1] == ["sudo"]
        if sudo:
            argv = argv[1:]
            while argv[:1] and argv[0].startswith("-"):
                argv = argv[1:]
            if self.sudo_password_required:
                await err("sudo: a password is required\n")
                return 1
        name = argv[0] if argv else ""
        if name == "docker":
            if self.docker_missing:
                await err("sudo: docker: command not found\n" if sudo else "bash: line 1: docker: command not found\n")
                return 1 if sudo else 127
            if not sudo:
                await err("permission denied while trying to connect to the Docker daemon socket at "
                          "unix:///var/run/docker.sock\n")
                return 1
            if argv[1:3] == ["logs", "-f"]:
                self._followers[pid] = (full_argv, closed)
            return await self.docker.cli(argv[1:], out, err, closed)
        if name == "echo":
            await out(" ".join(argv[1:]) + "\n")
            return 0
        if name == "true":
            return 0
        if name == "cat" and len(argv) == 2 and argv[1].startswith("/proc/") and argv[1].endswith("/cmdline"):
            found = self._followers.get(int(argv[1].split("/")[2])) if argv[1].split("/")[2].isdigit() else None
            if found is None:
                await err(f"cat: {argv[1]}: No such file or directory\n")
                return 1
            await out("".join(a + "\0" for a in found[0]))
            return 0
        if name == "kill":
            target = argv[-1] if len(argv) > 1 else ""
            found = self._followers.get(int(target)) if target.isdigit() else None
            if found is None:
                await err(f"kill: ({target}) - No such process\n")
                return 1
            if not sudo:
                await err(f"kill: ({target}) - Operation not permitted\n")
                return 1
            _settle(found[1])
            return 0
        if name == "hostname":
            await out(f"t1v-n-{self.node_name}-w-{self.worker}\n")
            return 0
        await err(f"bash: line 1: {name}: command not found\n")
        return 127


def _settle(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_result(None)


async def _write(stream: Any, text: str) -> None:
    stream.write(text)
    await stream.drain()


#: Characters of each line of a burst's big chunk (a long ``non-default args``-like line).
CHUNK_LINE_CHARS = 1400


def with_burst(plan: Any, lines_per_s: int, duration_s: float, *, chunk_bytes: int = 0, huge_lines: int = 0,
               huge_line_bytes: int = 250_000, cr_line_bytes: int = 0) -> Any:
    """``plan`` with ``lines_per_s x duration_s`` vLLM metrics lines first (its own lines shifted),
    in their middle ``chunk_bytes`` of :data:`CHUNK_LINE_CHARS`-character lines due at once and a
    ``cr_line_bytes`` progress bar redrawn with CRs on one line, and ``huge_lines`` lines of
    ``huge_line_bytes`` spread evenly through them (each due with the line before it)."""
    count = int(lines_per_s * duration_s)
    burst = tuple((i / lines_per_s, f"(APIServer pid=1) INFO 09-30 03:50:{(i // lines_per_s) % 60:02d} "
                   f"[loggers.py:123] Engine 000: Avg prompt throughput: {i % 997}.0 tokens/s, Avg "
                   f"generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache "
                   f"usage: 0.0%, Prefix cache hit rate: 0.0%") for i in range(count))
    if chunk_bytes:
        head = "(APIServer pid=1) INFO 09-30 03:50:00 [loggers.py:124] chunk line "
        at = duration_s / 2
        chunk = tuple((at, f"{head}{i:06d} " + "x" * (CHUNK_LINE_CHARS - len(head) - 8))
                      for i in range(max(1, chunk_bytes // (CHUNK_LINE_CHARS + 1))))
        half = count // 2
        burst = burst[:half] + chunk + burst[half:]
    if cr_line_bytes:
        burst = _inserted(burst, len(burst) // 2, _redrawn_bar(cr_line_bytes))
    for k in range(huge_lines):
        at = (k + 1) * len(burst) // (huge_lines + 1)
        head = f"(APIServer pid=1) INFO 09-30 03:50:00 [config.py:1] huge line {k}: "
        burst = _inserted(burst, at, head + "{'a': 1, " * ((huge_line_bytes - len(head)) // 9))
    shifted = tuple((offset + duration_s, line) for offset, line in plan.lines)
    changes: dict[str, Any] = {"lines": burst + shifted}
    for attr in ("ready_at_s", "exit_at_s"):
        if getattr(plan, attr, None) is not None:
            changes[attr] = getattr(plan, attr) + duration_s
    return dataclasses.replace(plan, **changes)


def _inserted(lines: tuple[tuple[float, str], ...], at: int, text: str) -> tuple[tuple[float, str], ...]:
    """``lines`` with ``text`` inserted before index ``at``, due with the line before it."""
    due = lines[at - 1][0] if at > 0 else 0.0
    return lines[:at] + ((due, text),) + lines[at:]


def _redrawn_bar(size: int) -> str:
    """A tqdm bar redrawn with CRs until it is ``size`` characters long (one line as docker stores it)."""
    frames: list[str] = []
    i = length = 0
    while length < size:
        pct = min(100, i * 100 // 400)
        frames.append(f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {i}/400 "
                      f"[{'#' * (pct // 4):<25}] {i * 0.05:.2f}s\r")
        length += len(frames[-1])
        i += 1
    return "".join(frames)


def _flag_value(command: Sequence[str], flag: str) -> str | None:
    """The value of ``flag V`` / ``flag=V`` in a serve command, else ``None``."""
    for i, arg in enumerate(command):
        if arg == flag and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _api_key(command: Sequence[str], env: Sequence[str]) -> str | None:
    """vLLM's key: ``--api-key K`` / ``--api-key=K`` in the serve command, else ``VLLM_API_KEY`` in the env."""
    for i, arg in enumerate(command):
        if arg == "--api-key" and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith("--api-key="):
            return arg.split("=", 1)[1]
    for item in env:
        name, _, value = item.partition("=")
        if name == "VLLM_API_KEY" and value:
            return value
    return None
