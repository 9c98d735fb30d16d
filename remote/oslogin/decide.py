"""Whether a TPU node needs OS Login, and which POSIX user a login profile gives: stdlib only.

The rule is gcloud's (``gcloud compute tpus tpu-vm ssh``): the node's own metadata
``enable-oslogin`` decides when it is set; else the project's ``commonInstanceMetadata``
(Compute API ``projects.get``); a value is true when it is ``TRUE`` in any case (``true``,
``True``), anything else set (``FALSE``, ``no``) is false. A node ``FALSE`` overrides a project
``TRUE``.

Shapes read (Google's REST references):

- TPU node ``metadata``: a JSON object ``{"enable-oslogin": "TRUE", ...}`` (``map<string,
  string>`` in the v2 Node resource);
- Compute ``Project.commonInstanceMetadata``: ``{"kind": "compute#metadata", "fingerprint",
  "items": [{"key": "enable-oslogin", "value": "TRUE"}, ...]}``;
- OS Login ``LoginProfile``: ``{"name", "posixAccounts": [{"primary": bool, "username",
  "uid", "gid", "homeDirectory", "shell", "operatingSystemType": "LINUX", ...}],
  "sshPublicKeys": {fingerprint: {"key": "ssh-ed25519 AAAA... comment", "fingerprint",
  "expirationTimeUsec", "name"}}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The metadata key both the node and the project use.
ENABLE_OSLOGIN = "enable-oslogin"


@dataclass(frozen=True)
class OsLoginVerdict:
    """Whether a node needs OS Login, and why.

    Attributes:
        enabled: the node accepts only OS Login users.
        source: what decided: ``"node metadata"``, ``"project metadata"`` or ``"default"``
            (set nowhere: off, the Compute Engine default).
        note: one sentence when the decision is less sure than it looks (the project's
            metadata could not be read, so only the node's counted), else ``None``.
    """

    enabled: bool
    source: str
    note: str | None = None

    def describe(self) -> str:
        """``OS Login on (project metadata)`` / ``OS Login off (default)``, plus the note."""
        text = f"OS Login {'on' if self.enabled else 'off'} ({self.source})"
        return f"{text}; {self.note}" if self.note else text


def metadata_flag(value: object) -> bool | None:
    """An ``enable-oslogin`` value as a decision: ``True`` for ``TRUE`` (any case, spaces
    stripped), ``False`` for any other string, ``None`` when the key is absent (``value`` None)."""
    if value is None:
        return None
    return str(value).strip().upper() == "TRUE"


def project_metadata_items(project: Mapping[str, Any]) -> dict[str, str]:
    """``{key: value}`` of a Compute ``Project`` JSON's ``commonInstanceMetadata.items``
    (missing or malformed entries are skipped)."""
    items = ((project.get("commonInstanceMetadata") or {}).get("items")) or []
    out: dict[str, str] = {}
    for item in items:
        if isinstance(item, Mapping) and isinstance(item.get("key"), str):
            value = item.get("value")
            out[item["key"]] = "" if value is None else str(value)
    return out


def os_login_verdict(node_metadata: Mapping[str, Any] | None, project_metadata: Mapping[str, Any] | None,
                     *, project_problem: str | None = None) -> OsLoginVerdict:
    """Decide whether a node needs OS Login (node metadata first, then the project's).

    Args:
        node_metadata: the TPU node's ``metadata`` object (``{}``/``None`` when it has none).
        project_metadata: the project's ``commonInstanceMetadata`` as ``{key: value}``
            (:func:`project_metadata_items`), or ``None`` when it could not be read.
        project_problem: why the project's metadata could not be read (``"HTTP 403: ..."``);
            with ``project_metadata=None`` it becomes the verdict's note, unless the node decided.

    Returns:
        An :class:`OsLoginVerdict`.
    """
    node_flag = metadata_flag(_get_ci(node_metadata or {}, ENABLE_OSLOGIN))
    if node_flag is not None:
        return OsLoginVerdict(node_flag, "node metadata")
    if project_metadata is None:
        why = f" ({project_problem})" if project_problem else ""
        return OsLoginVerdict(False, "node metadata", note=(
            f"the project's metadata could not be read{why}, so only the node's metadata was checked "
            f"(it does not set {ENABLE_OSLOGIN})"))
    project_flag = metadata_flag(_get_ci(project_metadata, ENABLE_OSLOGIN))
    if project_flag is not None:
        return OsLoginVerdict(project_flag, "project metadata")
    return OsLoginVerdict(False, "default")


def _get_ci(metadata: Mapping[str, Any], key: str) -> Any:
    """``metadata[key]``, the key matched case-insensitively (metadata keys are lower case on GCE)."""
    if key in metadata:
        return metadata[key]
    for name, value in metadata.items():
        if isinstance(name, str) and name.lower() == key:
            return value
    return None


def key_material(public_key: str) -> str:
    """``"<type> <base64>"`` of an OpenSSH public key line (options and comment dropped)."""
    parts = public_key.split()
    for i, part in enumerate(parts[:-1]):
        if part.startswith(("ssh-", "ecdsa-", "sk-")):
            return f"{part} {parts[i + 1]}"
    return " ".join(parts[:2])


def profile_has_key(profile: Mapping[str, Any], public_key: str) -> bool:
    """Whether the login profile's ``sshPublicKeys`` list ``public_key`` (type and body compared,
    as gcloud does; comments differ freely)."""
    wanted = key_material(public_key)
    for entry in (profile.get("sshPublicKeys") or {}).values():
        if isinstance(entry, Mapping) and key_material(str(entry.get("key", ""))) == wanted:
            return True
    return False


def posix_username(profile: Mapping[str, Any]) -> str | None:
    """The login name a profile gives: the primary POSIX account's ``username`` (else the first
    LINUX/unspecified account's), e.g. ``alice_example_com``; ``None`` when it has none."""
    accounts = [a for a in profile.get("posixAccounts") or [] if isinstance(a, Mapping) and a.get("username")]
    linux = [a for a in accounts if a.get("operatingSystemType", "LINUX") in ("LINUX", "OPERATING_SYSTEM_TYPE_UNSPECIFIED")]
    for account in linux:
        if account.get("primary"):
            return str(account["username"])
    return str(linux[0]["username"]) if linux else None
