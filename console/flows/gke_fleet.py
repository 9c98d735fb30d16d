"""The GKE part of the fleet, for the fleet screen and ``tpu-console nodes``: one source built from the
config, and the rows both doors show.

``[gke]`` absent: no GKE listing at all (a TPU-only operator sees no GKE calls and no 403 lines).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from remote.gke.models import GkeFleet, NodePool, Workload

if TYPE_CHECKING:
    from console.config import Config, ProjectConfig
    from remote.gke.fleet import GkeSource


def gke_source(config: Config, projects: Sequence[ProjectConfig] | None = None) -> GkeSource | None:
    """The :class:`~remote.gke.fleet.GkeSource` of ``config`` (``projects`` instead of the config's), or
    ``None`` when ``[gke]`` is absent."""
    if not config.gke.enabled:
        return None
    from remote.gke.fleet import GkeSource

    gke = config.gke
    return GkeSource(projects if projects is not None else config.projects, api_endpoint=gke.api_endpoint,
                     timeout_s=config.request_timeout_s, kubeconfig=str(gke.kubeconfig) if gke.kubeconfig else None,
                     contexts=gke.contexts, discover=gke.discover)


async def list_gke(source: GkeSource | None) -> GkeFleet:
    """``source``'s fleet once (an empty one without a source); no-credentials becomes one problem line.

    The source stays open (its clients are reused by watch and swap); the caller closes it.
    """
    if source is None:
        return GkeFleet()
    from remote.errors import CredentialsError
    from remote.gke.models import GkeProblem

    try:
        return await source.list_fleet()
    except CredentialsError as exc:
        return GkeFleet(problems=(GkeProblem("", None, None, 401, exc.message),))


#: Columns of the node pool rows (``nodes`` and the fleet screen).
POOL_COLUMNS = ("CLUSTER", "POOL", "MACHINE TYPE", "ACCELERATOR", "TOPOLOGY", "PROVISIONING", "NODES", "CHIPS",
                "IN USE", "LOCATION", "PROJECT")
#: Columns of the workload rows.
WORKLOAD_COLUMNS = ("CLUSTER", "NAMESPACE", "WORKLOAD", "READY", "POOL", "ACCELERATOR", "TOPOLOGY", "PROVISIONING",
                    "MODEL", "IMAGE", "LOCATION", "PROJECT")


def pool_row(pool: NodePool) -> tuple[str, ...]:
    """One node pool as text cells, in :data:`POOL_COLUMNS` order."""
    model = pool.provisioning_model + (" (queued)" if pool.queued else "")
    if pool.reservation:
        model += f" ({pool.reservation})"
    return (pool.cluster, pool.name, pool.machine_type or "-", pool.accelerator or "-", pool.topology or "-", model,
            str(pool.node_count), "-" if pool.chips is None else str(pool.chips),
            "?" if pool.chips_in_use is None else str(pool.chips_in_use), pool.location or "-", pool.project or "-")


def workload_row(w: Workload) -> tuple[str, ...]:
    """One workload as text cells, in :data:`WORKLOAD_COLUMNS` order."""
    return (w.cluster, w.namespace, w.ref, f"{w.ready}/{w.replicas}", w.node_pool or "-", w.accelerator or "-",
            w.topology or "-", w.provisioning_model or "-", w.model or "-", w.image or "-", w.location or "-",
            w.project or "-")
