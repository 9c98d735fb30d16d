"""The SSH failure family: each is one sentence an operator can act on, with a retry hint.

Part of :mod:`remote.ssh`; import from there.
"""

from __future__ import annotations

from remote.errors import SshError


class SshFailure(SshError):
    """An SSH failure with a retry hint. ``retryable`` is true for network trouble."""

    retryable = False


class SshUnreachable(SshFailure):
    """The host did not answer, refused the TCP connection, or the connection dropped."""

    title = "Host unreachable"
    retryable = True


class SshTimeout(SshFailure):
    """Connecting or a remote command took longer than its timeout."""

    title = "SSH timeout"
    retryable = True


class SshAuthRefused(SshFailure):
    """The node refused our key (not in the ``ssh-keys`` metadata yet, or OS Login)."""

    title = "SSH key refused"


class HostKeyUnknown(SshFailure):
    """The node's host key is not in the known-hosts file and was not accepted.

    Attributes:
        fingerprint: ``SHA256:...`` of the key the node presented.
    """

    title = "Unknown host key"

    def __init__(self, message: str, *, fingerprint: str) -> None:
        super().__init__(message)
        self.fingerprint = fingerprint


class HostKeyChanged(SshFailure):
    """The node presented a host key different from the one recorded for its alias."""

    title = "Host key changed"


class SudoPasswordRequired(SshFailure):
    """``sudo -n`` refused because the remote user needs a password for sudo."""

    title = "sudo needs a password"
