"""A simulated docker daemon and CLI for one sandbox TPU VM.

:class:`SimDocker` keeps containers and pulled images in memory and answers the ``docker``
verbs tpu-console uses with docker's own output shapes and error wording:
``logs [-f] [--timestamps] [--since TS]``, ``inspect``, ``image inspect``, ``ps``, ``pull``,
``rm -f``, ``run -d``, ``restart`` (in place: same id, ``RestartCount`` + 1) and ``exec CONTAINER ls|cat PATH`` (the served model's ``config.json``
in the container's Hugging Face cache, ``sandbox.hf_cache``). A container started with ``IMAGE vllm serve MODEL ...`` prints the
startup log that ``sandbox.engine.plan_startup`` computes, in real time from its start
(stderr, as vLLM does), and exits when the plan says so.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import hashlib
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox.docker_args import (
    format_ts,
    normalize_ref,
    parse_run_args,
    parse_since,
    render_template,
    verb_parser,
)
from sandbox.hf_cache import container_files

__all__ = ["DEFAULT_IMAGES", "SimContainer", "SimDocker", "format_ts", "normalize_ref", "parse_run_args",
           "parse_since", "render_template"]

#: Images ``docker pull`` knows (ref -> repo digest) when the VM is given none.
DEFAULT_IMAGES = {
    "vllm/vllm-tpu:latest": "sha256:" + hashlib.sha256(b"vllm-tpu latest").hexdigest(),
    "vllm/vllm-tpu:nightly": "sha256:" + hashlib.sha256(b"vllm-tpu nightly").hexdigest(),
    "vllm/vllm-tpu:v0.29.1": "sha256:" + hashlib.sha256(b"vllm-tpu v0.29.1").hexdigest(),
    "vllm/vllm-tpu:v0.30.0": "sha256:" + hashlib.sha256(b"vllm-tpu v0.30.0").hexdigest(),
    "vllm/vllm-tpu:v0.11.1": "sha256:" + hashlib.sha256(b"vllm-tpu v0.11.1").hexdigest(),
}
_ZERO_TIME = "0001-01-01T00:00:00Z"

#: Writes text to the client; awaiting the result applies back-pressure.
Writer = Callable[[str], Awaitable[None]]


@dataclass
class SimContainer:
    """One simulated container: its spec, its log plan and its lifecycle."""

    id: str
    name: str
    image: str
    image_id: str
    command: list[str]
    env: list[str]
    binds: list[str]
    network: str
    restart: str
    privileged: bool
    shm_size: int
    ports: list[str]
    entrypoint: list[str] | None
    plan: Any
    started_ns: int
    line_ns: list[int] = field(default_factory=list)
    removed: asyncio.Event = field(default_factory=asyncio.Event)
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    #: Restarts in place (``RestartCount``); each one ends the followers of the run before.
    restart_count: int = 0
    restarted: asyncio.Event = field(default_factory=asyncio.Event)
    #: Line texts of every run so far, beside ``line_ns`` (``plan.lines`` holds the current run's).
    texts: list[str] = field(default_factory=list)
    #: Index in ``line_ns`` where run N+1 starts (after restart N+1), for each restart so far.
    run_starts: list[int] = field(default_factory=list)

    @property
    def exit_ns(self) -> int | None:
        """When the container exits (wall clock ns), or ``None`` while it keeps running."""
        at = getattr(self.plan, "exit_at_s", None)
        return None if at is None else self.started_ns + int(at * 1e9)

    def exited(self, now_ns: int) -> bool:
        """True once the plan's exit time has passed."""
        return self.exit_ns is not None and now_ns >= self.exit_ns

    def inspect(self, now_ns: int) -> dict[str, Any]:
        """``docker inspect`` JSON for this container (the fields real docker prints that we use)."""
        exited = self.exited(now_ns)
        code = int(getattr(self.plan, "exit_code", 0) or 0) if exited else 0
        mounts = []
        for bind in self.binds:
            source, _, rest = bind.partition(":")
            dest, _, mode = rest.partition(":")
            mounts.append({"Type": "bind", "Source": source, "Destination": dest, "Mode": mode,
                           "RW": "ro" not in mode.split(","), "Propagation": "rprivate"})
        return {
            "Id": self.id, "Created": format_ts(self.started_ns - 150_000_000),
            "Path": (self.entrypoint or self.command or [""])[0],
            "Args": ((self.entrypoint or [])[1:] + self.command) if self.entrypoint else self.command[1:],
            "State": {"Status": "exited" if exited else "running", "Running": not exited, "Paused": False,
                      "Restarting": False, "OOMKilled": False, "Dead": False, "Pid": 0 if exited else 4242,
                      "ExitCode": code, "Error": "", "StartedAt": format_ts(self.started_ns),
                      "FinishedAt": format_ts(self.exit_ns) if exited and self.exit_ns else _ZERO_TIME},
            "Image": self.image_id, "Name": "/" + self.name, "RestartCount": self.restart_count, "Driver": "overlay2",
            "HostConfig": {"Binds": list(self.binds) or None, "NetworkMode": self.network,
                           "PortBindings": {}, "RestartPolicy": {"Name": self.restart, "MaximumRetryCount": 0},
                           "Privileged": self.privileged, "ShmSize": self.shm_size},
            "Mounts": mounts,
            "Config": {"Hostname": "t1v-n-sandbox-w-0", "Env": [*self.env, "PATH=/usr/local/sbin:/usr/local/"
                                                                 "bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                       "Cmd": list(self.command), "Image": self.image, "Entrypoint": self.entrypoint,
                       "Labels": {}, "Tty": False, "AttachStdout": False, "AttachStderr": False},
            "NetworkSettings": {"Networks": {self.network: {}}},
        }


class SimDocker:
    """The daemon state plus a CLI entry point (:meth:`cli`).

    Args:
        plan_for: ``(serve_argv, image) -> plan`` (an ``EnginePlan``-like object with ``lines``,
            ``ready_at_s``, ``exit_at_s``, ``exit_code``); raises ``ValueError`` on bad flags.
        known_images: ref -> repo digest that ``pull`` can fetch.
        on_ready: called with a container when its plan reaches ready.
        on_stopped: called with a container when it exits or is removed.
    """

    def __init__(self, *, plan_for: Callable[[list[str], str], Any], known_images: dict[str, str],
                 on_ready: Callable[[SimContainer], None], on_stopped: Callable[[SimContainer], None]) -> None:
        self.plan_for = plan_for
        self.known = {normalize_ref(k): v for k, v in known_images.items()}
        self.local: dict[str, str] = {}           # pulled ref -> repo digest
        self.containers: dict[str, SimContainer] = {}
        self.on_ready = on_ready
        self.on_stopped = on_stopped
        #: Lines written by ``logs -f`` followers so far (all containers, all clients).
        self.followed_lines = 0
        self._cut: tuple[int, Callable[[], None]] | None = None
        self._hold: dict[str, Any] | None = None

    def hold_inspect(self, *, skip: int = 0, release_after: int = 2, timeout_s: float = 30.0,
                     on_held: Callable[[], None] | None = None) -> None:
        """Make one ``docker inspect`` slow, for race tests: after ``skip`` more container inspects,
        the next one reads its containers at once but prints them only once ``release_after``
        later inspects have answered with other containers (at most ``timeout_s``), as an inspect
        that started before a replacement and finished after it would. ``on_held`` is called once
        that inspect is held (e.g. to replace the container then)."""
        self._hold = {"skip": skip, "release_after": release_after, "timeout_s": timeout_s,
                      "held": None, "others": 0, "event": asyncio.Event(), "on_held": on_held}

    def cut_after_followed_lines(self, count: int, cut: Callable[[], None]) -> None:
        """Call ``cut`` once, right after followers have written ``count`` lines in all (from now).

        The follower writing the ``count``-th line stops its batch there, so the cut lands at
        exactly that line however late the client connected (event-driven drop tests).
        """
        self._cut = (self.followed_lines + count, cut)

    # --- state -----------------------------------------------------------------------------

    def find(self, ref: str) -> SimContainer | None:
        """A container by name (``vllm`` or ``/vllm``), full id or unique id prefix."""
        ref = ref.lstrip("/")
        for box in self.containers.values():
            if box.name == ref or box.id == ref:
                return box
        matches = [b for b in self.containers.values() if len(ref) >= 3 and b.id.startswith(ref)]
        return matches[0] if len(matches) == 1 else None

    def _image_id(self, ref: str) -> str:
        return "sha256:" + hashlib.sha256(self.local.get(ref, ref).encode()).hexdigest()

    def digest_known(self, ref: str) -> str | None:
        """The repo digest ``pull`` would fetch for ``ref``, or ``None`` when the registry lacks it."""
        ref = normalize_ref(ref)
        if "@" in ref:
            repo, _, digest = ref.partition("@")
            ok = any(k.rsplit(":", 1)[0] == repo and d == digest for k, d in self.known.items())
            return digest if ok else None
        return self.known.get(ref)

    def start_container(self, *, name: str, image: str, command: list[str], env: list[str] | None = None,
                        binds: list[str] | None = None, network: str = "host", restart: str = "no",
                        privileged: bool = False, shm_size: int = 64 * 1024**2, ports: list[str] | None = None,
                        entrypoint: list[str] | None = None) -> SimContainer:
        """Create and start a container (the image must be local); schedules its ready/exit hooks."""
        ref = normalize_ref(image)
        full = (entrypoint or []) + command
        plan = self._plan(full, image)
        box = SimContainer(id=secrets.token_hex(32), name=name, image=image, image_id=self._image_id(ref),
                           command=list(command), env=list(env or []), binds=list(binds or []),
                           network=network, restart=restart, privileged=privileged, shm_size=shm_size,
                           ports=list(ports or []), entrypoint=entrypoint, plan=plan, started_ns=time.time_ns())
        box.line_ns = [box.started_ns + int(offset * 1e9) for offset, _ in plan.lines]
        box.texts = [text for _, text in plan.lines]
        self.containers[box.id] = box
        self._schedule(box)
        return box

    def _schedule(self, box: SimContainer) -> None:
        loop = asyncio.get_running_loop()
        plan = box.plan
        if getattr(plan, "ready_at_s", None) is not None and getattr(plan, "outcome", "") == "ready":
            box.timers.append(loop.call_later(plan.ready_at_s, self.on_ready, box))
        if box.exit_ns is not None:
            box.timers.append(loop.call_later(plan.exit_at_s, self.on_stopped, box))

    def restart(self, box: SimContainer, plan: Any = None) -> None:
        """Restart ``box`` in place (``docker restart``, or a restart policy after an exit): same id,
        ``RestartCount`` + 1, a new ``StartedAt``; the followers of the run before end (as
        ``docker logs -f`` does when its container stops) and the new run logs ``plan``
        (default: the same command planned again) after the lines of the runs before."""
        for timer in box.timers:
            timer.cancel()
        box.timers = []
        self.on_stopped(box)
        box.plan = plan if plan is not None else self._plan((box.entrypoint or []) + box.command, box.image)
        now = time.time_ns()
        printed = bisect.bisect_right(box.line_ns, now)     # the old run printed nothing after it stopped
        del box.line_ns[printed:], box.texts[printed:]
        box.started_ns = max(now, (box.line_ns[-1] + 1) if box.line_ns else 0)
        box.run_starts.append(len(box.line_ns))
        box.line_ns += [box.started_ns + int(offset * 1e9) for offset, _ in box.plan.lines]
        box.texts += [text for _, text in box.plan.lines]
        box.restart_count += 1
        box.restarted.set()
        box.restarted = asyncio.Event()
        self._schedule(box)

    def tagged(self, image: str) -> str:
        """``image`` as the tag its digest was published under (``repo@sha256:X`` -> ``repo:v0.30.0``
        when the registry's ``repo:v0.30.0`` has digest X), so a container run by digest (a rollback
        pins the replaced container's digest) runs, and reports, the same vLLM as by its tag; other
        refs unchanged."""
        repo, at, digest = normalize_ref(image).partition("@")
        if not at:
            return image
        tags = sorted(k for k, d in self.known.items() if d == digest and k.rsplit(":", 1)[0] == repo)
        return tags[0] if tags else image

    def _plan(self, full: list[str], image: str) -> Any:
        if full[:2] == ["vllm", "serve"]:
            try:
                return self.plan_for(full[2:], self.tagged(image))
            except ValueError as exc:
                # argparse's error(): the usage line, then "PROG: error: MESSAGE", exit 2
                return _StaticPlan(((0.8, "usage: vllm serve [model_tag] [options]"),
                                    (0.8, f"vllm serve: error: {exc}")), exit_at_s=0.9, exit_code=2)
        shown = " ".join(full) or "(no command)"
        return _StaticPlan(((0.1, f"sandbox: this simulated container only runs `vllm serve`, not {shown}"),),
                           exit_at_s=0.2, exit_code=127)

    def remove(self, box: SimContainer) -> None:
        """Kill and remove ``box`` (``rm -f``): followers end, readiness hooks fire."""
        for timer in box.timers:
            timer.cancel()
        self.containers.pop(box.id, None)
        box.removed.set()
        self.on_stopped(box)

    # --- CLI --------------------------------------------------------------------------------

    async def cli(self, args: list[str], out: Writer, err: Writer, closed: asyncio.Future[Any]) -> int:
        """Run ``docker <args>``; returns the exit status. ``closed`` completes when the client goes."""
        verb, rest = (args[0], args[1:]) if args else ("", [])
        if verb == "image" and rest[:1] == ["inspect"]:
            return await self._image_inspect(rest[1:], out, err)
        handler = {"logs": self._logs, "inspect": self._inspect, "ps": self._ps, "pull": self._pull,
                   "rm": self._rm, "run": self._run, "exec": self._exec, "restart": self._restart}.get(verb)
        if handler is None:
            await err(f"docker: unknown command: docker {verb}\n\nRun 'docker --help' for more information\n")
            return 1
        if verb == "logs":
            return await self._logs(rest, out, err, closed)
        code: int = await handler(rest, out, err)  # type: ignore[operator]
        return code

    async def _logs(self, args: list[str], out: Writer, err: Writer, closed: asyncio.Future[Any]) -> int:
        parser = verb_parser("logs")
        parser.add_argument("-f", "--follow", action="store_true")
        parser.add_argument("-t", "--timestamps", action="store_true")
        parser.add_argument("--since")
        parser.add_argument("--tail")
        parser.add_argument("container")
        try:
            opts = parser.parse_args(args)
            since_ns = parse_since(opts.since, time.time_ns()) if opts.since else None
        except (argparse.ArgumentError, ValueError) as exc:
            await err(f"{exc}\n")
            return 1
        box = self.find(opts.container)
        if box is None:
            await err(f"Error response from daemon: No such container: {opts.container}\n")
            return 1
        index = bisect.bisect_left(box.line_ns, since_ns) if since_ns is not None else 0
        restarted, run = box.restarted, box.restart_count
        while True:
            if restarted.is_set():                          # the container stopped: this follow ends
                end = box.run_starts[run] if run < len(box.run_starts) else len(box.line_ns)
                if index < end:                             # after the stopped run's last lines
                    await err("".join(self._line(box, i, opts.timestamps) for i in range(index, end)))
                return 0
            now = time.time_ns()
            due = bisect.bisect_right(box.line_ns, now)
            while index < due:
                stop = min(due, index + 5000)
                if opts.follow and self._cut is not None:
                    stop = min(stop, index + max(1, self._cut[0] - self.followed_lines))
                text = "".join(self._line(box, i, opts.timestamps) for i in range(index, stop))
                await err(text)      # vLLM logs to stderr; docker logs keeps the stream
                if opts.follow:
                    self.followed_lines += stop - index
                    if self._cut is not None and self.followed_lines >= self._cut[0]:
                        cut, self._cut = self._cut[1], None
                        cut()
                index = stop
            if not opts.follow or box.removed.is_set() or closed.done():
                return 0
            if index >= len(box.line_ns) and box.exited(now):
                return 0
            wake = [box.line_ns[index]] if index < len(box.line_ns) else []
            if box.exit_ns is not None:
                wake.append(box.exit_ns)
            timeout = max(0.01, (min(wake) - time.time_ns()) / 1e9) if wake else 1.0
            waiter = asyncio.ensure_future(box.removed.wait())
            restart = asyncio.ensure_future(restarted.wait())
            await asyncio.wait([waiter, restart, closed], timeout=min(timeout, 1.0),
                               return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            restart.cancel()

    @staticmethod
    def _line(box: SimContainer, index: int, timestamps: bool) -> str:
        text = box.texts[index]
        return f"{format_ts(box.line_ns[index])} {text}\n" if timestamps else text + "\n"

    async def _inspect(self, args: list[str], out: Writer, err: Writer) -> int:
        parser = verb_parser("inspect")
        parser.add_argument("--type")
        parser.add_argument("-f", "--format")
        parser.add_argument("names", nargs="+")
        try:
            opts = parser.parse_args(args)
        except (argparse.ArgumentError, ValueError) as exc:
            await err(f"{exc}\n")
            return 1
        found, status = [], 0
        for name in opts.names:
            box = self.find(name) if opts.type in (None, "container") else None
            image = None if box or opts.type == "container" else self._image_json(name)
            item = box.inspect(time.time_ns()) if box else image
            if item is None:
                kind = "container" if opts.type == "container" else "image" if opts.type == "image" else "object"
                await err(f"Error: No such {kind}: {name}\n")
                status = 1
            else:
                found.append(item)
        await self._maybe_hold({str(item.get("Id", "")) for item in found if "State" in item})
        if opts.format:
            await out("".join(render_template(opts.format, item) + "\n" for item in found))
        else:
            await out(json.dumps(found, indent=4) + "\n")
        return status

    async def _maybe_hold(self, ids: set[str]) -> None:
        hold = self._hold
        if hold is None or not ids:
            return
        if hold["held"] is not None:
            if not ids & hold["held"]:
                hold["others"] += 1
                if hold["others"] >= hold["release_after"]:
                    hold["event"].set()
                    self._hold = None
            return
        if hold["skip"] > 0:
            hold["skip"] -= 1
            return
        hold["held"] = ids
        if hold["on_held"] is not None:
            hold["on_held"]()
        try:
            await asyncio.wait_for(hold["event"].wait(), hold["timeout_s"])
        except TimeoutError:
            self._hold = None

    def _image_json(self, ref: str) -> dict[str, Any] | None:
        key = normalize_ref(ref)
        if key not in self.local:
            return None
        repo = key.rsplit("@", 1)[0].rsplit(":", 1)[0]
        return {"Id": self._image_id(key), "RepoTags": [key] if "@" not in key else [],
                "RepoDigests": [f"{repo}@{self.local[key]}"], "Created": format_ts(time.time_ns())}

    async def _image_inspect(self, args: list[str], out: Writer, err: Writer) -> int:
        items = [self._image_json(a) for a in args if not a.startswith("-")]
        for name, item in zip([a for a in args if not a.startswith("-")], items):
            if item is None:
                await err(f"Error response from daemon: No such image: {name}\n")
        await out(json.dumps([i for i in items if i], indent=4) + "\n")
        return 0 if all(items) else 1

    async def _ps(self, args: list[str], out: Writer, err: Writer) -> int:
        parser = verb_parser("ps")
        parser.add_argument("-a", "--all", action="store_true")
        parser.add_argument("--no-trunc", action="store_true")
        parser.add_argument("-q", "--quiet", action="store_true")
        parser.add_argument("--format")
        try:
            opts = parser.parse_args(args)
        except (argparse.ArgumentError, ValueError) as exc:
            await err(f"{exc}\n")
            return 1
        now = time.time_ns()
        rows = []
        for box in self.containers.values():
            if box.exited(now) and not opts.all:
                continue
            code = getattr(box.plan, "exit_code", 0)
            ago = max(0, (now - (box.exit_ns or box.started_ns)) // 1_000_000_000)
            status = f"Exited ({code}) {ago} seconds ago" if box.exited(now) else f"Up {ago} seconds"
            rows.append({"ID": box.id if opts.no_trunc else box.id[:12], "Image": box.image,
                         "Command": json.dumps(" ".join((box.entrypoint or []) + box.command)),
                         "CreatedAt": format_ts(box.started_ns), "Names": box.name,
                         "State": "exited" if box.exited(now) else "running", "Status": status,
                         "Ports": "", "Labels": "", "Mounts": ",".join(b.split(":")[0] for b in box.binds)})
        if opts.quiet:
            await out("".join(r["ID"] + "\n" for r in rows))
        elif opts.format:
            await out("".join(render_template(opts.format, r) + "\n" for r in rows))
        else:
            lines = ["CONTAINER ID   IMAGE   COMMAND   CREATED   STATUS   PORTS   NAMES"]
            lines += [f"{r['ID']}   {r['Image']}   {r['Command']}   {r['CreatedAt']}   {r['Status']}"
                      f"      {r['Names']}" for r in rows]
            await out("\n".join(lines) + "\n")
        return 0

    async def _pull(self, args: list[str], out: Writer, err: Writer) -> int:
        images = [a for a in args if not a.startswith("-")]
        if len(images) != 1:
            await err('"docker pull" requires exactly 1 argument.\nSee \'docker pull --help\'.\n')
            return 1
        return await self.pull(images[0], out, err)

    async def pull(self, image: str, out: Writer, err: Writer, *, prefix: str = "") -> int:
        """Pull ``image`` like docker: known refs succeed with their digest, others fail."""
        ref = normalize_ref(image)
        digest = self.digest_known(ref)
        if digest is None:
            await err(f"{prefix}Error response from daemon: manifest for {ref} not found: "
                      f"manifest unknown: manifest unknown\n")
            return 1
        tag = ref.rsplit("@", 1)[1] if "@" in ref else ref.rsplit(":", 1)[1]
        repo = ref.rsplit("@", 1)[0] if "@" in ref else ref.rsplit(":", 1)[0]
        fresh = ref not in self.local
        self.local[ref] = digest
        status = f"Downloaded newer image for {ref}" if fresh else f"Image is up to date for {ref}"
        await out(f"{tag}: Pulling from {repo}\nDigest: {digest}\nStatus: {status}\ndocker.io/{ref}\n")
        return 0

    async def _rm(self, args: list[str], out: Writer, err: Writer) -> int:
        force = any(a in ("-f", "--force") for a in args)
        status = 0
        for name in (a for a in args if not a.startswith("-")):
            box = self.find(name)
            if box is None:
                if not force:
                    await err(f"Error response from daemon: No such container: {name}\n")
                    status = 1
                continue
            if not force and not box.exited(time.time_ns()):
                await err(f"Error response from daemon: cannot remove container \"/{box.name}\": container "
                          f"is running: stop the container before removing or force remove\n")
                status = 1
                continue
            self.remove(box)
            await out(name + "\n")
        return status

    async def _restart(self, args: list[str], out: Writer, err: Writer) -> int:
        """``docker restart NAME...``: each container restarts in place."""
        status = 0
        for name in (a for a in args if not a.startswith("-")):
            box = self.find(name)
            if box is None:
                await err(f"Error response from daemon: No such container: {name}\n")
                status = 1
                continue
            self.restart(box)
            await out(name + "\n")
        return status

    async def _exec(self, args: list[str], out: Writer, err: Writer) -> int:
        """``docker exec CONTAINER ls [-1t] DIR`` / ``cat FILE`` over the container's files."""
        while args and args[0].startswith("-"):
            args = args[1:]
        if len(args) < 2:
            await err('"docker exec" requires at least 2 arguments.\nSee \'docker exec --help\'.\n')
            return 1
        name, command = args[0], args[1:]
        box = self.find(name)
        if box is None:
            await err(f"Error response from daemon: No such container: {name}\n")
            return 1
        if box.exited(time.time_ns()):
            await err(f"Error response from daemon: container {box.id} is not running\n")
            return 1
        env = dict(e.partition("=")[::2] for e in box.env)
        files = container_files(str(getattr(box.plan, "model", "") or ""), env)
        program, operands = command[0], [a for a in command[1:] if not a.startswith("-")]
        if program == "cat":
            status = 0
            for path in operands:
                if path in files:
                    await out(files[path])
                else:
                    await err(f"cat: {path}: No such file or directory\n")
                    status = 1
            return status
        if program == "ls":
            status = 0
            for path in operands:
                prefix = path.rstrip("/") + "/"
                entries = sorted({f[len(prefix):].split("/", 1)[0] for f in files if f.startswith(prefix)})
                if not entries:
                    await err(f"ls: cannot access '{path}': No such file or directory\n")
                    status = 2
                    continue
                await out("".join(e + "\n" for e in entries))
            return status
        await err(f'OCI runtime exec failed: exec failed: unable to start container process: exec: "{program}": '
                  "executable file not found in $PATH: unknown\n")
        return 127

    async def _run(self, args: list[str], out: Writer, err: Writer) -> int:
        try:
            spec = parse_run_args(args)
        except ValueError as exc:
            await err(f"{exc}\nSee 'docker run --help'.\n")
            return 125
        if spec.name and self.find(spec.name) is not None:
            other = self.find(spec.name)
            assert other is not None
            await err(f'docker: Error response from daemon: Conflict. The container name "/{spec.name}" is '
                      f'already in use by container "{other.id}". You have to remove (or rename) that '
                      f"container to be able to reuse that name.\nSee 'docker run --help'.\n")
            return 125
        ref = normalize_ref(spec.image)
        if ref not in self.local:
            await err(f"Unable to find image '{ref}' locally\n")
            if await self.pull(ref, err, err, prefix="docker: ") != 0:
                await err("See 'docker run --help'.\n")
                return 125
        box = self.start_container(
            name=spec.name or f"sandbox_{secrets.token_hex(3)}", image=spec.image, command=spec.command,
            env=spec.env, binds=spec.volumes, network=spec.network, restart=spec.restart,
            privileged=spec.privileged, shm_size=spec.shm_size, ports=spec.ports, entrypoint=spec.entrypoint)
        await out(box.id + "\n")
        return 0


@dataclass(frozen=True)
class _StaticPlan:
    """A fixed log for containers that are not a vLLM server (or whose flags vLLM rejects)."""

    lines: tuple[tuple[float, str], ...]
    exit_at_s: float | None = None
    exit_code: int | None = None
    outcome: str = "failed"
    ready_at_s: float | None = None
