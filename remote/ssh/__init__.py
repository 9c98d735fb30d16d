"""SSH to TPU VM workers the way ``gcloud compute tpus tpu-vm ssh`` does (asyncssh).

The package's public face; import from here. Inside: :mod:`remote.ssh.connect`
(targets, known hosts, the verified connection), :mod:`remote.ssh.commands` (remote
commands, the port forward, the ``/v1/models`` probe), :mod:`remote.ssh.forward` (a port forward
that reports each client's channel: the forwards that know their target) and :mod:`remote.ssh.errors`
(the failure family, one sentence each).
"""

from __future__ import annotations

from remote.ssh.commands import (
                                 CommandResult,
                                 command_line,
                                 forward_port,
                                 probe_models,
                                 run_command,
                                 sudo_failure,
)
from remote.ssh.connect import (
                                 SshTarget,
                                 append_known_host,
                                 connect,
                                 has_known_host,
                                 host_key_alias,
                                 os_login_refusal,
                                 pin_host_keys,
                                 public_key_line,
                                 target_for,
)
from remote.ssh.errors import (
                                 HostKeyChanged,
                                 HostKeyUnknown,
                                 SshAuthRefused,
                                 SshFailure,
                                 SshTimeout,
                                 SshUnreachable,
                                 SudoPasswordRequired,
)
from remote.ssh.forward import forward_port_watched

__all__ = [
    "CommandResult", "HostKeyChanged", "HostKeyUnknown", "SshAuthRefused", "SshFailure", "SshTarget",
    "SshTimeout", "SshUnreachable", "SudoPasswordRequired", "append_known_host", "command_line", "connect",
    "forward_port", "forward_port_watched", "has_known_host", "host_key_alias", "os_login_refusal", "pin_host_keys", "probe_models",
    "public_key_line",
    "run_command", "sudo_failure", "target_for",
]
