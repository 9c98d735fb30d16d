"""The whole sandbox: loopback TPU API, one SSH "TPU VM" per ready node, vLLM stand-ins.

:class:`Sandbox` runs every stand-in on a background thread with its own asyncio
loop, so it can sit beside the Textual app (``tpu-console --demo``) or run alone
(``tpu-console sandbox``). It writes a config file that points at itself
(TPU API endpoint, SSH key, known-hosts file with gcloud-style aliases, per-node
``host:port``), so the console uses its real clients against it.

On start, every READY node gets a simulated vLLM container: the v5e node boots at
once (ready within seconds), the flex-start v6e node boots slowly so the startup
view moves the moment the console opens. A multi-host node (``vllm-v5e-16``, 4
workers) gets one VM per worker (own port and host key, ``[ssh.hosts]`` keys
``NODE/W`` for workers above 0, known-hosts aliases ``tpu.<id>-<W>``), each running the
container: worker 0 prints the engine's log, the others their own worker lines.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import platformdirs

from remote.models import chip_generation, chips_of, utc_now

#: Image every sandbox node runs at start, and the images `docker pull` knows.
SANDBOX_IMAGE = "vllm/vllm-tpu:v0.29.1"
#: `vllm serve` argv the sandbox containers start with: (generation, minimum chips) -> argv.
#: Tensor parallelism is set to the node's chip count.
DEFAULT_SERVE_ARGS: dict[tuple[str, int], list[str]] = {
    ("v5e", 4): ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "32768",
                 "--gpu-memory-utilization", "0.90", "--max-num-batched-tokens", "2048"],
    ("v5e", 1): ["Qwen/Qwen3-0.6B", "--max-model-len", "16384", "--gpu-memory-utilization", "0.90"],
    ("v6e", 8): ["google/gemma-3-27b-it", "--max-model-len", "65536", "--gpu-memory-utilization", "0.92",
                 "--max-num-batched-tokens", "4096"],
    ("v6e", 1): ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "65536",
                 "--gpu-memory-utilization", "0.92"],
}


def serve_args_for(accelerator_type: str, chips: int) -> list[str] | None:
    """The sandbox's starting ``vllm serve`` argv for a node, or ``None`` for unknown chips."""
    generation = chip_generation(accelerator_type)
    choices = sorted(((need, argv) for (gen, need), argv in DEFAULT_SERVE_ARGS.items()
                      if gen == generation and chips >= need), reverse=True)
    if not choices:
        return None
    return [*choices[0][1], "--tensor-parallel-size", str(chips)]


SLOW_BOOT_NODE = "vllm-flex-b"
#: Write the ``[gke]`` table (the GKE API endpoint and the kubeconfig) into the sandbox's config.toml.
#: Off until the console's config knows ``[gke]`` (``console.config.GkeConfig``, branch wt/gke-client):
#: a config with a table the console does not know is refused, so writing it earlier would break --demo.
GKE_CONFIG_SECTION = True
#: The Google account the sandbox's config names (``[os_login] account``); its OS Login POSIX
#: name, ``alice_example_com``, is the only user the OS Login nodes let in.
SANDBOX_ACCOUNT = "alice@example.com"


def needs_os_login(node: dict[str, Any], project_metadata: dict[str, str]) -> bool:
    """The guest side of OS Login: ``enable-oslogin`` of the node's metadata, else the project's,
    ``TRUE`` in any case (the rule the console's :mod:`remote.oslogin` follows as a client)."""
    def flag(metadata: dict[str, Any]) -> bool | None:
        for key, value in metadata.items():
            if str(key).lower() == "enable-oslogin":
                return str(value).strip().upper() == "TRUE"
        return None

    node_flag = flag(node.get("metadata") or {})
    return node_flag if node_flag is not None else bool(flag(project_metadata))


def default_state_dir() -> Path:
    """Where the sandbox keeps its config, keys and history: ``~/.local/state/tpu-console/sandbox``."""
    return platformdirs.user_state_path("tpu-console") / "sandbox"


