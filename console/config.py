"""The console's configuration: one typed object loaded once from TOML.

The file lives at the XDG config path (``platformdirs.user_config_path("tpu-console") /
"config.toml"``); ``--config PATH`` overrides it. Every problem (TOML syntax error,
unknown key, wrong type) raises :class:`ConfigError` naming the file, the key and the
line, and is shown as one message without a traceback.

Example::

    refresh_interval_s = 10
    # readonly = true           # hide every action that changes the fleet
    # api_endpoint = "http://127.0.0.1:8470"   # sandbox or private endpoint

    [[projects]]
    id = "my-project"
    zones = []                 # empty: all zones (locations/-)

    [ssh]
    user = "alice"             # overrides everything (OS Login too); default: the OS Login
                               # POSIX name on OS Login nodes, else the local user name, like gcloud
    private_key = "~/.ssh/google_compute_engine"
    known_hosts = "~/.ssh/google_compute_known_hosts"
    proxy_command = ""         # e.g. a bastion: "ssh -W %h:%p bastion"; also %n node, %w worker,
                               # %z zone, %P project, %i the worker's GCE instance name
    iap = "auto"               # "auto": a node without an external IP goes through gcloud's IAP
                               # tunnel (start-iap-tunnel); "always"; "never" (its internal IP)
    # [ssh.hosts]              # per-node "host:port" overrides (bastions, the sandbox)
    # "vllm-a" = "127.0.0.1:2222"
    # "vllm-v5e-16/1" = "127.0.0.1:2223"   # one worker of a multi-host slice ("NODE/W")

    [os_login]
    # account = "alice@example.com"   # default: the ADC identity's email, else gcloud's core/account
    # api_endpoint = ""               # OS Login API override (the sandbox)
    # compute_api_endpoint = ""       # Compute API override (project metadata; the sandbox)

    [container]
    name = "vllm"
    port = 8000

    [forward]                  # the TUI's forwards and `forward NODE`: localhost:PORT -> node:container.port
    # port = 8005              # a fixed local port (a second node forwarded at once gets its stable port)
    # [forward.ports]          # per-node fixed ports
    # "vllm-a" = 8006
    [gke]                      # GKE clusters of the projects above (absent: no GKE listing at all)
    # discover = true          # list each project's clusters through the GKE API (locations/-)
    # api_endpoint = ""        # GKE API override (http:// loopback: anonymous; the sandbox)
    # kubeconfig = "~/.kube/config"   # its gke_PROJECT_LOCATION_CLUSTER contexts give those clusters'
                               # credentials (else: endpoint + CA from the GKE API, a token from ADC)
    # contexts = []            # kubeconfig contexts listed as clusters of their own (no GKE API)

    [logs]                     # the full log of each launch, under $XDG_STATE_HOME/tpu-console/logs
    max_mib = 64               # rotate a launch's log at this size...
    keep = 3                   # ...keeping this many older files

    [prices.v6e]               # $ per chip-hour by provisioning model
    on-demand = 2.70
    spot = 0.95
    flex-start = 1.35
"""

from __future__ import annotations

import getpass
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

APP_NAME = "tpu-console"


#: Docker's own rule for a container name (``docker run --name``).
CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")


class ConfigError(Exception):
    """A config file that cannot be used. ``str()`` is the one message to show."""


@dataclass(frozen=True)
class ProjectConfig:
    """One GCP project to list. ``zones`` empty means all zones (``locations/-``)."""

    id: str
    zones: tuple[str, ...] = ()


#: ``[ssh] iap`` values.
IAP_MODES = ("auto", "always", "never")


