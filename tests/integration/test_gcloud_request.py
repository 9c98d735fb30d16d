"""The request preview's gcloud line (console.flows.request: ``RequestPreview.gcloud``), run verbatim by
the real gcloud against the sandbox's TPU API, creates the same queued resource as the console's own
create (google-cloud-tpu): the same accelerator type, runtime, provisioning model (as the API reads
it), run duration and valid-until. Skipped, saying why, where gcloud is missing.
"""

from __future__ import annotations

import shlex

import pytest

from console.config import ProjectConfig
from console.flows.request import build_request, preview
from remote.models import utc_now
from remote.tpu.api import FleetSource
from remote.tpu.parse import qr_provisioning_model
from remote.tpu.requests import QueuedResourceService
from sandbox.fleet_data import default_world
from sandbox.tpu_server import SandboxTpuApi, _tier_of
from tests.integration.gcloud_oracle import gcloud_for, why_no_gcloud

pytestmark = pytest.mark.skipif(why_no_gcloud() is not None, reason=why_no_gcloud() or "")

P, ZONE = "inference-prod", "us-west4-a"
#: provisioning model -> the form's duration fields.
REQUESTS = {"flex-start": {"max_run_duration": "4h", "valid_until": "1h"}, "spot": {"valid_until": "30m"},
            "reserved": {}, "on-demand": {}}


def _same_fields(qr: dict) -> dict:
    """What must be the same in both: accelerator, runtime, provisioning model, run duration, valid-until."""
    node = qr["tpu"]["nodeSpec"][0]["node"]
    return {"acceleratorType": node["acceleratorType"], "runtimeVersion": node["runtimeVersion"],
            "provisioning_model": qr_provisioning_model(qr), "sandbox_tier": _tier_of(qr),
            "maxRunDuration": (qr.get("runDuration") or {}).get("maxRunDuration"),
            "validUntilDuration": (qr.get("queueingPolicy") or {}).get("validUntilDuration")}


async def test_the_preview_gcloud_line_creates_what_the_console_creates(tmp_path) -> None:
    server = SandboxTpuApi(default_world(utc_now()), time_scale=0.02)
    server.start()
    source = FleetSource([ProjectConfig(P)], api_endpoint=server.endpoint, timeout_s=10)
    try:
        gcloud = gcloud_for(tmp_path, tpu=server.endpoint, google_apis=server.endpoint, account="alice@example.com")
        lines = {}
        for model, durations in REQUESTS.items():
            request = build_request(name=f"g-{model}", project=P, zone=ZONE, accelerator_type="v5litepod-4",
                                    provisioning_model=model, **durations)
            lines[model] = preview(request, {}).gcloud
            assert lines[model] == request.gcloud_line()
        runs = {model: gcloud.start(shlex.split(line)[1:]) for model, line in lines.items()}   # verbatim, all at once
        service = QueuedResourceService(source, poll_initial_s=0.02, poll_max_s=0.05)
        for model, durations in REQUESTS.items():
            await service.create(build_request(name=f"c-{model}", project=P, zone=ZONE,
                                               accelerator_type="v5litepod-4", provisioning_model=model, **durations))
        for model, process in runs.items():
            _out, err = process.communicate(timeout=120)
            assert process.returncode == 0, f"{lines[model]}: {err[-600:]}"
        for model in REQUESTS:
            theirs = server.world.get(P, "queuedResources", f"projects/{P}/locations/{ZONE}/queuedResources/g-{model}")
            ours = server.world.get(P, "queuedResources", f"projects/{P}/locations/{ZONE}/queuedResources/c-{model}")
            assert theirs is not None and ours is not None
            assert _same_fields(theirs) == _same_fields(ours), model
            assert _same_fields(ours)["provisioning_model"] == model
    finally:
        source.close()
        server.stop()
