"""A benchmark of a GKE workload's vLLM: the same :func:`console.flows.bench.run_benchmark` and recording as a
node's (:class:`console.flows.bench.BenchCase`), through the workload's forward (API server port-forward to
the serving pod: :class:`console.flows.workload_forward.WorkloadForward`).

$/Mtok: the price per chip-hour of the node pool's chip generation (from its machine type,
``ct6e-standard-4t`` -> ``v6e``) and provisioning model (spot / flex-start / reserved / on-demand) in the
config's ``[prices]``, times the chips the pod holds (its ``google.com/tpu``; a LeaderWorkerSet group's: per
pod x the group's size) (:func:`workload_pricing`). The results are recorded against the launch of the pod
benchmarked (found by the pod's name, as a container by its id), else the workload's newest launch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from console.flows.bench import BenchParams, Pricing, record_result, run_benchmark
from console.flows.gke_target import lint_node
from console.flows.history_access import HistoryAccess
from store.errors import StoreError

if TYPE_CHECKING:
    from console.flows.bench import BenchResult
    from console.flows.workload_forward import WorkloadForward
    from remote.gke.models import NodePool, Workload


def workload_pricing(workload: Workload, pool: NodePool | None, prices: Mapping[str, Mapping[str, float]], *,
                     provisioning_model: str | None = None) -> Pricing:
    """The workload's price: ``prices[generation][provisioning model]`` $ per chip-hour x the pod's chips.

    Args:
        workload: its ``chips`` (``google.com/tpu`` per pod) and ``size`` (pods of an LWS group) are billed.
        pool: its node pool (the machine type's generation, the pool's provisioning model), or ``None``:
            the workload's own accelerator label and provisioning model.
        prices: the config's price table.
        provisioning_model: price as this model instead of the pool's.
    """
    from remote.gke.parse import generation_of_accelerator, machine_facts

    generation = (machine_facts(pool.machine_type)[1] if pool is not None else "") \
        or generation_of_accelerator(workload.accelerator) or None
    model = provisioning_model or (pool.provisioning_model if pool is not None else "") \
        or workload.provisioning_model or "on-demand"
    chips = (workload.chips or 0) * max(1, workload.size) or None
    return Pricing(prices.get(generation or "", {}).get(model), chips, generation, model)


def container_words(workload: Workload) -> list[str]:
    """The serving container's ``command`` + ``args`` (what the server was started with)."""
    from remote.gke.edit import pod_spec_of
    from remote.gke.parse import serving_container

    container = serving_container(pod_spec_of(workload))
    return [w for w in [*(container.get("command") or []), *(container.get("args") or [])] if isinstance(w, str)]


def workload_api_key(workload: Workload, given: str | None = None) -> str | None:
    """The key a benchmark sends: ``given``, else ``$VLLM_API_KEY``, else the container's ``--api-key`` or
    its plain ``VLLM_API_KEY`` env value (never recorded; a key from a Secret is not read)."""
    from remote.gke.edit import pod_spec_of
    from remote.gke.parse import serving_container

    found = given or os.environ.get("VLLM_API_KEY") or None
    words = container_words(workload)
    for i, word in enumerate(words):
        if found:
            break
        if word == "--api-key" and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith("--api-key="):
            found = word.split("=", 1)[1]
    env = serving_container(pod_spec_of(workload)).get("env") or []
    return found or next((e.get("value") for e in env if isinstance(e, dict) and e.get("name") == "VLLM_API_KEY"
                          and isinstance(e.get("value"), str) and e.get("value")), None)


@dataclass
class WorkloadBenchCase:
    """One benchmark of a workload's vLLM through ``forward`` (the TUI's held one, or a verb's own).

    Args:
        workload: the workload (its container's flags: API key, tool calling).
        forward: an open forward to its serving pod.
        params: what to run.
        pricing: :func:`workload_pricing`.
        history: the history (results recorded against the pod's launch).
        api_key: ``--api-key`` given by the operator.
    """

    workload: Workload
    forward: WorkloadForward
    params: BenchParams
    pricing: Pricing
    history: HistoryAccess
    api_key: str | None = None
    recorded: list[int] = field(default_factory=list)

    async def run(self, *, on_status: Callable[[str], None] | None = None,
                  on_progress: Callable[[Any], None] | None = None,
                  on_result: Callable[[BenchResult, int | None], None] | None = None) -> list[BenchResult]:
        """Run and record; returns the results (one per sweep level).

        Raises:
            RemoteError: the server failed. ValueError: arguments the library refuses.
        """
        from remote.bench.smoke import tool_calling_enabled

        launch_id = self._launch_id()
        if on_status is not None:
            on_status(f"Running {self.params.kind} through {self.forward.url} (-> {self.workload.ref} pod "
                      f"{self.forward.pod} port {self.forward.container_port})…")

        def done(result: BenchResult) -> None:
            row = self._record(launch_id, result)
            if on_result is not None:
                on_result(result, row)

        return await run_benchmark(self.forward.url, self.params, on_progress=on_progress, on_result=done,
                                   api_key=workload_api_key(self.workload, self.api_key),
                                   tool_calling=tool_calling_enabled(container_words(self.workload)))

    def _launch_id(self) -> int | None:
        """The launch of the pod benchmarked, else the workload's newest; ``None`` without either."""
        store = self.history.get()
        if store is None:
            return None
        node = lint_node(self.workload).name
        try:
            found = store.find_launch_by_container(node, self.forward.pod) if self.forward.pod else None
            if found is None:
                newest = store.list_launches(node=node, limit=1)
                found = newest[0] if newest else None
        except StoreError as exc:
            self.history.failed(exc)
            return None
        return int(found.id) if found is not None else None

    def _record(self, launch_id: int | None, result: BenchResult) -> int | None:
        store = self.history.get()
        if store is None:
            return None
        try:
            row = record_result(store, launch_id, lint_node(self.workload), self.params, result, self.pricing)
        except StoreError as exc:
            self.history.failed(exc)
            return None
        if row is not None:
            self.recorded.append(row)
        return row
