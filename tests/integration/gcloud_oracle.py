"""The real Google Cloud CLI pointed at the sandbox: a config dir of its own, no credentials, the
sandbox's TPU, Compute and OS Login APIs as endpoint overrides, and a home with gcloud's SSH key.

Used by the tests that hold our behaviour to gcloud's (``gcloud compute tpus tpu-vm ssh --dry-run``,
``queued-resources create``). The properties are written as gcloud writes them
(``configurations/config_default``), which saves a ``gcloud config set`` (~1-2 s) per property.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncssh

GCLOUD = shutil.which("gcloud") or "/usr/bin/gcloud"
#: Seconds one gcloud call may take (its own start is ~1-2 s).
GCLOUD_TIMEOUT_S = 60.0


def why_no_gcloud() -> str | None:
    """A sentence when the real gcloud cannot run here, else ``None``."""
    if not Path(GCLOUD).exists():
        return "the Google Cloud CLI (gcloud) is not installed here"
    return None


@dataclass(frozen=True)
class Gcloud:
    """gcloud with its own config dir and home (its ``~/.ssh/google_compute_engine`` made here)."""

    config_dir: Path
    home: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "CLOUDSDK_CONFIG": str(self.config_dir), "HOME": str(self.home),
                "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}

    def start(self, args: Sequence[str]) -> subprocess.Popen[str]:
        """Start ``gcloud ARGS`` (several may run at once)."""
        return subprocess.Popen([GCLOUD, *args], env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def run(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([GCLOUD, *args], env=self.env(), capture_output=True, text=True,
                              timeout=GCLOUD_TIMEOUT_S, check=False)


def gcloud_for(root: Path, *, tpu: str, google_apis: str, account: str) -> Gcloud:
    """A :class:`Gcloud` under ``root`` pointed at the sandbox's endpoints."""
    config_dir, home = root / "gcloud-config", root / "home"
    (config_dir / "configurations").mkdir(parents=True)
    (config_dir / "active_config").write_text("default")
    (config_dir / "gce").write_text("False")                 # not on GCE: no metadata-server probe
    (config_dir / "configurations" / "config_default").write_text(
        "[auth]\ndisable_credentials = true\n\n"
        f"[api_endpoint_overrides]\ntpu = {tpu.rstrip('/')}/\ncompute = {google_apis.rstrip('/')}/compute/v1/\n"
        f"oslogin = {google_apis.rstrip('/')}/\n\n"
        f"[core]\naccount = {account}\ndisable_usage_reporting = true\n")
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(parents=True, mode=0o700)
    key = asyncssh.generate_private_key("ssh-ed25519", comment="tpu-console-test")
    private = ssh_dir / "google_compute_engine"
    private.write_bytes(key.export_private_key())
    private.chmod(0o600)
    (ssh_dir / "google_compute_engine.pub").write_bytes(key.export_public_key())
    return Gcloud(config_dir, home)


def ssh_fields(line: str) -> dict[str, str]:
    """The fields of an OpenSSH command line gcloud (or we) print: ``identity_file``, ``user``,
    ``host``, ``tty`` (``-t``/``-T``), ``command`` (after ``--``) and each ``-o Key=Value`` by key."""
    words = shlex.split(line)
    fields: dict[str, str] = {}
    index = 1
    while index < len(words):
        word = words[index]
        if word == "--":
            fields["command"] = " ".join(words[index + 1:])
            break
        if word in ("-t", "-T"):
            fields["tty"] = word
        elif word == "-i":
            index += 1
            fields["identity_file"] = words[index]
        elif word == "-o":
            index += 1
            key, _, value = words[index].replace(" ", "=", 1).partition("=")
            fields[key] = value
        elif word == "-p":
            index += 1
            fields["port"] = words[index]
        elif "@" in word and "user" not in fields:
            fields["user"], _, fields["host"] = word.rpartition("@")
        index += 1
    return fields
