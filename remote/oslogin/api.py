"""The Google APIs OS Login needs: Compute ``projects.get`` and the OS Login API, with Google's clients.

- project metadata: google-api-python-client's Compute v1 ``projects().get`` (the discovery
  document shipped with the package, no discovery call), read for ``commonInstanceMetadata``
  (``enable-oslogin``). Chosen over google-cloud-compute, whose generated types take ~2.5 s of
  CPU to import on the connect path (google-api-python-client: ~0.4 s);
- the login profile and the key import: google-cloud-os-login's ``OsLoginServiceClient``
  (REST) ``get_login_profile(name="users/EMAIL", project_id=P)`` and
  ``import_ssh_public_key(parent="users/EMAIL", ssh_public_key=..., project_id=P)``;
- the identity: the ADC credentials' service-account email, else gcloud's ``core/account``
  (``CLOUDSDK_CORE_ACCOUNT``, else the active configuration file under ``CLOUDSDK_CONFIG`` or
  ``~/.config/gcloud``).

Blocking calls run on a small pool of daemon threads (a call left waiting never holds the
process's exit), each within ``timeout_s`` whole (headers and body; the OS Login client's session
reads its bodies through :class:`remote.deadline.DeadlineAdapter`); every failure comes out as :class:`OsLoginError`
with the HTTP status in ``code`` (0: no answer). An ``http://`` endpoint (the sandbox) uses
anonymous credentials, as :class:`remote.tpu.api.FleetSource` does.
"""

from __future__ import annotations

import asyncio
import configparser
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from remote.deadline import DaemonThreadPool, bound_session
from remote.errors import RemoteError

T = TypeVar("T")
#: Seconds past ``timeout_s`` a call may take before it is given up (its daemon thread is left to
#: end on its own): the transport's own timeout, when it has one, reports first.
CALL_GRACE_S = 1.0


