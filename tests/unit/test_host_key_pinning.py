"""remote.ssh.pin_host_keys: gcloud's WriteHostKeysToKnownHosts (guest attributes -> known hosts under the alias)."""

from __future__ import annotations

from pathlib import Path

import asyncssh

from remote.ssh import pin_host_keys


def _body(kind: str = "ssh-ed25519") -> str:
    return asyncssh.generate_private_key(kind).export_public_key().decode().split()[1]


def test_published_keys_are_written_sorted_under_the_alias_0600(tmp_path: Path) -> None:
    known = tmp_path / "ssh" / "google_compute_known_hosts"
    ed, ec = _body(), _body("ecdsa-sha2-nistp256")
    lines = pin_host_keys(known, "tpu.1-2-abcdef", {"ssh-ed25519": ed, "ecdsa-sha2-nistp256": ec})
    assert lines == [f"tpu.1-2-abcdef ecdsa-sha2-nistp256 {ec}", f"tpu.1-2-abcdef ssh-ed25519 {ed}"]
    assert known.read_text() == "".join(f"{line}\n" for line in lines)
    assert known.stat().st_mode & 0o777 == 0o600


def test_an_existing_entry_is_kept_as_gcloud_keeps_it(tmp_path: Path) -> None:
    known = tmp_path / "known"
    recorded = f"tpu.1-0 ssh-ed25519 {_body()}\n"
    known.write_text(recorded)
    assert pin_host_keys(known, "tpu.1-0", {"ssh-ed25519": _body()}) == []
    assert known.read_text() == recorded


def test_hostile_or_mistyped_values_are_skipped(tmp_path: Path) -> None:
    known = tmp_path / "known"
    ed = _body()
    lines = pin_host_keys(known, "tpu.1-0", {
        "ssh-ed25519": f"{ed}\ntpu.9-0 ssh-ed25519 {_body()}",     # a newline cannot add a line
        "ssh-rsa": _body("ecdsa-sha2-nistp256"),                    # an ECDSA key published as RSA
        "ecdsa-sha2-nistp256": "not base64!",
        "ssh-dss": _body(),                                          # not a type gcloud reads
    })
    assert lines == [f"tpu.1-0 ssh-ed25519 {ed}"]
    assert known.read_text() == f"tpu.1-0 ssh-ed25519 {ed}\n"