@dataclass(frozen=True)
class SshConfig:
    """How to reach a node over SSH, the way ``gcloud compute tpus tpu-vm ssh`` does.

    Attributes:
        user: remote user name (default: the local user name).
        private_key: path to the private key (default ``~/.ssh/google_compute_engine``).
        known_hosts: path to the known-hosts file (default ``~/.ssh/google_compute_known_hosts``).
        proxy_command: optional proxy command; ``%h`` host, ``%p`` port, ``%n`` node, ``%w`` worker,
            ``%z`` zone, ``%P`` project, ``%i`` the worker's GCE instance name, ``%%`` are replaced.
        iap: ``"auto"`` (a node without an external IP is reached through an IAP tunnel: gcloud's
            ``start-iap-tunnel`` as the proxy command), ``"always"`` or ``"never"`` (the internal IP).
        iap_tunnel_url: gcloud's hidden ``--iap-tunnel-url-override`` (the sandbox's IAP relay), or ``""``.
        gcloud: the gcloud program the IAP tunnel runs (``gcloud`` on the PATH).
        port: SSH port (22).
        connect_timeout_s: seconds before a connect attempt gives up.
        hosts: per-node ``"host:port"`` overrides, keyed by node name (worker 0, or every
            worker when none has its own) or ``NODE/W`` (worker W of a multi-host slice).
        user_configured: ``user`` was set in the config file (then it overrides OS Login).
    """

    user: str = field(default_factory=getpass.getuser)
    private_key: Path = field(default_factory=lambda: Path("~/.ssh/google_compute_engine").expanduser())
    known_hosts: Path = field(default_factory=lambda: Path("~/.ssh/google_compute_known_hosts").expanduser())
    proxy_command: str = ""
    iap: str = "auto"
    iap_tunnel_url: str = ""
    gcloud: str = "gcloud"
    port: int = 22
    connect_timeout_s: float = 15.0
    hosts: dict[str, str] = field(default_factory=dict)
    user_configured: bool = False


@dataclass(frozen=True)
class OsLoginConfig:
    """OS Login (nodes or projects with ``enable-oslogin=TRUE``): whose profile, and where the APIs are.

    Attributes:
        account: the Google account's email, or ``None`` for the ADC identity's (else gcloud's
            ``core/account``).
        api_endpoint: OS Login API override (``http://`` loopback: anonymous credentials), or ``None``.
        compute_api_endpoint: Compute API override (project metadata), or ``None``.
    """

    account: str | None = None
    api_endpoint: str | None = None
    compute_api_endpoint: str | None = None


@dataclass(frozen=True)
class GkeConfig:
    """GKE clusters: which to list and how to reach them (``[gke]``; absent: no GKE listing).

    Attributes:
        enabled: the ``[gke]`` table is present.
        discover: list the configured projects' clusters through the GKE API.
        api_endpoint: GKE API override (``http://`` loopback: anonymous credentials), or ``None``.
        kubeconfig: a kubeconfig path, or ``None``: its ``gke_PROJECT_LOCATION_CLUSTER`` contexts give
            those clusters' credentials, and ``contexts`` name clusters of their own.
        contexts: kubeconfig contexts to list as clusters without the GKE API.
    """

    enabled: bool = False
    discover: bool = True
    api_endpoint: str | None = None
    kubeconfig: Path | None = None
    contexts: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContainerConfig:
    """The serving container on each node.

    Attributes:
        name: container name (``docker run --name``).
        port: vLLM's HTTP port on the node.
        image: image used when no container runs yet.
        model: model used when no container runs yet.
        args: extra ``vllm serve`` arguments for that template.
        env: extra environment for that template (values may be ``$VAR`` references).
    """

    name: str = "vllm"
    port: int = 8000
    image: str = "vllm/vllm-tpu:latest"
    model: str = "Qwen/Qwen3-8B"
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ForwardConfig:
    """``[forward]``: the local ports of forwards to vLLM (:mod:`console.flows.forwards`).

    Attributes:
        port: a fixed local port for any node, or ``None`` (each node then gets its stable port,
            derived from its name within ``console.flows.forwards.STABLE_PORTS``).
        ports: per-node fixed local ports, keyed by node name (``[forward.ports]``); they win.
    """

    port: int | None = None
    ports: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LogsConfig:
    """The full log of each launch, kept on disk (``[logs]``).

    Attributes:
        max_mib: size at which a launch's log file is rotated (MiB).
        keep: rotated files kept per launch besides the current one (the oldest goes first).
        dir: where the logs go, or ``None`` for the XDG state path
            (``$XDG_STATE_HOME/tpu-console/logs``).
    """

    max_mib: float = 64.0
    keep: int = 3
    dir: Path | None = None

    @property
    def folder(self) -> Path:
        """The logs folder (``dir`` or the XDG state path)."""
        return self.dir if self.dir is not None else platformdirs.user_state_path(APP_NAME) / "logs"


