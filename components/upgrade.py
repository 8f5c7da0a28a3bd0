"""Safe Headscale upgrades on the SQLite stage: the pre-upgrade init container and its script.

Headscale migrates its database one way when it starts. The ``pre-upgrade`` init container runs
``scripts/litestream-pre-upgrade.sh`` after the restore and before the Litestream sidecar and Headscale: when
``headscale.version`` goes up it takes a consistent, integrity-checked snapshot of the database to
``<backup dir>/pre-upgrade/<from>-<to>/`` before the new version starts, and it refuses an older version than the
one recorded in ``<backup dir>/headscale-version`` (the script's header documents its environment, layout and exit
codes). The Pulumi-side refusal is ``components.version_gate``.

No Pulumi import and no I/O except :func:`pre_upgrade_script`, which reads packaged data.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from headscale_ha.components.shell_scripts import packaged_script

__all__ = [
    "CONTAINER_NAME",
    "EXIT_CODES",
    "MARKER_NAME",
    "SCRIPT_NAME",
    "SNAPSHOT_DIR",
    "SNAPSHOT_FILE",
    "SNAPSHOT_SHA256_FILE",
    "SOURCE_SHA256_FILE",
    "UPGRADE_SCRIPT_KEY",
    "parse_version",
    "pre_upgrade_container",
    "pre_upgrade_script",
    "snapshot_dir",
]

#: The script as packaged next to this module (components/scripts/).
SCRIPT_NAME = "litestream-pre-upgrade.sh"
#: Its key in the Litestream ConfigMap (mounted at /etc/litestream, so the container runs /etc/litestream/<key>).
UPGRADE_SCRIPT_KEY = "pre-upgrade.sh"
CONTAINER_NAME = "pre-upgrade"
#: In the backup directory: the version (X.Y.Z) that last started on the database.
MARKER_NAME = "headscale-version"
#: In the backup directory: one sub-directory per upgrade, named "<from>-<to>".
SNAPSHOT_DIR = "pre-upgrade"
#: In a snapshot directory: the database (one self-contained SQLite file), its digest (``sha256sum -c`` format),
#: and the digests of the local files it was taken from.
SNAPSHOT_FILE = "headscale.sqlite"
SNAPSHOT_SHA256_FILE = "headscale.sqlite.sha256"
SOURCE_SHA256_FILE = "source.sha256"
#: The script's exit codes (its header documents each).
EXIT_CODES = {
    "ok": 0,
    "usage": 2,
    "marker_untrusted": 13,
    "backup_dir_unavailable": 20,
    "downgrade": 40,
    "snapshot_invalid": 41,
    "snapshot_write": 42,
    "scratch": 43,
}

# The script's grammar: three decimal parts, no leading zeros (the shell would read them as octal), at most 9
# digits each (shell arithmetic stays exact).
_PART = r"(0|[1-9][0-9]{0,8})"
_VERSION = re.compile(rf"{_PART}\.{_PART}\.{_PART}")
# Litestream reads the scratch path inside a file:// URL: other characters would be read differently.
_SCRATCH_PATH = re.compile(r"/[A-Za-z0-9._/-]*")


def parse_version(value: str, *, field: str = "to_version") -> tuple[int, int, int]:
    """``"0.29.2"`` → ``(0, 29, 2)``; anything but X.Y.Z (as the script accepts it) is a ValueError naming ``field``."""
    match = _VERSION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{field}: {value!r} is not a Headscale version X.Y.Z (for example '0.29.2')")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def snapshot_dir(backup_dir: str, from_version: str, to_version: str) -> str:
    """Where the script puts the snapshot taken before upgrading ``from_version`` → ``to_version``."""
    parse_version(from_version, field="from_version")
    parse_version(to_version, field="to_version")
    base = _absolute(backup_dir, field="backup_dir").rstrip("/")
    return posixpath.join(base, SNAPSHOT_DIR, f"{from_version}-{to_version}")


def pre_upgrade_script() -> str:
    """Text of the pre-upgrade init container script, shipped as package data next to this module."""
    return packaged_script(SCRIPT_NAME)


def _absolute(value: str, *, field: str) -> str:
    if not isinstance(value, str) or not value.startswith("/") or value.rstrip("/") == "":
        raise ValueError(f"{field}: {value!r} must be an absolute path (not '/')")
    return value


def pre_upgrade_container(
    *,
    image: str,
    to_version: str,
    db_path: str,
    backup_dir: str,
    script_file: str,
    mounts: list[dict[str, Any]],
    scratch_mount: dict[str, Any],
    resources: dict[str, Any],
    security: dict[str, Any],
    key_mount: dict[str, Any] | None = None,
    key_file: str | None = None,
    manifest_script_file: str | None = None,
) -> dict[str, Any]:
    """The ``pre-upgrade`` init container: runs ``/bin/sh script_file`` in the Litestream image.

    With signed backups, ``key_mount`` (the backup key's volume mount), ``key_file`` (the key in it) and
    ``manifest_script_file`` (litestream-manifest.sh in the ConfigMap) let it write each snapshot's MAC, so the
    downgrade procedure can tell the snapshot from one planted on the export; all three or none.

    ``mounts`` are the data volume (holding ``db_path``), the backup directory (``backup_dir``) and the ConfigMap
    holding the script (at ``script_file``); ``scratch_mount`` is a writable emptyDir, the script's SCRATCH_DIR
    (its ``mountPath``); it needs room for up to three times the database and its WAL (the copy, and Litestream's
    compressed replica of it, twice). A mount in ``mounts`` at the same path as ``scratch_mount`` must be the same
    mount (it is then not repeated).
    """
    parse_version(to_version, field="to_version")
    _absolute(db_path, field="db_path")
    _absolute(backup_dir, field="backup_dir")
    _absolute(script_file, field="script_file")
    scratch_dir = scratch_mount.get("mountPath", "")
    if not _SCRATCH_PATH.fullmatch(scratch_dir) or scratch_dir.rstrip("/") == "":
        raise ValueError(
            f"scratch_mount: mountPath {scratch_dir!r} must be an absolute path of letters, digits and . _ / - "
            "(it becomes a file:// URL for Litestream)"
        )
    if scratch_mount.get("readOnly"):
        raise ValueError(f"scratch_mount: {scratch_dir!r} must be writable (the script copies the database there)")
    volume_mounts = [dict(mount) for mount in mounts]
    same_path = [mount for mount in volume_mounts if mount.get("mountPath") == scratch_dir]
    if not same_path:
        volume_mounts.append(dict(scratch_mount))
    elif same_path[0] != scratch_mount:
        raise ValueError(f"scratch_mount: {scratch_dir!r} is already the mount path of {same_path[0]!r} in mounts")
    signing = (key_mount, key_file, manifest_script_file)
    if any(part is not None for part in signing) and not all(part is not None for part in signing):
        raise ValueError("key_mount, key_file and manifest_script_file: give all three (signed backups) or none")
    signed_env = []
    if key_mount is not None:
        volume_mounts.append(dict(key_mount))
        signed_env = [
            {"name": "BACKUP_KEY_FILE", "value": key_file},
            {"name": "MANIFEST_SCRIPT", "value": manifest_script_file},
        ]
    return {
        "name": CONTAINER_NAME,
        "image": image,
        "command": ["/bin/sh", script_file],
        "env": [
            {"name": "DB_PATH", "value": db_path},
            {"name": "BACKUP_DIR", "value": backup_dir},
            {"name": "TO_VERSION", "value": to_version},
            {"name": "SCRATCH_DIR", "value": scratch_dir},
            *signed_env,
        ],
        "volumeMounts": volume_mounts,
        "resources": resources,
        "securityContext": security,
    }
