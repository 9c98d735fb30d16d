"""Loopback stand-ins for the two Google APIs OS Login needs: Compute ``projects.get`` and OS Login.

Stdlib HTTP on ``127.0.0.1`` (random port), one server for both (their paths do not overlap):

- ``GET /compute/v1/projects/P``: the Compute ``Project`` resource, with the project's
  ``commonInstanceMetadata`` (``{"kind": "compute#metadata", "fingerprint", "items": [{"key",
  "value"}]}``); a project in ``denied_projects`` answers 403 the way Compute does (``errors``
  with ``reason: forbidden``), an unknown one 404;
- ``GET /v1/users/EMAIL/loginProfile[?projectId=P]``: the account's ``LoginProfile`` (``name``,
  ``posixAccounts`` with the primary ``username`` ``alice_example_com``, ``sshPublicKeys`` keyed
  by the key's SHA-256 fingerprint in hex);
- ``POST /v1/users/EMAIL:importSshPublicKey[?projectId=P]`` (body: an ``SshPublicKey``
  ``{"key": "ssh-ed25519 AAAA..."}``): adds the key, answers ``{"loginProfile": ...}``.

Shapes from Google's REST references (compute v1 ``projects.get``, OS Login v1 ``users``).
The SSH server of an OS Login node asks :meth:`SandboxGoogleApis.authorized_keys` which keys a
user name may log in with: only imported keys, only under the account's POSIX name.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from sandbox.loopback_http import LoopbackHttp

JsonDict = dict[str, Any]

_PROJECT = re.compile(r"^/compute/v1/projects/([^/]+)$")
_PROFILE = re.compile(r"^/v1/users/([^/:]+)/loginProfile$")
_IMPORT = re.compile(r"^/v1/users/([^/:]+):importSshPublicKey$")


def posix_name(email: str) -> str:
    """OS Login's POSIX user name for an email: every character but letters and digits becomes
    ``_`` (``alice@example.com`` -> ``alice_example_com``)."""
    return re.sub(r"[^A-Za-z0-9]", "_", email)


def key_fingerprint(public_key: str) -> str:
    """SHA-256 (hex) of an OpenSSH public key's decoded body: the key of ``sshPublicKeys``.

    Raises:
        ValueError: not ``<type> <base64>``.
    """
    parts = public_key.split()
    if len(parts) < 2:
        raise ValueError("an SSH public key is '<type> <base64> [comment]'")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the key body is not base64") from None
    return hashlib.sha256(blob).hexdigest()


class SandboxGoogleApis:
    """The Compute + OS Login stand-in, in a daemon thread.

    Args:
        project_metadata: ``{project: {key: value}}`` served as ``commonInstanceMetadata``.
        accounts: Google accounts that have an OS Login profile (emails).
        denied_projects: projects whose ``projects.get`` answers 403.

    Attributes:
        requests: ``(method, path with query)`` of every request, in order.
        imported: ``{email: [OpenSSH key lines]}``, what importSshPublicKey stored.
        usernames: ``{email: POSIX name}`` set by an administrator (Directory API custom
            usernames); others get :func:`posix_name`.
    """

    def __init__(self, project_metadata: dict[str, dict[str, str]], accounts: tuple[str, ...] = (),
                 denied_projects: tuple[str, ...] = ()) -> None:
        self.project_metadata = {p: dict(items) for p, items in project_metadata.items()}
        self.accounts = set(accounts)
        self.denied_projects = set(denied_projects)
        self.requests: list[tuple[str, str]] = []
        self.imported: dict[str, list[str]] = {email: [] for email in accounts}
        self.usernames: dict[str, str] = {}
        self._lock = threading.Lock()
        self._http = LoopbackHttp("sandbox-google-apis")

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` (after :meth:`start`)."""
        return self._http.endpoint

    def start(self) -> str:
        """Start serving; returns the endpoint."""
        apis = self

        class Handler(_Handler):
            sandbox = apis

        return self._http.start(Handler)

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        self._http.stop()

    def authorized_keys(self, username: str) -> list[str]:
        """The key lines ``username`` may log in with on an OS Login node: the imported keys of the
        account whose POSIX name it is, none for any other name."""
        with self._lock:
            for email in self.accounts:
                if self.usernames.get(email, posix_name(email)) == username:
                    return list(self.imported.get(email, []))
        return []

    # --- answers ------------------------------------------------------------------------

    def answer(self, method: str, raw_path: str, body: bytes) -> tuple[int, JsonDict]:
        """Status and JSON body of one request."""
        with self._lock:
            self.requests.append((method, raw_path))
        parts = urlsplit(raw_path)
        path, query = unquote(parts.path), parse_qs(parts.query)
        project = (query.get("projectId") or [""])[0]
        if method == "GET" and (m := _PROJECT.match(path)):
            return self._project(m.group(1))
        if method == "GET" and (m := _PROFILE.match(path)):
            email = m.group(1)
            if email not in self.accounts:
                return _error(404, f"User {email} not found.", "NOT_FOUND")
            return 200, self._profile(email, project)
        if method == "POST" and (m := _IMPORT.match(path)):
            email = m.group(1)
            if email not in self.accounts:
                return _error(404, f"User {email} not found.", "NOT_FOUND")
            try:
                key = str(json.loads(body or b"{}").get("key", "")).strip()
                key_fingerprint(key)
            except (ValueError, AttributeError) as exc:
                return _error(400, f"Invalid SSH public key: {exc}", "INVALID_ARGUMENT")
            with self._lock:
                known = self.imported.setdefault(email, [])
                if key not in known:
                    known.append(key)
            return 200, {"loginProfile": self._profile(email, project)}
        return _error(404, f"Method not found: {method} {path}", "NOT_FOUND")

    def _project(self, project: str) -> tuple[int, JsonDict]:
        if project in self.denied_projects:
            message = f"Required 'compute.projects.get' permission for 'projects/{project}'"
            return 403, {"error": {"code": 403, "message": message,
                                   "errors": [{"message": message, "domain": "global", "reason": "forbidden"}]}}
        if project not in self.project_metadata:
            message = f"The resource 'projects/{project}' was not found"
            return 404, {"error": {"code": 404, "message": message,
                                   "errors": [{"message": message, "domain": "global", "reason": "notFound"}]}}
        items = [{"key": k, "value": v} for k, v in sorted(self.project_metadata[project].items())]
        digest = hashlib.sha256(json.dumps(items).encode()).digest()[:8]
        return 200, {
            "kind": "compute#project", "id": str(int.from_bytes(digest[:6], "big")), "name": project,
            "creationTimestamp": "2024-03-01T09:00:00.000-08:00",
            "commonInstanceMetadata": {"kind": "compute#metadata",
                                       "fingerprint": base64.b64encode(digest).decode(), "items": items},
            "defaultServiceAccount": "123456789012-compute@developer.gserviceaccount.com",
            "xpnProjectStatus": "UNSPECIFIED_XPN_PROJECT_STATUS", "defaultNetworkTier": "PREMIUM",
        }

    def _profile(self, email: str, project: str) -> JsonDict:
        user = self.usernames.get(email, posix_name(email))
        uid = str(1_000_000_000 + int(hashlib.sha256(email.encode()).hexdigest()[:6], 16))
        with self._lock:
            keys = list(self.imported.get(email, []))
        return {
            "name": str(int(hashlib.sha256(email.encode()).hexdigest()[:15], 16)),
            "posixAccounts": [{
                "primary": True, "username": user, "uid": uid, "gid": uid,
                "homeDirectory": f"/home/{user}", "shell": "/bin/bash", "gecos": "",
                "systemId": "", "accountId": project or "inference-prod", "operatingSystemType": "LINUX",
                "name": f"users/{email}/projects/{project or 'inference-prod'}",
            }],
            "sshPublicKeys": {key_fingerprint(k): {"key": k, "fingerprint": key_fingerprint(k),
                                                   "name": f"users/{email}/sshPublicKeys/{key_fingerprint(k)}"}
                              for k in keys},
        }


def _error(code: int, message: str, status: str) -> tuple[int, JsonDict]:
    return code, {"error": {"code": code, "message": message, "status": status}}


class _Handler(BaseHTTPRequestHandler):
    sandbox: SandboxGoogleApis
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        status, payload = self.sandbox.answer(self.command, self.path, body)
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = do_POST = do_DELETE = do_PATCH = _handle

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr log."""