#: Default $ per chip-hour, by chip generation and provisioning model (public list prices,
#: us-central; edit them in the config for your region and discounts).
DEFAULT_PRICES: dict[str, dict[str, float]] = {
    "v5e": {"on-demand": 1.20, "spot": 0.48, "flex-start": 0.60, "reserved": 0.84, "preemptible": 0.48},
    "v6e": {"on-demand": 2.70, "spot": 1.08, "flex-start": 1.35, "reserved": 1.89, "preemptible": 1.08},
    "v5p": {"on-demand": 4.20, "spot": 1.68, "flex-start": 2.10, "reserved": 2.94, "preemptible": 1.68},
}


@dataclass(frozen=True)
class Config:
    """The whole configuration. Build with :func:`load_config`.

    Attributes:
        path: the file it came from, or ``None`` for built-in defaults.
        projects: projects to list.
        api_endpoint: TPU API endpoint override (``http://`` loopback uses anonymous credentials).
        refresh_interval_s: seconds between fleet refreshes.
        request_timeout_s: timeout for each TPU API call.
        ssh: SSH settings.
        os_login: OS Login settings.
        container: serving container settings.
        forward: local ports of the forwards to vLLM.
        prices: $ per chip-hour, ``prices[generation][provisioning_model]``.
        keys: binding overrides, action id -> key (``{"refresh": "ctrl+r"}``).
        db_path: history database override, or ``None`` for the XDG data path.
        readonly: hide and refuse every action that changes the fleet (request, delete, probe,
            swap, rollback), as k9s ``--readonly`` does; ``readonly = true`` or ``--readonly``.
        logs: where and how big the launches' full logs are kept.
        gke: GKE clusters to list (``[gke]``).
    """

    path: Path | None = None
    projects: tuple[ProjectConfig, ...] = ()
    api_endpoint: str | None = None
    refresh_interval_s: float = 10.0
    request_timeout_s: float = 20.0
    ssh: SshConfig = field(default_factory=SshConfig)
    os_login: OsLoginConfig = field(default_factory=OsLoginConfig)
    container: ContainerConfig = field(default_factory=ContainerConfig)
    forward: ForwardConfig = field(default_factory=ForwardConfig)
    prices: dict[str, dict[str, float]] = field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_PRICES.items()})
    keys: dict[str, str] = field(default_factory=dict)
    db_path: Path | None = None
    readonly: bool = False
    logs: LogsConfig = field(default_factory=LogsConfig)
    gke: GkeConfig = field(default_factory=GkeConfig)

    def price_per_chip_hour(self, generation: str | None, provisioning_model: str) -> float | None:
        """$ per chip-hour for a chip generation (``v6e``) and model (``spot``), or ``None``."""
        return self.prices.get(generation or "", {}).get(provisioning_model)


def default_config_path() -> Path:
    """The XDG config file path, e.g. ``~/.config/tpu-console/config.toml``."""
    return platformdirs.user_config_path(APP_NAME) / "config.toml"


def default_db_path() -> Path:
    """The XDG data path of the history database, e.g. ``~/.local/share/tpu-console/history.db``."""
    return platformdirs.user_data_path(APP_NAME) / "history.db"


# --- validation -------------------------------------------------------------------------

_NUM = (int, float)


