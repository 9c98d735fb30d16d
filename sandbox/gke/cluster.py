"""The sandbox's GKE as one piece: :class:`SandboxGke` starts the GKE API stand-in, the Kubernetes API
stand-in of cluster ``tpu-serving`` (HTTPS with the sandbox CA), its controller loop, seeds the cluster
(namespaces, the TPU nodes, the ``vllm-llama`` Deployment) and writes a kubeconfig (0600) the way
``gcloud container clusters get-credentials`` does: context ``gke_PROJECT_LOCATION_CLUSTER``, the server,
``certificate-authority-data`` and (here) a bearer token instead of gcloud's exec plugin.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox.gke import cluster_data as data
from sandbox.gke.controller import Controller
from sandbox.gke.gke_api import SandboxGkeApi
from sandbox.gke.kube_api import KubeApiState, KubeHandler
from sandbox.gke.kubelet import Kubelet, PlanFor, PodRun
from sandbox.gke.pod_logs import serve_log
from sandbox.gke.portforward import PortForwarder
from sandbox.gke.store import ObjectStore
from sandbox.gke.tls import make_cluster_tls
from sandbox.gke.writes import lws_with_defaults, with_defaults
from sandbox.loopback_http import LoopbackHttp

#: The Google access token the sandbox's own gcloud presents (``sandbox.runner``); the API takes it too,
#: as GKE takes a Google token from ``gke-gcloud-auth-plugin``.
SANDBOX_GOOGLE_TOKEN = "sandbox-access-token"


def _default_plan_for(boot_s: float) -> PlanFor:
    def plan_for(argv: list[str], accelerator_type: str, image: str) -> Any:
        from sandbox.engine import plan_startup

        return plan_startup(argv, accelerator_type, boot_s=boot_s, image=image or None)

    return plan_for


def _worker_plan(plan: Any, worker: int) -> Any:
    """What host ``worker`` (> 0) of a multi-host group prints while its leader runs ``plan``."""
    from sandbox.engine import worker_plan

    return worker_plan(plan, worker)


class SandboxGke:
    """One GKE cluster of the sandbox, its APIs and kubeconfig.

    Args:
        state_dir: where the kubeconfig and the cluster's certificates go (``state_dir/gke``).
        boot_s: wall seconds a pod's vLLM takes from container start to ready.
        create_s: seconds a pod stays ContainerCreating. terminate_s: seconds a deleted pod stays Terminating.
        time_scale: factor on the crash back-off. tick_s: the controller's period.
        plan_for: ``(serve_argv, accelerator_type, image) -> plan`` (default: the sandbox engine).
        other_projects: projects the GKE API lists with no clusters; denied_projects: answered 403.
        deploy_demo: create the ``vllm-llama`` Deployment at start.
        multi_host: add the ``v5e-multi`` pool (a 4x4 v5e slice of 4 nodes) and, with ``deploy_demo``, the
            ``vllm-multi`` LeaderWorkerSet on it (a leader and 3 workers, 4 chips each).

    Attributes (after :meth:`start`): gke_api_url, kubernetes_api_url, kubeconfig_path, token, store,
    controller, kubelet, gke_api, kube (the handlers' shared state: its ``requests``).
    """

    def __init__(self, state_dir: Path, *, boot_s: float = 25.0, create_s: float = 1.0, terminate_s: float = 0.5,
                 time_scale: float = 1.0, tick_s: float = 0.1, plan_for: PlanFor | None = None,
                 other_projects: tuple[str, ...] = (), denied_projects: tuple[str, ...] = (),
                 deploy_demo: bool = True, multi_host: bool = False) -> None:
        self.folder = Path(state_dir) / "gke"
        self.kubeconfig_path = self.folder / "kubeconfig"
        self.token = "sandbox-k8s-" + secrets.token_urlsafe(18)
        self.boot_s = boot_s
        self.plan_for = plan_for or _default_plan_for(boot_s)
        self.other_projects = other_projects
        self.denied_projects = denied_projects
        self.deploy_demo = deploy_demo
        self.pools = data.ALL_POOLS if multi_host else data.POOLS
        self.store = ObjectStore()
        self.kubelet = Kubelet(self.store, self._accelerator_of, self.plan_for, create_s=create_s,
                               terminate_s=terminate_s, time_scale=time_scale, worker_plan=_worker_plan)
        self.controller = Controller(self.store, self.kubelet, tick_s=tick_s)
        self.kubelet.on_ready = self._serve_pod
        self.kubelet.on_stopped = self._unserve_pod
        #: pod uid -> its OpenAI-compatible server (the vLLM API server in the pod)
        self.pod_servers: dict[str, Any] = {}
        self.forwarder = PortForwarder(self.store, self._pod_port)
        self.gke_api: SandboxGkeApi | None = None
        self.kube: KubeApiState | None = None
        self.gke_api_url = ""
        self.kubernetes_api_url = ""
        self._http = LoopbackHttp("sandbox-kube-api")
        self._ca_b64 = ""

    @staticmethod
    def _accelerator_of(node_name: str) -> str:
        pool = data.pool_of_node(node_name)
        return pool.accelerator_type if pool is not None else "v6e-4"

    @property
    def context(self) -> str:
        """The kubeconfig context gcloud would name: ``gke_inference-prod_us-east5_tpu-serving``."""
        return f"gke_{data.PROJECT}_{data.LOCATION}_{data.CLUSTER}"

    def start(self) -> None:
        """Start both APIs and the controller, seed the cluster, write the kubeconfig."""
        tls = make_cluster_tls(self.folder, data.CLUSTER)
        self._ca_b64 = base64.b64encode(tls.ca_pem).decode()
        self._seed()
        self.kube = KubeApiState(self.store, {self.token, SANDBOX_GOOGLE_TOKEN}, server_address="127.0.0.1:0",
                                 serve_log=lambda h, ns, name, q: serve_log(self.kubelet, h, ns, name, q),
                                 serve_portforward=self.forwarder.serve)
        state = self.kube

        class Handler(KubeHandler):
            api = state

        self.kubernetes_api_url = self._http.start(Handler, tls=tls.server_context())
        port = int(self.kubernetes_api_url.rsplit(":", 1)[1])
        state.server_address = f"127.0.0.1:{port}"
        clusters: dict[str, Callable[[], list[dict[str, Any]]]] = {
            data.PROJECT: lambda: [data.cluster_json(f"127.0.0.1:{port}", self._ca_b64,
                                                         pool_specs=self.pools)]}
        for project in self.other_projects:
            clusters.setdefault(project, list)
        self.gke_api = SandboxGkeApi(clusters, denied_projects=self.denied_projects)
        self.gke_api_url = self.gke_api.start()
        self.controller.start()
        self.write_kubeconfig()

    def _seed(self) -> None:
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.store.create("namespaces", {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
                                             "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
        for pool in self.pools:
            for index, name in enumerate(pool.node_names()):
                self.store.create("nodes", data.node_json(pool, name, index))
        if self.deploy_demo:
            deployment = with_defaults(data.demo_deployment())
            deployment.pop("apiVersion")
            deployment.pop("kind")
            self.store.create("deployments", deployment)
        if self.deploy_demo and data.MULTI_POOL in self.pools:
            lws = lws_with_defaults(data.demo_lws())
            lws.pop("apiVersion")
            lws.pop("kind")
            self.store.create("leaderworkersets", lws)

    def _serve_pod(self, pod: dict[str, Any], run: PodRun) -> None:
        """The pod's engine is up: its OpenAI-compatible server answers (configured from the engine's plan)."""
        from sandbox.openai_server import SandboxOpenAIServer

        plan = run.plan
        uid = pod["metadata"]["uid"]
        server = self.pod_servers.get(uid) or SandboxOpenAIServer("127.0.0.1", 0)
        try:
            server.configure(model=plan.model, served_model_name=plan.served_model_name or plan.model,
                             max_model_len=plan.max_model_len, accelerator_type=self._accelerator_of(run.node),
                             chips=plan.chips, kv_cache_tokens=plan.kv_cache_tokens,
                             gpu_memory_utilization=plan.gpu_memory_utilization, block_size=plan.kv_block_size)
        except (ValueError, AttributeError):
            return                                    # nothing servable: the forward reports a refusal
        server.start()
        server.set_ready(True)
        self.pod_servers[uid] = server

    def _unserve_pod(self, pod: dict[str, Any], run: PodRun) -> None:
        server = self.pod_servers.pop(pod["metadata"]["uid"], None)
        if server is not None:
            server.stop()

    def _pod_port(self, uid: str, port: int) -> int | None:
        """The local port of what listens on ``port`` in pod ``uid`` (vLLM's 8000), or ``None``."""
        server = self.pod_servers.get(uid)
        pod = next((p for p in self.store.items("pods") if p["metadata"]["uid"] == uid), None)
        ports = {int(p.get("containerPort", 0)) for c in (pod or {}).get("spec", {}).get("containers", [])
                 for p in c.get("ports") or []} or {8000}
        return int(server.port) if server is not None and port in ports else None

    def write_kubeconfig(self) -> None:
        """Write :attr:`kubeconfig_path` (YAML, 0600, atomically)."""
        name = self.context
        text = "\n".join([
            "# Written by the tpu-console sandbox: its GKE cluster, as `gcloud container clusters get-credentials`",
            "# would write it (a bearer token in place of gke-gcloud-auth-plugin).",
            "apiVersion: v1", "kind: Config", "preferences: {}",
            "clusters:", f"- name: {name}", "  cluster:", f"    server: {json.dumps(self.kubernetes_api_url)}",
            f"    certificate-authority-data: {self._ca_b64}",
            "contexts:", f"- name: {name}", "  context:", f"    cluster: {name}", f"    user: {name}",
            "    namespace: default",
            f"current-context: {name}",
            "users:", f"- name: {name}", "  user:", f"    token: {json.dumps(self.token)}", ""])
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.kubeconfig_path.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(partial, self.kubeconfig_path)

    def stop(self) -> None:
        """Stop the controller and both APIs; open watches and log follows end (idempotent)."""
        self.controller.stop()
        for server in self.pod_servers.values():
            server.stop()
        self.pod_servers.clear()
        with self.store.cond:
            self.store.closed = True
            self.store.cond.notify_all()
        self._http.stop()
        if self.gke_api is not None:
            self.gke_api.stop()
            self.gke_api = None
