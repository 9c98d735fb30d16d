"""OS Login for TPU VMs, the way ``gcloud compute tpus tpu-vm ssh`` uses it; import from here.

:mod:`remote.oslogin.decide` (stdlib): whether a node needs OS Login (node metadata, then
project metadata) and which POSIX user a login profile gives. :mod:`remote.oslogin.api`: the
Compute and OS Login API calls (Google's client libraries) and the account's email.
"""

from __future__ import annotations

from remote.oslogin.api import OsLoginApi, OsLoginError, gcloud_account
from remote.oslogin.decide import (
    ENABLE_OSLOGIN,
    OsLoginVerdict,
    key_material,
    os_login_verdict,
    posix_username,
    profile_has_key,
    project_metadata_items,
)

__all__ = [
    "ENABLE_OSLOGIN", "OsLoginApi", "OsLoginError", "OsLoginVerdict", "gcloud_account", "key_material",
    "os_login_verdict", "posix_username", "profile_has_key", "project_metadata_items",
]