def _line_of(text: str, table: str, key: str) -> int | None:
    """Best-effort line number (1-based) of ``key`` inside ``[table]`` in TOML ``text``."""
    current = ""
    key_re = re.compile(r"^\s*(?:\"%s\"|'%s'|%s)\s*=" % ((re.escape(key),) * 3))
    for number, line in enumerate(text.splitlines(), start=1):
        header = re.match(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$", line)
        if header:
            current = header.group(1).replace('"', "")
            if table and current == table and not key:
                return number
            continue
        if current == table and key_re.match(line):
            return number
    return None


class _Checker:
    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text

    def fail(self, table: str, key: str, problem: str) -> ConfigError:
        dotted = f"{table}.{key}" if table else key
        line = _line_of(self.text, table, key)
        where = f"{self.path}, line {line}" if line else str(self.path)
        return ConfigError(f"{where}: key '{dotted}': {problem}")

    def table(self, data: Any, table: str, allowed: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise self.fail(table.rpartition(".")[0], table.rpartition(".")[2], "expected a table")
        for key, value in data.items():
            if key not in allowed:
                names = ", ".join(sorted(allowed))
                raise self.fail(table, key, f"unknown key (known keys here: {names})")
            expected = allowed[key]
            if expected is None:
                continue
            if expected is float:
                ok = isinstance(value, _NUM) and not isinstance(value, bool)
            elif expected is int:
                ok = isinstance(value, int) and not isinstance(value, bool)
            else:
                ok = isinstance(value, expected)
            if not ok:
                want = {str: "a string", int: "an integer", float: "a number", list: "a list",
                        dict: "a table", bool: "true or false"}.get(expected, str(expected))
                raise self.fail(table, key, f"expected {want}, got {type(value).__name__} {value!r}")
        return data


def config_file_named(config: Config) -> str:
    """The file a sentence should name: the config's own, else the default path looked for and not found
    (``/home/a/.config/tpu-console/config.toml (not there yet)``), never just "the config file"."""
    if config.path is not None:
        return str(config.path)
    return f"{default_config_path()} (looked for there, not found)"


def load_config(path: Path | str | None = None, *, required: bool = False) -> Config:
    """Load the config from ``path`` (default: the XDG path).

    Args:
        path: file to read; ``None`` uses :func:`default_config_path`.
        required: raise when the file does not exist (true when the user named it).

    Returns:
        The typed :class:`Config`; built-in defaults when the default file is absent.

    Raises:
        ConfigError: syntax error, unknown key, wrong type or value, or a missing file
            that was named explicitly. The message names the file, the key and the line.
    """
    explicit = path is not None
    file = Path(path).expanduser() if path is not None else default_config_path()
    if not file.exists():
        if explicit or required:
            raise ConfigError(f"{file}: no such config file")
        return Config()
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: TOML syntax error: {exc}") from None
    return _build(file, text, data)


def _build(file: Path, text: str, data: dict[str, Any]) -> Config:
    chk = _Checker(file, text)
    chk.table(data, "", {
        "projects": list, "api_endpoint": str, "refresh_interval_s": float, "request_timeout_s": float,
        "ssh": dict, "os_login": dict, "container": dict, "forward": dict, "prices": dict, "keys": dict,
        "db_path": str, "readonly": bool, "logs": dict, "gke": dict,
    })
    projects = _projects(chk, data)
    for key in ("refresh_interval_s", "request_timeout_s"):
        if key in data and data[key] <= 0:
            raise chk.fail("", key, "must be a positive number of seconds")
    ssh, os_login = _ssh(chk, data), _os_login(chk, data)
    container, forward = _container(chk, data), _forward(chk, data)
    prices = _prices(chk, data)
    keys = chk.table(data.get("keys", {}), "keys", {k: str for k in data.get("keys", {})})
    logs = _logs(chk, data)

    return Config(
        path=file,
        projects=tuple(projects),
        api_endpoint=data.get("api_endpoint") or None,
        refresh_interval_s=float(data.get("refresh_interval_s", 10.0)),
        request_timeout_s=float(data.get("request_timeout_s", 20.0)),
        ssh=ssh,
        os_login=os_login,
        container=container,
        forward=forward,
        prices=prices,
        keys=dict(keys),
        db_path=Path(os.path.expanduser(data["db_path"])) if data.get("db_path") else None,
        readonly=bool(data.get("readonly", False)),
        logs=logs,
        gke=_gke(chk, data),
    )


def _projects(chk: _Checker, data: dict[str, Any]) -> list[ProjectConfig]:
    projects = []
    for item in data.get("projects", []):
        item = chk.table(item, "projects", {"id": str, "zones": list})
        if not item.get("id"):
            raise chk.fail("projects", "id", "every [[projects]] entry needs an id")
        zones = item.get("zones", [])
        if not all(isinstance(z, str) for z in zones):
            raise chk.fail("projects", "zones", "expected a list of zone names")
        projects.append(ProjectConfig(id=item["id"], zones=tuple(zones)))
    return projects


def _ssh(chk: _Checker, data: dict[str, Any]) -> SshConfig:
    s = chk.table(data.get("ssh", {}), "ssh", {
        "user": str, "private_key": str, "known_hosts": str, "proxy_command": str, "port": int,
        "connect_timeout_s": float, "hosts": dict, "iap": str, "iap_tunnel_url": str, "gcloud": str,
    })
    if s.get("iap", "auto") not in IAP_MODES:
        raise chk.fail("ssh", "iap", f"expected one of {', '.join(repr(m) for m in IAP_MODES)}, got {s['iap']!r}")
    if s.get("iap_tunnel_url") and not s["iap_tunnel_url"].startswith(("ws://", "wss://")):
        raise chk.fail("ssh", "iap_tunnel_url", f"expected a ws:// or wss:// URL, got {s['iap_tunnel_url']!r}")
    hosts = chk.table(s.get("hosts", {}), "ssh.hosts", {k: str for k in s.get("hosts", {})})
    for node, target in hosts.items():
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            raise chk.fail("ssh.hosts", node, f"expected \"host:port\", got {target!r}")
        if not 1 <= int(port) <= 65535:
            raise chk.fail("ssh.hosts", node, f"port {int(port)} is not a TCP port (1-65535), in {target!r}")
    if "port" in s and not 1 <= s["port"] <= 65535:
        raise chk.fail("ssh", "port", f"{s['port']} is not a TCP port (1-65535)")
    ssh_defaults = SshConfig()
    return SshConfig(
        user=s.get("user") or ssh_defaults.user,
        private_key=Path(os.path.expanduser(s["private_key"])) if "private_key" in s else ssh_defaults.private_key,
        known_hosts=Path(os.path.expanduser(s["known_hosts"])) if "known_hosts" in s else ssh_defaults.known_hosts,
        proxy_command=s.get("proxy_command", ""),
        iap=s.get("iap", "auto"),
        iap_tunnel_url=s.get("iap_tunnel_url", ""),
        gcloud=s.get("gcloud", "gcloud"),
        port=s.get("port", 22),
        connect_timeout_s=float(s.get("connect_timeout_s", 15.0)),
        hosts=dict(hosts),
        user_configured=bool(s.get("user")),
    )


def _os_login(chk: _Checker, data: dict[str, Any]) -> OsLoginConfig:
    o = chk.table(data.get("os_login", {}), "os_login", {
        "account": str, "api_endpoint": str, "compute_api_endpoint": str,
    })
    if o.get("account") and "@" not in o["account"]:
        raise chk.fail("os_login", "account", f"{o['account']!r} is not an email address (alice@example.com)")
    return OsLoginConfig(account=o.get("account") or None, api_endpoint=o.get("api_endpoint") or None,
                         compute_api_endpoint=o.get("compute_api_endpoint") or None)


def _container(chk: _Checker, data: dict[str, Any]) -> ContainerConfig:
    c = chk.table(data.get("container", {}), "container", {
        "name": str, "port": int, "image": str, "model": str, "args": list, "env": dict,
    })
    if not all(isinstance(a, str) for a in c.get("args", [])):
        raise chk.fail("container", "args", "expected a list of strings")
    env = chk.table(c.get("env", {}), "container.env", {k: str for k in c.get("env", {})})
    if "name" in c and not CONTAINER_NAME.fullmatch(c["name"]):
        raise chk.fail("container", "name", f"{c['name']!r} is not a docker container name "
                                            "(letters, digits, then also _ . -: [a-zA-Z0-9][a-zA-Z0-9_.-]*)")
    if "port" in c and not 1 <= c["port"] <= 65535:
        raise chk.fail("container", "port", f"{c['port']} is not a TCP port (1-65535)")
    defaults = ContainerConfig()
    return ContainerConfig(
        name=c.get("name", defaults.name), port=c.get("port", defaults.port),
        image=c.get("image", defaults.image), model=c.get("model", defaults.model),
        args=tuple(c.get("args", ())), env=dict(env),
    )


def _forward(chk: _Checker, data: dict[str, Any]) -> ForwardConfig:
    f = chk.table(data.get("forward", {}), "forward", {"port": int, "ports": dict})
    node_ports = chk.table(f.get("ports", {}), "forward.ports", {k: int for k in f.get("ports", {})})
    for table, key, value in [("forward", "port", f.get("port")), *(("forward.ports", k, v) for k, v in node_ports.items())]:
        if value is not None and not 1 <= value <= 65535:
            raise chk.fail(table, key, f"{value} is not a TCP port (1-65535)")
    return ForwardConfig(port=f.get("port"), ports=dict(node_ports))


def _prices(chk: _Checker, data: dict[str, Any]) -> dict[str, dict[str, float]]:
    prices = {k: dict(v) for k, v in DEFAULT_PRICES.items()}
    for gen, table in chk.table(data.get("prices", {}), "prices", {k: dict for k in data.get("prices", {})}).items():
        allowed = {m: float for m in ("on-demand", "spot", "flex-start", "reserved", "preemptible")}
        prices.setdefault(gen, {}).update(chk.table(table, f"prices.{gen}", allowed))
    return prices


def _logs(chk: _Checker, data: dict[str, Any]) -> LogsConfig:
    lg = chk.table(data.get("logs", {}), "logs", {"max_mib": float, "keep": int, "dir": str})
    if "max_mib" in lg and not lg["max_mib"] > 0:
        raise chk.fail("logs", "max_mib", "must be a positive number of MiB")
    if "keep" in lg and not 0 <= lg["keep"] <= 100:
        raise chk.fail("logs", "keep", "must be a number of files from 0 to 100")
    return LogsConfig(max_mib=float(lg.get("max_mib", 64.0)), keep=int(lg.get("keep", 3)),
                      dir=Path(os.path.expanduser(lg["dir"])) if lg.get("dir") else None)


def _gke(chk: _Checker, data: dict[str, Any]) -> GkeConfig:
    if "gke" not in data:
        return GkeConfig()
    g = chk.table(data["gke"], "gke", {"discover": bool, "api_endpoint": str, "kubeconfig": str, "contexts": list})
    contexts = g.get("contexts", [])
    if not all(isinstance(c, str) and c for c in contexts):
        raise chk.fail("gke", "contexts", "expected a list of kubeconfig context names")
    if contexts and not g.get("kubeconfig"):
        raise chk.fail("gke", "contexts", "contexts need a kubeconfig = PATH in [gke]")
    endpoint = g.get("api_endpoint") or None
    if endpoint and not endpoint.startswith(("http://", "https://")) and "/" in endpoint:
        raise chk.fail("gke", "api_endpoint", f"expected http(s)://HOST[:PORT] or HOST, got {endpoint!r}")
    return GkeConfig(enabled=True, discover=g.get("discover", True), api_endpoint=endpoint,
                     kubeconfig=Path(os.path.expanduser(g["kubeconfig"])) if g.get("kubeconfig") else None,
                     contexts=tuple(contexts))
