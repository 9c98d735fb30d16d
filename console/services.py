"""The app's collaborators, built once from the config (the composition root).

The app is handed a :class:`Services`; tests and the sandbox use the same
constructor, so the real client code runs everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from console.config import Config
from console.flows.actions import RunningActions
from console.flows.forwards import ForwardRegistry
from console.flows.history_store import history_path
from console.flows.serving import ResolvedTargets
from remote.models import FleetSnapshot, Node, QueuedResource, utc_now

if TYPE_CHECKING:
    from console.flows.fleet_cache import FleetCache
    from console.flows.serving import ServingSampler
    from console.flows.ssh_login import LoginResolver
    from remote.container.spec import ContainerSpec
    from remote.startup import StartupState
    from remote.tpu.requests import QueuedResourceService
    from sandbox.runner import Sandbox
    from store.history import HistoryStore


class FleetLister(Protocol):
    """The TPU API as the console reads it (``remote.tpu.api.FleetSource`` in production)."""

    async def list_fleet(self) -> FleetSnapshot:
        """One snapshot of every configured project."""
        ...

    async def get_node(self, project: str, zone: str, name: str) -> Node:
        """One node, fresh (raises ``TpuApiError`` 404 when it is gone)."""
        ...

    async def get_queued_resource(self, project: str, zone: str, name: str) -> QueuedResource:
        """One queued resource, fresh (raises ``TpuApiError`` 404 when it is gone)."""
        ...


@dataclass
class Services:
    """Collaborators of the console.

    Attributes:
        config: the loaded configuration.
        fleet: the TPU API fleet lister.
        db_path: the history database file.
        sandbox: the running sandbox when ``--demo``, else ``None``.
        clock: the current UTC time (tests freeze it for stable snapshots).
        previous_specs: node key -> the ``ContainerSpec`` a swap replaced (what rollback re-runs).
        forwards: the console's forwards to vLLM (they outlive the screen that opened them).
        watching: node key -> the startup state its startup view last read (kept when the view is left).
        serving_sampler: ``node -> ServingSampler`` for the fleet's serving columns
            (:func:`serving_sampler_for` in production), or ``None``: not sampled (the columns say ``-``).
        serving_targets: the SSH targets those samplers resolved, kept while node and config stay.
        fleet_cache: where the fleet screen keeps the last fleet it listed (shown at the next start
            before the first refresh), or ``None``: not kept.
        actions: the use cases running remote steps now (a swap, a request...): quitting asks while any run.
        shared_sandbox_dir: ``--demo`` found a sandbox already running there (``tpu-console sandbox``)
            and uses it instead of starting another; ``None`` otherwise.
        logins: which user each connection logs in as (:attr:`logins`: one resolver, its caches shared by
            every screen of the console).
    """

    config: Config
    fleet: FleetLister
    db_path: Path
    sandbox: Sandbox | None = None
    clock: Callable[[], datetime] = utc_now
    previous_specs: dict[tuple[str, str, str], ContainerSpec] = field(default_factory=dict)
    forwards: ForwardRegistry = field(default_factory=ForwardRegistry)
    watching: dict[tuple[str, str, str], StartupState] = field(default_factory=dict)
    serving_sampler: Callable[[Node], ServingSampler] | None = None
    serving_targets: ResolvedTargets = field(default_factory=ResolvedTargets)
    fleet_cache: FleetCache | None = None
    actions: RunningActions = field(default_factory=RunningActions)
    shared_sandbox_dir: Path | None = None
    _store: HistoryStore | None = field(default=None, repr=False)
    _queued: QueuedResourceService | None = field(default=None, repr=False)
    _logins: LoginResolver | None = field(default=None, repr=False)
    _config_mtime_ns: int | None = field(default=None, repr=False)

    @property
    def queued_resources(self) -> QueuedResourceService:
        """Create / get / delete of queued resources over ``fleet``'s clients (built on first use).

        Raises:
            remote.errors.RemoteError: ``fleet`` is not a ``FleetSource`` (it has no TPU API client).
        """
        if self._queued is None:
            from remote.errors import RemoteError
            from remote.tpu.api import FleetSource
            from remote.tpu.requests import QueuedResourceService

            if not isinstance(self.fleet, FleetSource):
                raise RemoteError("this fleet source cannot create or delete queued resources")
            self._queued = QueuedResourceService(self.fleet)
        return self._queued

    @property
    def logins(self) -> LoginResolver:
        """The console's :class:`~console.flows.ssh_login.LoginResolver` (built on first use; it reads
        the config as it is now: project metadata and OS Login profiles are cached across screens)."""
        if self._logins is None:
            from console.flows.ssh_login import LoginResolver

            self._logins = LoginResolver(self.config)
        self._logins.config = self.config
        return self._logins

    @property
    def store(self) -> HistoryStore:
        """The history store, opened on first use.

        Raises:
            store.StoreError: the database cannot be opened (the message names the file).
        """
        if self._store is None:
            from console.flows.history_store import open_history

            self._store = open_history(self.config, self.db_path)
        return self._store

    def __post_init__(self) -> None:
        try:
            self._config_mtime_ns = self.config.path.stat().st_mtime_ns if self.config.path else None
        except OSError:
            self._config_mtime_ns = None

    def reload_ssh_hosts(self) -> bool:
        """Take the ``[ssh.hosts]`` of the config file as it is now, when the file changed since the
        last look (the sandbox writes an entry for every node it makes READY, e.g. one requested from
        the console). Only the hosts change; a file that no longer loads is left for the next start.

        Returns:
            ``True`` when the hosts changed.
        """
        from dataclasses import replace

        from console.config import ConfigError, load_config

        path = self.config.path
        if path is None:
            return False
        try:
            mtime_ns = path.stat().st_mtime_ns
        except OSError:
            return False
        if mtime_ns == self._config_mtime_ns:
            return False
        self._config_mtime_ns = mtime_ns
        try:
            hosts = load_config(path).ssh.hosts
        except ConfigError:
            return False
        if hosts == self.config.ssh.hosts:
            return False
        self.config = replace(self.config, ssh=replace(self.config.ssh, hosts=hosts))
        return True

    def close(self) -> None:
        """Close what was opened (forwards, store, API clients)."""
        self.forwards.close_all()
        if self._logins is not None:
            self._logins.close()
            self._logins = None
        if self._store is not None:
            self._store.close()
            self._store = None
        close = getattr(self.fleet, "close", None)
        if close is not None:
            close()


def build_services(config: Config, *, db_path: Path | None = None, sandbox: Sandbox | None = None,
                   fleet_cache: FleetCache | None = None, listing_process: bool = False) -> Services:
    """Build the production collaborators from ``config`` (imports the TPU client: ~0.5-1 s the
    first time, so the console calls this on a thread after its first frame).

    Args:
        config: loaded configuration.
        db_path: ``--db`` override; else ``config.db_path``; else the XDG data path.
        sandbox: the running sandbox, kept alive with the services.
        fleet_cache: where the last fleet is kept (:func:`console.flows.fleet_cache.cache_for`), or ``None``.
        listing_process: list the fleet in a child process (the console: its parsing never holds the
            UI's GIL, :mod:`remote.tpu.lister_process`); else in this process.
    """
    from remote.tpu.api import FleetSource
    from remote.tpu.lister_process import ProcessFleetSource

    kind = ProcessFleetSource if listing_process else FleetSource
    fleet = kind(config.projects, api_endpoint=config.api_endpoint, timeout_s=config.request_timeout_s)
    services = Services(
        config=config,
        fleet=fleet,
        db_path=history_path(config, db_path),
        sandbox=sandbox,
        fleet_cache=fleet_cache,
    )
    services.serving_sampler = lambda node: serving_sampler_for(services, node)
    if listing_process:
        # the serving samplers' SSH and HTTP clients, imported here (a thread, off the first frame):
        # asyncssh's import runs a compiler to look for liboqs, ~0.1-0.5 s the first sample held the UI
        import httpx  # noqa: F401

        import remote.ssh.connect
        import remote.ssh.forward  # noqa: F401
    return services


def serving_sampler_for(services: Services, node: Node) -> ServingSampler:
    """The production :class:`~console.flows.serving.ServingSampler` of ``node``: worker 0 through the
    one SSH target resolution, the node's forward in ``services.forwards`` when open, the state its
    startup view last read (``services.watching``)."""
    from console.flows.serving import sampler_for

    def forward_url() -> str | None:
        forward = services.forwards.get(node.key)
        return forward.url if forward is not None and forward.state == "open" else None

    # the config as it is now: the fleet makes a node's sampler after taking new [ssh.hosts] entries
    return sampler_for(node, services.config, services.fleet, forward_url=forward_url,
                       watched=lambda: services.watching.get(node.key), clock=services.clock,
                       logins=services.logins, targets=services.serving_targets)