class OsLoginError(RemoteError):
    """A Compute or OS Login API call failed, or the Google account is unknown.

    Attributes:
        code: HTTP status (403, 404 ...), or 0 when nothing answered or nothing was asked.
    """

    title = "OS Login"

    def __init__(self, message: str, *, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


def gcloud_account(env: dict[str, str] | None = None) -> str | None:
    """gcloud's ``core/account`` (the account ``gcloud auth login`` made active), or ``None``.

    Reads ``CLOUDSDK_CORE_ACCOUNT``, else ``[core] account`` of the active configuration
    (``<config dir>/active_config`` names it, ``default`` without one; the config dir is
    ``CLOUDSDK_CONFIG`` or ``~/.config/gcloud``). Never runs gcloud.
    """
    env = dict(os.environ) if env is None else env
    if env.get("CLOUDSDK_CORE_ACCOUNT"):
        return env["CLOUDSDK_CORE_ACCOUNT"].strip() or None
    root = Path(env.get("CLOUDSDK_CONFIG") or Path(env.get("HOME", "~")).expanduser() / ".config" / "gcloud")
    try:
        active = (root / "active_config").read_text(encoding="utf-8").strip() or "default"
    except OSError:
        active = "default"
    parser = configparser.ConfigParser()
    try:
        parser.read(root / "configurations" / f"config_{active}", encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return None
    value = parser.get("core", "account", fallback="").strip()
    return value or None


def _status_of(exc: BaseException) -> tuple[int, str]:
    """(HTTP status, the API's own message) of a google-api-core / googleapiclient / google-auth /
    transport error."""
    import json

    from google.api_core import exceptions as gexc
    from googleapiclient.errors import HttpError

    if isinstance(exc, HttpError):
        message = exc.reason or str(exc)
        try:
            message = json.loads(exc.content)["error"].get("message") or message
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        return int(exc.resp.status), message
    if isinstance(exc, gexc.GoogleAPICallError):
        message = exc.message or str(exc)
        try:
            message = exc.response.json()["error"].get("message") or message
        except (AttributeError, ValueError, KeyError, TypeError):
            pass
        return (int(exc.code) if isinstance(exc.code, int) else 0), message
    return 0, f"{type(exc).__name__}: {exc}"


class OsLoginApi:
    """Project metadata and OS Login profiles for the console's Google account.

    Args:
        oslogin_endpoint: OS Login API endpoint override (``http://127.0.0.1:PORT`` for the
            sandbox), ``None`` for ``oslogin.googleapis.com``.
        compute_endpoint: Compute API root override (``http://127.0.0.1:PORT``; ``/compute/v1/`` is
            appended), ``None`` for ``https://compute.googleapis.com``.
        timeout_s: per-call timeout, seconds.
        credentials: google-auth credentials (default: anonymous for ``http://`` endpoints,
            else Application Default Credentials).
    """

    def __init__(self, *, oslogin_endpoint: str | None = None, compute_endpoint: str | None = None,
                 timeout_s: float = 20.0, credentials: Any = None) -> None:
        self.oslogin_endpoint = oslogin_endpoint
        self.compute_endpoint = compute_endpoint
        self.timeout_s = timeout_s
        self._credentials = credentials
        self._pool = DaemonThreadPool(4, "oslogin-api")
        self._lock = threading.Lock()
        self._projects: Any = None
        self._oslogin: Any = None

    # --- clients ------------------------------------------------------------------------

    def _creds(self, endpoint: str | None) -> Any:
        from remote.tpu.api import credentials_for

        creds = credentials_for(endpoint, self._credentials)
        if not (endpoint and endpoint.startswith("http://")):
            self._credentials = creds            # ADC kept (one refresh); a stand-in's anonymous ones are not
        return creds

    def _projects_client(self) -> Any:
        """The Compute v1 ``projects`` resource (google-api-python-client, static discovery)."""
        with self._lock:
            if self._projects is None:
                from googleapiclient.discovery import build

                # the discovery client's api_endpoint is the base URL, service path included
                options = ({"api_endpoint": self.compute_endpoint.rstrip("/") + "/compute/v1/"}
                           if self.compute_endpoint else None)
                self._projects = build("compute", "v1", http=self._compute_http(), static_discovery=True,
                                       cache_discovery=False, client_options=options)
            return self._projects

    def _compute_http(self) -> Any:
        """A fresh authorized httplib2 connection (httplib2 is not thread-safe: one per call)."""
        import google_auth_httplib2
        import httplib2

        return google_auth_httplib2.AuthorizedHttp(self._creds(self.compute_endpoint),
                                                   http=httplib2.Http(timeout=self.timeout_s))

    def _oslogin_client(self) -> Any:
        with self._lock:
            if self._oslogin is None:
                from google.cloud import oslogin_v1

                options = {"api_endpoint": self.oslogin_endpoint} if self.oslogin_endpoint else None
                self._oslogin = oslogin_v1.OsLoginServiceClient(
                    transport="rest", credentials=self._creds(self.oslogin_endpoint), client_options=options)
                bound_session(getattr(self._oslogin.transport, "_session", None))  # each call whole in time
            return self._oslogin

    async def _run(self, what: str, fn: Callable[[], T]) -> T:
        import google.auth.exceptions
        import httplib2
        import requests
        from google.api_core import exceptions as gexc
        from googleapiclient.errors import Error as ApiClientError

        def call() -> T:
            try:
                return fn()
            except OsLoginError:
                raise
            except (gexc.GoogleAPIError, ApiClientError, google.auth.exceptions.GoogleAuthError,
                    requests.RequestException, httplib2.HttpLib2Error, OSError, ValueError) as exc:
                code, message = _status_of(exc)
                raise OsLoginError(f"{what} failed ({f'HTTP {code}' if code else 'no answer'}): {message}",
                                   code=code) from exc
            except RemoteError as exc:        # CredentialsError from default_credentials
                raise OsLoginError(f"{what} failed: {exc.message}") from exc
        try:       # the whole call: httplib2 (Compute) bounds each read only
            return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(self._pool, call),
                                          self.timeout_s + CALL_GRACE_S)
        except TimeoutError:
            raise OsLoginError(f"{what} failed (no answer): no whole answer within {self.timeout_s:g} s "
                               "(timed out)") from None

    # --- calls --------------------------------------------------------------------------

    async def project_metadata(self, project: str) -> dict[str, str]:
        """The project's ``commonInstanceMetadata`` as ``{key: value}`` (Compute ``projects.get``).

        Raises:
            OsLoginError: the call failed (``code`` 403 without ``compute.projects.get``).
        """
        from remote.oslogin.decide import project_metadata_items

        def get() -> dict[str, str]:
            request = self._projects_client().projects().get(project=project)
            answer = request.execute(http=self._compute_http(), num_retries=0)
            return project_metadata_items(answer)
        return await self._run(f"reading the metadata of project {project}", get)

    async def login_profile(self, account: str, project: str) -> dict[str, Any]:
        """The account's OS Login ``LoginProfile`` as REST JSON (see :mod:`remote.oslogin.decide`).

        Args:
            account: the Google account's email (``alice@example.com``).
            project: the node's project (``projectId``: the profile's POSIX account for it).

        Raises:
            OsLoginError: the call failed (403: no OS Login permission, 404: no such user).
        """
        from remote.tpu.parse import message_to_json

        def get() -> dict[str, Any]:
            return message_to_json(self._oslogin_client().get_login_profile(
                request={"name": f"users/{account}", "project_id": project}, timeout=self.timeout_s))
        return await self._run(f"reading the OS Login profile of {account}", get)

    async def import_public_key(self, account: str, public_key: str, project: str) -> dict[str, Any]:
        """Add ``public_key`` (OpenSSH line) to the account's OS Login profile; the new profile as JSON.

        Raises:
            OsLoginError: the call failed (403: the account may not add keys).
        """
        from google.cloud.oslogin_v1 import common

        from remote.tpu.parse import message_to_json

        def post() -> dict[str, Any]:
            answer = self._oslogin_client().import_ssh_public_key(
                request={"parent": f"users/{account}", "ssh_public_key": common.SshPublicKey(key=public_key),
                         "project_id": project}, timeout=self.timeout_s)
            return message_to_json(answer.login_profile)
        return await self._run(f"importing the SSH public key into the OS Login profile of {account}", post)

    async def account(self) -> str | None:
        """The email of the identity the console calls Google with, or ``None`` when unknown:
        the ADC service account's email, else gcloud's ``core/account``."""
        def find() -> str | None:
            try:
                creds = self._creds(self.oslogin_endpoint)
            except RemoteError:
                creds = None
            email = getattr(creds, "service_account_email", None)
            if isinstance(email, str) and "@" in email:
                return email
            return gcloud_account()
        return await asyncio.get_running_loop().run_in_executor(self._pool, find)

    def close(self) -> None:
        """Stop the worker threads and close the HTTP sessions (idempotent)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        for close in (getattr(self._projects, "close", None),
                      getattr(getattr(self._oslogin, "transport", None), "close", None)):
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001 - closing a session must not raise at exit
                    pass
        self._projects = self._oslogin = None
