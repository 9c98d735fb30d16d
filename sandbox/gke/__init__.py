"""The sandbox's GKE: a GKE API stand-in (``container.googleapis.com`` v1 REST) and a Kubernetes API
stand-in (HTTPS, bearer token, core/v1 and apps/v1) for one cluster with two TPU node pools, with a
controller that turns Deployments into ReplicaSets and Pods, schedules them on free ``google.com/tpu``
and runs each pod's container on the sandbox's simulated vLLM engine.

Modules: :mod:`.cluster_data` (the cluster, its node pools and nodes, the demo Deployment),
:mod:`.gke_api` (the GKE REST stand-in), :mod:`.tls` (the sandbox CA and the API server's certificate),
:mod:`.store` (objects, resourceVersions, watch events, selectors), :mod:`.patches` (JSON, merge and
strategic merge patch), :mod:`.validation` (422 Status), :mod:`.controller` (deployments, replica sets,
scheduler, kubelet), :mod:`.pod_logs` (container logs), :mod:`.tables` (``as=Table`` answers),
:mod:`.kube_api` (the HTTP routes), :mod:`.cluster` (starts it all, writes the kubeconfig).
"""
