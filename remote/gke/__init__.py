"""The GKE backend: TPU node pools and vLLM workloads on GKE clusters, beside the TPU VMs.

Modules: :mod:`.models` (frozen dataclasses, stdlib only), :mod:`.parse` (GKE / Kubernetes JSON ->
models), :mod:`.discovery` (clusters and node pools across projects with google-cloud-container, and
their credentials), :mod:`.kube` (one cluster's Kubernetes API through kr8s), :mod:`.fleet` (the GKE part
of a fleet listing). Keep this module empty of imports: the models must load without the clients.
"""
