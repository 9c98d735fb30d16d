"""One error hierarchy for everything ``remote`` does.

Library exceptions (google-api-core, asyncssh, httpx, OSError) are translated at
the boundary into these, each with a short ``title`` and a ``message`` a person
can act on. The UI shows ``str(error)``; it never shows a traceback for these.
"""

from __future__ import annotations


class RemoteError(Exception):
    """Base of every expected failure talking to the outside world.

    Attributes:
        title: a few words, e.g. ``"SSH key refused"``.
        message: one or two sentences saying what happened and what to try.
    """

    title: str = "Remote error"

    def __init__(self, message: str, *, title: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if title is not None:
            self.title = title

    def __str__(self) -> str:
        return f"{self.title}: {self.message}"


class TpuApiError(RemoteError):
    """The Cloud TPU API refused or failed a call.

    Attributes:
        code: HTTP status (403, 404, 429, 5xx) or 0 for a timeout/transport error.
        status: the API's status word (``PERMISSION_DENIED``) when given.
        reason: the ``ErrorInfo.reason`` (``IAM_PERMISSION_DENIED``, ``SERVICE_DISABLED``) when given.
    """

    title = "TPU API error"

    def __init__(self, message: str, *, code: int = 0, status: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.reason = reason


class CredentialsError(RemoteError):
    """No usable Google credentials (Application Default Credentials)."""

    title = "No Google credentials"


class SshError(RemoteError):
    """An SSH connection or remote command failed (auth, host key, network, sudo, docker)."""

    title = "SSH error"


class VllmHttpError(RemoteError):
    """The vLLM OpenAI-compatible server could not be reached or answered an error."""

    title = "vLLM server error"


class KubeApiError(RemoteError):
    """A GKE cluster's Kubernetes API refused or failed a call.

    Attributes:
        code: HTTP status (400, 403, 404, 409, 422, 5xx) or 0 for a timeout / connection failure.
        reason: the Status object's ``reason`` (``NotFound``, ``Invalid``, ``Conflict``) when given.
    """

    title = "Kubernetes API error"

    def __init__(self, message: str, *, code: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
