"""Probing spot capacity: the use case behind ``tpu-console probe`` (and the TUI's probe).

A probe creates a short-lived spot queued resource and deletes it again
(:func:`remote.tpu.probe.probe`), so it changes the fleet: read-only mode refuses it here, whatever
the door. While it runs it is registered in ``actions`` (quitting asks: the probe's queued resource
may be left behind, and the sentence names it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from console.flows.actions import RunningActions, tracked
from console.flows.policy import HasReadonly, refuse_in_readonly

if TYPE_CHECKING:
    from remote.tpu.probe import ProbeResult
    from remote.tpu.requests import QueuedResourceService


@dataclass
class ProbeCase:
    """One capacity probe of ``accelerator_type`` in ``project``/``zone``.

    Args:
        config: what the policy reads (``readonly``).
        service: the queued-resource service.
        project, zone, accelerator_type, runtime_version: what to probe.
        wait_s: seconds to wait for an answer before calling it a stockout.
        actions: the console's actions in flight, or ``None``.

    Raises:
        ReadOnlyRefused: read-only mode is on.
    """

    config: HasReadonly
    service: QueuedResourceService
    project: str
    zone: str
    accelerator_type: str
    runtime_version: str
    wait_s: float = 120.0
    actions: RunningActions | None = None

    def __post_init__(self) -> None:
        refuse_in_readonly(self.config, "probe")

    async def run(self, on_state: Callable[[str], None] | None = None) -> ProbeResult:
        """Create the probe's spot queued resource, read the answer, delete it.

        Raises:
            ReadOnlyRefused: read-only mode is on.
            ValueError: a bad zone, accelerator type or runtime (nothing created).
            RemoteError: the TPU API failed (credentials, unreachable).
        """
        from remote.tpu.probe import probe, probe_name

        refuse_in_readonly(self.config, "probe")
        with tracked(self.actions, f"probe of {self.accelerator_type} in {self.zone}",
                     f"a spot queued resource {probe_name(self.accelerator_type)}-… may exist in "
                     f"{self.project}/{self.zone} until the probe deletes it"):
            return await probe(self.service, self.project, self.zone, self.accelerator_type, self.runtime_version,
                               wait_s=self.wait_s, on_state=on_state)
