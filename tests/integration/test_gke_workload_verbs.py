"""``rollback``, ``history``, ``forward``, ``bench`` and ``metrics`` on ``deploy/NAME`` against the sandbox's
GKE and Kubernetes API stand-ins (one sandbox for the module), with the real kubectl as the oracle
(skipped, saying why, without kubectl)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console.cli import main
from sandbox.runner import Sandbox

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
DEPLOY = "vllm-llama"


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    sb = Sandbox(tmp_path_factory.mktemp("gke-verbs"), boot_s=1.0, fast_boot_s=0.3, gke_boot_s=1.0, gke_create_s=0.3)
    sb.start()
    try:
        yield sb
    finally:
        sb.stop()


def _kubectl(box: Sandbox, *args: str) -> Any:
    if not Path(KUBECTL).exists():
        pytest.skip("kubectl is not installed (the oracle for the Kubernetes API stand-in)")
    done = subprocess.run([KUBECTL, "--kubeconfig", str(box.kubeconfig_path), *args], capture_output=True,
                          text=True, timeout=60, check=True)
    return json.loads(done.stdout) if "-o" in args and "json" in args else done.stdout


def _cli(capsys: pytest.CaptureFixture[str], box: Sandbox, *argv: str) -> tuple[int, str, str]:
    code = main(["--config", str(box.config_path), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _args(box: Sandbox) -> list[str]:
    deploy = _kubectl(box, "get", "deploy", DEPLOY, "-o", "json")
    [container] = deploy["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def test_rollback_restores_the_previous_template_as_rollout_undo_does(
        box: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, box, "rollback", f"deploy/{DEPLOY}", "--yes", "--json")
    assert code == 1 and "Nothing to roll back to: deploy/vllm-llama has one revision only" in err
    first_args = _args(box)
    code, out, err = _cli(capsys, box, "swap", f"deploy/{DEPLOY}", "--set", "max-model-len=8192", "--yes", "--json")
    assert code == 0, err
    swap = json.loads(out)["outcome"]
    deployed = _kubectl(box, "get", "deploy", DEPLOY, "-o", "json")["metadata"]["annotations"]
    assert swap["revision"] == deployed["deployment.kubernetes.io/revision"] == "2"   # the revision it made
    swapped_args = _args(box)
    assert "--max-model-len=8192" in swapped_args and swapped_args != first_args
    code, out, err = _cli(capsys, box, "rollback", f"deploy/{DEPLOY}", "--dry-run", "--json")
    assert code == 0, err
    plan = json.loads(out)["plan"]
    assert (plan["restores_revision"], plan["new_revision"], plan["args"]) == (1, 3, first_args)
    assert plan["patch"][1]["op"] == "replace" and plan["patch"][1]["path"] == "/spec/template"
    assert _args(box) == swapped_args                   # a dry run changes nothing
    code, out, err = _cli(capsys, box, "rollback", f"deploy/{DEPLOY}", "--yes", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["outcome"]["patched"] is True and report["outcome"]["code"] == 0
    assert report["outcome"]["revision"] == "3"
    assert _args(box) == first_args                     # kubectl: the Deployment's args are the old ones
    history = _kubectl(box, "rollout", "history", f"deploy/{DEPLOY}")
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["2", "3"]
    code, out, _ = _cli(capsys, box, "history", "--json")
    [launch] = [x for x in json.loads(out) if x["id"] == report["outcome"]["launch_id"]]
    assert (launch["workload"], launch["cluster"], launch["namespace"], launch["revision"], launch["outcome"]) == (
        "deploy/vllm-llama", "tpu-serving", "default", "3", "ready")
    assert launch["max_model_len"] == 65536


def test_rollback_is_refused_in_read_only_mode_but_previews(box: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    before = _kubectl(box, "get", "deploy", DEPLOY, "-o", "json")["metadata"]["resourceVersion"]
    code, _, err = _cli(capsys, box, "--readonly", "rollback", f"deploy/{DEPLOY}", "--yes")
    assert code == 1 and "read-only" in err
    code, out, err = _cli(capsys, box, "--readonly", "rollback", f"deploy/{DEPLOY}", "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["plan"]["patch"][0] == {"op": "test", "path": "/metadata/resourceVersion", "value": before}


def test_history_of_a_workload_lists_its_launches_only(box: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, box, "watch", f"deploy/{DEPLOY}", "--json", "--poll-s", "0.2")
    assert code == 0, err
    pod = json.loads(out)["pod"]
    code, out, err = _cli(capsys, box, "history", f"deploy/{DEPLOY}", "--json")
    assert code == 0, err
    mine = json.loads(out)
    code, out, _ = _cli(capsys, box, "history", "--json")
    every = json.loads(out)
    expected = [x["id"] for x in every if x.get("workload") == f"deploy/{DEPLOY}"]
    assert [x["id"] for x in mine] == expected and len(expected) >= 1
    assert {(x["cluster"], x["namespace"], x["node"]) for x in mine} == {
        ("tpu-serving", "default", f"tpu-serving/default/deploy/{DEPLOY}")}
    assert mine[0]["container_id"] == pod                     # newest first: the watch just made
    code, out, _ = _cli(capsys, box, "history", f"deploy/{DEPLOY}", "--namespace", "serving", "--json")
    assert code == 0 and json.loads(out) == []
    code, out, _ = _cli(capsys, box, "history", "deploy/other", "--json")
    assert code == 0 and json.loads(out) == []
    code, out, _ = _cli(capsys, box, "history", f"deploy/{DEPLOY}", "--cluster", "tpu-serving")
    assert code == 0 and "tpu-serving/default/" in out and "No launches" not in out
    code, _, err = _cli(capsys, box, "history", "deploy/Bad_Name")
    assert code == 2 and "not a Kubernetes object name" in err


def test_a_forward_reaches_the_pods_openai_server_and_follows_a_swap_to_the_new_pod(box: Sandbox) -> None:
    """localhost:PORT -> the serving pod through the API server (kr8s's port-forward over the sandbox's
    WebSocket), then a swap: the same URL answers from the new pod, and the forward said it moved."""
    import asyncio

    import httpx

    from console.config import load_config
    from console.flows.forwards import ForwardRegistry
    from console.flows.gke_fleet import gke_source
    from console.flows.gke_target import find_workload, parse_workload_spec
    from console.flows.history_access import HistoryAccess
    from console.flows.workload_swap import WorkloadSwapCase

    said: list[str] = []
    _kubectl(box, "rollout", "status", f"deploy/{DEPLOY}", "--timeout=60s")

    async def go() -> tuple[Any, Any, str, str, str, int]:
        config = load_config(box.config_path)
        source = gke_source(config)
        assert source is not None
        registry = ForwardRegistry()
        try:
            workload, kube = await find_workload(source, parse_workload_spec(f"deploy/{DEPLOY}"))
            forward = await registry.open_workload(workload, kube, config=config.forward)
            forward.on_change = said.append
            first_pod = forward.pod or ""
            async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
                before = (await client.get(f"{forward.url}/v1/models")).json()
                case = WorkloadSwapCase(workload, kube, config, HistoryAccess.none())
                outcome = await case.run(case.preview({"max-model-len": "4096"}, None), poll_s=0.2)
                assert outcome.rollout is not None and outcome.rollout.code == 0
                for _ in range(300):                    # said by the forward's own look at the pods
                    if any("moves to pod" in s for s in said):
                        break
                    await asyncio.sleep(0.1)
                assert any("moves to pod" in s for s in said), said     # before any request found it
                after = (await client.get(f"{forward.url}/v1/models")).json()
            new_pod = str(outcome.rollout.summary["pod"])
            return before, after, first_pod, new_pod, forward.describe(), forward.connections
        finally:
            registry.close_all()
            await source.close()

    before, after, first_pod, new_pod, state, connections = asyncio.run(go())
    assert [m["max_model_len"] for m in before["data"]] == [65536]
    assert [m["max_model_len"] for m in after["data"]] == [4096]
    assert new_pod != first_pod and state == f"open (pod {new_pod})" and connections >= 2
    [moved] = [s for s in said if "moves to pod" in s]
    assert f"moves to pod {new_pod} (was {first_pod})" in moved
    pods = {p["metadata"]["name"] for p in _kubectl(box, "get", "pods", "-n", "default", "-o", "json")["items"]
            if not p["metadata"].get("deletionTimestamp")}
    assert new_pod in pods


def test_the_forward_verb_prints_the_url_and_serves_until_interrupted(box: Sandbox) -> None:
    import signal
    import sys

    import httpx

    _kubectl(box, "rollout", "status", f"deploy/{DEPLOY}", "--timeout=60s")
    proc = subprocess.Popen([sys.executable, "-m", "console.cli", "--config", str(box.config_path), "forward",
                             f"deploy/{DEPLOY}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        url = proc.stdout.readline().strip()            # printed once it listens
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.poll() is not None else url
        said = proc.stderr.readline()
        assert f"-> deploy/{DEPLOY} pod {DEPLOY}-" in said and "port 8000 in tpu-serving/default" in said
        models = httpx.get(f"{url}/v1/models", timeout=10, trust_env=False).json()
        assert models["data"][0]["id"] == "meta-llama/Llama-3.1-8B-Instruct"
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    assert code == 0


def test_bench_prices_by_the_node_pool_and_the_pods_chips_and_is_recorded(
        box: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    from console.config import load_config
    from remote.bench import usd_per_mtok

    code, out, err = _cli(capsys, box, "watch", f"deploy/{DEPLOY}", "--json", "--poll-s", "0.2")
    assert code == 0, err
    pod = json.loads(out)["pod"]
    code, out, err = _cli(capsys, box, "bench", f"deploy/{DEPLOY}", "--kind", "throughput", "--streams", "2",
                          "--requests", "4", "--prompt-tokens", "64", "--output-tokens", "16", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert (report["node"], report["accelerator_type"], report["provisioning_model"]) == (
        f"tpu-serving/default/deploy/{DEPLOY}", "v6e-4", "flex-start")
    [level] = report["results"]
    spec = _kubectl(box, "get", "pod", pod, "-o", "json")["spec"]        # kubectl: the pod's chips and node
    chips = int(spec["containers"][0]["resources"]["limits"]["google.com/tpu"])
    labels = _kubectl(box, "get", "node", spec["nodeName"], "-o", "json")["metadata"]["labels"]
    assert (labels["cloud.google.com/gke-nodepool"], labels.get("cloud.google.com/gke-flex-start")) == ("v6e-flex", "true")
    price = load_config(box.config_path).prices["v6e"]["flex-start"]
    assert (level["chips"], level["price_per_chip_hour_usd"]) == (chips, price) and chips == 4
    tok_s = level["output_throughput"]
    assert level["usd_per_mtok"] == pytest.approx(usd_per_mtok(price, chips, tok_s)) and level["usd_per_mtok"] > 0
    code, out, _ = _cli(capsys, box, "history", f"deploy/{DEPLOY}", "--json")
    [launch] = [x for x in json.loads(out) if x["container_id"] == pod]
    [bench] = launch["benchmarks"]
    assert bench["kind"] == "throughput" and bench["usd_per_mtok"] == pytest.approx(level["usd_per_mtok"])


def test_metrics_reads_the_serving_pods_kv_cache(box: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, box, "watch", f"deploy/{DEPLOY}", "--json", "--poll-s", "0.2")
    assert code == 0, err
    watched = json.loads(out)
    code, out, err = _cli(capsys, box, "metrics", f"deploy/{DEPLOY}", "--json", "--interval", "0.2")
    assert code == 0, err
    [line] = out.splitlines()
    sample = json.loads(line)
    assert sample["node"] == f"tpu-serving/default/deploy/{DEPLOY}" and sample["url"] is None
    assert sample["kv_cache_size_tokens"] == watched["kv_cache_tokens"]
    assert sample["model_names"] == ["meta-llama/Llama-3.1-8B-Instruct"]
    assert f"pod {watched['pod']} port 8000" in err


def test_a_workload_without_gke_in_the_config_is_bad_input(box: Sandbox, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.toml"
    config.write_text("\n".join(line for line in box.config_path.read_text().splitlines()
                                if not line.startswith(("[gke]", "discover", "kubeconfig", "contexts", "api_endpoint"))))
    for argv in (["bench", f"deploy/{DEPLOY}", "--kind", "smoke"], ["metrics", f"deploy/{DEPLOY}"],
                 ["rollback", f"deploy/{DEPLOY}", "--yes"], ["forward", f"deploy/{DEPLOY}"]):
        code = main(["--config", str(config), *argv])
        err = capsys.readouterr().err
        assert code == 2 and "is a GKE workload and" in err and "has no [gke] table" in err, (argv, err)
