"""Probing spot capacity: the use case behind ``tpu-console probe`` (and the TUI's probe).

A probe creates a short-lived spot queued resource and deletes it again
(:func:`remote.tpu.probe.probe`), so it changes the fleet: read-only mode refuses it here, whatever
the door. While it runs it is registered in ``actions`` (quitting asks: the probe's queued resource
may be left behind, and the sentence names it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from console.flows.actions import RunningActions, tracked
from console.flows.policy import HasReadonly, refuse_in_readonly

if TYPE_CHECKING:
    from remote.tpu.advice import TryOption
    from remote.tpu.probe import ProbeResult
    from remote.tpu.requests import QueuedResourceService

#: Lists the accelerator types each zone of a project offers (``FleetSource.offered_types``):
#: ``project -> {zone: (type, ...)}``; raises ``RemoteError``.
OfferedTypes = Callable[[str], Awaitable[Mapping[str, Sequence[str]]]]


@dataclass(frozen=True)
class ProbeAnswer:
    """A probe's verdict and what to try.

    Attributes:
        result: the probe (``verdict``, ``reason``, ``deleted``...).
        tries: unless available, the options with their commands (:func:`remote.tpu.advice.what_to_try`).
        note: why the advice names no other zone (the zones' types could not be listed), or ``None``.
    """

    result: ProbeResult
    tries: list[TryOption] = field(default_factory=list)
    note: str | None = None


@dataclass
class ProbeCase:
    """One capacity probe of ``accelerator_type`` in ``project``/``zone``.

    Args:
        config: what the policy reads (``readonly``).
        service: the queued-resource service.
        project, zone, accelerator_type, runtime_version: what to probe.
        wait_s: seconds to wait for an answer before calling it a stockout.
        poll_s: seconds between two reads of the probe's state.
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
    poll_s: float = 2.0

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
                               wait_s=self.wait_s, poll_s=self.poll_s, on_state=on_state)

    async def answer(self, offered: OfferedTypes, on_state: Callable[[str], None] | None = None) -> ProbeAnswer:
        """:meth:`run`, then, unless capacity is available, what to try (the next smaller type here,
        the project's other zones offering the type, flex-start after a spot stockout, quota): the
        one answer ``tpu-console probe`` prints and the request form shows.

        Args:
            offered: lists the zones' accelerator types of a project; a failure leaves the advice
                without other zones and says so in :attr:`ProbeAnswer.note`.

        Raises:
            ReadOnlyRefused, ValueError, RemoteError: as :meth:`run`.
        """
        from remote.errors import RemoteError
        from remote.tpu.advice import what_to_try

        result = await self.run(on_state)
        if result.verdict == "available":
            return ProbeAnswer(result)
        note = None
        try:
            zones = await offered(self.project)
        except RemoteError as exc:
            note = f"could not list the zones' accelerator types ({exc}); the advice names no other zone."
            zones = {}
        tries = what_to_try(result.verdict, project=self.project, zone=self.zone,
                            accelerator_type=self.accelerator_type, provisioning_model="spot", offered=zones,
                            reason=result.reason)
        return ProbeAnswer(result, tries, note)