def sandbox_running(state_dir: Path) -> bool:
    """Whether a sandbox holds ``state_dir`` now (its ``.lock`` is locked by a live process)."""
    import fcntl

    try:
        with open(state_dir / ".lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(lock, fcntl.LOCK_UN)
            return False
    except OSError:
        return False


def _toml_str(value: str) -> str:
    return json.dumps(value)


def _shell_word(value: str) -> str:
    import shlex

    return shlex.quote(value)


@dataclass(frozen=True)
class VmNode:
    """A node the sandbox runs an SSH server for: its short name, numeric id (gcloud's host-key
    alias ``tpu.<id>-<worker>``), accelerator type (``v6e-8``), worker count and whether it takes
    OS Login users only."""

    name: str
    node_id: str
    accelerator_type: str
    workers: int = 1
    os_login: bool = False
    resource: str = ""


class Sandbox:
    """Loopback stand-ins for a TPU fleet, started and stopped as one.

    Args:
        state_dir: folder for config.toml, the client key, known_hosts and history.db
            (default :func:`default_state_dir`); tests pass a temporary folder.
        boot_s: seconds a slow boot takes (the flex-start node); others boot in ``fast_boot_s``.
        fast_boot_s: seconds for the nodes that should be ready almost at once.
        latency_s: extra seconds the TPU API adds to each response.
        clock: current UTC time, for the fleet's countdowns.
        boot: start containers on the ready nodes (False: VMs with no container).
        time_scale: factor on the TPU API's queued-resource state durations (tests: 0.05).
        gke: start the sandbox's GKE (:mod:`sandbox.gke`): a GKE API stand-in and the Kubernetes API of
            cluster ``inference-prod/us-east5/tpu-serving`` with a vLLM Deployment whose pods boot in
            ``gke_boot_s`` (default ``boot_s``) after ``gke_create_s`` of ContainerCreating.
            ``gke_multi_host`` adds the ``v5e-multi`` pool (4 nodes of a 4x4 v5e slice) and the
            ``vllm-multi`` LeaderWorkerSet on it (``--demo`` and ``tpu-console sandbox`` do).
        private_nodes: names of READY nodes without external IPs (``enableExternalIps: false``, the
            network and subnetwork as the API gives them): the config names no ``[ssh.hosts]`` entry
            for them, so the console reaches them as it reaches a real private node, through gcloud's
            IAP tunnel (``start-iap-tunnel``) to the sandbox's IAP relay (:mod:`sandbox.iap_relay`).

    Attributes (after :meth:`start`):
        config_path, db_path, api_endpoint, vms (node name -> worker 0's SandboxVm),
        workers (node name -> every worker's SandboxVm, worker 0 first), nodes (VmNode list),
        google_apis (the Compute + OS Login stand-in, :mod:`sandbox.google_apis`) and its endpoint
        google_apis_endpoint; gke (:class:`sandbox.gke.cluster.SandboxGke`, or None), gke_api_url
        (``http://127.0.0.1:PORT``), kubernetes_api_url (``https://127.0.0.1:PORT``) and kubeconfig_path.
    """

    def __init__(self, state_dir: Path | None = None, *, boot_s: float = 25.0, fast_boot_s: float = 2.0,
                 latency_s: float = 0.0, clock: Callable[[], datetime] = utc_now, boot: bool = True,
                 time_scale: float = 1.0, private_nodes: tuple[str, ...] = (), gke: bool = True,
                 gke_boot_s: float | None = None, gke_create_s: float = 1.0, gke_multi_host: bool = False) -> None:
        self._explicit_dir = state_dir is not None
        #: the state dir is a temporary one (the default was taken): :meth:`stop` removes it
        self.temporary = False
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self._lock_file: Any = None
        self.boot_s = boot_s
        self.fast_boot_s = fast_boot_s
        self.latency_s = latency_s
        self.clock = clock
        self.boot = boot
        self.time_scale = time_scale
        self.private_nodes = tuple(private_nodes)
        self.iap_relay: Any = None
        self.want_gke = gke
        self.gke_boot_s = boot_s if gke_boot_s is None else gke_boot_s
        self.gke_create_s = gke_create_s
        self.gke_multi_host = gke_multi_host
        self.gke: Any = None
        self.gke_api_url = ""
        self.kubernetes_api_url = ""
        self.config_path = self.state_dir / "config.toml"
        self.db_path = self.state_dir / "history.db"
        self.key_path = self.state_dir / "id_ed25519"
        self.known_hosts_path = self.state_dir / "known_hosts"
        self.kubeconfig_path = self.state_dir / "gke" / "kubeconfig"
        self.api_endpoint = ""
        self.google_apis: Any = None
        self.google_apis_endpoint = ""
        self.vms: dict[str, Any] = {}
        self.workers: dict[str, list[Any]] = {}
        self.nodes: list[VmNode] = []
        self.tpu_api: Any = None
        self.world: Any = None
        self.projects: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client_public_key = ""

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start every stand-in and write :attr:`config_path`. Blocks until ready."""
        from sandbox.fleet_data import default_world
        from sandbox.google_apis import SandboxGoogleApis
        from sandbox.tpu_server import SandboxTpuApi

        self._take_state_dir()
        self.world = default_world(self.clock())
        self._make_private()
        self.projects = list(self.world.projects)
        self.tpu_api = SandboxTpuApi(self.world, latency_s=self.latency_s, time_scale=self.time_scale)
        self.api_endpoint = self.tpu_api.start()
        self.google_apis = SandboxGoogleApis(
            {pid: project.metadata for pid, project in self.world.projects.items()}, (SANDBOX_ACCOUNT,),
            denied_projects=tuple(pid for pid, project in self.world.projects.items() if project.denied))
        self.google_apis_endpoint = self.google_apis.start()
        if self.want_gke:
            self._start_gke()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sandbox", daemon=True)
        self._thread.start()
        self.call(self._start_vms())
        self.call(self._start_iap_relay())
        self._write_config()
        self.tpu_api.lifecycle.on_node_ready = self._node_ready
        self.tpu_api.lifecycle.on_node_deleting = self._node_deleting

    def _start_gke(self) -> None:
        from sandbox.gke.cluster import SandboxGke

        self.gke = SandboxGke(self.state_dir, boot_s=self.gke_boot_s, create_s=self.gke_create_s,
                              time_scale=self.time_scale, multi_host=self.gke_multi_host,
                              other_projects=tuple(p for p, v in self.world.projects.items() if not v.denied),
                              denied_projects=tuple(p for p, v in self.world.projects.items() if v.denied))
        self.gke.start()
        self.gke_api_url = self.gke.gke_api_url
        self.kubernetes_api_url = self.gke.kubernetes_api_url
        self.kubeconfig_path = self.gke.kubeconfig_path

    def _take_state_dir(self) -> None:
        """Lock the state dir; a second sandbox at the default dir moves to a temporary one, which
        :meth:`stop` removes (its private key and history are no one else's)."""
        import fcntl
        import tempfile

        self.state_dir.mkdir(parents=True, exist_ok=True)
        lock = open(self.state_dir / ".lock", "w")  # noqa: SIM115 - held until stop()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            if self._explicit_dir:
                raise RuntimeError(f"another sandbox is using {self.state_dir}") from None
            self.state_dir = Path(tempfile.mkdtemp(prefix="tpu-console-sandbox-"))
            self.temporary = True
            self.config_path = self.state_dir / "config.toml"
            self.db_path = self.state_dir / "history.db"
            self.key_path = self.state_dir / "id_ed25519"
            self.known_hosts_path = self.state_dir / "known_hosts"
            self.kubeconfig_path = self.state_dir / "gke" / "kubeconfig"
            return self._take_state_dir()
        self._lock_file = lock

    def call(self, coro: Any, timeout_s: float = 60.0) -> Any:
        """Run ``coro`` on the sandbox loop from another thread and return its result."""
        assert self._loop is not None, "sandbox not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def stop(self) -> None:
        """Stop every stand-in (idempotent)."""
        if self._loop is not None:
            try:
                if self.iap_relay is not None:
                    self.call(self.iap_relay.stop(), timeout_s=10)
                self.call(self._stop_vms(), timeout_s=10)
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._loop.close()
            self._loop = None
        if self.tpu_api is not None:
            self.tpu_api.stop()
            self.tpu_api = None
        if self.google_apis is not None:
            self.google_apis.stop()
            self.google_apis = None
        if self.gke is not None:
            self.gke.stop()
            self.gke = None
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
        if self.temporary:
            import shutil

            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- internals ---------------------------------------------------------------------

    def _vm_nodes(self) -> list[VmNode]:
        """The READY nodes a client could reach: read from the world itself (the
        sandbox never asks our own TPU client what it serves), leaving out denied projects and
        unreachable zones as the API does."""
        found = []
        for project_id, project in self.world.projects.items():
            if project.denied:
                continue
            items, _ = self.world.list(project_id, "nodes", None)
            for item in items:
                workers = len(item.get("networkEndpoints") or [])
                if item.get("state") != "READY" or workers < 1:
                    continue
                found.append(VmNode(name=item["name"].rsplit("/", 1)[-1], node_id=str(item.get("id", "")),
                                    accelerator_type=item.get("acceleratorType", ""), workers=workers,
                                    os_login=needs_os_login(item, project.metadata), resource=item["name"]))
        return found

    async def _start_vms(self) -> None:
        import asyncssh

        from sandbox.vm import SandboxVm

        client_key = asyncssh.generate_private_key("ssh-ed25519")
        self._client_public_key = client_key.export_public_key().decode()
        self.key_path.write_bytes(client_key.export_private_key())
        os.chmod(self.key_path, 0o600)
        self.nodes = self._vm_nodes()
        known_lines = []
        for node in self.nodes:
            slow = node.name == SLOW_BOOT_NODE
            chips = chips_of(node.accelerator_type) or 1
            argv = serve_args_for(node.accelerator_type, chips // node.workers or 1)    # one host's chips
            self.workers[node.name] = []
            for worker in range(node.workers):
                vm = SandboxVm(node_name=node.name, accelerator_type=node.accelerator_type,
                               authorized_client_key=client_key.export_public_key().decode(),
                               boot_s=self.boot_s if slow else self.fast_boot_s, worker=worker,
                               login_keys=self.google_apis.authorized_keys if node.os_login else None)
                vm.ssh_port = await vm.start()
                self.world.publish_host_key(node.resource, worker, vm.host_public_key)
                self.workers[node.name].append(vm)
                known_lines.append(vm.known_hosts_line(f"tpu.{node.node_id}-{worker}"))
                if self.boot and argv is not None:
                    await vm.boot_container(argv, image=SANDBOX_IMAGE)
            self.vms[node.name] = self.workers[node.name][0]
        self.known_hosts_path.write_text("".join(line if line.endswith("\n") else line + "\n"
                                                 for line in known_lines))
        os.chmod(self.known_hosts_path, 0o600)

    def _node_ready(self, project: str, node: dict[str, Any]) -> None:
        """A node created by a queued-resource request turned READY: give it a VM (no container yet).

        Called from a TPU API thread just before the API says READY; it waits (up to 30 s) while
        the VM starts on the sandbox loop and the config (``[ssh.hosts]``) and the known-hosts file
        are rewritten, so a client that sees READY and reloads the config can reach it.
        """
        if self._loop is None or len(node.get("networkEndpoints") or []) != 1:
            return
        project_metadata = self.world.projects[project].metadata if project in self.world.projects else {}
        vm_node = VmNode(name=node["name"].rsplit("/", 1)[-1], node_id=str(node.get("id", "")),
                         accelerator_type=node.get("acceleratorType", ""),
                         os_login=needs_os_login(node, project_metadata), resource=node["name"])
        started = asyncio.run_coroutine_threadsafe(self._add_vm(vm_node), self._loop)
        try:
            started.result(timeout=30)
        except Exception as exc:  # noqa: BLE001 - the node still turns READY; the client says it cannot reach it
            print(f"sandbox: no VM for {vm_node.name}: {exc}", file=sys.stderr)
            return
        # here, on the API thread that holds the world's lock (the sandbox loop would wait for it)
        self.world.publish_host_key(vm_node.resource, 0, self.vms[vm_node.name].host_public_key)

    async def _add_vm(self, node: VmNode) -> None:
        from sandbox.vm import SandboxVm

        if node.name in self.vms:
            return
        vm = SandboxVm(node_name=node.name, accelerator_type=node.accelerator_type,
                       authorized_client_key=self._client_public_key, boot_s=self.fast_boot_s,
                       login_keys=self.google_apis.authorized_keys if node.os_login else None)
        vm.ssh_port = await vm.start()
        self.vms[node.name] = vm
        self.workers[node.name] = [vm]
        self.nodes.append(node)
        line = vm.known_hosts_line(f"tpu.{node.node_id}-0")
        with self.known_hosts_path.open("a", encoding="utf-8") as known:
            known.write(line if line.endswith("\n") else line + "\n")
        self._write_config()

    def _node_deleting(self, project: str, node: dict[str, Any]) -> None:
        """A node of a queued resource being deleted: stop its VM (SSH server, containers, OpenAI
        server) and drop it from the config's ``[ssh.hosts]`` and the known-hosts file.

        Called from a TPU API thread; waits (up to 10 s) for the VM to stop.
        """
        name = node["name"].rsplit("/", 1)[-1]
        if self._loop is None or name not in self.vms:
            return
        stopped = asyncio.run_coroutine_threadsafe(self._remove_vm(name), self._loop)
        try:
            stopped.result(timeout=10)
        except Exception as exc:  # noqa: BLE001 - the node is deleted anyway; say why its VM lingers
            print(f"sandbox: the VM of {name} did not stop: {exc}", file=sys.stderr)

    async def _remove_vm(self, name: str) -> None:
        if self.vms.pop(name, None) is None:
            return
        vms = self.workers.pop(name, [])
        for vm in vms:                                  # every worker of the node
            await vm.stop()
        gone = [n for n in self.nodes if n.name == name]
        self.nodes = [n for n in self.nodes if n.name != name]
        aliases = {f"tpu.{n.node_id}-{worker}" for n in gone for worker in range(max(1, len(vms)))}
        if self.known_hosts_path.exists():
            kept = [line for line in self.known_hosts_path.read_text(encoding="utf-8").splitlines(keepends=True)
                    if line.split(" ", 1)[0] not in aliases]
            self.known_hosts_path.write_text("".join(kept), encoding="utf-8")
        self._write_config()

    def _make_private(self) -> None:
        """Take the external IPs of :attr:`private_nodes` away (as ``enableExternalIps: false`` does)."""
        for project in self.world.projects.values():
            for name, node in project.nodes.items():
                if name.rsplit("/", 1)[-1] in self.private_nodes:
                    node["networkConfig"]["enableExternalIps"] = False
                    for endpoint in node.get("networkEndpoints") or []:
                        endpoint["accessConfig"] = {}

    async def _start_iap_relay(self) -> None:
        from sandbox.iap_relay import SandboxIapRelay

        self.iap_relay = SandboxIapRelay(self._instance_backend, self.state_dir)
        await self.iap_relay.start()

    def _instance_backend(self, project: str, zone: str, instance: str, port: int) -> tuple[str, int] | None:
        """The IAP relay's backend: the VM whose ``hostname`` guest attribute is ``instance`` (port 22)."""
        if port != 22:
            return None
        with self.world.lock:
            for name, per_worker in self.world.guest_attributes.items():
                if not name.startswith(f"projects/{project}/locations/{zone}/nodes/"):
                    continue
                for worker, items in enumerate(per_worker):
                    if any(i.get("key") == "hostname" and i.get("value") == instance for i in items):
                        vms = self.workers.get(name.rsplit("/", 1)[-1], [])
                        return ("127.0.0.1", vms[worker].ssh_port) if worker < len(vms) else None
        return None

    def _write_gcloud(self) -> Path | None:
        """A gcloud of the sandbox's own (``gcloud`` with its own config dir: a made-up access token that
        only the sandbox's endpoints see, the sandbox's APIs), for the IAP tunnel's ProxyCommand;
        ``None`` when gcloud is not installed."""
        import shutil

        real = shutil.which("gcloud")
        if real is None:
            return None
        config_dir = self.state_dir / "gcloud-config"
        (config_dir / "configurations").mkdir(parents=True, exist_ok=True)
        (config_dir / "active_config").write_text("default")
        (config_dir / "gce").write_text("False")
        token = self.state_dir / "gcloud-access-token"          # IAP's websocket sends a bearer token
        token.write_text("sandbox-access-token\n")
        os.chmod(token, 0o600)
        (config_dir / "configurations" / "config_default").write_text(
            f"[auth]\naccess_token_file = {token}\n\n[api_endpoint_overrides]\ntpu = {self.api_endpoint}/\n"
            f"compute = {self.google_apis_endpoint}/compute/v1/\noslogin = {self.google_apis_endpoint}/\n\n"
            f"[core]\naccount = {SANDBOX_ACCOUNT}\ndisable_usage_reporting = true\n"
            f"custom_ca_certs_file = {self.iap_relay.ca_file}\n")
        wrapper = self.state_dir / "gcloud"
        # the CA variable too: an environment's CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE outranks the config file
        wrapper.write_text(f"#!/bin/sh\nCLOUDSDK_CONFIG={_shell_word(str(config_dir))} "
                           f"CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE={_shell_word(str(self.iap_relay.ca_file))} "
                           f"exec {_shell_word(real)} \"$@\"\n")
        os.chmod(wrapper, 0o700)
        return wrapper

    async def _stop_vms(self) -> None:
        for vms in self.workers.values():
            for vm in vms:
                await vm.stop()
        self.vms.clear()
        self.workers.clear()

    def _write_config(self) -> None:
        lines = [
            "# Written by the tpu-console sandbox; rewritten at every start.",
            f"api_endpoint = {_toml_str(self.api_endpoint)}",
            "refresh_interval_s = 5",
            f"db_path = {_toml_str(str(self.db_path))}",
            "",
        ]
        for project in self.projects:
            lines += ["[[projects]]", f"id = {_toml_str(project)}", ""]
        lines += [
            "# OS Login nodes (research-sandbox's project metadata says enable-oslogin=TRUE) let in only",
            f"# {SANDBOX_ACCOUNT}'s POSIX name, with the key imported into its OS Login profile.",
            "[os_login]",
            f"account = {_toml_str(SANDBOX_ACCOUNT)}",
            f"api_endpoint = {_toml_str(self.google_apis_endpoint)}",
            f"compute_api_endpoint = {_toml_str(self.google_apis_endpoint)}",
            "",
            "[ssh]",
            "# no user: the OS Login POSIX name on OS Login nodes, else the local user name (like gcloud)",
            f"private_key = {_toml_str(str(self.key_path))}",
            f"known_hosts = {_toml_str(str(self.known_hosts_path))}",
            "connect_timeout_s = 5",
        ]
        gcloud = self._write_gcloud() if self.iap_relay is not None else None
        if gcloud is not None:
            lines += ["# private nodes: gcloud's IAP tunnel (start-iap-tunnel) to the sandbox's IAP relay",
                      f"iap_tunnel_url = {_toml_str(self.iap_relay.url)}", f"gcloud = {_toml_str(str(gcloud))}"]
        lines += ["", "[ssh.hosts]"]
        for name, vms in sorted(self.workers.items()):
            if name in self.private_nodes:
                continue                                    # reached as a real private node is: IAP
            for worker, vm in enumerate(vms):
                key = name if worker == 0 else f"{name}/{worker}"
                lines.append(f"{_toml_str(key)} = {_toml_str(f'127.0.0.1:{vm.ssh_port}')}")
        lines += [
            "",
            "[container]",
            'name = "vllm"',
            "port = 8000",
            f"image = {_toml_str(SANDBOX_IMAGE)}",
            'model = "meta-llama/Llama-3.1-8B-Instruct"',
            "",
        ]
        if self.gke is not None:
            gke = ["[gke]", "# the sandbox's GKE API and the kubeconfig of its cluster (context gke_inference-prod_us-east5_tpu-serving)",
                   f"api_endpoint = {_toml_str(self.gke_api_url)}", f"kubeconfig = {_toml_str(str(self.kubeconfig_path))}", ""]
            lines += gke if GKE_CONFIG_SECTION else ["# " + line if line else line for line in gke]
        partial = self.config_path.with_suffix(".toml.partial")
        partial.write_text("\n".join(lines), encoding="utf-8")
        os.replace(partial, self.config_path)         # readers never see half a file

    def describe(self) -> str:
        """Human-readable lines: config path and every endpoint."""
        out = [f"config:   {self.config_path}", f"history:  {self.db_path}", f"TPU API:  {self.api_endpoint}",
               f"Compute + OS Login APIs: {self.google_apis_endpoint} (account {SANDBOX_ACCOUNT})"]
        if self.gke is not None:
            out += [f"GKE API:  {self.gke_api_url}",
                    f"Kubernetes API: {self.kubernetes_api_url} (kubeconfig {self.kubeconfig_path})"]
        for name, vms in sorted(self.workers.items()):
            for worker, vm in enumerate(vms):
                who = f"node {name}" if len(vms) == 1 else f"node {name} worker {worker}"
                login = "  OS Login only" if vm.login_keys is not None else ""
                out.append(f"{who}: ssh 127.0.0.1:{vm.ssh_port}  vLLM (inside the VM) 127.0.0.1:{vm.openai_port}{login}")
        return "\n".join(out)
