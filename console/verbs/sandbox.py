"""``tpu-console sandbox``: run the loopback stand-ins until Ctrl-C.

Prints the config file it wrote (point any verb at it with ``--config``) and
every endpoint: TPU API, one SSH server per ready node, vLLM inside each VM, the GKE API and
the Kubernetes API of its GKE cluster (with the kubeconfig path).
"""

from __future__ import annotations

import argparse
import sys
import time


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sandbox``."""
    p = sub.add_parser("sandbox", help="run the loopback sandbox (TPU API, SSH nodes, vLLM, GKE) until Ctrl-C",
                       description="Run the loopback stand-ins until Ctrl-C: a TPU REST API, one SSH "
                       "server per ready node with a simulated docker and vLLM engine, and an "
                       "OpenAI-compatible server per node, a GKE API and the Kubernetes API of one GKE cluster "
                   "(kubectl --kubeconfig PATH works against it). Prints the config file it wrote; point "
                       "any verb at it with --config (or use `tpu-console --demo VERB`).")
    p.add_argument("--state-dir", metavar="DIR", help="where to write config, keys and history "
                   "(default: ~/.local/state/tpu-console/sandbox)")
    p.add_argument("--boot-s", type=float, default=25.0, help="seconds the slow node's boot takes (default 25)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Start the sandbox, print where it is, and wait for Ctrl-C. Exit 0."""
    from sandbox.runner import Sandbox

    sandbox = Sandbox(args.state_dir, boot_s=args.boot_s, gke_multi_host=True)
    sandbox.start()
    try:
        print(sandbox.describe())
        print(f"\nTry:  tpu-console --config {sandbox.config_path} nodes\n(Ctrl-C stops the sandbox)", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopping the sandbox", file=sys.stderr)
        return 0
    finally:
        sandbox.stop()
